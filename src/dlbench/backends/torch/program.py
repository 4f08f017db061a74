"""The training machinery every torch workload shares, written the way a careful practitioner
writes it by hand: an nn.Module, torch.optim.Adam (fused), the spec's loss (LOSSES), a DataLoader
over in-memory tensors fed by the spec's index rows, and in `compiled` mode torch.compile of the
whole train step.

A workload module (mlp.py, cnn.py, ...) supplies a small `Model`: the nn.Module (its attribute
names spell the canonical parameter names), layout overrides where the generic conversion is not
enough, and its own numerics read back; `TorchProgram` does the rest.

Canonical <-> torch conversion is derived from the module tree: `<path>.weight` of an nn.Linear
or nn.Conv2d is the canonical `<path>.kernel` ((in, out) <-> (out, in); HWIO <-> OIHW), the
`weight` of a norm is its `scale` and a BatchNorm's running mean/var are the buffers `mean`/
`var`; every other tensor keeps its name and layout.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from dlbench import workloads
from dlbench.backends.generate import Generating
from dlbench.backends.base import Sampling, Unsupported, shard_slice
from dlbench.backends.torch import (
    compile_options,
    ddp,
    device,
    infer_compile_options,
    losses,
    pipeline,
    settings,
)
from dlbench.backends.torch.layers import pick
from dlbench.backends.torch.training import compilations, make_optimizer, optimizer_numerics, optimizer_path
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads.data import Augment, Dataset

Batch = tuple[torch.Tensor, torch.Tensor]

# Larger prediction inputs are split so that activations stay bounded (outside the timed window).
PREDICT_CHUNK = 1024


# --- layouts -----------------------------------------------------------------------------------


class Layout(Protocol):
    """How one canonical array maps to its torch tensor."""

    def to_torch(self, a: np.ndarray) -> np.ndarray: ...

    def to_canonical(self, a: np.ndarray) -> np.ndarray: ...


@typing.final
class Same:
    def to_torch(self, a: np.ndarray) -> np.ndarray:
        return a

    def to_canonical(self, a: np.ndarray) -> np.ndarray:
        return a


@typing.final
class DenseKernel:
    """Canonical (in, out); nn.Linear's weight is (out, in)."""

    def to_torch(self, a: np.ndarray) -> np.ndarray:
        return a.T

    def to_canonical(self, a: np.ndarray) -> np.ndarray:
        return a.T


@typing.final
class ConvKernel:
    """Canonical HWIO; nn.Conv2d's weight is OIHW."""

    def to_torch(self, a: np.ndarray) -> np.ndarray:
        return a.transpose(3, 2, 0, 1)

    def to_canonical(self, a: np.ndarray) -> np.ndarray:
        return a.transpose(2, 3, 1, 0)


_NORMS = (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm)
# Leaf renames per owner type; a norm's num_batches_tracked (None) has no canonical twin.
_NORM_LEAVES: dict[str, str | None] = {
    "weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var",
    "num_batches_tracked": None,
}


@dataclass(frozen=True)
class Slot:
    """Where a canonical tensor lives in the module and how its layout converts."""

    torch_name: str
    layout: Layout


def _slot(owner: nn.Module, owner_name: str, attr: str, overrides: Mapping[str, Layout]) -> tuple[str, Slot] | None:
    layout: Layout = Same()
    leaf: str | None = attr
    if isinstance(owner, (nn.Linear, nn.Conv2d)) and attr == "weight":
        leaf = "kernel"
        layout = DenseKernel() if isinstance(owner, nn.Linear) else ConvKernel()
    elif isinstance(owner, _NORMS):
        leaf = _NORM_LEAVES[attr]
    if leaf is None:
        return None
    name = f"{owner_name}.{leaf}" if owner_name else leaf
    torch_name = f"{owner_name}.{attr}" if owner_name else attr
    return name, Slot(torch_name, overrides.get(name, layout))


