"""The training machinery of every TensorFlow workload, written once: tf.Variable parameters
and buffers, the torch-formula Adam, the train step under each mode, the tf.data pipeline over
the spec's index rows and the Program methods. A workload module (mlp.py, cnn.py, ...) supplies
only a small Model: its forward pass, its canonical<->TF parameter conversion and the read-back
of the numerics it uses.

Modes: eager runs the Python step as is, graph wraps it in tf.function, compiled in
tf.function(jit_compile=True) (XLA).
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple, Protocol

import numpy as np
import tensorflow as tf

from dlbench.backends import multistep
from dlbench.backends.generate import Generating
from dlbench.backends.base import Sampling, Unsupported
from dlbench.spec import Numerics, TrialSpec
from dlbench.backends.tensorflow import losses, mirrored, pipeline
from dlbench.backends.tensorflow.training import Adam, in_mode, tracing_count
from dlbench.workloads.data import Augment, Dataset

DTYPES = {"float32": tf.float32, "float64": tf.float64}
# Compute dtype per reduced precision: variables and the optimizer stay float32, the forward pass
# runs on bfloat16 casts of them (fp16 needs Keras's loss scaler: TensorFlowBackend.precisions).
COMPUTE_DTYPES = {"bf16": tf.bfloat16}


class Loss(Protocol):
    def __call__(self, out: tf.Tensor, y: tf.Tensor, /) -> tf.Tensor: ...

    def numerics(self) -> dict[str, Any]: ...


@typing.final
@dataclass(frozen=True)
class LossKind:
    """One loss: its factory from the numerics block and its targets' dtype (None: the
    program's float dtype, one float array per sample; else integer labels of that dtype)."""

    make: Callable[[Numerics], Loss]
    label_dtype: tf.DType | None


# The numerics block's loss name -> how the program trains with it.
LOSSES: dict[str, LossKind] = {
    "mean_softmax_cross_entropy": LossKind(losses.cross_entropy, tf.int32),
    "focal_l1_detection": LossKind(losses.focal_l1, None),
    "mean_squared_error": LossKind(losses.squared_error, None),
    "mean_token_cross_entropy": LossKind(losses.token_cross_entropy, tf.int32),
}


def loss_kind(n: Numerics, devices: int) -> LossKind:
    """The LossKind of the numerics block's loss, or Unsupported naming what is implemented (on
    several devices only cross-entropy: its per-sample losses split over replicas)."""
    if n.loss not in LOSSES:
        raise Unsupported(f"the TensorFlow programs implement the losses {', '.join(LOSSES)}, not {n.loss!r}")
    if devices > 1 and n.loss != "mean_softmax_cross_entropy":
        raise Unsupported(f"the TensorFlow loss {n.loss!r} is not implemented on several devices")
    return LOSSES[n.loss]
DROPOUT = 0.0  # no model has a dropout layer

Batch = tuple[tf.Tensor, tf.Tensor]
Tensors = Mapping[str, tf.Tensor]


