"""The ONNX Runtime Program every workload shares: the torch implementation of the workload,
loaded with the canonical parameters, exported once with torch.onnx.export (the dynamo exporter,
onnxscript) with a dynamic batch axis, cached, and run by an InferenceSession.

The export cache lives under DLBENCH_CACHE_DIR (default ~/.cache/dlbench)/onnx, one directory
per key: the workload spec without its sizes (the batch axis is dynamic, so batch, dataset and
eval sizes do not change the graph), a hash of the canonical parameters, a hash of the source
that defines the graph (exporter_digest: the workload's definition and the torch implementation),
the opset, the torch version and this file's format. A directory holds model.onnx, torch_logits.npy (the torch eval
model's logits on the canonical fixed batch, computed with the export) and meta.json (the torch
program's numerics read back, export seconds). Every init() checks the session's logits on the
fixed batch against those torch logits and refuses a session that differs.

A generate trial (lm) exports the decode-with-past graph instead, under a key of its own, and
serves it through generate.py's decoder.

ONNX Runtime cannot train: its program implements the inference protocols only (Servable,
Sampler), and a scenario that needs another is `unsupported` before anything is built (the
backend's capabilities provide `infer` only; support.build_as checks the protocol).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import tempfile
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from dlbench import workloads
from dlbench.analysis import parity
from dlbench.backends.base import BUILTIN_PACKAGES, Sampling, Unsupported, build_program, builder_module, require_builder
from dlbench.backends.generate import Generating
import dlbench.backends.onnxruntime.generate as generate
from dlbench.backends.onnxruntime.profile import opened as profiling_opened
from dlbench.backends.onnxruntime.session import EXPORTS_FROM, providers, session_options
from dlbench.paths import cache_base
from dlbench.spec import PARITY_BATCH, GenerateOptions, TrialSpec, WorkloadSpec, to_dict

# The dynamo exporter's own opset (torch.onnx's TORCHLIB_OPSET in torch 2.13): exported as is,
# no version conversion pass.
OPSET = 18
# Bump when what an export directory holds changes.
EXPORT_FORMAT = 1
# The implementations that are exported (the backend's Capabilities.exports_from).
TORCH_PACKAGE = BUILTIN_PACKAGES + EXPORTS_FROM
# The whole-sequence forward every scenario but generate serves (cache_key's default graph).
FORWARD = "forward"
# Sizes that do not change the exported graph (dynamic batch axis).
_SIZE_FIELDS = ("batch_size", "dataset_size", "eval_size", "labels")
PREDICT_CHUNK = 1024
# What each init() in this process did (cache key, hit or miss, seconds, the torch check):
# reported by OnnxRuntimeBackend.info().
EXPORTS: list[dict[str, Any]] = []


def build(trial: TrialSpec) -> OrtProgram:
    """The Program of any workload that torch implements (Unsupported, with the reason, for one
    it does not): every workload shares OrtProgram, which exports torch's model."""
    try:
        require_builder(TORCH_PACKAGE, trial.workload.name)
    except Unsupported as e:
        raise Unsupported(f"onnxruntime serves torch's exported implementations: {e}") from None
    return OrtProgram(trial)


