"""The cnn benchmark as a plain PyTorch training loop, written without dlbench's runner.

Same work as a dlbench trial: the canonical initial weights, data set and per-epoch order come
from dlbench.workloads; the model, layout conversion and loop are this file's own. Warm-up
epochs are untimed; the timed epochs run between two synchronised clock reads. Prints one JSON
line to stdout.

    python benchmarks/reference/torch_cnn.py --mode compiled --threads 2

torch is imported inside the functions because --threads must set the OpenMP variables first.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from dlbench.spec import WorkloadSpec
from dlbench.workloads import cnn
from dlbench.workloads.data import batch_indices, epoch_order

import harness  # beside this script: the CLI and result line overhead.py reads

if TYPE_CHECKING:
    import torch

Step = Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]


def parse_args() -> argparse.Namespace:
    return harness.parse_args(__doc__.split("\n\n")[0], ("eager", "compiled"))


def pin_threads(n: int) -> None:
    """Run on n cores with n threads, as dlbench's worker does. Must precede `import torch`:
    OpenMP reads its variables once."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:n])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n)


def make_model(spec: WorkloadSpec) -> torch.nn.Sequential:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 6 * 6, 128), nn.ReLU(),
        nn.Linear(128, spec.num_classes),
    )  # fmt: skip


def load_canonical(model: torch.nn.Sequential, p: dict[str, np.ndarray]) -> None:
    """Canonical kernels are HWIO and (in, out); the first dense kernel's rows are in HWC
    order, and torch flattens CHW."""
    import torch

    fc1 = p["dense1.kernel"].reshape(6, 6, 64, 128).transpose(3, 2, 0, 1).reshape(128, -1)
    state = {
        "0.weight": p["conv1.kernel"].transpose(3, 2, 0, 1), "0.bias": p["conv1.bias"],
        "3.weight": p["conv2.kernel"].transpose(3, 2, 0, 1), "3.bias": p["conv2.bias"],
        "7.weight": fc1, "7.bias": p["dense1.bias"],
        "9.weight": p["dense2.kernel"].T, "9.bias": p["dense2.bias"],
    }  # fmt: skip
    model.load_state_dict({k: torch.tensor(np.ascontiguousarray(v)) for k, v in state.items()})


def make_step(model: torch.nn.Sequential, spec: WorkloadSpec, mode: str, plain: bool = False) -> Step:
    import torch

    n = spec.numerics
    opt = torch.optim.Adam(
        model.parameters(), lr=n.learning_rate, betas=(n.beta1, n.beta2), eps=n.eps,
        weight_decay=n.weight_decay, **({} if plain else {"fused": True}),
    )  # fmt: skip
    if plain:  # the tutorial's torch.compile(model), the step around it eager
        compiled = torch.compile(model) if mode == "compiled" else model
        loss_fn = torch.nn.CrossEntropyLoss()

        def plain_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            opt.zero_grad()
            loss = loss_fn(compiled(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        return plain_step
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return torch.compile(train_step) if mode == "compiled" else train_step


def run_epoch(step: Step, x: torch.Tensor, y: torch.Tensor, spec: WorkloadSpec, epoch: int) -> torch.Tensor:
    import torch

    rows = batch_indices(epoch_order(spec.seed, epoch, spec.dataset_size), spec.batch_size)
    return torch.stack([step(x[r], y[r]) for r in torch.from_numpy(rows)])


def run_plain_epoch(step: Step, loader: torch.utils.data.DataLoader) -> torch.Tensor:
    import torch

    return torch.stack([step(x, y) for x, y in loader])


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()  # CPU ops are synchronous: nothing to wait for there


def main() -> None:
    args = parse_args()
    if args.threads:
        pin_threads(args.threads)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision("highest")

    spec = WorkloadSpec(batch_size=args.batch_size, dataset_size=args.dataset_size, seed=args.seed)
    model = make_model(spec)
    load_canonical(model, cnn.init_params(spec))
    data = cnn.make_dataset(spec)
    y = torch.from_numpy(data.y).long()
    if args.plain:  # a tutorial's loop: NCHW, a DataLoader shuffling a TensorDataset
        x = torch.from_numpy(data.x).permute(0, 3, 1, 2).contiguous()
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=spec.batch_size,
                                             shuffle=True, drop_last=True,
                                             generator=torch.Generator().manual_seed(args.seed))
        step = make_step(model, spec, args.mode, plain=True)

        def one_epoch(epoch: int) -> torch.Tensor:
            return run_plain_epoch(step, loader)
    else:
        # channels_last (NHWC in memory) is faster for these convolutions and pools on CPU.
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        step = make_step(model, spec, args.mode)
        x = torch.from_numpy(data.x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)

        def one_epoch(epoch: int) -> torch.Tensor:
            return run_epoch(step, x, y, spec, epoch)

    for epoch in range(args.warmup_epochs):
        one_epoch(epoch)
    sync()
    start = time.perf_counter()
    for epoch in range(args.warmup_epochs, args.warmup_epochs + args.epochs):
        losses = one_epoch(epoch)
    sync()
    train_s = time.perf_counter() - start

    samples = args.epochs * spec.steps_per_epoch * spec.batch_size
    harness.report("torch", args.mode, samples, train_s, float(losses[-1]), args.plain)


if __name__ == "__main__":
    main()