def slots(module: nn.Module, overrides: Mapping[str, Layout]) -> tuple[dict[str, Slot], dict[str, Slot]]:
    """(parameters, buffers): canonical name -> Slot, in module order."""
    params: dict[str, Slot] = {}
    buffers: dict[str, Slot] = {}
    for owner_name, owner in module.named_modules():
        for table, tensors in ((params, owner.named_parameters(recurse=False)),
                               (buffers, owner.named_buffers(recurse=False))):
            for attr, _ in tensors:
                found = _slot(owner, owner_name, attr, overrides)
                if found is not None:
                    table[found[0]] = found[1]
    return params, buffers


# --- the per-workload model --------------------------------------------------------------------


class Model(Protocol):
    """What differs per workload."""

    # channels_last for convnets where measured faster; contiguous_format otherwise.
    memory_format: torch.memory_format
    # Canonical name -> Layout where the generic conversion does not apply.
    layouts: Mapping[str, Layout]

    def module(self) -> nn.Module:
        """A new float32 module on the current default device, every numeric passed explicitly;
        its initial values do not matter, init() overwrites them."""
        ...

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        """The model's own numerics (padding, flatten order, BatchNorm, LayerNorm, GELU,
        attention scale, ODE solver) read back from `module`, keyed like spec.Numerics."""
        ...


# --- the step ----------------------------------------------------------------------------------


# The memory_format option's names (settings.py) -> torch's formats.
MEMORY_FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}


def format_name(memory_format: torch.memory_format) -> str:
    return "channels_last" if memory_format == torch.channels_last else "contiguous"


# Autocast dtype per precision: float32 parameters and optimizer, reduced-precision compute.
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Amp:
    """The trial's precision the idiomatic torch way: torch.autocast around forward and loss
    (autocast runs the loss in float32 itself), and for fp16 a GradScaler (dynamic loss
    scaling) created with each training state."""

    device_type: str
    dtype: torch.dtype | None  # None: no autocast (fp32, tf32)
    scaled: bool

    @staticmethod
    def of(precision_name: str, device_type: str) -> Amp:
        dtype = AUTOCAST.get(precision_name)
        return Amp(device_type, dtype, dtype is torch.float16)

    def scaler(self) -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(self.device_type) if self.scaled else None


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor,
    amp: Amp, scaler: torch.amp.GradScaler | None,
) -> torch.Tensor:
    """One training step; compiled whole in compiled mode. With torch 2.13 dynamo breaks the
    graph at zero_grad (never traced), at backward (AOTAutograd has already compiled the
    backward together with the forward graph) and around optimizer.step (the fused Adam kernel
    runs untraced), which leaves two graphs: forward+loss(+backward) and the final detach.
    Measured on the cnn and rejected: compiled autograd (one more graph, no speed-up) and the
    traced foreach Adam (Inductor's code is slower on CPU than the fused kernel)."""
    optimizer.zero_grad(set_to_none=True)
    # Inlined, not a helper method: dynamo traces the autocast context in place.
    with torch.autocast(amp.device_type, dtype=amp.dtype, enabled=amp.dtype is not None):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:  # fp16: the fused Adam unscales and skips steps with inf/NaN gradients itself
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    return loss.detach()


def forward_backward(model: nn.Module, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor, amp: Amp) -> torch.Tensor:
    """The train step without the update (and without loss scaling): the gradients land in each
    parameter's .grad."""
    with torch.autocast(amp.device_type, dtype=amp.dtype, enabled=amp.dtype is not None):
        loss = loss_fn(model(x), y)
    loss.backward()
    return loss.detach()


def eval_forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The inference forward; compiled whole in compiled mode, called under inference_mode."""
    return model(x)


def make_cross_entropy(n: Numerics) -> nn.Module:
    return nn.CrossEntropyLoss(reduction="mean", label_smoothing=0.0)


def make_focal_l1(n: Numerics) -> nn.Module:
    return losses.FocalL1Loss(float(n.extra["focal_alpha"]), float(n.extra["focal_gamma"]))


@dataclass(frozen=True)
class LossKind:
    """One loss: its factory from the numerics block and its targets' dtype (None: the
    program's float dtype, float32 under autocast; else that integer dtype)."""

    make: Callable[[Numerics], nn.Module]
    label_dtype: torch.dtype | None


