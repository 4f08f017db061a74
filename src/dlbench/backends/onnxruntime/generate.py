"""ONNX Runtime generation (the generate scenario): the torch implementation's decode-with-past
form (backends/torch/lm.py: PastPresent) exported once from the canonical parameters, with
dynamic batch, new-token and past axes, and driven by an InferenceSession token by token.

One graph serves prefill and decode: (ids (B, t), past keys and values (depth, B, heads, L, dh))
-> (logits (B, V) of the last new position, present keys and values (depth, B, heads, L + t,
dh)). Prefill feeds the prompt with an empty past (L = 0); each decode step feeds the greedy
token with the last step's present as its past. The export lives in the ONNX export cache
(program.py) under a key of its own (graph "past-present"), beside the whole-sequence graph of
the infer scenario, and is checked at init against torch's own logits on an example.

int8 (--precision int8): the same export quantised by onnxruntime.quantization.quantize_dynamic
(MatMul and Gemm with constant weights: int8 weights per output channel, activations quantised
per call, MatMulInteger / DynamicQuantizeMatMul kernels), cached beside the float32 graph.

IO binding (option generate_io): `binding` keeps the cache in ONNX Runtime's own OrtValues from
one step to the next (outputs allocated by the session on its device, bound as the next step's
inputs); `run` passes NumPy arrays through session.run, which copies every output cache back
into NumPy each step. On this project's 2-core CPU the two were within the machine's noise at
the tiny and cpu presets (interleaved, loaded machine: not a published number); on a GPU binding
keeps the cache on the device.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from dlbench.backends.base import Unsupported, build_program
from dlbench.backends.generate import HostLogits
from dlbench.backends.onnxruntime.session import GENERATE_IO, providers, session_options
from dlbench.spec import TrialSpec
from dlbench.workloads import lm

GRAPH = "past-present"
MODEL = "model.onnx"
MODEL_INT8 = "model_int8.onnx"
INPUTS = ("ids", "past_keys", "past_values")
OUTPUTS = ("logits", "present_keys", "present_values")
# The example the graph is traced with: every dynamic size >= 2 (torch.export specialises a
# dimension of size 0 or 1 to that constant).
EXAMPLE_BATCH, EXAMPLE_NEW, EXAMPLE_PAST = 2, 3, 4
INT8_HOW = "int8: quantize_dynamic of MatMul/Gemm, per-channel"


def export_past_present(trial: TrialSpec, params: dict[str, np.ndarray], out: Path, opset: int,
                        torch_package: str) -> dict[str, Any]:
    """Export the torch implementation's decode-with-past module (Generating.export_factory of
    the torch program, eager, float32, canonical parameters) to out/model.onnx; keep torch's
    outputs on the example beside it (torch_outputs.npz) for the check at init."""
    import torch

    start = time.perf_counter()
    torch_trial = replace(trial, framework="torch", precision="fp32", policy=replace(trial.policy, mode="eager", options={}))
    program = build_program(torch_package, torch_trial)
    factory = getattr(program, "export_factory", None)
    if factory is None:
        raise Unsupported(f"torch's {trial.workload.name} program has no decode-with-past form to export")
    module = factory(program.init(params))
    example = _example(trial)
    batch, new, past = (torch.export.Dim(n) for n in ("batch", "new_tokens", "past"))
    exported = torch.onnx.export(
        module, tuple(torch.from_numpy(a) for a in example), dynamo=True, opset_version=opset, optimize=True,
        verbose=False, input_names=list(INPUTS), output_names=list(OUTPUTS),
        dynamic_shapes=({0: batch, 1: new}, {1: batch, 3: past}, {1: batch, 3: past}),
    )
    if exported is None:  # only the TorchScript exporter (dynamo=False) returns None
        raise RuntimeError("torch.onnx.export returned no program")
    exported.save(str(out / MODEL), external_data=False)
    with torch.no_grad():
        outputs = [o.numpy() for o in module(*(torch.from_numpy(a) for a in example))]
    np.savez(out / "torch_outputs.npz", **dict(zip(OUTPUTS, outputs)))
    return {"workload": trial.workload.name, "graph": GRAPH, "numerics": program.numerics(), "opset": opset,
            "torch": torch.__version__, "onnx": importlib.metadata.version("onnx"),
            "export_s": time.perf_counter() - start}


def _example(trial: TrialSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Token ids and a random past of the example shapes (the cache is any float tensor)."""
    s = lm.size(trial.workload)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, s.vocab, (EXAMPLE_BATCH, EXAMPLE_NEW)).astype(np.int64)
    shape = (s.depth, EXAMPLE_BATCH, s.heads, EXAMPLE_PAST, s.head_dim)
    return ids, rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


