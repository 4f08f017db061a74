"""LiteRT generation (the generate scenario): the TensorFlow implementation's decoder with the KV
cache as inputs and outputs (backends/tensorflow/lm.py: CacheIO), converted by the TFLite
converter (builtin ops only) into fixed-shape models, and run by LiteRT's Interpreter through
their Interpreters, token by token.

Fixed shapes, as TFLite models have them: one decode-step model for the trial's batch and cache
length, converted when the decoder is made, and one prefill model per prompt length, converted
on that length's first prefill (`compilations` counts every conversion, so a new prompt length
shows as the recompile it is). Between steps the cache travels as NumPy arrays (the signature
runner copies inputs in and outputs out). A converter that cannot express a model makes the
trial unsupported with the converter's own error (program.convert_function).

int8 (--precision int8): each model converted with the converter's dynamic-range quantisation
(Optimize.DEFAULT without a representative dataset: int8 weights of the fully-connected and
batch-matmul layers with constant weights, activations quantised per call by the hybrid kernels).
"""

from __future__ import annotations

import typing
from typing import Any

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from dlbench.backends.generate import HostLogits
from dlbench.workloads import lm

INT8_HOW = "int8: the converter's dynamic range"


@typing.final
class Model:
    """One converted model's Interpreter, tensors allocated: inputs set by name, outputs read in
    the order the function returns them. (A model converted from a concrete function carries
    no SignatureDef, so no signature runner: its outputs are named Identity, Identity_1, ...
    in the function's output order.)"""

    def __init__(self, model: bytes, threads: int) -> None:
        self.it = Interpreter(model_content=model, num_threads=threads)
        self.it.allocate_tensors()
        self.inputs = {d["name"]: d["index"] for d in self.it.get_input_details()}
        named = {d["name"]: d["index"] for d in self.it.get_output_details()}
        self.outputs = [named[n] for n in sorted(named, key=lambda n: int(n.rpartition("_")[2]) if "_" in n else 0)]

    def __call__(self, **inputs: np.ndarray) -> list[np.ndarray]:
        for name, value in inputs.items():
            self.it.set_tensor(self.inputs[name], value)
        self.it.invoke()
        return [self.it.get_tensor(i) for i in self.outputs]


@typing.final
class LiteRTDecoder(HostLogits):
    """backends/generate.py's Decoder over converted prefill and decode-step models."""

    def __init__(self, cache_io: Any, convert: Any, threads: int, size: lm.Size, batch: int, max_len: int,
                 int8: bool) -> None:
        self.cache_io, self.convert, self.threads = cache_io, convert, threads
        self.size, self.batch, self.max_len, self.int8 = size, batch, max_len, int8
        self.conversions = 0
        self._step = self._open(cache_io.step(batch, max_len))
        self._prefills: dict[int, Any] = {}
        self._keys: np.ndarray | None = None
        self._values: np.ndarray | None = None
        self._position = 0
        self.how = ("converted prefill per prompt length and decode step, cache in and out"
                    + (f"; {INT8_HOW}" if int8 else ""))

    def _open(self, concrete: Any) -> Any:
        self.conversions += 1
        return Model(self.convert(concrete, self.int8), self.threads)

    def prefill(self, prompt: np.ndarray) -> np.ndarray:
        length = prompt.shape[1]
        runner = self._prefills.get(length)
        if runner is None:
            runner = self._prefills[length] = self._open(self.cache_io.prefill(self.batch, length, self.max_len))
        logits, self._keys, self._values = runner(ids=np.ascontiguousarray(prompt, np.int32))
        self._position = length
        return logits

    def decode(self, logits: np.ndarray) -> np.ndarray:
        ids = logits.argmax(axis=-1).astype(np.int32)[:, None]
        logits, self._keys, self._values = self._step(ids=ids, position=np.array(self._position, np.int32),
                                                      keys=self._keys, values=self._values)
        self._position += 1
        return logits

    def compilations(self) -> int:
        """Conversions so far: the decode step's and one per prompt length."""
        return self.conversions
