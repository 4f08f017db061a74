"""The cnn workload in PyTorch, written the way a careful practitioner writes it by hand.

Layouts: canonical conv kernels are HWIO and torch's OIHW; canonical dense kernels are
(in, out) and torch's (out, in). The canonical first dense kernel's rows follow the HWC flatten
of the pooled map while torch flattens CHW: viewed as (H, W, C, out) that kernel is an HWIO
kernel of a 6x6 VALID convolution, so the same permutation as the conv kernels converts it.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler

from dlbench.backends.base import Unsupported
from dlbench.backends.torch import COMPILE_OPTIONS, device
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import cnn as workload
from dlbench.workloads.data import Dataset

# The pooled map that the first dense layer flattens: 32 -conv-> 30 -pool-> 15 -conv-> 13
# -pool-> 6 with VALID padding.
_POOLED_CHW = (workload.CONV2_CH, 6, 6)
assert int(np.prod(_POOLED_CHW)) == workload.FLAT
# Images, weights and activations in channels_last (NHWC in memory, like the canonical data):
# on a 2-core AVX2 CPU with torch 2.13, oneDNN's convolutions and ATen's max-pool are faster
# there; measured +15 % steps/s in eager mode and +9 % compiled, against contiguous NCHW.
MEMORY_FORMAT = torch.channels_last
# Larger prediction inputs are split so that activations stay bounded (outside the timed window).
_PREDICT_CHUNK = 1024

Batch = tuple[torch.Tensor, torch.Tensor]


class Net(nn.Module):
    """conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2, flatten, dense128-relu, dense10.
    Module names follow the canonical parameter names (conv1.kernel <-> conv1.weight)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        in_ch = workload.INPUT_SHAPE[2]
        self.conv1 = nn.Conv2d(in_ch, workload.CONV1_CH, kernel_size=3, padding=0)
        self.conv2 = nn.Conv2d(workload.CONV1_CH, workload.CONV2_CH, kernel_size=3, padding=0)
        self.pool = nn.MaxPool2d(kernel_size=2)
        self.dense1 = nn.Linear(workload.FLAT, workload.HIDDEN)
        self.dense2 = nn.Linear(workload.HIDDEN, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # CHW order: dense1's canonical rows are permuted to match
        return self.dense2(torch.relu(self.dense1(x)))


@dataclass
class State:
    """Training state: torch keeps parameters and optimizer moments in these objects, which
    train_chunk updates in place."""

    model: Net
    optimizer: torch.optim.Adam


def train_step(
    model: Net, optimizer: torch.optim.Optimizer, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """One training step; compiled whole in compiled mode. With torch 2.13 dynamo breaks the
    graph at zero_grad (never traced), at backward (AOTAutograd has already compiled the
    backward together with the forward graph) and around optimizer.step (the fused Adam kernel
    runs untraced), which leaves two graphs: forward+loss(+backward) and the final detach.
    Measured and rejected: compiled autograd (one more graph, no speed-up) and the traced
    foreach Adam (Inductor's code is slower on CPU than the fused kernel)."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def forward_backward(model: Net, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The train step without the update: the gradients land in each parameter's .grad."""
    loss = loss_fn(model(x), y)
    loss.backward()
    return loss.detach()


def check_numerics(n: Numerics) -> None:
    """Raise Unsupported for any pinned numeric this implementation does not provide."""
    wanted = {
        "optimizer": "adam",
        "eps_placement": "outside_sqrt",  # torch.optim.Adam: m_hat / (sqrt(v_hat) + eps)
        "bias_correction": True,  # torch.optim.Adam always bias-corrects
        "padding": "VALID",
        "flatten_order": "HWC",
        "dropout": 0.0,  # Net has no dropout layer
        "loss": "mean_softmax_cross_entropy",
        "dtype": "float32",
    }
    differ = [f"{k}={getattr(n, k)!r} (has {v!r})" for k, v in wanted.items() if getattr(n, k) != v]
    if differ:
        raise Unsupported(f"the torch cnn does not implement {', '.join(differ)}")


def make_optimizer(model: Net, n: Numerics) -> torch.optim.Adam:
    # fused=True: one ATen kernel per parameter, several times faster than the foreach and
    # for-loop paths on CPU; torch.compile leaves it untraced ("don't trace into fused
    # optimizer"), which is also faster than Inductor's code for the traced foreach path.
    return torch.optim.Adam(
        model.parameters(),
        lr=n.learning_rate,
        betas=(n.beta1, n.beta2),
        eps=n.eps,
        weight_decay=n.weight_decay,
        amsgrad=False,
        maximize=False,
        fused=True,
    )


def make_loss() -> nn.CrossEntropyLoss:
    return nn.CrossEntropyLoss(reduction="mean", label_smoothing=0.0)


def canonical_name(torch_name: str) -> str:
    return torch_name.replace(".weight", ".kernel")


def to_torch_layout(name: str, a: np.ndarray) -> np.ndarray:
    """A canonical array -> the layout of the torch parameter of the same name."""
    if name == "dense1.kernel":
        c, h, w = _POOLED_CHW
        return a.reshape(h, w, c, -1).transpose(3, 2, 0, 1).reshape(a.shape[1], -1)
    if a.ndim == 4:  # HWIO -> OIHW
        return a.transpose(3, 2, 0, 1)
    if a.ndim == 2:  # (in, out) -> (out, in)
        return a.T
    return a


def to_canonical_layout(name: str, a: np.ndarray) -> np.ndarray:
    """The inverse of to_torch_layout, as a contiguous array."""
    if name == "dense1.kernel":
        c, h, w = _POOLED_CHW
        a = a.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(c * h * w, -1)
    elif a.ndim == 4:  # OIHW -> HWIO
        a = a.transpose(2, 3, 1, 0)
    elif a.ndim == 2:
        a = a.T
    return np.ascontiguousarray(a)


class _RowSampler(Sampler[torch.Tensor]):
    """Yields the spec's per-step index rows in order: each row is one whole batch."""

    def __init__(self, rows: torch.Tensor) -> None:
        self._rows = rows

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


class _InMemory(torch.utils.data.Dataset[Batch]):
    """Indexed by a whole row of sample indices: one gather per batch, no per-sample
    collation."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __getitem__(self, rows: torch.Tensor) -> Batch:
        # Advanced indexing keeps channels_last; index_select would return contiguous NCHW.
        return self.x[rows], self.y[rows]

    def __len__(self) -> int:
        return len(self.y)


@typing.final
class TorchCnn:
    def __init__(self, trial: TrialSpec) -> None:
        check_numerics(trial.workload.numerics)
        self._trial = trial
        self._device = device()
        self._loss_fn = make_loss()
        self._data: _InMemory | None = None
        self._compiled = trial.policy.mode == "compiled"
        # torch.compile is lazy: each function compiles inside its first call. The two are
        # separate code objects, so the fixed-batch check's batch size never makes the train
        # step's shapes dynamic.
        self._step: Callable[..., torch.Tensor] = self._maybe_compile(train_step)
        self._fwd_bwd: Callable[..., torch.Tensor] = self._maybe_compile(forward_backward)

    def _maybe_compile(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        return torch.compile(fn, **COMPILE_OPTIONS) if self._compiled else fn

    def _images(self, x_nhwc: np.ndarray) -> torch.Tensor:
        x = torch.from_numpy(np.ascontiguousarray(x_nhwc, dtype=np.float32)).permute(0, 3, 1, 2)
        return x.to(self._device, memory_format=MEMORY_FORMAT, copy=True)

    def _labels(self, y: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(y, dtype=np.int64)).to(self._device, copy=True)

    def load(self, dataset: Dataset) -> None:
        self._data = _InMemory(self._images(dataset.x), self._labels(dataset.y))

    def init(self, params: dict[str, np.ndarray]) -> State:
        model = Net(self._trial.workload.num_classes).to(self._device)
        names = {canonical_name(k) for k, _ in model.named_parameters()}
        if names != set(params):
            raise ValueError(f"expected parameters {sorted(names)}, got {sorted(params)}")
        with torch.no_grad():
            for name, p in model.named_parameters():
                a = to_torch_layout(canonical_name(name), params[canonical_name(name)])
                p.copy_(torch.from_numpy(np.ascontiguousarray(a)))
        model = model.to(memory_format=MEMORY_FORMAT)  # type: ignore[call-overload]  # stub lacks it
        return State(model, make_optimizer(model, self._trial.workload.numerics))

    def params(self, state: State) -> dict[str, np.ndarray]:
        return {
            canonical_name(k): to_canonical_layout(canonical_name(k), p.detach().cpu().numpy())
            for k, p in state.model.named_parameters()
        }

    def batches(self, order: np.ndarray) -> Iterator[Batch]:
        if self._data is None:
            raise RuntimeError("load(dataset) must come before batches(order)")
        rows = torch.from_numpy(np.asarray(order, dtype=np.int64)).to(self._device)
        loader = DataLoader(
            self._data,
            batch_size=None,  # each sampler item is already a whole batch of indices
            sampler=_RowSampler(rows),
            num_workers=self._trial.policy.loader_workers,
        )
        return iter(loader)

    def compile(self, state: State, batch: Batch) -> float | None:
        return None  # torch.compile compiles inside the first call

    def train_chunk(self, state: State, batches: Iterator[Batch], n_steps: int) -> tuple[State, torch.Tensor]:
        losses = [
            self._step(state.model, state.optimizer, self._loss_fn, x, y)
            for x, y in itertools.islice(batches, n_steps)
        ]
        if len(losses) != n_steps:
            raise RuntimeError(f"batches ran out after {len(losses)} of {n_steps} steps")
        return state, torch.stack(losses)

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        model = state.model
        model.eval()
        try:
            with torch.inference_mode():
                chunks = [
                    model(self._images(x[i : i + _PREDICT_CHUNK])).cpu().numpy()
                    for i in range(0, len(x), _PREDICT_CHUNK)
                ]
        finally:
            model.train()  # the compiled step guards on the training flag: restore it
        return np.concatenate(chunks)

    def loss_and_grads(self, state: State, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        model = state.model
        # Same path as training (compiled in compiled mode), without the optimizer update.
        model.zero_grad(set_to_none=True)
        loss = self._fwd_bwd(model, self._loss_fn, self._images(x), self._labels(y))
        grads = {}
        for name, p in model.named_parameters():
            if p.grad is None:
                raise RuntimeError(f"parameter {name} got no gradient")
            grads[canonical_name(name)] = to_canonical_layout(canonical_name(name), p.grad.cpu().numpy())
        model.zero_grad(set_to_none=True)
        return float(loss), grads

    def canonical_batch(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        return np.ascontiguousarray(x.permute(0, 2, 3, 1).cpu().numpy()), y.cpu().numpy()

    def losses_to_numpy(self, losses: torch.Tensor) -> np.ndarray:
        return losses.cpu().numpy().astype(np.float64)

    def compilations(self) -> int:
        if not self._compiled:
            return 0  # eager mode never imports dynamo
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def numerics(self) -> dict[str, Any]:
        # Read back from objects built by the same factories as init's.
        model = Net(self._trial.workload.num_classes)
        optimizer = make_optimizer(model, self._trial.workload.numerics)
        group = optimizer.param_groups[0]
        beta1, beta2 = group["betas"]
        convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
        loss = self._loss_fn
        return {
            "optimizer": type(optimizer).__name__.lower() + ("_amsgrad" if group["amsgrad"] else ""),
            "learning_rate": float(group["lr"]),
            "beta1": float(beta1),
            "beta2": float(beta2),
            "eps": float(group["eps"]),
            "eps_placement": "outside_sqrt",  # torch.optim.Adam's formula, not a setting
            "bias_correction": True,  # likewise: torch.optim.Adam always bias-corrects
            "weight_decay": float(group["weight_decay"]),
            "padding": "VALID" if all(c.padding == (0, 0) for c in convs) else repr([c.padding for c in convs]),
            # The network flattens CHW; with dense1's rows permuted it computes the HWC model.
            "flatten_order": "HWC",
            "dropout": max((float(m.p) for m in model.modules() if isinstance(m, nn.Dropout)), default=0.0),
            "loss": f"{loss.reduction}_softmax_cross_entropy"
            if loss.label_smoothing == 0.0 and loss.weight is None
            else repr(loss),
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        }


def build(trial: TrialSpec) -> TorchCnn:
    return TorchCnn(trial)