def quantized(directory: Path) -> Path:
    """The int8 graph of the export in `directory`, quantised now where it is not there yet
    (written under a temporary name and renamed, so a concurrent trial never reads half)."""
    target = directory / MODEL_INT8
    if target.exists():
        return target
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp, source = directory / f".{MODEL_INT8}.{os.getpid()}", directory / f".plain.{os.getpid()}.onnx"
    # The exporter's intermediate shapes (value_info) include ones onnx's shape inference, which
    # the quantiser runs, re-infers differently ("Inferred shape and existing shape differ"):
    # the quantiser starts from the graph without them.
    model = onnx.load(str(directory / MODEL))
    model.graph.ClearField("value_info")
    onnx.save(model, str(source))
    try:
        quantize_dynamic(source, tmp, per_channel=True, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gemm"])
        os.replace(tmp, target)
    finally:
        source.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return target


def check_export(session: Any, trial: TrialSpec, directory: Path) -> float:
    """The session's logits on the export's example against torch's (normwise relative)."""
    ids, keys, values = _example(trial)
    logits = session.run(["logits"], {"ids": ids, "past_keys": keys, "past_values": values})[0]
    expected = np.load(directory / "torch_outputs.npz")["logits"]
    return float(np.linalg.norm(logits - expected) / np.linalg.norm(expected))


def open_session(model: Path, trial: TrialSpec) -> Any:
    return ort.InferenceSession(str(model), sess_options=session_options(trial.policy), providers=providers())


@typing.final
@dataclass(frozen=True)
class GenState:
    session: Any  # ort.InferenceSession of the past-present graph (float32 or int8)
    io: str  # GENERATE_IO value: "binding" or "run"
    int8: bool


@typing.final
class OrtDecoder(HostLogits):
    """backends/generate.py's Decoder over the past-present session. The cache grows by the new
    positions at every call (ONNX Runtime's Concat), as a Hugging Face ONNX export runs it;
    the argmax of the logits is taken on the host, which is ONNX Runtime's device on a CPU."""

    def __init__(self, state: GenState, size: lm.Size, batch: int, max_len: int) -> None:
        self.session, self.size, self.batch, self.max_len = state.session, size, batch, max_len
        self.binding = state.io == "binding"
        self._io = self.session.io_binding() if self.binding else None
        # Outputs stay where the session computes them: the cache on the GPU under CUDA (what
        # binding is for), in host memory on a CPU.
        self._device = "cuda" if self.session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"
        self._past: tuple[Any, Any] = self._empty()
        self.how = ("one past-present graph, cache " +
                    ("in OrtValues (IO binding)" if self.binding else "through NumPy (session.run)") +
                    (f"; {INT8_HOW}" if state.int8 else ""))

    def _empty(self) -> tuple[Any, Any]:
        s = self.size
        empty = np.zeros((s.depth, self.batch, s.heads, 0, s.head_dim), np.float32)
        return empty, empty

    def _run(self, ids: np.ndarray) -> np.ndarray:
        keys, values = self._past
        if self._io is None:
            logits, k, v = self.session.run(list(OUTPUTS), {"ids": ids, "past_keys": keys, "past_values": values})
            self._past = (k, v)
            return np.asarray(logits)
        io = self._io
        io.bind_cpu_input("ids", ids)
        for name, past in (("past_keys", keys), ("past_values", values)):
            if isinstance(past, np.ndarray):
                io.bind_cpu_input(name, past)
            else:
                io.bind_ortvalue_input(name, past)
        for name in OUTPUTS:
            io.bind_output(name, self._device)
        self.session.run_with_iobinding(io)
        logits, k, v = io.get_outputs()
        self._past = (k, v)
        return np.asarray(logits.numpy())

    def prefill(self, prompt: np.ndarray) -> np.ndarray:
        self._past = self._empty()
        return self._run(np.ascontiguousarray(prompt, np.int64))

    def decode(self, logits: np.ndarray) -> np.ndarray:
        return self._run(logits.argmax(axis=-1).astype(np.int64)[:, None])

    def compilations(self) -> int:
        return 0  # the session optimises its graph once, at init; new shapes never recompile


def io_mode(trial: TrialSpec) -> str:
    return trial.policy.options.get("generate_io", GENERATE_IO.default)
