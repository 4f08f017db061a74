"""The Keras Program every workload shares. A workload module (mlp.py, cnn.py, ...) builds one
Keras model from keras.layers and keras.ops only and names its variables canonically (`Net`);
the same model, optimizer, loss and training code then run on JAX, torch and TensorFlow,
whichever KERAS_BACKEND the worker set before the import.

Training is the idiomatic Keras way: `model.compile(...)` once, then `model.fit` over the spec's
index rows per chunk (`fit(data, epochs=1, steps_per_epoch=n, shuffle=False)`), with
steps_per_execution = the chunk size where the backend allows it (torch's trainer refuses > 1).
Modes (DESIGN 2.4): eager = run_eagerly=True; graph = jit_compile=False (tf.function, offered by
keras-tensorflow only); compiled = jit_compile=True (XLA through jax.jit or
tf.function(jit_compile=True), torch.compile on torch).

Losses: fit() reports the mean loss over the steps it ran (Keras's loss tracker), and getting
each step's loss would need a callback per batch, which turns off Keras's asynchronous callback
dispatch and splits every execution into single steps; so train_chunk returns the chunk's mean
loss as a length-1 vector. fit() fetches that mean to the host at its end (History keeps Python
floats): every chunk ends synced.

Canonical layouts are Keras's own (NHWC, HWIO conv kernels, (in, out) dense kernels, Flatten of
NHWC in HWC order); only MultiHeadAttention's (D, heads, head_dim) kernels differ from the
canonical (D, D), by a reshape, so every variable converts in and out by a reshape.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
from keras import layers, ops

import dlbench.backends.keras.losses as losses
from dlbench import workloads
from dlbench.backends.generate import Generating
from dlbench.backends.base import Sampling, TimedBatches, Unsupported
from dlbench.backends.keras.native import Native, Pipeline, native
from dlbench.spec import Numerics, TrialSpec, WorkloadSpec
from dlbench.workloads.data import Augment, Dataset

# Keras's dtype policy per precision: "mixed_*" keeps variables in float32 and computes in the
# reduced type; compile() wraps the optimizer in a LossScaleOptimizer for mixed_float16
# (auto_scale_loss). tf32 is float32 storage with the native framework's TF32 switches.
DTYPE_POLICIES = {"fp32": "float32", "tf32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# For every kernel and bias: init() overwrites them with the canonical values, and Keras's
# random initializers cost JAX a compile per op and shape (building 20 convolutions took 57 s
# with glorot_uniform against 1.5 s with zeros on keras-jax, on this loaded 2-core machine).
ZEROS = {"kernel_initializer": "zeros", "bias_initializer": "zeros"}


# --- what a workload module provides ------------------------------------------------------------


@typing.final
@dataclass(frozen=True)
class Net:
    """One workload's Keras model with its variables under canonical names."""

    model: keras.Model
    params: dict[str, Any]  # canonical name -> keras.Variable (trained)
    buffers: dict[str, Any]  # canonical name -> keras.Variable (BatchNorm statistics)
    initial_buffers: dict[str, np.ndarray]  # canonical name -> value at init()
    numerics: dict[str, Any]  # the model's own numerics, read back from its layers


# (workload spec, the Model class to instantiate functionally) -> Net
NetFactory = Callable[[WorkloadSpec, type], Net]


# --- optimizer and loss ------------------------------------------------------------------------


