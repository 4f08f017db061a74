"""Where native JAX lost to Keras on JAX (issue 20): the same compiled step fed four ways, and
Keras's own fit, interleaved in one process; steps per wall second and per CPU-second.

Variants (each one epoch of `--steps` steps, synced every 16 steps as a dlbench chunk is):
- `dlbench`: the JAX Program's `train_chunk` over its own pipeline (what a trial runs);
- `device_put ahead`: the same step fed by `jax.device_put` two batches ahead of the step (flax's
  prefetch_to_device; dlbench's JAX pipeline before issue 20, on every device);
- `numpy`: the same step called with the NumPy batch itself (what Keras's JAX trainer does on
  CPU: keras/src/backend/jax/trainer.py, JAXEpochIterator skips its look-ahead there);
- `device-resident`: the same step on batches already on the device (no input cost at all);
- `keras step`: Keras's own jitted `train_step` on the same device-resident batches (its
  compiled program against ours, nothing else);
- `keras fit`: dlbench's keras-jax Program (`fit`, steps_per_execution 16).

    python benchmarks/jax_input_path.py --workload mlp --steps 256 --repeats 7

Not a test: numbers go to docs/benchmarks.md with the command, the load and the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from dlbench import workloads
from dlbench.spec import Policy, TrialSpec
from dlbench.workloads.contract import preset_spec
from dlbench.workloads.data import batch_indices, epoch_order

CHUNK = 16


def build(framework: str, workload: str, steps: int) -> dict[str, Any]:
    from dlbench.backends import get_backend, support
    from dlbench.runner.child import setup_environment

    spec = preset_spec(workloads.get(workload), "cpu")
    spec = dataclasses.replace(spec, dataset_size=steps * spec.batch_size)
    trial = TrialSpec(workload=spec, framework=framework, policy=Policy(mode="compiled"), epochs=1,
                      warmup_epochs=1, chunk_steps=CHUNK, trial_id=0)
    trial.validate()
    backend = get_backend(framework)
    setup_environment(trial, backend)
    backend.import_framework()
    backend.configure(trial.policy)
    program = support.build(trial, backend)
    state = support.init(trial, workloads.get(trial.workload.name), program)
    data = workloads.get(workload).make_dataset(spec)
    program.load(data)
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    program.compile(state, next(iter(program.batches(rows[:1]))))
    return {"backend": backend, "program": program, "state": state, "rows": rows, "data": data}


def variants(native: dict[str, Any], keras: dict[str, Any]) -> dict[str, Callable[[], None]]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from dlbench.backends.jax import pipeline

    program, rows = native["program"], native["rows"]
    x = np.asarray(native["data"].x, program._x_dtype)
    y = np.asarray(native["data"].y, program._y_dtype)
    host = [(x[r], y[r]) for r in rows]
    resident = jax.block_until_ready([jax.device_put(b) for b in host])

    def chunks(cell: dict[str, Any], step: Callable[[Any, Any], Any], batches: Any) -> None:
        state = cell["state"]
        for start in range(0, len(rows), CHUNK):
            losses = []
            for _ in range(min(CHUNK, len(rows) - start)):
                state, loss = step(state, next(batches))
                losses.append(loss)
            jax.block_until_ready((state, losses))
        cell["state"] = state

    def ours(state: Any, batch: Any) -> Any:
        return program._step(state, *batch)

    def dlbench(cell: dict[str, Any]) -> Callable[[], None]:
        def run() -> None:
            batches = cell["program"].batches(cell["rows"])
            for start in range(0, len(cell["rows"]), CHUNK):
                n = min(CHUNK, len(cell["rows"]) - start)
                cell["state"], losses = cell["program"].train_chunk(cell["state"], batches, n)
                cell["backend"].sync(cell["state"], losses)
        return run

    # Keras's jitted train_step on a copy of its state (the step donates what it is given).
    model = keras["state"].model
    keras["program"]._activate(keras["state"])
    raw = {"state": jax.tree.map(jnp.copy, model._get_jax_state(
        trainable_variables=True, non_trainable_variables=True, optimizer_variables=True,
        metrics_variables=True))}
    keras_step = jax.jit(model.train_step, donate_argnums=0).lower(raw["state"], resident[0]).compile()

    def keras_raw(state: Any, batch: Any) -> Any:
        logs, state = keras_step(state, batch)
        return state, logs

    return {
        "dlbench": dlbench(native),
        "device_put ahead": lambda: chunks(native, ours, pipeline._prefetch(iter(host), None)),
        "numpy": lambda: chunks(native, ours, iter(host)),
        "device-resident": lambda: chunks(native, ours, iter(resident)),
        "keras step": lambda: chunks(raw, keras_raw, iter(resident)),
        "keras fit": dlbench(keras),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="mlp")
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    keras = build("keras-jax", args.workload, args.steps)  # sets KERAS_BACKEND before the import
    native = build("jax", args.workload, args.steps)
    runs = variants(native, keras)
    for run in runs.values():  # warm-up: every compile happens here
        run()
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    load = [os.getloadavg()[0]]
    names = list(runs)
    for r in range(args.repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            w0, c0 = time.perf_counter(), time.process_time()
            runs[name]()
            wall[name].append(args.steps / (time.perf_counter() - w0))
            cpu[name].append(args.steps / (time.process_time() - c0))
    load.append(os.getloadavg()[0])
    print(f"{args.workload}, {args.steps} steps per epoch, {args.repeats} rounds, load average {load[0]:.1f} -> {load[1]:.1f}")
    print("| variant | steps per CPU-s (median) | range | steps/s wall (median) |")
    print("|---|---:|---|---:|")
    for name in names:
        print(f"| {name} | {statistics.median(cpu[name]):.4g} | {min(cpu[name]):.4g}-{max(cpu[name]):.4g} "
              f"| {statistics.median(wall[name]):.4g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
