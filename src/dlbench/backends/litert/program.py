"""The LiteRT Program every workload shares: the TensorFlow implementation of the workload
(graph mode, float32) loaded with the canonical parameters, its eval-mode forward traced with a
dynamic batch axis and converted by the TFLite converter (builtin ops only), then run by
ai_edge_litert's Interpreter with the policy's threads.

One Interpreter per batch size, made and allocated on that size's first call (the first request
and the first large batch "compile" like the other frameworks' first calls; `compilations`
counts them, so a new shape inside a timed window is flagged). Every init() checks the float32
model's logits on the fixed batch against TensorFlow's and refuses a conversion that differs.

With `quantization=dynamic-int8` the served model is the converter's dynamic-range
quantisation (Optimize.DEFAULT without a representative dataset: int8 weights, activations
quantised on the fly). Its logits are not held to the float32 parity tolerance (a quantised
model is not meant to reproduce float32 logits to 1e-3): init() measures the float32 model's
held-out accuracy and the share of samples where both models' top-1 agree, precision() names
them, and the inference scenario reports the served model's accuracy change against float32.

A generate trial (lm) converts the decoder with the KV cache as inputs and outputs instead
(generate.py), float32 or (--precision int8) dynamic-range int8, judged by the parent's
generation parity like every framework's.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter

from dlbench import workloads
from dlbench.analysis import parity
from dlbench.backends.base import BUILTIN_PACKAGES, Sampling, Unsupported, build_program, require_builder
from dlbench.backends.generate import Generating
import dlbench.backends.litert.generate as generate
from dlbench.backends.litert.settings import EXPORTS_FROM, quantization, threads
from dlbench.backends.tensorflow.program import TensorFlowProgram
from dlbench.spec import PARITY_BATCH, GenerateOptions, TrialSpec

PREDICT_CHUNK = 1024
# The implementations that are converted (the backend's Capabilities.exports_from).
TENSORFLOW_PACKAGE = BUILTIN_PACKAGES + EXPORTS_FROM
# What each init() in this process did: reported by LiteRTBackend.info().
CONVERSIONS: list[dict[str, Any]] = []
NOT_JUDGED = ("dynamic-range int8 is judged by its held-out accuracy against the float32 model"
              " (infer_accuracy_change), not by the float32 parity tolerance")


def build(trial: TrialSpec) -> LiteRTProgram:
    """The Program of any workload that TensorFlow implements (Unsupported, with the reason, for
    one it does not, and at init for a model the converter cannot express in builtin ops)."""
    try:
        require_builder(TENSORFLOW_PACKAGE, trial.workload.name)
    except Unsupported as e:
        raise Unsupported(f"litert serves TensorFlow's converted implementations: {e}") from None
    return LiteRTProgram(trial)


@typing.final
@dataclass
class State:
    model: bytes  # the served flatbuffer
    threads: int
    interpreters: dict[int, Any] = field(default_factory=dict)  # batch size -> allocated Interpreter

    def interpreter(self, batch: int) -> Any:
        """The Interpreter for this batch size, made and allocated on its first use."""
        found = self.interpreters.get(batch)
        if found is None:
            found = open_interpreter(self.model, self.threads, batch)
            self.interpreters[batch] = found
        return found


def open_interpreter(model: bytes, num_threads: int, batch: int) -> Any:
    it = Interpreter(model_content=model, num_threads=num_threads)
    detail = it.get_input_details()[0]
    it.resize_tensor_input(detail["index"], [batch, *detail["shape_signature"][1:]])
    it.allocate_tensors()
    return it


def run(it: Any, x: np.ndarray) -> np.ndarray:
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return np.asarray(it.get_tensor(it.get_output_details()[0]["index"]))


def convert(tf_program: TensorFlowProgram, sample_shape: tuple[int, ...], x_dtype: tf.DType, int8: bool) -> bytes:
    """The eval-mode forward traced with a dynamic batch axis, converted (builtin ops only)."""
    fn = tf.function(tf_program.eval_forward(), input_signature=[tf.TensorSpec((None, *sample_shape), x_dtype)])
    return convert_function(fn.get_concrete_function(), int8)


def convert_function(concrete: Any, int8: bool) -> bytes:
    """A concrete tf.function converted with builtin ops only (int8: dynamic-range quantised);
    Unsupported with the converter's own error where it cannot express the function."""
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if int8:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        return bytes(converter.convert())
    except Exception as e:  # a model the converter cannot express with builtin ops
        # the converter's own error, on one line (its messages span several, with op locations)
        error = " ".join(str(e).split())[:300]
        raise Unsupported(f"the TFLite converter cannot convert this model: {type(e).__name__}: {error}") from e