# The numerics block's loss name -> how the program trains with it.
LOSSES: dict[str, LossKind] = {
    "mean_softmax_cross_entropy": LossKind(make_cross_entropy, torch.int64),
    "focal_l1_detection": LossKind(make_focal_l1, None),
    "mean_squared_error": LossKind(lambda n: nn.MSELoss(reduction="mean"), None),
    "mean_token_cross_entropy": LossKind(lambda n: losses.TokenCrossEntropy(), torch.int64),
}


def loss_kind(n: Numerics) -> LossKind:
    """The LossKind of the numerics block's loss, or Unsupported naming what is implemented."""
    return pick(LOSSES, n.loss, "the torch loss")


def loss_numerics(loss: nn.Module) -> dict[str, Any]:
    """The loss's name (and its own numerics) read back from the module."""
    if isinstance(loss, nn.CrossEntropyLoss):
        plain = loss.label_smoothing == 0.0 and loss.weight is None
        return {"loss": f"{loss.reduction}_softmax_cross_entropy" if plain else repr(loss)}
    if isinstance(loss, nn.MSELoss):
        return {"loss": f"{loss.reduction}_squared_error"}
    if isinstance(loss, (losses.FocalL1Loss, losses.TokenCrossEntropy)):
        return loss.numerics()
    return {"loss": repr(loss)}


@dataclass
class State:
    """Training state: torch keeps parameters, BatchNorm buffers and optimizer moments in these
    objects, which train_chunk updates in place."""

    model: nn.Module
    optimizer: torch.optim.Adam
    # What the step calls: the model, or the model under DistributedDataParallel (devices > 1).
    forward: nn.Module
    scaler: torch.amp.GradScaler | None = None  # fp16 only


# --- the program -------------------------------------------------------------------------------


def build(trial: TrialSpec, model: Model) -> TorchProgram:
    """The program for `model` (backends.support checks its numerics read-back)."""
    return TorchProgram(trial, model)


# Why torch runs one step per Python call (docs/benchmarks.md, "Native loops against Keras").
ONE_STEP_PER_CALL = (
    "one step per call: CUDA graphs (torch.compile mode reduce-overhead) replay captured GPU kernels only,"
    " so there is nothing of theirs on CPU; torch.compile of a Python loop over K steps traces K copies of"
    " the step (compile time about K times) to save a guard check and wrapper per step, and Keras on torch"
    " runs one step per call too")


