"""The seed CNN in plain JAX + Optax: params are a dict in the canonical names and layouts
(NHWC activations, HWIO kernels), so nothing is permuted in or out; the whole train step (loss,
gradients, Adam update) is one jax.jit with the state donated."""

from __future__ import annotations

import collections
import itertools
import time
import typing
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from dlbench.backends.base import Unsupported
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import cnn
from dlbench.workloads.data import Dataset

Params = dict[str, jax.Array]
Batch = tuple[jax.Array, jax.Array]

# Canonical layouts are JAX's own: the flatten of NHWC is the canonical HWC order.
DIMENSION_NUMBERS = ("NHWC", "HWIO", "NHWC")
PADDING = "VALID"
LOSS = "mean_softmax_cross_entropy"
# Batches put on the device ahead of the step that consumes them (flax's prefetch_to_device).
PREFETCH_DEPTH = 2


class TrainState(NamedTuple):
    params: Params
    opt_state: optax.OptState


# --- model -------------------------------------------------------------------------------------


def _conv_relu_pool(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    y = lax.conv_general_dilated(
        x, kernel, window_strides=(1, 1), padding=PADDING, dimension_numbers=DIMENSION_NUMBERS
    )
    y = jax.nn.relu(y + bias)
    # 2x2 max pool, stride 2; VALID drops the odd last row/column (13 -> 6) like the reference.
    return lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def apply(params: Params, x: jax.Array) -> jax.Array:
    """Logits for NHWC images."""
    h = _conv_relu_pool(x, params["conv1.kernel"], params["conv1.bias"])
    h = _conv_relu_pool(h, params["conv2.kernel"], params["conv2.bias"])
    h = h.reshape(h.shape[0], -1)  # NHWC -> HWC flatten, the canonical row order of dense1
    h = jax.nn.relu(h @ params["dense1.kernel"] + params["dense1.bias"])
    return h @ params["dense2.kernel"] + params["dense2.bias"]


def loss_fn(params: Params, x: jax.Array, y: jax.Array) -> jax.Array:
    logits = apply(params, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def make_optimizer(numerics: Numerics) -> optax.GradientTransformation:
    """Adam with every value passed explicitly. optax.adam is the torch formula (bias-corrected
    moments, eps outside the square root: eps_root=0); inject_hyperparams keeps the values in
    the optimizer state so numerics() reads them back from what actually runs."""
    return optax.inject_hyperparams(optax.adam, static_args="nesterov")(
        learning_rate=numerics.learning_rate,
        b1=numerics.beta1,
        b2=numerics.beta2,
        eps=numerics.eps,
        eps_root=0.0,
        nesterov=False,
    )


# What this implementation hard-wires; any other value in the spec is refused, never ignored.
_FIXED_NUMERICS = {
    "optimizer": "adam",
    "eps_placement": "outside_sqrt",
    "bias_correction": True,
    "weight_decay": 0.0,
    "padding": PADDING,
    "flatten_order": "HWC",
    "dropout": 0.0,
    "loss": LOSS,
    "dtype": "float32",
}


def _check_numerics(numerics: Numerics) -> None:
    for name, value in _FIXED_NUMERICS.items():
        wanted = getattr(numerics, name)
        if wanted != value:
            raise Unsupported(f"the JAX cnn implements {name} {value!r}, not {wanted!r}")


# --- compile counting --------------------------------------------------------------------------

# XLA compiles per function name, counted by one process-wide listener; each program gives its
# step a unique name so that two programs in one process never count each other's compiles.
_COMPILES: collections.Counter[str] = collections.Counter()
_STEP_IDS = itertools.count()
_listening = False


def _on_event_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES[str(kwargs.get("fun_name", ""))] += 1


def _listen_for_compiles() -> None:
    global _listening
    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_on_event_duration)
        _listening = True


# --- program -----------------------------------------------------------------------------------


def build(trial: TrialSpec) -> CnnProgram:
    _check_numerics(trial.workload.numerics)
    _listen_for_compiles()
    return CnnProgram(trial)


@typing.final
class CnnProgram:
    def __init__(self, trial: TrialSpec) -> None:
        self._spec = trial.workload
        self._tx = make_optimizer(trial.workload.numerics)
        tx = self._tx

        def train_step(state: TrainState, x: jax.Array, y: jax.Array) -> tuple[TrainState, jax.Array]:
            loss, grads = jax.value_and_grad(loss_fn)(state.params, x, y)
            updates, opt_state = tx.update(grads, state.opt_state, state.params)
            return TrainState(optax.apply_updates(state.params, updates), opt_state), loss

        train_step.__name__ = f"cnn_train_step_{next(_STEP_IDS)}"
        self._step_name = f"jit({train_step.__name__})"
        # Donating the state lets XLA update params and moments in place.
        self._jitted = jax.jit(train_step, donate_argnums=0)
        # Until compile() runs, the jitted function compiles in its first call.
        self._step: Any = self._jitted
        self._value_and_grad = jax.jit(jax.value_and_grad(loss_fn))
        self._apply = jax.jit(apply)
        self._x = np.empty((0, *cnn.INPUT_SHAPE), np.float32)
        self._y = np.empty((0,), np.int32)

    def load(self, dataset: Dataset) -> None:
        # Host NumPy, indexed per batch and put on the device by batches(): what JAX
        # practitioners do for an in-memory data set.
        self._x = np.ascontiguousarray(dataset.x, dtype=np.float32)
        self._y = np.ascontiguousarray(dataset.y, dtype=np.int32)

    def init(self, params: dict[str, np.ndarray]) -> TrainState:
        # jnp.array copies: the state is donated, so it must not alias the caller's arrays.
        device_params = {k: jnp.array(v, dtype=jnp.float32) for k, v in params.items()}
        return TrainState(device_params, self._tx.init(device_params))

    def batches(self, order: np.ndarray) -> Iterator[Batch]:
        queue: collections.deque[Batch] = collections.deque()
        for idx in order:
            queue.append(jax.device_put((self._x[idx], self._y[idx])))
            if len(queue) == PREFETCH_DEPTH:
                yield queue.popleft()
        while queue:
            yield queue.popleft()

    def compile(self, state: TrainState, batch: Batch) -> float:
        # Lowering only traces abstract values: nothing runs, so nothing is donated.
        start = time.perf_counter()
        self._step = self._jitted.lower(state, *batch).compile()
        return time.perf_counter() - start

    def train_chunk(self, state: TrainState, batches: Iterator[Batch], n_steps: int) -> tuple[TrainState, jax.Array]:
        # Dispatch is asynchronous: the loop runs ahead of the device and never blocks.
        losses = []
        for _ in range(n_steps):
            x, y = next(batches)
            state, loss = self._step(state, x, y)
            losses.append(loss)
        return state, jnp.stack(losses)

    def predict(self, state: TrainState, x: np.ndarray) -> np.ndarray:
        return np.asarray(self._apply(state.params, x))

    def loss_and_grads(self, state: TrainState, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        loss, grads = self._value_and_grad(state.params, x, y)
        return float(loss), {k: np.array(g) for k, g in grads.items()}

    def params(self, state: TrainState) -> dict[str, np.ndarray]:
        # np.array copies: a view of a buffer that a later step donates would change under us.
        return {k: np.array(v) for k, v in state.params.items()}

    def canonical_batch(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        return np.array(x), np.array(y)

    def losses_to_numpy(self, losses: jax.Array) -> np.ndarray:
        return np.asarray(losses, dtype=np.float64)

    def compilations(self) -> int:
        return _COMPILES[self._step_name]

    def numerics(self) -> dict[str, Any]:
        """Read back from a freshly built state: the optimizer's own hyper-parameters and inner
        state, the padding and layout the model passes to XLA, the parameters' dtype."""
        state = self.init(cnn.init_params(self._spec))
        hyper = {k: _float32_value(v) for k, v in state.opt_state.hyperparams.items()}
        adam_state = state.opt_state.inner_state[0]
        dtypes = {str(v.dtype) for v in state.params.values()}
        return {
            "optimizer": "adam" if isinstance(adam_state, optax.ScaleByAdamState) else type(adam_state).__name__,
            "learning_rate": hyper["learning_rate"],
            "beta1": hyper["b1"],
            "beta2": hyper["b2"],
            "eps": hyper["eps"],
            "eps_placement": "outside_sqrt" if hyper["eps_root"] == 0.0 else "inside_sqrt",
            # optax.scale_by_adam always divides by 1 - beta**t; it has no switch to turn it off.
            "bias_correction": isinstance(adam_state, optax.ScaleByAdamState),
            "weight_decay": hyper.get("weight_decay", 0.0),
            "padding": PADDING,
            "flatten_order": DIMENSION_NUMBERS[2][1:],
            "dropout": 0.0,  # the model has no dropout layer
            "loss": LOSS,
            "dtype": dtypes.pop() if len(dtypes) == 1 else ",".join(sorted(dtypes)),
        }


def _float32_value(value: jax.Array) -> float:
    """The shortest decimal that is this float32 exactly (1e-3, not 0.0010000000475): the
    optimizer holds float32 hyper-parameters, and this compares equal to the spec's value."""
    return float(np.format_float_positional(np.float32(value), unique=True, trim="-"))