@typing.final
class TorchFormulaAdam(keras.optimizers.Adam):
    """Adam as torch.optim.Adam and optax.adam compute it: `m_hat / (sqrt(v_hat) + eps)`.

    Keras's Adam computes `alpha = lr sqrt(1 - b2^t) / (1 - b1^t)` and `var -= m alpha /
    (sqrt(v) + eps)`: its eps is added before v's bias correction (the paper's eps-hat), a
    different update. Only `update_step` differs; the moment slots and everything `apply` does
    around the update (no clipping, EMA or weight decay here) are Keras's own. On torch, Keras
    swaps only the exact class `keras.optimizers.Adam` for its foreach version, so this one
    updates variable by variable there.
    """

    eps_placement = "outside_sqrt"
    bias_correction = True

    def __init__(self, dense_gradient: Callable[[Any], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # Keras on TensorFlow hands embedding gradients over as tf.IndexedSlices, on which its
        # ops act slice by slice: square(g) squares duplicate rows before they are summed, and
        # only the rows present are updated (a lazy Adam). The spec's Adam is dense; with the
        # slices the tiny transformer's loss was 4 % off after 4 steps. (native.py)
        self._dense_gradient = dense_gradient

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        gradient = ops.cast(self._dense_gradient(gradient), dtype)
        t = ops.cast(self.iterations + 1, dtype)
        # 1 - b^t as -expm1(t log b) with log b in float64: in float32, 1 - 0.999**t carries a
        # 1.3e-5 relative error at t = 1 from rounding 0.999 alone (torch computes it in float64).
        one_minus_b1t = -ops.expm1(t * math.log(self.beta_1))
        one_minus_b2t = -ops.expm1(t * math.log(self.beta_2))
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        # torch's arrangement: lr / (1 - b1^t) scales m, sqrt(1 - b2^t) divides sqrt(v).
        denominator = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(one_minus_b2t)), self.epsilon)
        self.assign_sub(variable, ops.divide(ops.multiply(m, lr / one_minus_b1t), denominator))


def make_optimizer(n: Numerics, dense_gradient: Callable[[Any], Any]) -> TorchFormulaAdam:
    """Every value passed explicitly (Keras's default eps is 1e-7)."""
    if n.weight_decay:
        raise Unsupported(
            f"weight_decay {n.weight_decay!r}: Keras decays weights decoupled (AdamW), the spec's"
            " is torch's L2 term in the gradient; allowed: 0.0"
        )
    return TorchFormulaAdam(dense_gradient, learning_rate=n.learning_rate, beta_1=n.beta1, beta_2=n.beta2,
                            epsilon=n.eps, amsgrad=False, weight_decay=None, clipnorm=None,
                            clipvalue=None, global_clipnorm=None, use_ema=False)


def make_cross_entropy(n: Numerics) -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=None,
                                                       reduction="sum_over_batch_size")


def make_focal_l1(n: Numerics) -> keras.losses.Loss:
    return losses.FocalL1(float(n.extra["focal_alpha"]), float(n.extra["focal_gamma"]))


@typing.final
@dataclass(frozen=True)
class LossKind:
    """One loss: its factory from the numerics block and its targets' dtype (integer labels, or
    float32 targets: Keras's variables are float32 under every dtype policy)."""

    make: Callable[[Numerics], keras.losses.Loss]
    label_dtype: str


# The numerics block's loss name -> how the program compiles with it.
LOSSES: dict[str, LossKind] = {
    "mean_softmax_cross_entropy": LossKind(make_cross_entropy, "int32"),
    "focal_l1_detection": LossKind(make_focal_l1, "float32"),
    # MeanSquaredError averages each sample's values, then the batch (sum_over_batch_size): with
    # every sample the same size, the mean of all values.
    "mean_squared_error": LossKind(lambda n: keras.losses.MeanSquaredError(reduction="sum_over_batch_size"),
                                   "float32"),
    "mean_token_cross_entropy": LossKind(lambda n: losses.TokenCrossEntropy(), "int32"),
}


def loss_kind(n: Numerics) -> LossKind:
    """The LossKind of the numerics block's loss, or Unsupported naming what is implemented."""
    if n.loss not in LOSSES:
        raise Unsupported(f"the Keras programs implement the losses {', '.join(LOSSES)}, not {n.loss!r}")
    return LOSSES[n.loss]


# --- numerics read back ------------------------------------------------------------------------


def _shortest_float32(value: float) -> float:
    """The shortest decimal that is this float32 exactly (1e-3, not 0.0010000000475): Keras
    keeps the learning rate in a float32 variable."""
    return float(np.format_float_positional(np.float32(value), unique=True, trim="-"))


# Read back from attributes, never get_config(): Keras's serialization imports TensorFlow when
# it is installed, which would load it into keras-jax and keras-torch workers.


