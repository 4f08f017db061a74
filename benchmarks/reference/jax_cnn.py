"""The seed CNN trained the way a JAX practitioner writes it without dlbench: one jitted step,
NumPy batches, time.perf_counter after block_until_ready. Only the parameters, the data and
the per-epoch order come from dlbench.workloads, so that this is the same work as a dlbench
trial; the model and the loop are this file's own.

    python benchmarks/reference/jax_cnn.py --batch-size 128 --dataset-size 8192 --epochs 3 \\
        --warmup-epochs 1 --threads 2 --seed 0

Prints one JSON line: framework, mode, samples_per_s, train_s, final_loss.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any

import harness  # beside this script: the CLI and result line overhead.py reads


def parse_args() -> argparse.Namespace:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--donate", choices=("yes", "no"), default=None,
                       help="donate the parameters and Adam moments to the step (default: yes, as dlbench does;"
                            " no under --plain, as a tutorial's plain jax.jit)")

    return harness.parse_args(__doc__.split("\n\n")[0], ("compiled",), extra)


def pin_threads(n: int) -> None:
    # XLA:CPU sizes its thread pool from the affinity mask when jax starts: pin first.
    cpus = sorted(os.sched_getaffinity(0))
    if n > len(cpus):
        raise SystemExit(f"--threads {n}: only {len(cpus)} cores are available")
    os.sched_setaffinity(0, cpus[:n])


def main() -> None:
    args = parse_args()
    if args.threads is not None:
        pin_threads(args.threads)

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from dlbench.spec import WorkloadSpec
    from dlbench.workloads import cnn
    from dlbench.workloads.data import epoch_order

    jax.config.update("jax_default_matmul_precision", "highest")

    def conv_block(x: Any, w: Any, b: Any) -> Any:
        x = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        x = jax.nn.relu(x + b)
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def model(p: dict[str, Any], x: Any) -> Any:
        x = conv_block(x, p["conv1.kernel"], p["conv1.bias"])
        x = conv_block(x, p["conv2.kernel"], p["conv2.bias"])
        x = x.reshape(x.shape[0], -1)
        x = jax.nn.relu(x @ p["dense1.kernel"] + p["dense1.bias"])
        return x @ p["dense2.kernel"] + p["dense2.bias"]

    def loss_fn(p: dict[str, Any], x: Any, y: Any) -> Any:
        return optax.softmax_cross_entropy_with_integer_labels(model(p, x), y).mean()

    tx = optax.adam(1e-3, b1=0.9, b2=0.999, eps=1e-8)

    def step(p: Any, opt_state: Any, x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, opt_state = tx.update(grads, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, loss

    # Donated: XLA updates the parameters and Adam moments in place (a tutorial's plain jax.jit
    # does not donate).
    donate = args.donate == "yes" if args.donate else not args.plain
    train_step = functools.partial(jax.jit, donate_argnums=(0, 1))(step) if donate else jax.jit(step)

    spec = WorkloadSpec(batch_size=args.batch_size, dataset_size=args.dataset_size, seed=args.seed)
    data = cnn.make_dataset(spec)
    params = {k: jnp.array(v) for k, v in cnn.init_params(spec).items()}
    opt_state = tx.init(params)
    bs, steps = args.batch_size, args.dataset_size // args.batch_size

    shuffle = np.random.default_rng(args.seed)

    def run_epoch(epoch: int, p: Any, o: Any) -> Any:
        # a tutorial's NumPy loop shuffles with its own generator; dlbench's order otherwise
        order = shuffle.permutation(args.dataset_size) if args.plain else epoch_order(args.seed, epoch, args.dataset_size)
        loss = None
        for i in range(steps):
            idx = order[i * bs : (i + 1) * bs]
            p, o, loss = train_step(p, o, data.x[idx], data.y[idx])
        return p, o, loss

    for epoch in range(args.warmup_epochs):
        params, opt_state, loss = run_epoch(epoch, params, opt_state)
    jax.block_until_ready(params)

    start = time.perf_counter()
    for epoch in range(args.warmup_epochs, args.warmup_epochs + args.epochs):
        params, opt_state, loss = run_epoch(epoch, params, opt_state)
    jax.block_until_ready((params, loss))
    train_s = time.perf_counter() - start

    harness.report("jax", args.mode, args.epochs * steps * bs, train_s, float(loss), args.plain, donated=donate)


if __name__ == "__main__":
    main()
