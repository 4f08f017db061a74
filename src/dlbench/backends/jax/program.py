"""The training machinery every JAX workload shares: plain JAX + Optax, params (and BatchNorm
buffers) as dicts in the canonical names and layouts, which are JAX's own (NHWC activations,
HWIO and (in, out) kernels), so nothing is permuted in or out; the whole train step (loss,
gradients, Adam update, buffer update) is one jax.jit with the state donated.

A workload module (mlp.py, cnn.py, ...) supplies a small `Model`: its forward pass, its initial
buffers and its own numerics read back; `JaxProgram` does the rest.
"""

from __future__ import annotations

import functools
import re
import time
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlbench import workloads
from dlbench.backends import multistep
from dlbench.backends.generate import Generating
from dlbench.backends.base import Sampling, Unsupported
from dlbench.backends.jax import losses, pipeline, settings
from dlbench.backends.jax.training import compiles, counted_name, listen_for_compiles, make_optimizer, optimizer_numerics
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads.data import Augment, Dataset

Params = dict[str, jax.Array]
# A batch as the step takes it: device arrays, or host NumPy on a CPU device (pipeline.py).
Batch = pipeline.Batch | pipeline.HostBatch


class Loss(Protocol):
    def __call__(self, out: jax.Array, y: jax.Array, /) -> jax.Array: ...

    def numerics(self) -> dict[str, Any]: ...


@typing.final
@dataclass(frozen=True)
class LossKind:
    """One loss: its factory from the numerics block and its targets' dtype (None: the
    program's float dtype; else that integer dtype)."""

    make: Callable[[Numerics], Loss]
    label_dtype: str | None


# The numerics block's loss name -> how the program trains with it.
LOSSES: dict[str, LossKind] = {
    "mean_softmax_cross_entropy": LossKind(losses.cross_entropy, "int32"),
    "focal_l1_detection": LossKind(losses.focal_l1, None),
    "mean_squared_error": LossKind(losses.squared_error, None),
    "mean_token_cross_entropy": LossKind(losses.token_cross_entropy, "int32"),
}


def loss_kind(n: Numerics) -> LossKind:
    """The LossKind of the numerics block's loss, or Unsupported naming what is implemented."""
    if n.loss not in LOSSES:
        raise Unsupported(f"the JAX programs implement the losses {', '.join(LOSSES)}, not {n.loss!r}")
    return LOSSES[n.loss]


class TrainState(NamedTuple):
    params: Params
    # Non-trained state (BatchNorm running statistics); an empty dict for most workloads.
    buffers: Params
    opt_state: optax.OptState


class Model(Protocol):
    """What differs per workload. Parameters and buffers arrive in the canonical names and
    layouts, already in the program's dtype; constants inside `apply` must be Python floats
    (weakly typed) so that float32 stays float32 and the float64 reference stays float64."""

    def initial_buffers(self) -> dict[str, np.ndarray]:
        """Canonical initial buffers (BatchNorm running mean zeros, variance ones); {} if none."""
        ...

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        """(logits, buffers after this batch). `train` is static: training-mode BatchNorm
        normalises with the batch statistics and updates the buffers; otherwise the running
        statistics are used and the buffers come back unchanged."""
        ...

    def numerics(self) -> dict[str, Any]:
        """The model's own numerics (padding, BatchNorm, LayerNorm, GELU, attention scale, ODE
        solver), read back from the values it passes to JAX, keyed like spec.Numerics."""
        ...


# --- building ----------------------------------------------------------------------------------


def build(trial: TrialSpec, model: Model) -> JaxProgram:
    """The program for `model` (backends.support checks its numerics read-back)."""
    dtype = trial.workload.numerics.dtype
    if dtype == "float64" and not jax.config.values["jax_enable_x64"]:
        # Without x64, JAX silently makes float32 arrays of float64 requests.
        raise RuntimeError(
            "dtype 'float64' needs jax_enable_x64, which is off: set JAX_ENABLE_X64=1 before jax"
            " is imported (JaxBackend.reference_environment)"
        )
    listen_for_compiles()
    return JaxProgram(trial, model)


def refuse(workload: str, field: str, wanted: object, implemented: Iterable[object]) -> Unsupported:
    """The one-line reason a numerics value is not run: the value asked for and those that are."""
    allowed = " or ".join(repr(v) for v in implemented)
    return Unsupported(f"the JAX {workload} implements {field} {allowed}, not {wanted!r}")


# --- program -----------------------------------------------------------------------------------