@typing.final
class LiteRTProgram(Sampling, Generating):
    def __init__(self, trial: TrialSpec) -> None:
        spec = trial.workload
        self._trial = trial
        self._workload = workloads.get(spec.name)
        shape, x_dtype = self._workload.input_spec(spec)
        self._shape = tuple(shape)
        floating = np.issubdtype(np.dtype(x_dtype), np.floating)
        self._x_dtype = np.dtype(np.float32) if floating else np.dtype(x_dtype)
        self._int8 = quantization(trial.policy) == "dynamic-int8"
        self._numerics: dict[str, Any] | None = None
        self._precision: dict[str, Any] = {}
        self._opened = 0
        # a generate trial (its record's options are GenerateOptions): the decoder, not the forward
        self._generating = (workloads.scenario_unsupported(spec.name, trial.scenario) is None
                            and workloads.scenario(spec.name, trial.scenario).options is GenerateOptions)

    def _tensorflow(self, params: dict[str, np.ndarray]) -> tuple[TensorFlowProgram, Any]:
        """TensorFlow's program of the workload (graph mode, float32) and its state."""
        spec = self._trial.workload
        tf_trial = replace(self._trial, framework="tensorflow", precision="fp32",
                           policy=replace(self._trial.policy, mode="graph", options={}))
        tf_program = build_program(TENSORFLOW_PACKAGE, tf_trial)
        if not isinstance(tf_program, TensorFlowProgram):
            raise RuntimeError(f"the tensorflow builder of {spec.name} made no TensorFlowProgram")
        tf_state = tf_program.init(params)
        self._numerics = tf_program.numerics()
        return tf_program, tf_state

    def _init_generate(self, params: dict[str, np.ndarray]) -> State:
        """The decoder's cache-in, cache-out functions; conversion happens as the decoder needs
        each fixed shape (generate.py)."""
        if self._int8:
            raise Unsupported("in the generate scenario int8 decoding is --precision int8 (the quantization option"
                              " is the infer scenario's)")
        tf_program, tf_state = self._tensorflow(params)
        if tf_program.export_factory is None:
            raise Unsupported(f"TensorFlow's {self._trial.workload.name} program has no cache-in, cache-out form")
        cache_io, n, int8 = tf_program.export_factory(tf_state), threads(self._trial.policy), self._trial.precision == "int8"
        size = workloads.get(self._trial.workload.name).size(self._trial.workload)
        self.decoder_factory = lambda state, batch, max_len: generate.LiteRTDecoder(
            cache_io, convert_function, n, size, batch, max_len, int8)
        self._precision = {"graph_dtype": "float32", "weights": generate.INT8_HOW if int8 else "float32"}
        return State(b"", n)

    def init(self, params: dict[str, np.ndarray]) -> State:
        """Convert the TensorFlow model (float32, and int8 when asked), check the float32
        model's logits against TensorFlow's, and (int8) measure the float32 model's accuracy.
        A generate trial converts its decoder instead (_init_generate)."""
        if self._generating:
            return self._init_generate(params)
        spec = self._trial.workload
        start = time.perf_counter()
        tf_program, tf_state = self._tensorflow(params)
        x_dtype = tf.as_dtype(self._x_dtype)
        fp32 = convert(tf_program, self._shape, x_dtype, int8=False)
        served = convert(tf_program, self._shape, x_dtype, int8=True) if self._int8 else fp32
        convert_s = time.perf_counter() - start
        fixed = self._workload.fixed_batch(spec, PARITY_BATCH)
        x = self.infer_input(fixed.x)
        err = parity.rel_err(run(open_interpreter(fp32, threads(self._trial.policy), len(x)), x),
                             np.asarray(tf_program.predict(tf_state, x)))
        tol = parity.tolerance(spec.numerics.dtype).infer_logits_rel_err
        CONVERSIONS.append({"workload": spec.name, "quantization": "dynamic-int8" if self._int8 else "none",
                            "fp32_bytes": len(fp32), "served_bytes": len(served), "convert_s": convert_s,
                            "tf_logits_rel_err": err})
        if not err <= tol:
            raise RuntimeError(f"litert's float32 logits on the fixed batch differ from TensorFlow's by {err:.2e}"
                               f" (normwise; tolerance {tol:g})")
        self._precision = {"graph_dtype": "float32", "weights": "int8 (dynamic range)" if self._int8 else "float32"}
        if self._int8:
            self._precision.update(self._against_fp32(fp32, served))
        return State(served, threads(self._trial.policy))

    def _against_fp32(self, fp32: bytes, served: bytes) -> dict[str, Any]:
        """The float32 model's held-out accuracy and the top-1 agreement of both models."""
        spec = self._trial.workload
        data = self._workload.make_eval_dataset(spec)
        n = threads(self._trial.policy)
        a = self.predict(State(fp32, n), data.x).argmax(-1)
        b = self.predict(State(served, n), data.x).argmax(-1)
        return {"fp32_accuracy": float(np.mean(a == data.y)), "fp32_top1_agreement": float(np.mean(a == b)),
                "parity_not_judged": NOT_JUDGED}

    def infer_fn(self, state: State) -> Callable[[np.ndarray], np.ndarray]:
        """set_tensor, invoke, get_tensor (a copy on the host) on the batch size's Interpreter."""
        def infer(x: np.ndarray) -> np.ndarray:
            if len(x) not in state.interpreters:
                self._opened += 1
            return run(state.interpreter(len(x)), x)

        return infer

    def infer_input(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x, self._x_dtype)

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        """Logits in chunks of PREDICT_CHUNK (the last padded to the chunk's size, so that one
        Interpreter serves them all)."""
        size = min(PREDICT_CHUNK, len(x))
        it = state.interpreter(size)
        out = []
        for i in range(0, len(x), size):
            rows = np.resize(np.arange(i, min(i + size, len(x))), size)
            out.append(run(it, self.infer_input(x[rows]))[: min(size, len(x) - i)])
        return np.concatenate(out)

    def precision(self) -> dict[str, Any]:
        return dict(self._precision)

    def numerics(self) -> dict[str, Any]:
        """The TensorFlow program's numerics, read back when the model was converted."""
        if self._numerics is None:
            raise RuntimeError("litert numerics are known once init() has converted the model")
        return dict(self._numerics)

    def compilations(self) -> int:
        return self._opened  # an Interpreter allocated for a new batch size
