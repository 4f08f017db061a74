"""What differs between Keras's three backends and cannot be written in keras.ops: the gradient
of a function (loss_and_grads), counting compilations, and the input pipeline fit() consumes.

This is the one place in the Keras package that dispatches on `keras.backend.backend()`, once
per program (`native()`); everything else is backend-neutral Keras. Each backend's framework is
imported inside its own functions, where Keras has already loaded it.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import keras
import numpy as np

from dlbench.backends.base import Unsupported
from dlbench.backends.keras.pipeline import DevicePipeline
from dlbench.workloads.data import Augment, Dataset, crop_flip

# f(trainable values, non-trainable values, x, y) -> scalar loss
LossFn = Callable[[list[Any], list[Any], Any, Any], Any]
# the same arguments -> (loss, gradients w.r.t. the trainable values, in their order)
GradFn = Callable[[list[Any], list[Any], Any, Any], tuple[Any, list[Any]]]
# (model, mode, called once per trace) -> device input -> the logits as host NumPy
ForwardFn = Callable[[Any, str, Callable[[], None]], Callable[[Any], np.ndarray]]


class Pipeline(Protocol):
    """The input pipeline over the spec's index rows, in the form fit() consumes."""

    def load(self, dataset: Dataset) -> None:
        ...

    def fit_input(self, rows: np.ndarray, augment: Augment | None) -> Any:
        """What fit() consumes: exactly len(rows) batches, row i's samples in batch i, augmented
        with `augment`'s step i (workloads.data.crop_flip) where given."""
        ...

    def first_batch(self, rows: np.ndarray, augment: Augment | None) -> tuple[Any, Any]:
        """The first batch fit() would see from fit_input(rows, augment), as the pipeline yields
        it."""
        ...


@typing.final
@dataclass(frozen=True)
class Native:
    backend: str
    # Keras's torch trainer refuses steps_per_execution > 1; None: no limit.
    max_steps_per_execution: int | None
    # (loss function, mode) -> its value-and-gradient function, compiled as the mode compiles
    # (on torch: eager in every mode, _torch_value_and_grad).
    value_and_grad: Callable[[LossFn, str], GradFn]
    # The class a workload instantiates functionally: Model(inputs=..., outputs=...).
    model_class: type
    # (model, mode) -> compilations of the train step so far.
    compilations: Callable[[Any, str], int]
    # (loader workers, data placement) -> the input pipeline
    pipeline: Callable[[int, str], Pipeline]
    # A gradient as the optimizer receives it -> a dense tensor.
    dense_gradient: Callable[[Any], Any]
    # The inference forward (Program.infer_fn): the model called with training=False inside
    # the backend's own compiled function, as Keras's predict step compiles it, minus predict's
    # data adapter and callbacks.
    forward: ForwardFn
    # (pure function, mode, arguments to donate) -> it compiled as Keras's own predict step
    # compiles on this backend (jax.jit, tf.function, torch.compile); itself in eager mode.
    compile_pure: Callable[[Callable[..., Any], str, tuple[int, ...]], Callable[..., Any]]


def native() -> Native:
    backend = keras.backend.backend()
    if backend == "jax":
        return Native("jax", None, _jax_value_and_grad, TracedModel, _traced_steps, _array_pipeline,
                      _already_dense, _jax_forward, _jax_compile)
    if backend == "tensorflow":
        return Native("tensorflow", None, _tf_value_and_grad, TracedModel, _traced_steps,
                      _tf_pipeline, _tf_dense, _tf_forward, _tf_compile)
    if backend == "torch":
        return Native("torch", 1, _torch_value_and_grad, keras.Model, _dynamo_graphs,
                      _array_pipeline, _already_dense, _torch_forward, _torch_compile)
    raise Unsupported(f"Keras backend {backend!r} is not one of: jax, tensorflow, torch")


# --- gradients ---------------------------------------------------------------------------------


def _jax_value_and_grad(f: LossFn, mode: str) -> GradFn:
    import jax

    g = jax.value_and_grad(f)
    return g if mode == "eager" else jax.jit(g)  # type: ignore[no-any-return]


def _tf_value_and_grad(f: LossFn, mode: str) -> GradFn:
    import tensorflow as tf

    def g(trainable: list[Any], non_trainable: list[Any], x: Any, y: Any) -> tuple[Any, list[Any]]:
        with tf.GradientTape() as tape:
            tape.watch(trainable)
            loss = f(trainable, non_trainable, x, y)
        return loss, tape.gradient(loss, trainable)

    # As Keras's own train function: tf.function in graph mode, with XLA in compiled mode.
    return g if mode == "eager" else tf.function(g, jit_compile=mode == "compiled")  # type: ignore[no-any-return]