@typing.final
class JaxProgram(Sampling, Generating):
    def __init__(self, trial: TrialSpec, model: Model) -> None:
        spec = trial.workload
        self._spec = spec
        self._workload = workloads.get(spec.name)
        self._model = model
        self._dtype = np.dtype(spec.numerics.dtype)
        shape, x_dtype = self._workload.input_spec(spec)
        # Float inputs follow the program's dtype (float64 for the reference); token ids do not.
        self._x_dtype = self._dtype if np.issubdtype(x_dtype, np.floating) else np.dtype(x_dtype)
        self._tx = make_optimizer(spec.numerics)
        self._mesh = _Mesh(trial.devices)
        tx = self._tx
        # The compute dtype policy: parameters, buffers and optimizer state stay in the
        # program's dtype; the model applies in bfloat16 (bf16) and the loss is float32.
        self._compute = COMPUTE_DTYPES.get(trial.precision)
        kind = loss_kind(spec.numerics)
        self._loss = kind.make(spec.numerics)
        self._y_dtype = self._dtype if kind.label_dtype is None else np.dtype(kind.label_dtype)
        loss_fn = functools.partial(_loss, model, self._compute, self._loss)

        def train_step(state: TrainState, x: jax.Array, y: jax.Array) -> tuple[TrainState, jax.Array]:
            (loss, buffers), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, state.buffers, x, y)
            updates, opt_state = tx.update(grads, state.opt_state, state.params)
            return TrainState(optax.apply_updates(state.params, updates), buffers, opt_state), loss

        self._step_name = counted_name(train_step, f"{spec.name}_train_step")
        # Donating the state lets XLA update params, buffers and moments in place.
        self._jitted = jax.jit(train_step, donate_argnums=0)
        # Until compile() runs, the jitted function compiles in its first call.
        self._step: Any = self._jitted
        self._compiled: jax.stages.Compiled | None = None
        # K steps per call (backends/multistep.py), their own name for the compile count.
        self._loop = multistep.train_loop(trial, multistep.JAX_AUTO_STEPS)
        multi = _multi_step(train_step, self._loop.loop)
        self._multi_name = counted_name(multi, f"{spec.name}_train_{self._loop.steps_per_call}_steps")
        self._multi_jitted = jax.jit(multi, donate_argnums=0)
        self._multi: Any = self._multi_jitted
        self._value_and_grad = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
        init = functools.partial(_init_state, tx, self._dtype)
        # The state replicated over the mesh (data parallelism), else on the default device.
        self._init = jax.jit(init) if self._mesh.replicated is None else jax.jit(init, out_shardings=self._mesh.replicated)
        self._predict = jax.jit(functools.partial(_logits, model))

        def infer(params: Params, buffers: Params, x: jax.Array) -> jax.Array:
            return _logits(model, params, buffers, x)

        # The inference function of the infer scenario: its own name, so its compiles are
        # counted (one per batch size, made by the worker's warm-up).
        self._infer_name = counted_name(infer, f"{spec.name}_infer")
        self._infer = jax.jit(infer)
        self._policy = trial.policy
        # The dataset as load() placed it: host NumPy (pipeline) or device arrays (device).
        self._x: np.ndarray | jax.Array = np.empty((0, *shape), self._x_dtype)
        self._y: np.ndarray | jax.Array = np.empty((0,), self._y_dtype)

    def load(self, dataset: Dataset) -> None:
        # Host NumPy, indexed per batch and put on the device by batches(): what JAX
        # practitioners do for an in-memory data set; or the whole of it on the device once.
        self._x = np.ascontiguousarray(dataset.x, dtype=self._x_dtype)
        self._y = np.ascontiguousarray(dataset.y, dtype=self._y_dtype)
        if self._policy.data == "device":
            self._x, self._y = jax.block_until_ready(jax.device_put((self._x, self._y)))

    def init(self, params: dict[str, np.ndarray]) -> TrainState:
        # One jitted function: a jit's outputs are fresh device buffers (the state is donated, so
        # it must not alias the caller's arrays), and it compiles once where creating the Adam
        # moments array by array compiled one zeros() per shape (resnet: ~40 compiles).
        return self._init(params, self._model.initial_buffers())  # type: ignore[no-any-return]

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[Batch]:
        x, y = self._x, self._y
        if isinstance(x, jax.Array) and isinstance(y, jax.Array):
            return self._mesh.shard(pipeline.device_batches(x, y, order, augment))
        if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
            sharding = self._mesh.batch
            return pipeline.host_batches(x, y, order, augment, self._policy.loader_workers, sharding,
                                         pipeline.prefetch_to_device(sharding))
        raise RuntimeError("load(dataset) must come before batches(order)")

    def compile(self, state: TrainState, batch: Batch) -> float:
        # Lowering only traces abstract values: nothing runs, so nothing is donated. Both
        # programs a chunk may run: one step (the first step, a chunk's leftover steps) and K.
        start = time.perf_counter()
        self._compiled = self._jitted.lower(state, *batch).compile()
        self._step = self._compiled
        k = self._loop.steps_per_call
        if k > 1:
            x, y = batch
            self._multi = self._multi_jitted.lower(state, (x,) * k, (y,) * k).compile()
        return time.perf_counter() - start

    def train_chunk(self, state: TrainState, batches: Iterator[Batch], n_steps: int) -> tuple[TrainState, jax.Array]:
        # Dispatch is asynchronous: the loop runs ahead of the device and never blocks. K steps
        # per call while a chunk has K left (their batches pulled in order), then one per call.
        k = self._loop.steps_per_call
        calls = n_steps // k if k > 1 else 0
        per_call = []
        for _ in range(calls):
            xs, ys = zip(*(next(batches) for _ in range(k)), strict=True)
            state, chunk = self._multi(state, xs, ys)
            per_call.append(chunk)
        losses = []
        for _ in range(n_steps - calls * k):
            x, y = next(batches)
            state, loss = self._step(state, x, y)
            losses.append(loss)
        if losses:
            per_call.append(jnp.stack(losses))
        return state, per_call[0] if len(per_call) == 1 else jnp.concatenate(per_call)

    def train_loop(self) -> dict[str, Any]:
        return {**self._loop.record(), "donated": "state"}

    def predict(self, state: TrainState, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._predict(state.params, state.buffers, np.asarray(x, self._x_dtype)))

    def infer_fn(self, state: TrainState) -> Callable[[jax.Array], np.ndarray]:
        """The jitted eval-mode apply; parameters and buffers are arguments (not constants
        folded into the executable), as a served model's are. np.asarray waits for the result
        (dispatch is asynchronous) and brings it to the host: the request's end."""
        params, buffers, infer = state.params, state.buffers, self._infer
        return lambda x: np.asarray(infer(params, buffers, x))

    def infer_input(self, x: np.ndarray) -> jax.Array:
        return jax.device_put(np.asarray(x, self._x_dtype))

    def loss_and_grads(self, state: TrainState, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        # Training mode (batch statistics in BatchNorm); the buffers it would update are dropped.
        batch = jax.device_put((np.asarray(x, self._x_dtype), np.asarray(y, self._y_dtype)), self._mesh.batch)
        (loss, _), grads = self._value_and_grad(state.params, state.buffers, *batch)
        return float(loss), {k: np.array(g) for k, g in grads.items()}

    def params(self, state: TrainState) -> dict[str, np.ndarray]:
        # np.array copies: a view of a buffer that a later step donates would change under us.
        return {k: np.array(v) for k, v in state.params.items()}

    def buffers(self, state: TrainState) -> dict[str, np.ndarray]:
        """The non-trained state (BatchNorm running statistics) in canonical names."""
        return {k: np.array(v) for k, v in state.buffers.items()}

    def canonical_batch(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        return np.array(x), np.array(y)

    def losses_to_numpy(self, losses: jax.Array) -> np.ndarray:
        return np.asarray(losses, dtype=np.float64)

    def compilations(self) -> int:
        return compiles((self._step_name, self._multi_name, self._infer_name))

    def compiled_flops(self) -> float | None:
        """XLA's own FLOP count of one compiled train step (elementwise ops included), once
        compile() has run; None before."""
        analysis = None if self._compiled is None else self._compiled.cost_analysis()
        return None if analysis is None else float(analysis["flops"])

    def precision(self) -> dict[str, Any]:
        """The compute dtype policy and JAX's matmul precision, as the step runs them."""
        return {
            "param_dtype": str(self._dtype),
            "compute_dtype": str(np.dtype(self._compute)) if self._compute is not None else str(self._dtype),
            "loss_dtype": "float32" if self._compute is not None else str(self._dtype),
            "default_matmul_precision": jax.config.values["jax_default_matmul_precision"],
        }

    def applied_options(self) -> dict[str, Any]:
        """The options as the built program runs them (base.OptionsReadBack): for a workload
        with a 2x2/2 max-pool (the `pool` option), how many reduce_window and reduce ops its
        forward pass lowers to, counted in the StableHLO of one example; the matmul precision
        is in precision(), the loop in train_loop()."""
        if self._spec.name not in settings.POOL_WORKLOADS:
            return {}
        params = {k: jax.ShapeDtypeStruct(v, self._dtype) for k, v in self._workload.param_shapes(self._spec).items()}
        buffers = {k: jax.ShapeDtypeStruct(v.shape, self._dtype) for k, v in self._model.initial_buffers().items()}
        x = jax.ShapeDtypeStruct((1, *self._workload.input_spec(self._spec)[0]), self._x_dtype)
        text = self._predict.lower(params, buffers, x).as_text()
        return {"pool": {op: len(re.findall(rf"stablehlo\.{op}\b", text)) for op in ("reduce_window", "reduce")}}

    def numerics(self) -> dict[str, Any]:
        """The workload's NUMERICS_FIELDS read back: the optimizer's own hyper-parameters and
        inner state (from an optimizer state for a one-element probe of the program's dtype, which
        holds the same values as the real one at a fraction of the cost), the parameters' dtype,
        and the model's own numerics."""
        found = {
            **optimizer_numerics(self._tx, self._dtype),
            "dropout": 0.0,  # no JAX model here has a dropout layer
            **self._loss.numerics(),
            **self._model.numerics(),
        }
        return {name: found[name] for name in self._workload.NUMERICS_FIELDS}


def _multi_step(train_step: Callable[[TrainState, jax.Array, jax.Array], tuple[TrainState, jax.Array]],
                loop: str) -> Callable[[TrainState, tuple[jax.Array, ...], tuple[jax.Array, ...]], tuple[TrainState, jax.Array]]:
    """train_step over K batches (tuples of K arrays, in order) in one function: the steps
    written out one after another (unroll, as Keras on TensorFlow compiles its steps_per_execution;
    Keras 3.15 on JAX calls its jitted one step from a Python loop instead), or a lax.scan over
    the batches stacked inside the compiled function. (state, K losses)."""

    def unrolled(state: TrainState, xs: tuple[jax.Array, ...], ys: tuple[jax.Array, ...]) -> tuple[TrainState, jax.Array]:
        losses = []
        for x, y in zip(xs, ys, strict=True):
            state, loss = train_step(state, x, y)
            losses.append(loss)
        return state, jnp.stack(losses)

    def scanned(state: TrainState, xs: tuple[jax.Array, ...], ys: tuple[jax.Array, ...]) -> tuple[TrainState, jax.Array]:
        return jax.lax.scan(lambda s, b: train_step(s, *b), state, (jnp.stack(xs), jnp.stack(ys)))

    return unrolled if loop == "unroll" else scanned


def _init_state(tx: optax.GradientTransformation, dtype: np.dtype[Any], params: Params, buffers: Params) -> TrainState:
    params = {k: v.astype(dtype) for k, v in params.items()}
    buffers = {k: v.astype(dtype) for k, v in buffers.items()}
    return TrainState(params, buffers, tx.init(params))


# Compute dtype per reduced precision (fp16 needs loss scaling: precision.py declares it
# unsupported in JAX).
COMPUTE_DTYPES = {"bf16": jnp.bfloat16}


def _cast_floats(tree: Params, dtype: Any) -> Params:
    return {k: v.astype(dtype) if jnp.issubdtype(v.dtype, jnp.floating) else v for k, v in tree.items()}


def _loss(model: Model, compute: Any, loss: Loss, params: Params, buffers: Params, x: jax.Array,
          y: jax.Array) -> tuple[jax.Array, Params]:
    if compute is None:
        logits, new_buffers = model.apply(params, buffers, x, True)
        return loss(logits, y), new_buffers
    # Casts inside the differentiated function: the gradients come back in the parameters'
    # dtype through the casts' transposes; updated buffers return to their stored dtype.
    x = x.astype(compute) if jnp.issubdtype(x.dtype, jnp.floating) else x
    logits, new_buffers = model.apply(_cast_floats(params, compute), _cast_floats(buffers, compute), x, True)
    stored = {k: v.astype(buffers[k].dtype) for k, v in new_buffers.items()}
    return loss(logits.astype(jnp.float32), y), stored


def _logits(model: Model, params: Params, buffers: Params, x: jax.Array) -> jax.Array:
    return model.apply(params, buffers, x, False)[0]


@typing.final
class _Mesh:
    """Data parallelism over `devices` local devices: a one-axis Mesh ("data"), each global batch
    split along its rows into contiguous shards in device order, parameters and optimizer state
    replicated; jit partitions the step and inserts the gradient all-reduce. With one device,
    nothing is placed (JAX's default device)."""

    def __init__(self, devices: int) -> None:
        self.devices = devices
        self.batch: jax.sharding.Sharding | None = None
        self.replicated: jax.sharding.Sharding | None = None
        if devices > 1:
            mesh = jax.sharding.Mesh(np.array(jax.local_devices()[:devices]), ("data",))
            self.batch = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
            self.replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def shard(self, batches: Iterator[Batch]) -> Iterator[Batch]:
        """Device-resident batches resharded over the mesh (gathered on one device first)."""
        if self.batch is None:
            return batches
        return (jax.device_put(b, self.batch) for b in batches)