def optimizer_numerics(optimizer: keras.optimizers.Optimizer) -> dict[str, Any]:
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):  # fp16: the Adam inside
        optimizer = optimizer.inner_optimizer
    assert isinstance(optimizer, TorchFormulaAdam)
    return {
        "optimizer": "adam_amsgrad" if optimizer.amsgrad else "adam",
        "learning_rate": _shortest_float32(float(ops.convert_to_numpy(optimizer.learning_rate))),
        "beta1": float(optimizer.beta_1),
        "beta2": float(optimizer.beta_2),
        "eps": float(optimizer.epsilon),
        "eps_placement": optimizer.eps_placement,
        "bias_correction": optimizer.bias_correction,
        "weight_decay": float(optimizer.weight_decay or 0.0),
    }


def loss_numerics(loss: keras.losses.Loss) -> dict[str, Any]:
    """The loss's name (and its own numerics) read back from the loss object."""
    if isinstance(loss, (losses.FocalL1, losses.TokenCrossEntropy)):
        return loss.numerics()
    if isinstance(loss, keras.losses.MeanSquaredError):
        return {"loss": squared_error_numerics(loss)}
    return {"loss": cross_entropy_numerics(loss)}


def cross_entropy_numerics(loss: keras.losses.Loss) -> str:
    """LOSS when the loss object computes the mean softmax cross-entropy of integer labels on
    a probe (its from_logits flag is private)."""
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]], np.float32)
    y = np.array([0, 2], np.int32)
    shifted = logits - logits.max(axis=1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    wanted = float(-logp[np.arange(2), y].mean())
    got = float(ops.convert_to_numpy(loss(y, logits)))
    if isinstance(loss, keras.losses.SparseCategoricalCrossentropy) and math.isclose(got, wanted, rel_tol=1e-6):
        return "mean_softmax_cross_entropy"
    return f"{type(loss).__name__} (reduction {loss.reduction}): {got} on the probe, not {wanted}"


def squared_error_numerics(loss: keras.losses.Loss) -> str:
    """mean_squared_error when the loss object computes the mean of the squared differences over
    every value on a probe (its reduction decides)."""
    y = np.array([[0.5, -1.0, 2.0], [0.0, 1.5, -0.5]], np.float32)
    out = np.array([[1.0, 0.0, -1.0], [0.25, 0.5, 3.0]], np.float32)
    wanted = float(np.mean((out.astype(np.float64) - y) ** 2))
    got = float(ops.convert_to_numpy(loss(y, out)))
    if math.isclose(got, wanted, rel_tol=1e-6):
        return "mean_squared_error"
    return f"{type(loss).__name__} (reduction {loss.reduction}): {got} on the probe, not {wanted}"


def model_numerics(model: keras.Model) -> dict[str, Any]:
    """dtype and dropout, from the model's variables and layers."""
    dtypes = sorted({v.dtype for v in model.trainable_variables})
    compute, variable = model.dtype_policy.compute_dtype, model.dtype_policy.variable_dtype
    # A mixed policy's compute dtype is the precision's (KerasProgram.precision records it); a
    # layer computing in anything but its policy's dtype shows here.
    dtype = ",".join(dtypes) if dtypes == [variable] else f"{','.join(dtypes)} (compute {compute})"
    rates = [float(layer.rate) for layer in model.layers if isinstance(layer, layers.Dropout)]
    rates += [float(layer.dropout) for layer in model.layers if isinstance(layer, layers.MultiHeadAttention)]
    return {"dtype": dtype, "dropout": max(rates, default=0.0)}


# --- the data order ----------------------------------------------------------------------------


@typing.final
class BatchStream:
    """The spec's index rows, consumed in order: train_chunk takes the next n rows and builds
    fit()'s input over exactly those; iterating yields each row's batch as that input yields it
    (canonical_batch proves the order)."""

    def __init__(self, pipeline: Pipeline, rows: np.ndarray, augment: Augment | None) -> None:
        self._pipeline = pipeline
        self._rows = np.asarray(rows, dtype=np.int64)
        self._augment = augment
        self._next = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._next >= len(self._rows):
            raise StopIteration
        return self._pipeline.first_batch(*self.take(1))

    def take(self, n: int) -> tuple[np.ndarray, Augment | None]:
        """The next n rows and their augmentation parameters."""
        left = len(self._rows) - self._next
        if n > left:
            raise RuntimeError(f"batches ran out: {n} steps asked, {left} left")
        start, self._next = self._next, self._next + n
        augment = None if self._augment is None else self._augment.steps(start, start + n)
        return self._rows[start : start + n], augment


# --- the program -------------------------------------------------------------------------------


@typing.final
class State:
    """One training state (parameters, buffers, optimizer variables) of the program's single
    Keras model. Keras keeps a state in the model's variables, which fit() updates in place, so
    one state is live there at a time and the others are parked as NumPy values: init() parks
    a new state instead of overwriting the live one (the worker's parity probe inits after the
    warm-up and must leave the trained state alone), and a parked state is swapped in when it
    is trained or run."""

    def __init__(self, model: keras.Model, parked: list[np.ndarray] | None) -> None:
        self.model = model
        # Values of KerasProgram._state_variables in that order; None while live.
        self.parked = parked


def build(trial: TrialSpec, make_net: NetFactory) -> KerasProgram:
    """The program for the workload's model (backends.support checks its numerics read-back)."""
    return KerasProgram(trial, make_net)


@typing.final
class KerasProgram(Sampling, Generating):
    def __init__(self, trial: TrialSpec, make_net: NetFactory) -> None:
        spec = trial.workload
        self._spec, self._mode = spec, trial.policy.mode
        self._workload = workloads.get(spec.name)
        kind = loss_kind(spec.numerics)
        self._native: Native = native()
        # Global in Keras, and set before any layer exists: every layer takes it when built.
        keras.config.set_dtype_policy(DTYPE_POLICIES[trial.precision])
        self._net = make_net(spec, self._native.model_class)
        self._label_dtype = np.dtype(kind.label_dtype)
        self._canonical_shapes = {**self._workload.param_shapes(spec), **self._workload.buffer_shapes(spec)}
        model = self._net.model
        limit = self._native.max_steps_per_execution
        model.compile(
            optimizer=make_optimizer(spec.numerics, self._native.dense_gradient),
            loss=kind.make(spec.numerics),
            run_eagerly=self._mode == "eager",
            jit_compile=self._mode == "compiled",
            steps_per_execution=trial.chunk_steps if limit is None else min(trial.chunk_steps, limit),
        )
        if model.jit_compile != (self._mode == "compiled"):  # Keras falls back with a warning
            raise Unsupported(f"Keras refused jit_compile=True for {spec.name} on {self._native.backend}")
        model.optimizer.build(model.trainable_variables)
        self._pipeline = self._native.pipeline(trial.policy.loader_workers, trial.policy.data)
        self._grad_fn = self._native.value_and_grad(self._training_loss, self._mode)
        by_path = {v.path: name for name, v in self._net.params.items()}
        if len(by_path) != len(self._net.params) or set(by_path) != {v.path for v in model.trainable_variables}:
            raise RuntimeError(f"{spec.name}: the canonical names do not cover the model's trainable variables once each")
        self._trainable_names = [by_path[v.path] for v in model.trainable_variables]
        self._state_variables = [*model.trainable_variables, *model.non_trainable_variables,
                                 *model.optimizer.variables]
        self._index = {v.path: i for i, v in enumerate(self._state_variables)}
        # The optimizer as built (step 0, zero moments): every init() starts from these values.
        self._fresh_optimizer = [_numpy(v) for v in model.optimizer.variables]
        self._live: State | None = None
        self._infer_traces = 0
        self._x_dtype = np.dtype(self._workload.input_spec(spec)[1])

    def _training_loss(self, trainable: list[Any], non_trainable: list[Any], x: Any, y: Any) -> Any:
        """The train step's loss, written statelessly (buffer updates are dropped)."""
        logits, _ = self._net.model.stateless_call(trainable, non_trainable, x, training=True)
        return self._net.model.loss(y, logits)

    def load(self, dataset: Dataset) -> None:
        self._pipeline.load(Dataset(dataset.x, np.asarray(dataset.y, self._label_dtype)))

    def init(self, params: dict[str, np.ndarray]) -> State:
        """A parked state of these parameters (and the initial buffers, a fresh optimizer); the
        live state, if any, is left alone until this one is used."""
        net = self._net
        if set(params) not in (set(net.params), set(net.params) | set(net.buffers)):
            raise ValueError(f"parameter names {sorted(params)} are not {sorted(net.params)}")
        values = {var.path: params[name] for name, var in net.params.items()}
        values.update({var.path: params.get(name, net.initial_buffers[name]) for name, var in net.buffers.items()})
        model = net.model
        values.update({v.path: _numpy(v) for v in model.non_trainable_variables if _is_rng_state(v)})
        unknown = [v.path for v in model.non_trainable_variables if v.path not in values]
        if unknown:
            raise RuntimeError(f"{self._spec.name}: no canonical name for the model's variables {unknown}")
        parked = [np.asarray(values[v.path], dtype=v.dtype).reshape(v.shape)
                  for v in (*model.trainable_variables, *model.non_trainable_variables)]
        return State(model, [*parked, *(np.copy(v) for v in self._fresh_optimizer)])

    def _activate(self, state: State) -> None:
        """Make `state` the one in the model's variables, parking the live one."""
        if state is self._live:
            return
        if state.parked is None:
            raise RuntimeError("this state is neither live nor parked: it belongs to another program")
        if self._live is not None:
            self._live.parked = [_numpy(v) for v in self._state_variables]
        for var, value in zip(self._state_variables, state.parked):
            var.assign(value)
        state.parked, self._live = None, state

    def _values(self, state: State, variables: list[Any]) -> list[Any]:
        """The state's values of these model variables: the variables themselves when live."""
        if state.parked is None:
            return variables
        parked = state.parked
        return [parked[self._index[v.path]] for v in variables]

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> BatchStream:
        return BatchStream(self._pipeline, order, augment)

    def compile(self, state: State, batch: Any) -> float | None:
        # fit() compiles (traces) its train function inside the first call; Keras exposes no
        # ahead-of-time compile. The worker reports compile_estimate_s.
        return None

    def train_chunk(self, state: State, batches: Iterator[Any], n_steps: int) -> tuple[State, np.ndarray]:
        """n_steps steps by one fit() call; returns the chunk's mean loss as a length-1 vector
        (see the module docstring)."""
        if isinstance(batches, TimedBatches):  # fit() pulls its batches itself: nothing to time
            batches = batches.inner
        if not isinstance(batches, BatchStream):
            raise TypeError(f"batches must come from batches(order), got {type(batches).__name__}")
        data = self._pipeline.fit_input(*batches.take(n_steps))
        self._activate(state)
        history = state.model.fit(data, epochs=1, steps_per_epoch=n_steps, verbose=0, shuffle=False)
        return state, np.asarray(history.history["loss"], dtype=np.float64)

    def train_loop(self) -> dict[str, Any]:
        model = self._net.model
        return {"steps_per_call": int(model.steps_per_execution), "loop": "fit",
                "rule": "Keras steps_per_execution = chunk_steps (at most the backend's limit)"}

    def live_model(self, state: State) -> keras.Model:
        """The model with `state`'s values in its variables (generation reads them there)."""
        self._activate(state)
        return state.model

    @property
    def native(self) -> Native:
        return self._native

    @property
    def mode(self) -> str:
        return self._mode

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        self._activate(state)
        return np.asarray(state.model.predict_on_batch(x))

    def infer_fn(self, state: State) -> Callable[[Any], np.ndarray]:
        """The model called with training=False inside the backend's compiled function
        (native.py), not predict(): the variables' values of this state, logits to NumPy."""
        self._activate(state)
        return self._native.forward(state.model, self._mode, self._count_infer_trace)

    def _count_infer_trace(self) -> None:
        self._infer_traces += 1

    def infer_input(self, x: np.ndarray) -> Any:
        return ops.convert_to_tensor(np.asarray(x, self._x_dtype))

    def loss_and_grads(self, state: State, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Training mode (batch statistics in BatchNorm), through model.stateless_call and the
        backend's own gradient (native.py); the state is not changed (nor swapped in)."""
        model = state.model
        trainable = [ops.convert_to_tensor(v) for v in self._values(state, model.trainable_variables)]
        non_trainable = [ops.convert_to_tensor(v) for v in self._values(state, model.non_trainable_variables)]
        loss, grads = self._grad_fn(trainable, non_trainable, ops.convert_to_tensor(x),
                                    ops.convert_to_tensor(np.asarray(y, self._label_dtype)))
        out = {name: self._canonical(name, g) for name, g in zip(self._trainable_names, grads)}
        return float(ops.convert_to_numpy(loss)), out

    def _canonical(self, name: str, value: Any) -> np.ndarray:
        # np.array copies: torch's CPU tensors would otherwise share memory with the variable.
        return np.array(ops.convert_to_numpy(value)).reshape(self._canonical_shapes[name])

    def params(self, state: State) -> dict[str, np.ndarray]:
        names, variables = list(self._net.params), list(self._net.params.values())
        return {n: self._canonical(n, v) for n, v in zip(names, self._values(state, variables))}

    def buffers(self, state: State) -> dict[str, np.ndarray]:
        """The non-trained state (BatchNorm running statistics) in canonical names."""
        names, variables = list(self._net.buffers), list(self._net.buffers.values())
        return {n: self._canonical(n, v) for n, v in zip(names, self._values(state, variables))}

    def moments(self, state: State) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Adam's first and second moments of each parameter, in canonical names and shapes:
        what fit() made of the gradients it computed (tests recover those from them)."""
        optimizer = self._net.model.optimizer
        out = {}
        for name, var in self._net.params.items():
            i = optimizer._get_variable_index(var)
            m, v = self._values(state, [optimizer._momentums[i], optimizer._velocities[i]])
            out[name] = (self._canonical(name, m), self._canonical(name, v))
        return out

    def canonical_batch(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        return np.array(ops.convert_to_numpy(x)), np.array(ops.convert_to_numpy(y))

    def losses_to_numpy(self, losses: np.ndarray) -> np.ndarray:
        return np.asarray(losses, dtype=np.float64)

    def compilations(self) -> int:
        # Inference traces count only where the mode traces (eager runs the Python every call).
        infer = 0 if self._mode == "eager" else self._infer_traces
        return self._native.compilations(self._net.model, self._mode) + infer

    def precision(self) -> dict[str, Any]:
        model = self._net.model
        return {
            "keras_dtype_policy": model.dtype_policy.name,
            "variable_dtype": model.dtype_policy.variable_dtype,
            "compute_dtype": model.dtype_policy.compute_dtype,
            "loss_scale_optimizer": isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer),
        }

    def numerics(self) -> dict[str, Any]:
        model = self._net.model
        found = {**optimizer_numerics(model.optimizer), **loss_numerics(model.loss),
                 **model_numerics(model), **self._net.numerics}
        return {name: found[name] for name in self._workload.NUMERICS_FIELDS}


def _is_rng_state(variable: Any) -> bool:
    """The state of a keras.random.SeedGenerator, which LSTM, GRU and Dropout layers carry even
    at dropout 0: the layer's random stream, not a model buffer; it keeps its value."""
    return str(variable.path).endswith("seed_generator_state")


def _numpy(variable: Any) -> np.ndarray:
    """A copy (torch's CPU tensors would otherwise share memory with the variable)."""
    return np.array(ops.convert_to_numpy(variable))


def layer_name(canonical: str) -> str:
    """A Keras layer name for a canonical prefix (`layer1.block0.conv1` -> `layer1_block0_conv1`):
    Keras on torch registers layers as torch modules, whose names cannot contain '.'. Variables
    are mapped through the layer objects, never through these names."""
    return canonical.replace(".", "_")


def dense_params(name: str, layer: layers.Dense) -> dict[str, Any]:
    """`<name>.kernel` (in, out) and `<name>.bias` of a Dense layer: Keras's layout is canonical."""
    return {f"{name}.kernel": layer.kernel, f"{name}.bias": layer.bias}