@typing.final
class TorchProgram(Sampling, Generating):
    def __init__(self, trial: TrialSpec, model: Model) -> None:
        spec = trial.workload
        self._trial = trial
        self._workload = workloads.get(spec.name)
        self._model = model
        self._device = device()
        self._amp = Amp.of(trial.precision, self._device.type)
        self._dtype: torch.dtype = getattr(torch, spec.numerics.dtype)
        shape, x_dtype = self._workload.input_spec(spec)
        # NHWC images become NCHW tensors (channels_last in memory where the model asks for it).
        self._images = len(shape) == 3
        self._x_canonical = np.dtype(x_dtype)
        # Float inputs follow the program's dtype (float64 for the reference); token ids are
        # int64, the index type nn.functional.embedding is written for.
        self._x_dtype = self._dtype if np.issubdtype(self._x_canonical, np.floating) else torch.int64
        kind = loss_kind(spec.numerics)
        self._loss_fn = kind.make(spec.numerics)
        self._label_dtype = self._dtype if kind.label_dtype is None else kind.label_dtype
        meta = self._meta_module()
        self._params, self._buffers = slots(meta, model.layouts)
        _check_canonical(meta, self._workload.param_shapes(spec), self._params, "parameters")
        _check_canonical(meta, self._workload.buffer_shapes(spec), self._buffers, "buffers")
        # The dataset as load() placed it: host memory for the DataLoader, or the device.
        self._data: Batch | None = None
        self._compiled = trial.policy.mode == "compiled"
        # The options this program reads (settings.py; the defaults are the choices documented
        # here): the layout of images and conv weights, what compiled mode compiles, the loader.
        self._memory_format = MEMORY_FORMATS[settings.memory_format_name(trial.policy, format_name(model.memory_format))]
        self._compile_options = compile_options(trial.policy)
        self._scope = settings.value(trial.policy, "compile_scope") if self._compiled else None
        self._loader = settings.value(trial.policy, "loader")
        if self._loader == "tensor_dataset" and trial.policy.data == "device":
            raise Unsupported("torch option loader=tensor_dataset is a DataLoader: it applies to --data pipeline,"
                              " not device")
        # Data parallelism: this rank's contiguous shard of every global batch (ddp.launch has
        # made the process group before any Program is built).
        self._rank, self._world = ddp.rank_and_world() if trial.devices > 1 else (0, 1)
        # torch.compile is lazy: each function compiles inside its first call. The two are
        # separate code objects, so the fixed-batch check's batch size never makes the train
        # step's shapes dynamic.
        # With compile_scope=model the step stays Python and init() compiles the module instead.
        self._step: Callable[..., torch.Tensor] = self._maybe_compile(train_step)
        self._fwd_bwd: Callable[..., torch.Tensor] = self._maybe_compile(forward_backward)

    @property
    def compiled(self) -> bool:
        """Whether the trial's mode compiles (torch.compile)."""
        return self._compiled

    def _maybe_compile(self, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        return torch.compile(fn, **self._compile_options) if self._scope == "step" else fn

    def _meta_module(self) -> nn.Module:
        """The model's module without storage, in the program's dtype: names, shapes, dtypes
        and settings at no cost (read back by numerics())."""
        with torch.device("meta"):
            module = self._model.module()
        return module.to(dtype=self._dtype)

    def _new_module(self) -> nn.Module:
        with torch.device(self._device):
            module = self._model.module()
        module = module.to(dtype=self._dtype)
        return module.to(memory_format=self._memory_format)  # type: ignore[call-overload]

    def _inputs(self, x: np.ndarray, on: torch.device | None = None) -> torch.Tensor:
        on = self._device if on is None else on
        t = torch.from_numpy(np.ascontiguousarray(x))
        if self._images:
            t = t.permute(0, 3, 1, 2)  # a view: NCHW shape over NHWC memory, i.e. channels_last
            return t.to(on, dtype=self._x_dtype, memory_format=self._memory_format, copy=True)
        return t.to(on, dtype=self._x_dtype, copy=True)

    def _labels(self, y: np.ndarray, on: torch.device | None = None) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(y)).to(self._device if on is None else on, dtype=self._label_dtype,
                                                          copy=True)

    def load(self, dataset: Dataset) -> None:
        # "pipeline": host tensors, which the DataLoader gathers (in its workers, if any).
        on = self._device if self._trial.policy.data == "device" else torch.device("cpu")
        self._data = self._inputs(dataset.x, on), self._labels(dataset.y, on)

    def init(self, params: dict[str, np.ndarray]) -> State:
        """Canonical parameters (optionally with canonical buffers; BatchNorm's running
        statistics otherwise start at torch's defaults, mean 0 and variance 1, the canonical
        initial values) -> a fresh module and optimizer."""
        missing = set(self._params) - set(params)
        unknown = set(params) - set(self._params) - set(self._buffers)
        if missing or unknown:
            raise ValueError(f"parameters missing: {sorted(missing)}, unknown: {sorted(unknown)}")
        module = self._new_module()
        tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
        slots_by_name = {**self._params, **self._buffers}
        with torch.no_grad():
            for name, a in params.items():
                slot = slots_by_name[name]
                tensors[slot.torch_name].copy_(torch.from_numpy(np.ascontiguousarray(slot.layout.to_torch(a))))
        forward = ddp.wrap(module) if self._world > 1 else module
        if self._scope == "model":  # torch.compile(model): the plainest idiomatic use
            forward = typing.cast(nn.Module, torch.compile(forward, **self._compile_options))
        return State(module, make_optimizer(module.parameters(), self._trial.workload.numerics, self._trial.policy),
                     forward, self._amp.scaler())

    def _shard(self, rows: int) -> slice:
        return shard_slice(rows, self._world, self._rank)

    def _read(self, module: nn.Module, table: dict[str, Slot], grads: bool = False) -> dict[str, np.ndarray]:
        tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
        out = {}
        for name, slot in table.items():
            t = tensors[slot.torch_name]
            if grads:
                if t.grad is None:
                    raise RuntimeError(f"parameter {slot.torch_name} got no gradient")
                t = t.grad
            # A copy: .numpy() of a CPU tensor shares its memory, which the next step updates.
            out[name] = np.array(slot.layout.to_canonical(t.detach().cpu().numpy()), order="C", copy=True)
        return out

    def params(self, state: State) -> dict[str, np.ndarray]:
        return self._read(state.model, self._params)

    def buffers(self, state: State) -> dict[str, np.ndarray]:
        """The non-trained state (BatchNorm running statistics) in canonical names."""
        return self._read(state.model, self._buffers)

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[Batch]:
        if self._data is None:
            raise RuntimeError("load(dataset) must come before batches(order)")
        x, y = self._data
        fmt = self._memory_format
        if self._world > 1:
            rows = self._shard(order.shape[1])
            order, augment = order[:, rows], None if augment is None else augment.shard(rows)
        if self._trial.policy.data == "device":
            return pipeline.device_batches(x, y, order, augment, fmt)
        workers = self._trial.policy.loader_workers
        if self._loader == "tensor_dataset":
            return pipeline.sampler_batches(x, y, order, augment, workers, self._device, fmt)
        return pipeline.loader_batches(x, y, order, augment, workers, self._device, fmt)

    def compile(self, state: State, batch: Batch) -> float | None:
        return None  # torch.compile compiles inside the first call

    def train_chunk(self, state: State, batches: Iterator[Batch], n_steps: int) -> tuple[State, torch.Tensor]:
        losses = [
            self._step(state.forward, state.optimizer, self._loss_fn, x, y, self._amp, state.scaler)
            for x, y in itertools.islice(batches, n_steps)
        ]
        if len(losses) != n_steps:
            raise RuntimeError(f"batches ran out after {len(losses)} of {n_steps} steps")
        stacked = torch.stack(losses)
        # Each rank's loss is its shard's mean: one all-reduce per chunk gives the global one.
        return state, ddp.mean_over_ranks(stacked) if self._world > 1 else stacked

    def train_loop(self) -> dict[str, Any]:
        return {"steps_per_call": 1, "loop": "python", "rule": ONE_STEP_PER_CALL}

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        """Evaluation mode: BatchNorm uses its running statistics."""
        model = state.model
        model.eval()
        try:
            with torch.inference_mode():
                chunks = [
                    model(self._inputs(x[i : i + PREDICT_CHUNK])).cpu().numpy()
                    for i in range(0, len(x), PREDICT_CHUNK)
                ]
        finally:
            model.train()  # the compiled step guards on the training flag: restore it
        return np.concatenate(chunks)

    def infer_fn(self, state: State) -> Callable[[torch.Tensor], np.ndarray]:
        """The module in eval mode (it stays there: an inference state never trains) under
        torch.inference_mode, through torch.compile in compiled mode (infer_compile_options: a
        static graph per batch size); the logits come back as NumPy, the request's end."""
        model = state.model.eval()
        forward = torch.compile(eval_forward, **infer_compile_options(self._trial.policy)) if self._compiled else eval_forward

        def infer(x: torch.Tensor) -> np.ndarray:
            with torch.inference_mode():
                return forward(model, x).cpu().numpy()

        return infer

    def infer_input(self, x: np.ndarray) -> torch.Tensor:
        return self._inputs(x)

    def loss_and_grads(self, state: State, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Training mode (batch statistics in BatchNorm), on the same path as training (compiled
        in compiled mode) without the update; the buffers it updates are restored."""
        model = state.model
        saved = [b.detach().clone() for b in model.buffers()]
        model.zero_grad(set_to_none=True)
        rows = self._shard(len(x))  # all rows on one device; DDP averages the shards' gradients
        loss = self._fwd_bwd(state.forward, self._loss_fn, self._inputs(x[rows]), self._labels(y[rows]), self._amp)
        if self._world > 1:
            loss = ddp.mean_over_ranks(loss)
        grads = self._read(model, self._params, grads=True)
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for b, s in zip(model.buffers(), saved):
                b.copy_(s)
        return float(loss), grads

    def canonical_batch(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        if self._images:
            x = x.permute(0, 2, 3, 1)
        return np.ascontiguousarray(x.cpu().numpy(), dtype=self._x_canonical), y.cpu().numpy()

    def losses_to_numpy(self, losses: torch.Tensor) -> np.ndarray:
        return losses.cpu().numpy().astype(np.float64)

    def compilations(self) -> int:
        return compilations(self._compiled)

    def precision(self) -> dict[str, Any]:
        """The precision policy as the training step runs it."""
        module = self._meta_module()
        return {
            "param_dtype": str(next(module.parameters()).dtype).removeprefix("torch."),
            "autocast": self._amp.dtype is not None,
            "autocast_device_type": self._amp.device_type,
            "autocast_dtype": None if self._amp.dtype is None else str(self._amp.dtype).removeprefix("torch."),
            "grad_scaler": self._amp.scaled,
        }

    def applied_options(self) -> dict[str, Any]:
        """The options as the built objects run them (base.OptionsReadBack), read back from a
        module and optimizer made by init's factories on the meta device: the conv weights'
        memory format (None where the model has no 4-D weight), Adam's fused/foreach flags, what
        compiled mode compiles and with which torch.compile mode, and the loader."""
        module = self._meta_module().to(memory_format=self._memory_format)  # type: ignore[call-overload]
        weights = [p for p in module.parameters() if p.dim() == 4]
        layout = None if not weights else (
            "channels_last" if all(p.is_contiguous(memory_format=torch.channels_last) for p in weights) else "contiguous")
        optimizer = make_optimizer(module.parameters(), self._trial.workload.numerics, self._trial.policy)
        return {
            "memory_format": layout,
            "optimizer": optimizer_path(optimizer),
            "compile_scope": self._scope,
            "compile_mode": self._compile_options["mode"] if self._compiled else None,
            "loader": self._loader if self._trial.policy.data == "pipeline" else None,
        }

    def numerics(self) -> dict[str, Any]:
        """The workload's NUMERICS_FIELDS read back from objects built by the same factories as
        init's (on the meta device: no storage, no cost)."""
        module = self._meta_module()
        optimizer = make_optimizer(module.parameters(), self._trial.workload.numerics, self._trial.policy)
        loss = self._loss_fn
        found = {
            **optimizer_numerics(optimizer),
            "dropout": max((float(m.p) for m in module.modules() if isinstance(m, nn.Dropout)), default=0.0),
            **loss_numerics(loss),
            "dtype": str(next(module.parameters()).dtype).removeprefix("torch."),
            **self._model.numerics(module),
        }
        return {name: found[name] for name in self._workload.NUMERICS_FIELDS}


def _check_canonical(module: nn.Module, shapes: dict[str, tuple[int, ...]], table: dict[str, Slot], what: str) -> None:
    """The module spells exactly the workload's canonical names and shapes: a slip fails the
    build, not a parity check later."""
    if set(shapes) != set(table):
        raise RuntimeError(
            f"torch module {what} {sorted(set(table) - set(shapes))} are not canonical;"
            f" missing {sorted(set(shapes) - set(table))}"
        )
    tensors = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    for name, slot in table.items():
        # A storage-free stand-in with the meta tensor's shape, converted like real values.
        stand_in = np.broadcast_to(np.zeros((), np.float32), tensors[slot.torch_name].shape)
        shape = slot.layout.to_canonical(stand_in).shape
        if shape != shapes[name]:
            raise RuntimeError(f"torch {what[:-1]} {name} has canonical shape {shape}, not {shapes[name]}")