def params_digest(params: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(params):
        a = np.ascontiguousarray(params[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:20]


def exporter_digest(workload: str) -> str:
    """A hash of the source that defines the exported graph besides the spec and parameters:
    the workload's definition (workloads.definition_digest), the torch implementation that is
    exported (every module of the torch backend package, whose shared layers and program build
    each model, plus a plugin workload's own torch builder module) and this file. Coarse on
    purpose: a change to any torch module re-exports every workload once (seconds), and a model
    fix never meets a stale export."""
    h = hashlib.sha256(workloads.definition_digest(workload).encode())
    torch_dir = Path(_origin(TORCH_PACKAGE)).parent
    files = sorted(torch_dir.glob("*.py"))
    builder = builder_module(TORCH_PACKAGE, workload)
    if builder is not None and Path(_origin(builder)).parent != torch_dir:
        files.append(Path(_origin(builder)))
    for path in [*files, Path(__file__)]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def _origin(module: str) -> str:
    found = importlib.util.find_spec(module)
    if found is None or found.origin is None:
        raise RuntimeError(f"cannot find the source of {module} (needed for the export cache key)")
    return found.origin


def cache_key(spec: WorkloadSpec, params: dict[str, np.ndarray], graph: str = FORWARD) -> str:
    """`graph`: the whole-sequence forward (infer), or generate.GRAPH (the decode-with-past
    graph), which keys an export of its own."""
    d = to_dict(spec)
    for name in _SIZE_FIELDS:
        d.pop(name)
    blob = {"spec": d, "params": params_digest(params), "opset": OPSET, "source": exporter_digest(spec.name),
            "torch": importlib.metadata.version("torch"), "format": EXPORT_FORMAT}
    if graph != FORWARD:  # the forward's keys stay those of stores made before other graphs
        blob["graph"] = graph
    return f"{spec.name}-{hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:20]}"


def cache_root() -> Path:
    return cache_base() / "onnx"


@dataclass(frozen=True)
class Export:
    directory: Path
    meta: dict[str, Any]
    hit: bool

    @property
    def model(self) -> Path:
        return self.directory / "model.onnx"

    def torch_logits(self) -> np.ndarray:
        return np.load(self.directory / "torch_logits.npy")


def ensure_export(trial: TrialSpec, params: dict[str, np.ndarray], graph: str = FORWARD) -> Export:
    """The cached export of `graph` for these parameters, made now on a miss (in a temporary
    directory renamed into place, so a crash or a concurrent export never leaves half a
    directory)."""
    root = cache_root()
    directory = root / cache_key(trial.workload, params, graph)
    if (directory / "meta.json").exists():
        return Export(directory, json.loads((directory / "meta.json").read_text()), hit=True)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=root))
    try:
        meta = (export_torch(trial, params, tmp) if graph == FORWARD
                else generate.export_past_present(trial, params, tmp, OPSET, TORCH_PACKAGE))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            tmp.rename(directory)
        except OSError:  # another process exported the same key first: use theirs
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Export(directory, json.loads((directory / "meta.json").read_text()), hit=False)


def export_torch(trial: TrialSpec, params: dict[str, np.ndarray], out: Path) -> dict[str, Any]:
    """Export the torch implementation (eager, eval mode, canonical parameters) to
    out/model.onnx with a dynamic batch axis; save its logits on the fixed batch beside it."""
    import torch

    start = time.perf_counter()
    torch_trial = replace(trial, framework="torch", policy=replace(trial.policy, mode="eager"))
    program = build_program(TORCH_PACKAGE, torch_trial)
    state = program.init(params)
    fixed = workloads.get(trial.workload.name).fixed_batch(trial.workload, PARITY_BATCH)
    example = program.infer_input(fixed.x)
    forward = program.infer_fn(state)  # puts the module in eval mode
    exported = torch.onnx.export(
        state.model, (example,), dynamo=True, opset_version=OPSET, optimize=True, verbose=False,
        dynamic_shapes=({0: torch.export.Dim("batch")},),
    )
    if exported is None:  # only the TorchScript exporter (dynamo=False) returns None
        raise RuntimeError("torch.onnx.export returned no program")
    exported.save(str(out / "model.onnx"), external_data=False)
    np.save(out / "torch_logits.npy", np.asarray(forward(example)))
    return {
        "workload": trial.workload.name,
        "numerics": program.numerics(),
        "opset": OPSET,
        "torch": torch.__version__,
        "onnx": importlib.metadata.version("onnx"),
        "onnxscript": importlib.metadata.version("onnxscript"),
        "export_s": time.perf_counter() - start,
    }


@typing.final
@dataclass(frozen=True)
class State:
    session: Any  # ort.InferenceSession
    input_name: str
    output_name: str