def _torch_value_and_grad(f: LossFn, mode: str) -> GradFn:
    """Eager in every mode. torch.compile of the loss gives another compiled program than
    Keras's compiled train step, rounding differently from it all the same (docs/workloads.md,
    "ReLU kinks"), and recompiles the Keras frames both pass through, which hit dynamo's
    recompile limit under the train step alone."""
    import torch

    def g(trainable: list[Any], non_trainable: list[Any], x: Any, y: Any) -> tuple[Any, list[Any]]:
        leaves = [t.detach().requires_grad_(True) for t in trainable]
        loss = f(leaves, non_trainable, x, y)
        return loss.detach(), list(torch.autograd.grad(loss, leaves))

    return g


# --- inference ---------------------------------------------------------------------------------


def _jax_forward(model: Any, mode: str, on_trace: Callable[[], None]) -> Callable[[Any], np.ndarray]:
    """model.stateless_call under jax.jit (Keras's JAX predict step is jitted the same way),
    with the variable values of this moment as arguments; np.asarray waits and fetches."""
    import jax

    def f(trainable: list[Any], non_trainable: list[Any], x: Any) -> Any:
        on_trace()  # Python runs here only while jax.jit traces
        logits, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return logits

    g = f if mode == "eager" else jax.jit(f)
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    return lambda x: np.asarray(g(trainable, non_trainable, x))


def _tf_forward(model: Any, mode: str, on_trace: Callable[[], None]) -> Callable[[Any], np.ndarray]:
    """model(x, training=False) in tf.function, with XLA in compiled mode (as Keras's own
    predict function); .numpy() is TF's sync and fetch."""
    import tensorflow as tf

    def f(x: Any) -> Any:
        on_trace()  # Python runs here only while tf.function traces
        return model(x, training=False)

    g = f if mode == "eager" else tf.function(f, jit_compile=mode == "compiled")
    return lambda x: g(x).numpy()


def _torch_forward(model: Any, mode: str, on_trace: Callable[[], None]) -> Callable[[Any], np.ndarray]:
    """model(x, training=False) under torch.no_grad, torch.compile'd in compiled mode with
    Keras's own options for its predict function (torch.compile's defaults). Dynamo's graphs
    are counted by _dynamo_graphs; on_trace is not called (dynamo would replay it per call)."""
    import torch

    def f(x: Any) -> Any:
        with torch.no_grad():
            return model(x, training=False)

    g = torch.compile(f) if mode == "compiled" else f
    return lambda x: g(x).detach().cpu().numpy()


def _jax_compile(f: Callable[..., Any], mode: str, donate: tuple[int, ...]) -> Callable[..., Any]:
    import jax

    return f if mode == "eager" else jax.jit(f, donate_argnums=donate)  # type: ignore[no-any-return]


def _tf_compile(f: Callable[..., Any], mode: str, donate: tuple[int, ...]) -> Callable[..., Any]:
    import tensorflow as tf

    return f if mode == "eager" else tf.function(f, jit_compile=mode == "compiled")  # type: ignore[no-any-return]


def _torch_compile(f: Callable[..., Any], mode: str, donate: tuple[int, ...]) -> Callable[..., Any]:
    """Eager under torch.no_grad in every mode, as keras_hub generates on torch: torch.compile
    of a Keras cached decode step recompiled at each new position (26 dynamo graphs and 355 s
    for 8 tokens of the tiny lm, measured on the loaded two-core machine)."""
    import torch

    def no_grad(*args: Any) -> Any:
        with torch.no_grad():
            return f(*args)

    return no_grad


def _already_dense(gradient: Any) -> Any:
    return gradient


def _tf_dense(gradient: Any) -> Any:
    """Embedding gradients arrive as tf.IndexedSlices (rows, possibly repeated): summed into a
    dense tensor, as the spec's (dense) Adam sees them."""
    import tensorflow as tf

    return tf.convert_to_tensor(gradient) if isinstance(gradient, tf.IndexedSlices) else gradient


# --- compilations ------------------------------------------------------------------------------