class Layout(Protocol):
    """Canonical parameters (workload names and layouts) <-> the TF variables a model holds."""

    def shapes(self, canonical: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        """TF variable names -> shapes, from the canonical names -> shapes."""
        ...

    def to_framework(self, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Canonical arrays -> values of the TF variables."""
        ...

    def to_canonical(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Values (or gradients) of the TF variables -> canonical arrays."""
        ...


class Model(Protocol):
    """One workload's model in TF: what a workload module hands to TensorFlowProgram."""

    @property
    def layout(self) -> Layout:
        """How canonical parameters become this model's variables and back."""
        ...

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """Logits and the new values of the buffers the pass updates (BatchNorm running
        statistics in training mode; empty otherwise)."""
        ...

    def numerics(self) -> dict[str, Any]:
        """The workload-specific numerics (padding, norm eps, ...) as the model passes them to
        TF, keyed like spec.Numerics."""
        ...


@typing.final
class SameLayout:
    """TF's native layouts are the canonical ones (NHWC images, HWIO conv kernels, (in, out)
    dense kernels, an NHWC reshape flattens in HWC order): nothing is renamed or permuted."""

    def shapes(self, canonical: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
        return dict(canonical)

    def to_framework(self, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(params)

    def to_canonical(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(values)


class State(NamedTuple):
    """Views of the program's variables: TF updates variables in place, so the state passed
    around is always the same object; a NamedTuple lets tf.nest (and so sync) see every one."""

    params: dict[str, tf.Variable]
    buffers: dict[str, tf.Variable]
    m: dict[str, tf.Variable]
    v: dict[str, tf.Variable]
    step: tf.Variable


def dense(h: tf.Tensor, params: Tensors, name: str) -> tf.Tensor:
    """`h @ <name>.kernel + <name>.bias` for a (rows, in) input: the models' shared layer."""
    return tf.nn.bias_add(tf.matmul(h, params[f"{name}.kernel"]), params[f"{name}.bias"])


def initial_buffer(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """BatchNorm running statistics start as torch's do: `<bn>.mean` zeros, `<bn>.var` ones."""
    fill = {"mean": 0.0, "var": 1.0}[name.rsplit(".", 1)[-1]]
    return np.full(shape, fill)


@typing.final
class TensorFlowProgram(Sampling, Generating):
    """One workload's Program: the Model's forward pass inside the shared training machinery."""

    def __init__(self, trial: TrialSpec, workload: ModuleType, model: Model) -> None:
        spec = trial.workload
        self._model = model
        self._fields: tuple[str, ...] = workload.NUMERICS_FIELDS
        self._dtype = DTYPES[spec.numerics.dtype]
        self._compute: tf.DType | None = COMPUTE_DTYPES.get(trial.precision)
        kind = loss_kind(spec.numerics, trial.devices)
        self._loss = kind.make(spec.numerics)
        self._y_dtype = self._dtype if kind.label_dtype is None else kind.label_dtype
        self._strategy = mirrored.strategy() if trial.devices > 1 else None
        with self._strategy.scope() if self._strategy is not None else contextlib.nullcontext():
            self._make_variables(spec, workload, model)
        sample_shape, sample_dtype = workload.input_spec(spec)
        # Images and vectors follow the program's dtype (float64 for the parity reference);
        # token ids stay integers.
        is_float = np.dtype(sample_dtype).kind == "f"
        self._x_dtype = self._dtype if is_float else tf.as_dtype(sample_dtype)
        # Fixed shapes: the step traces (and compiles) exactly once.
        signature = [
            tf.TensorSpec((spec.batch_size, *sample_shape), self._x_dtype),
            tf.TensorSpec((spec.batch_size, *_target_shape(workload, spec, kind)), self._y_dtype),
        ]
        mode = trial.policy.mode
        # Data parallelism: XLA compiles each replica's forward and backward (jit_compile on
        # the replica function); the step around strategy.run, with the cross-replica sum and
        # the update, is a graph: one XLA cluster cannot span the replicas' devices.
        outer = mode if self._strategy is None else ("graph" if mode == "compiled" else mode)
        self._shard_grads = in_mode(self._shard_loss_grads, "compiled") if mode == "compiled" else self._shard_loss_grads
        self._step = in_mode(self._train_step, outer, signature)
        # K steps per tf.function call (backends/multistep.py), written out one after another;
        # eager mode has no compiled call to amortise, and a MirroredStrategy step stays one.
        self._loop = multistep.train_loop(trial)
        if mode == "eager" or self._strategy is not None:
            why = "eager: no compiled call to amortise" if mode == "eager" else "MirroredStrategy: one step per call"
            self._loop = multistep.TrainLoop(1, self._loop.loop, why)
        k = self._loop.steps_per_call
        self._steps = in_mode(self._train_steps, outer, [(signature[0],) * k, (signature[1],) * k])
        # Checks and evaluation run under the trial's mode too (their own traces, not counted).
        self._grads = in_mode(self._loss_grads_updates, outer)
        # Evaluation and inference (infer_fn): one trace per input shape (batch size), counted.
        self._logits = in_mode(self._predict, mode)
        # What compilations() counts: the train steps and the inference forward.
        self._counted = (self._step, self._steps, self._logits)
        self._x: tf.Variable | None = None
        self._y: tf.Variable | None = None
        self._policy = trial.policy
        self._device_gather: pipeline.DeviceGather | None = None

    def _make_variables(self, spec: Any, workload: ModuleType, model: Model) -> None:
        shapes = model.layout.shapes(workload.param_shapes(spec))
        self._vars = {n: tf.Variable(tf.zeros(s, self._dtype), name=n) for n, s in shapes.items()}
        self._initial_buffers = {
            n: initial_buffer(n, s) for n, s in workload.buffer_shapes(spec).items()
        }
        self._buffers = {
            n: tf.Variable(v, dtype=self._dtype, trainable=False, name=n)
            for n, v in self._initial_buffers.items()
        }
        self._adam = Adam(self._vars, spec.numerics, self._dtype)

    # -- steps --------------------------------------------------------------------------------
    def _loss_grads_updates(
        self, x: tf.Tensor, y: tf.Tensor
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor], dict[str, tf.Tensor]]:
        """Training-mode loss, gradients and buffer updates; nothing is assigned. With several
        replicas: each replica's shard, its loss summed and divided by the global batch (so
        that the cross-replica sums are the global batch's mean loss and gradients)."""
        if self._strategy is not None:
            per_replica = self._strategy.run(self._replica_loss_grads, args=(x, y))
            loss, grads = tf.nest.map_structure(
                lambda v: self._strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None), per_replica)
            return loss, grads, {}
        with tf.GradientTape() as tape:
            logits, updates = self._forward(x, True)
            loss = self._loss(logits, y)
        grads = tape.gradient(loss, self._vars)
        # An embedding lookup's gradient is IndexedSlices: dense, as torch and JAX update it.
        return loss, {k: tf.convert_to_tensor(g) for k, g in grads.items()}, updates

    def _forward(self, x: tf.Tensor, training: bool) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """The model on the variables, or on their casts to the compute dtype (the cast is
        differentiable: gradients reach the float32 variables); float32 logits and buffers."""
        if self._compute is None:
            return self._model.forward(self._vars, self._buffers, x, training)
        c = self._compute
        params = {k: tf.cast(v, c) for k, v in self._vars.items()}
        buffers = {k: tf.cast(v, c) for k, v in self._buffers.items()}
        x = tf.cast(x, c) if x.dtype.is_floating else x
        logits, updates = self._model.forward(params, buffers, x, training)
        return tf.cast(logits, self._dtype), {k: tf.cast(v, self._dtype) for k, v in updates.items()}

    def _replica_loss_grads(self, x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """One replica (in its replica context): its contiguous rows of the global batch, in
        rank order. Sliced here, outside the compiled function, so that one trace serves every
        replica."""
        ctx = tf.distribute.get_replica_context()
        global_rows = tf.shape(x)[0]
        rows = global_rows // ctx.num_replicas_in_sync
        start = ctx.replica_id_in_sync_group * rows
        return self._shard_grads(x[start : start + rows], y[start : start + rows], global_rows)

    def _shard_loss_grads(
        self, x: tf.Tensor, y: tf.Tensor, global_rows: tf.Tensor
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """A shard's loss as sum / global batch (tf.nn.compute_average_loss), and its gradients:
        summed over the replicas they are the global batch's mean loss and gradients."""
        with tf.GradientTape() as tape:
            logits, _ = self._forward(x, True)
            # several devices train cross-entropy only (loss_kind)
            per_sample = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=global_rows)
        grads = tape.gradient(loss, self._vars)
        return loss, {k: tf.convert_to_tensor(g) for k, g in grads.items()}

    def _train_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        loss, grads, updates = self._loss_grads_updates(x, y)
        self._adam.apply(self._vars, grads)
        for name, value in updates.items():
            self._buffers[name].assign(value)
        return loss

    def _train_steps(self, xs: tuple[tf.Tensor, ...], ys: tuple[tf.Tensor, ...]) -> tf.Tensor:
        """K train steps in order (automatic control dependencies keep the variable updates of
        one step before the reads of the next): the K losses."""
        return tf.stack([self._train_step(x, y) for x, y in zip(xs, ys, strict=True)])

    def _predict(self, x: tf.Tensor) -> tf.Tensor:
        return self._model.forward(self._vars, self._buffers, x, False)[0]

    def _state(self) -> State:
        adam = self._adam
        return State(self._vars, self._buffers, adam.m, adam.v, adam.step)

    # -- Program ------------------------------------------------------------------------------
    def load(self, dataset: Dataset) -> None:
        # Variables (pipeline.py says why). "pipeline": on the host, because tf.data runs
        # there and each batch goes to the device with the step's inputs; "device": on the
        # default device (the GPU where there is one), gathered there.
        on = None if self._policy.data == "device" else "/CPU:0"
        with tf.device(on):
            self._x = tf.Variable(dataset.x, trainable=False, dtype=self._x_dtype, name="inputs")
            self._y = tf.Variable(dataset.y, trainable=False, dtype=self._y_dtype, name="labels")
        self._device_gather = pipeline.DeviceGather(self._x, self._y)

    def init(self, params: dict[str, np.ndarray]) -> State:
        values = self._model.layout.to_framework(params)
        if set(values) != set(self._vars):
            raise ValueError(f"parameter names {sorted(params)} do not match the workload's")
        for name, var in self._vars.items():
            var.assign(tf.cast(values[name], self._dtype))
        for name, buf in self._buffers.items():
            buf.assign(tf.cast(self._initial_buffers[name], self._dtype))
        self._adam.reset()
        return self._state()

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[Batch]:
        if self._x is None or self._y is None or self._device_gather is None:
            raise RuntimeError("load(dataset) must come before batches(order)")
        if self._policy.data == "device":
            return self._device_gather.batches(order, augment)
        return pipeline.loader_batches(self._x, self._y, order, augment, self._policy.loader_workers)

    def compile(self, state: State, batch: Batch) -> float | None:
        # TF has no public ahead-of-time compile for a tf.function: get_concrete_function only
        # traces, and XLA (jit_compile) and graph optimisation (Grappler) run inside the first
        # call. The worker reports compile_estimate_s instead.
        return None

    def train_chunk(
        self, state: State, batches: Iterator[Batch], n_steps: int
    ) -> tuple[State, tf.Tensor]:
        # K steps per call while the chunk has K left (their batches pulled in order), then one
        # per call; the losses stay a tensor: no host fetch per step.
        k = self._loop.steps_per_call
        calls = n_steps // k if k > 1 else 0
        per_call = []
        for _ in range(calls):
            xs, ys = zip(*(next(batches) for _ in range(k)), strict=True)
            per_call.append(self._steps(xs, ys))
        losses = [self._step(*next(batches)) for _ in range(n_steps - calls * k)]
        if losses:
            per_call.append(tf.stack(losses))
        return state, per_call[0] if len(per_call) == 1 else tf.concat(per_call, 0)

    def train_loop(self) -> dict[str, Any]:
        return self._loop.record()

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._logits(tf.constant(x, dtype=self._x_dtype)).numpy())

    def infer_fn(self, state: State) -> Callable[[tf.Tensor], np.ndarray]:
        """The eval-mode forward as the mode runs it (eager ops, tf.function, or
        tf.function(jit_compile=True)); .numpy() fetches the logits to the host, which is TF's
        sync and the request's end."""
        logits = self._logits
        return lambda x: logits(x).numpy()

    def eval_forward(self) -> Callable[[tf.Tensor], tf.Tensor]:
        """The eval-mode forward on the program's variables, untraced: what a converter traces
        with a signature of its own (backends/litert: the TFLite converter)."""
        return self._predict

    def infer_input(self, x: np.ndarray) -> tf.Tensor:
        # tf.constant lives in host memory; the identity puts it on the default device.
        return tf.identity(tf.constant(x, dtype=self._x_dtype))

    def loss_and_grads(
        self, state: State, x: np.ndarray, y: np.ndarray
    ) -> tuple[float, dict[str, np.ndarray]]:
        x_t, y_t = tf.constant(x, dtype=self._x_dtype), tf.constant(y, dtype=self._y_dtype)
        loss, grads, _ = self._grads(x_t, y_t)
        canonical = self._model.layout.to_canonical({k: g.numpy() for k, g in grads.items()})
        return float(loss.numpy()), canonical

    def params(self, state: State) -> dict[str, np.ndarray]:
        values = {name: var.numpy() for name, var in state.params.items()}
        return self._model.layout.to_canonical(values)

    def canonical_batch(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        return x.numpy(), y.numpy()

    def losses_to_numpy(self, losses: tf.Tensor) -> np.ndarray:
        return np.asarray(losses.numpy(), dtype=np.float64)

    def compilations(self) -> int:
        return tracing_count(self._counted)

    def precision(self) -> dict[str, Any]:
        return {
            "variable_dtype": self._dtype.name,
            "compute_dtype": (self._compute or self._dtype).name,
            "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
        }

    def numerics(self) -> dict[str, Any]:
        adam = self._adam
        dtypes = sorted({var.dtype.name for var in (*self._vars.values(), *self._buffers.values())})
        found = {
            **adam.numerics(),
            "dropout": DROPOUT,
            **self._loss.numerics(),
            "dtype": ",".join(dtypes),
            **self._model.numerics(),
        }
        return {k: found[k] for k in self._fields}


def _target_shape(workload: ModuleType, spec: Any, kind: LossKind) -> tuple[int, ...]:
    """One sample's target shape: () for class labels, else that of the workload's targets
    (read off a one-sample fixed batch: the workload interface has no shape for them; lm's
    integer targets are a token per position)."""
    if kind.label_dtype is not None and spec.numerics.loss == "mean_softmax_cross_entropy":
        return ()
    return tuple(workload.fixed_batch(spec, 1).y.shape[1:])


def build(trial: TrialSpec, workload: ModuleType, model: Model) -> TensorFlowProgram:
    """The Program (backends.support compares every numerics field the workload uses, as read
    back, with the spec: what this implementation does not parametrise must match)."""
    return TensorFlowProgram(trial, workload, model)