@typing.final
class OrtProgram(Sampling, Generating):
    def __init__(self, trial: TrialSpec) -> None:
        spec = trial.workload
        self._trial = trial
        self._workload = workloads.get(spec.name)
        shape, x_dtype = self._workload.input_spec(spec)
        # As the torch model takes them: NCHW float32 images, float32 vectors, int64 token ids.
        self._images = len(shape) == 3
        self._x_dtype = np.dtype(np.float32) if np.issubdtype(np.dtype(x_dtype), np.floating) else np.dtype(np.int64)
        self._numerics: dict[str, Any] | None = None
        self._precision: dict[str, Any] = {"graph_dtype": "float32"}  # the exported float32 graph
        # a generate trial (its record's options are GenerateOptions): the decoder, not the forward
        self._generating = (workloads.scenario_unsupported(spec.name, trial.scenario) is None
                            and workloads.scenario(spec.name, trial.scenario).options is GenerateOptions)
        if self._generating:
            size = workloads.get(spec.name).size(spec)
            self.decoder_factory = lambda state, batch, max_len: generate.OrtDecoder(state, size, batch, max_len)

    def init(self, params: dict[str, np.ndarray]) -> State | generate.GenState:
        """Export (or find the cached export), open a session under the policy, check its logits
        on the fixed batch against torch's (a generate trial: its decode-with-past graph's, on
        the export's example)."""
        if self._generating:
            return self._init_generate(params)
        spec = self._trial.workload
        start = time.perf_counter()
        export = ensure_export(self._trial, params)
        self._numerics = {k: export.meta["numerics"].get(k) for k in self._workload.NUMERICS_FIELDS}
        session = ort.InferenceSession(str(export.model), sess_options=session_options(self._trial.policy),
                                       providers=providers())
        profiling_opened(session)  # a profiled trial (profile.py)
        state = State(session, session.get_inputs()[0].name, session.get_outputs()[0].name)
        fixed = self._workload.fixed_batch(spec, PARITY_BATCH)
        err = parity.rel_err(self.infer_fn(state)(self.infer_input(fixed.x)), export.torch_logits())
        tol = parity.tolerance(spec.numerics.dtype).infer_logits_rel_err
        EXPORTS.append({"key": export.directory.name, "cache": "hit" if export.hit else "miss",
                        "opset": export.meta["opset"], "export_s": export.meta["export_s"],
                        "init_s": time.perf_counter() - start, "torch_logits_rel_err": err,
                        "providers": session.get_providers()})
        if not err <= tol:
            raise RuntimeError(f"onnxruntime's logits on the fixed batch differ from torch's by {err:.2e}"
                               f" (normwise; tolerance {tol:g}): export {export.directory}")
        return state

    def _init_generate(self, params: dict[str, np.ndarray]) -> generate.GenState:
        """The decode-with-past export, checked in float32 against torch, then served in float32
        or (--precision int8) quantised."""
        trial, start = self._trial, time.perf_counter()
        export = ensure_export(trial, params, generate.GRAPH)
        self._numerics = {k: export.meta["numerics"].get(k) for k in self._workload.NUMERICS_FIELDS}
        fp32 = generate.open_session(export.model, trial)
        err = generate.check_export(fp32, trial, export.directory)
        tol = parity.tolerance(trial.workload.numerics.dtype).infer_logits_rel_err
        int8 = trial.precision == "int8"
        session = generate.open_session(generate.quantized(export.directory), trial) if int8 else fp32
        profiling_opened(session)
        EXPORTS.append({"key": export.directory.name, "graph": generate.GRAPH, "cache": "hit" if export.hit else "miss",
                        "opset": export.meta["opset"], "export_s": export.meta["export_s"],
                        "init_s": time.perf_counter() - start, "torch_logits_rel_err": err, "int8": int8,
                        "providers": session.get_providers()})
        if not err <= tol:
            raise RuntimeError(f"onnxruntime's decode-with-past logits differ from torch's by {err:.2e}"
                               f" (normwise; tolerance {tol:g}): export {export.directory}")
        if int8:
            self._precision["weights"] = generate.INT8_HOW
        return generate.GenState(session, generate.io_mode(trial), int8)

    def infer_fn(self, state: State) -> Callable[[np.ndarray], np.ndarray]:
        """InferenceSession.run: host NumPy in, host NumPy logits out."""
        run, feed, outputs = state.session.run, state.input_name, [state.output_name]
        return lambda x: run(outputs, {feed: x})[0]  # type: ignore[no-any-return]

    def infer_input(self, x: np.ndarray) -> np.ndarray:
        a = np.asarray(x, self._x_dtype)
        return np.ascontiguousarray(a.transpose(0, 3, 1, 2) if self._images else a)

    def predict(self, state: State, x: np.ndarray) -> np.ndarray:
        forward = self.infer_fn(state)
        return np.concatenate([forward(self.infer_input(x[i : i + PREDICT_CHUNK]))
                               for i in range(0, len(x), PREDICT_CHUNK)])

    def precision(self) -> dict[str, Any]:
        return dict(self._precision)  # the exported float32 graph, its weights int8 where asked

    def numerics(self) -> dict[str, Any]:
        """The torch program's numerics, read back when the model was exported (init; checked
        against the spec by backends.support.init)."""
        if self._numerics is None:
            raise RuntimeError("onnxruntime numerics are known once init() has found the export")
        return dict(self._numerics)

    def compilations(self) -> int:
        return 0  # the session optimises its graph once, in init(); run() never compiles
