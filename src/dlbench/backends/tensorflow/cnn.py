"""The seed CNN in TensorFlow itself: tf.Variable parameters, tf.nn ops and a GradientTape.

TF's native layouts are the canonical ones (NHWC images, HWIO conv kernels, (in, out) dense
kernels, an NHWC reshape flattens in HWC order), so parameters and gradients cross without any
permutation. Modes: eager runs the Python step as is, graph wraps it in tf.function, compiled
in tf.function(jit_compile=True) (XLA).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from dlbench.backends.base import Program, Unsupported
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import cnn
from dlbench.workloads.data import Dataset

DTYPE = tf.float32
PADDING = "VALID"  # passed to every conv2d and max_pool2d
FLATTEN_ORDER = "HWC"  # what tf.reshape of an NHWC tensor gives
DROPOUT = 0.0  # the model has no dropout layer
LOSS = "mean_softmax_cross_entropy"  # reduce_mean of sparse_softmax_cross_entropy_with_logits

Batch = tuple[tf.Tensor, tf.Tensor]


class State(NamedTuple):
    """Views of the program's variables: TF updates variables in place, so the state passed
    around is always the same object; a NamedTuple lets tf.nest (and so sync) see every one."""

    params: dict[str, tf.Variable]
    m: dict[str, tf.Variable]
    v: dict[str, tf.Variable]
    step: tf.Variable


@typing.final
class Adam:
    """Adam as torch.optim.Adam and optax.adam compute it: bias-corrected moments, eps added
    outside the square root. Not tf.keras.optimizers.Adam: Keras adds eps to sqrt(v) before the
    bias correction (the paper's eps-hat) and defaults it to 1e-7, a different update. Written
    out it is a handful of element-wise ops per variable, which XLA fuses in compiled mode."""

    name = "adam"
    eps_placement = "outside_sqrt"

    def __init__(self, params: dict[str, tf.Variable], numerics: Numerics) -> None:
        self.learning_rate = numerics.learning_rate
        self.beta1 = numerics.beta1
        self.beta2 = numerics.beta2
        self.eps = numerics.eps
        self.bias_correction = numerics.bias_correction
        self.weight_decay = numerics.weight_decay
        self.m = {k: _zeros_like(p, f"m/{k}") for k, p in params.items()}
        self.v = {k: _zeros_like(p, f"v/{k}") for k, p in params.items()}
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")

    def reset(self) -> None:
        for slot in (*self.m.values(), *self.v.values()):
            slot.assign(tf.zeros_like(slot))
        self.step.assign(0)

    def apply(self, params: dict[str, tf.Variable], grads: dict[str, tf.Tensor]) -> None:
        # Bias corrections in float64, as torch computes them (Python floats): in float32,
        # 1 - 0.999^t carries a 1e-5 relative error from rounding 0.999 alone.
        t = tf.cast(self.step.assign_add(1), tf.float64)
        step_size = tf.constant(self.learning_rate, tf.float64)
        v_scale = tf.constant(1.0, tf.float64)
        if self.bias_correction:
            # torch's arrangement: lr / (1 - b1^t) scales m, sqrt(1 - b2^t) divides sqrt(v).
            step_size = step_size / (1.0 - tf.constant(self.beta1, tf.float64) ** t)
            v_scale = tf.sqrt(1.0 - tf.constant(self.beta2, tf.float64) ** t)
        step_size, v_scale = tf.cast(step_size, DTYPE), tf.cast(v_scale, DTYPE)
        for name, p in params.items():
            g = grads[name]
            if self.weight_decay:
                g = g + self.weight_decay * p  # torch's (L2, not decoupled) weight decay
            m = self.m[name].assign(self.beta1 * self.m[name] + (1.0 - self.beta1) * g)
            v = self.v[name].assign(self.beta2 * self.v[name] + (1.0 - self.beta2) * tf.square(g))
            p.assign_sub(step_size * m / (tf.sqrt(v) / v_scale + self.eps))


def _zeros_like(p: tf.Variable, name: str) -> tf.Variable:
    return tf.Variable(tf.zeros_like(p), trainable=False, name=name)


def _in_mode(
    fn: Callable[..., Any], mode: str, input_signature: list[tf.TensorSpec] | None = None
) -> Any:
    """The function as the mode runs it. jit_compile=False in graph mode so that no
    auto-clustering flag can turn it into XLA behind our back."""
    if mode == "eager":
        return fn
    return tf.function(fn, input_signature=input_signature, jit_compile=mode == "compiled")


@typing.final
class TensorFlowCNN:
    def __init__(self, trial: TrialSpec) -> None:
        spec = trial.workload
        self._padding = PADDING
        self._vars = {
            name: tf.Variable(tf.zeros(shape, DTYPE), name=name)
            for name, shape in cnn.param_shapes(spec).items()
        }
        self._adam = Adam(self._vars, spec.numerics)
        # Fixed shapes: the step traces (and compiles) exactly once.
        signature = [
            tf.TensorSpec((spec.batch_size, *cnn.INPUT_SHAPE), DTYPE),
            tf.TensorSpec((spec.batch_size,), tf.int32),
        ]
        self._step = _in_mode(self._train_step, trial.policy.mode, signature)
        eager = trial.policy.mode == "eager"
        self._tracing_count: Callable[[], int] = (
            (lambda: 0) if eager else self._step.experimental_get_tracing_count
        )
        # Checks and evaluation run under the trial's mode too (their own traces, not counted).
        self._grads = _in_mode(self._loss_and_grads, trial.policy.mode)
        self._logits = _in_mode(self._forward, trial.policy.mode)
        self._x: tf.Variable | None = None
        self._y: tf.Variable | None = None

    # -- model --------------------------------------------------------------------------------
    def _forward(self, x: tf.Tensor) -> tf.Tensor:
        p = self._vars
        h = tf.nn.conv2d(x, p["conv1.kernel"], strides=1, padding=self._padding)
        h = tf.nn.relu(tf.nn.bias_add(h, p["conv1.bias"]))
        h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding=self._padding)
        h = tf.nn.conv2d(h, p["conv2.kernel"], strides=1, padding=self._padding)
        h = tf.nn.relu(tf.nn.bias_add(h, p["conv2.bias"]))
        h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding=self._padding)
        h = tf.reshape(h, [-1, cnn.FLAT])  # NHWC rows flatten in HWC order, as canonical
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(h, p["dense1.kernel"]), p["dense1.bias"]))
        return tf.nn.bias_add(tf.matmul(h, p["dense2.kernel"]), p["dense2.bias"])

    def _loss_and_grads(
        self, x: tf.Tensor, y: tf.Tensor
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        with tf.GradientTape() as tape:
            logits = self._forward(x)
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            loss = tf.reduce_mean(losses)
        return loss, tape.gradient(loss, self._vars)

    def _train_step(self, x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        loss, grads = self._loss_and_grads(x, y)
        self._adam.apply(self._vars, grads)
        return loss

    def _state(self) -> State:
        return State(self._vars, self._adam.m, self._adam.v, self._adam.step)

    # -- Program ------------------------------------------------------------------------------
    def load(self, dataset: Dataset) -> None:
        # Variables, not constants: tf.data captures a variable by its handle, while a captured
        # constant is copied into the pipeline's graph on every batches() call (about 0.2 s
        # per epoch at 8192 images, 10 s for the first one at 50000). On the host, because
        # tf.data runs there; each batch goes to the device with the step's inputs.
        with tf.device("/CPU:0"):
            self._x = tf.Variable(dataset.x, trainable=False, dtype=DTYPE, name="images")
            self._y = tf.Variable(dataset.y, trainable=False, dtype=tf.int32, name="labels")

    def init(self, params: dict[str, np.ndarray]) -> State:
        if set(params) != set(self._vars):
            raise ValueError(f"parameter names {sorted(params)} are not {sorted(self._vars)}")
        for name, var in self._vars.items():
            var.assign(params[name])
        self._adam.reset()
        return self._state()

    def batches(self, order: np.ndarray) -> Iterator[Batch]:
        if self._x is None or self._y is None:
            raise RuntimeError("load(dataset) must come before batches(order)")
        x, y = self._x, self._y

        def gather(idx: tf.Tensor) -> Batch:
            return tf.gather(x, idx), tf.gather(y, idx)

        # One element per row of the spec's order; deterministic=True keeps that order while
        # the gathers run in parallel, prefetch overlaps them with the training step.
        dataset = (
            tf.data.Dataset.from_tensor_slices(order)
            .map(gather, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE)
        )
        return iter(dataset)

    def compile(self, state: State, batch: Batch) -> float | None:
        # TF has no public ahead-of-time compile for a tf.function: get_concrete_function only
        # traces, and XLA (jit_compile) and graph optimisation (Grappler) run inside the first
        # call. The worker reports compile_estimate_s instead.
        return None

    def train_chunk(
        self, state: State, batches: Iterator[Batch], n_steps: int
    ) -> tuple[State, tf.Tensor]:
        losses = [self._step(*next(batches)) for _ in range(n_steps)]
        return state, tf.stack(losses)  # stays a tensor: no host fetch per step

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._logits(tf.constant(x, dtype=DTYPE)).numpy())

    def loss_and_grads(
        self, state: State, x: np.ndarray, y: np.ndarray
    ) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self._grads(tf.constant(x, dtype=DTYPE), tf.constant(y, dtype=tf.int32))
        return float(loss.numpy()), {name: g.numpy() for name, g in grads.items()}

    def params(self, state: State) -> dict[str, np.ndarray]:
        return {name: var.numpy() for name, var in state.params.items()}

    def canonical_batch(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        return x.numpy(), y.numpy()

    def losses_to_numpy(self, losses: tf.Tensor) -> np.ndarray:
        return np.asarray(losses.numpy(), dtype=np.float64)

    def compilations(self) -> int:
        return int(self._tracing_count())

    def numerics(self) -> dict[str, Any]:
        adam = self._adam
        dtypes = sorted({var.dtype.name for var in self._vars.values()})
        return {
            "optimizer": adam.name,
            "learning_rate": adam.learning_rate,
            "beta1": adam.beta1,
            "beta2": adam.beta2,
            "eps": adam.eps,
            "eps_placement": adam.eps_placement,
            "bias_correction": adam.bias_correction,
            "weight_decay": adam.weight_decay,
            "padding": self._padding,
            "flatten_order": FLATTEN_ORDER,
            "dropout": DROPOUT,
            "loss": LOSS,
            "dtype": ",".join(dtypes),
        }


def build(trial: TrialSpec) -> Program:
    program = TensorFlowCNN(trial)
    # What this implementation does not parametrise (padding, loss, ...) must match the spec.
    wanted = dataclasses.asdict(trial.workload.numerics)
    got = program.numerics()
    differ = [f"{k}={got[k]!r} (spec: {wanted[k]!r})" for k in wanted if got.get(k) != wanted[k]]
    if differ:
        raise Unsupported(f"tensorflow cnn computes {', '.join(differ)}")
    return program