class TracedModel(keras.Model):
    """A functional keras.Model that counts how often its train step's Python runs. jax.jit and
    tf.function run it only when they trace, and every trace is followed by a compile (XLA, or
    a TF graph); in eager mode it runs every step and nothing is compiled. Not for torch:
    dynamo guards on a module's int attributes, so a counter there would recompile every step."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.train_step_traces = 0

    def train_step(self, *args: Any) -> Any:
        self.train_step_traces += 1
        return super().train_step(*args)


def _traced_steps(model: Any, mode: str) -> int:
    if not isinstance(model, TracedModel):
        raise TypeError(f"expected a TracedModel, got {type(model).__name__}")
    return 0 if mode == "eager" else model.train_step_traces


def _dynamo_graphs(model: Any, mode: str) -> int:
    """torch.compile's graphs, counted by dynamo itself (process-wide, as the torch backend
    does); eager mode compiles nothing."""
    if mode != "compiled":
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


# --- input pipelines ---------------------------------------------------------------------------


@typing.final
class RowBatches(keras.utils.PyDataset):
    """Batch i = the samples of index row i: Keras's own pipeline for in-memory data, indexed by
    the spec's order (fit(shuffle=False) keeps it), augmented in NumPy. workers=1 (loader
    workers 0 or 1) gathers in the training thread; JAX's asynchronous dispatch overlaps that
    gather with the step already queued; N > 1 is a pool of N threads."""

    def __init__(self, x: np.ndarray, y: np.ndarray, rows: np.ndarray, augment: Augment | None,
                 workers: int) -> None:
        super().__init__(workers=max(workers, 1), use_multiprocessing=False)
        self._x, self._y, self._rows, self._augment = x, y, rows, augment

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not 0 <= i < len(self._rows):
            raise IndexError(f"batch {i} of {len(self._rows)}")
        rows = self._rows[i]
        x = self._x[rows]
        if self._augment is not None:
            a = self._augment
            x = crop_flip(x, a.offsets[i], a.flips[i], a.pad)
        return x, self._y[rows]


@typing.final
class ArrayPipeline:
    """Host NumPy arrays and a PyDataset per chunk (JAX and torch)."""

    def __init__(self, workers: int) -> None:
        self._x = np.empty((0,), np.float32)
        self._y = np.empty((0,), np.int32)
        self._workers = workers

    def load(self, dataset: Dataset) -> None:
        self._x = np.ascontiguousarray(dataset.x)
        self._y = np.ascontiguousarray(dataset.y)  # in the loss's target dtype (KerasProgram.load)

    def fit_input(self, rows: np.ndarray, augment: Augment | None) -> RowBatches:
        return RowBatches(self._x, self._y, rows, augment, self._workers)

    def first_batch(self, rows: np.ndarray, augment: Augment | None) -> tuple[np.ndarray, np.ndarray]:
        return self.fit_input(rows, augment)[0]


@typing.final
class TFDataPipeline:
    """tf.data over the spec's rows (TensorFlow): a map that gathers each row from variables
    on the host, in order (deterministic=True), prefetched; TensorFlow's idiomatic pipeline and
    no Python in the loop, where a PyDataset would pass every batch through
    tf.data.Dataset.from_generator. The same pipeline as the TensorFlow backend's
    (backends/tensorflow/pipeline.py); data "device" puts the variables on the default device."""

    def __init__(self, workers: int, device: bool = False) -> None:
        self._x: Any = None
        self._y: Any = None
        self._workers, self._device = workers, device

    def load(self, dataset: Dataset) -> None:
        import tensorflow as tf

        # Variables, not constants: a dataset captures a variable by handle, a constant would
        # be copied into every chunk's pipeline graph.
        with tf.device(None if self._device else "/CPU:0"):
            self._x = tf.Variable(dataset.x, trainable=False, name="images")
            self._y = tf.Variable(dataset.y, trainable=False, name="labels")  # the loss's target dtype

    def fit_input(self, rows: np.ndarray, augment: Augment | None) -> Any:
        from dlbench.backends.tensorflow import pipeline

        if self._x is None:
            raise RuntimeError("load(dataset) must come before batches(order)")
        return pipeline.dataset(self._x, self._y, rows, augment, self._workers)

    def first_batch(self, rows: np.ndarray, augment: Augment | None) -> tuple[Any, Any]:
        x, y = next(iter(self.fit_input(rows, augment)))
        return x, y


def _array_pipeline(workers: int, data: str) -> Pipeline:
    """JAX and torch: host NumPy in a PyDataset, or device tensors (pipeline.py)."""
    return DevicePipeline() if data == "device" else ArrayPipeline(workers)


def _tf_pipeline(workers: int, data: str) -> Pipeline:
    return TFDataPipeline(workers, device=data == "device")
