"""ONNX Runtime's own profiler for profiled trials (backends/profiling.py): a session profiles
only when opened with `enable_profiling`, so `prepare()` turns it on for the sessions this
worker opens (session.py: session_options) and each opened session is registered here
(`opened`); `stop()` ends their profiling and keeps the events inside the profiled window, each
node's event named by its op type (`Conv`, `FusedMatMul`), in a Chrome trace. ORT's own file (the
whole session: build, warm-up and window) is kept beside it."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Op types (ONNX's and ONNX Runtime's contrib ops) after graph optimisation.
RULES = (
    (r"MaxPool|AveragePool|GlobalAveragePool|GlobalMaxPool|LpPool", "pooling"),
    (r"Conv", "convolution"),
    (r"MatMul|Gemm|Attention|Einsum|QLinearMatMul|MatMulInteger", "matmul"),
    (r"Norm|BatchNormalization", "normalisation"),
    (r"Softmax|Reduce|ArgMax|ArgMin|TopK|CumSum", "loss and reductions"),
    (r"Relu|Gelu|Erf|Tanh|Sigmoid|Add|Mul|Sub|Div|Exp|Log|Sqrt|Pow|Neg|Max|Min|Clip|Where|Equal|Greater|Less|"
     r"Not|And|Or|Cast|Abs|Sin|Cos|Floor|Ceil|Round|Range|Trilu|Mod|BiasGelu|QuickGelu|Silu|Swish", "elementwise and activation"),
    (r"Transpose|Reshape|Flatten|Squeeze|Unsqueeze|Concat|Split|Slice|Gather|Scatter|Expand|Tile|Pad|Shape|"
     r"Identity|ConstantOfShape|Constant|MemcpyToHost|MemcpyFromHost|DequantizeLinear|QuantizeLinear|"
     r"Resize|Upsample|NonZero|Size|DynamicQuantizeLinear", "copies and layout"),
)
# The session's own spans around its nodes' (a run, the executor).
CONTAINERS = r"^model_run$|^SequentialExecutor::Execute$|^ParallelExecutor::Execute$|^session_initialization$"

_profiling: dict[str, Any] = {"on": False, "dir": None, "sessions": []}


def prepare() -> None:
    """Sessions opened from now on profile themselves (session.py reads `enabled`)."""
    _profiling["on"] = True
    _profiling["dir"] = tempfile.mkdtemp(prefix="dlbench-ort-profile-")


def enabled() -> str | None:
    """The file prefix for a session's profile, where profiling is on; else None."""
    return str(Path(_profiling["dir"]) / "ort") if _profiling["on"] else None


def opened(session: Any) -> None:
    if _profiling["on"]:
        _profiling["sessions"].append(session)


def start(trace_dir: Path) -> Callable[[], Path]:
    begin = (time.monotonic_ns(), time.time_ns())

    def stop() -> Path:
        end = (time.monotonic_ns(), time.time_ns())
        events: list[dict[str, Any]] = []
        for session in _profiling["sessions"]:
            raw = Path(session.end_profiling())
            origin_ns = session.get_profiling_start_time_ns()
            # ORT documents its start as comparable to time.monotonic_ns(); builds whose clock is
            # the system clock are told apart by which of the two it is near
            clock = 0 if abs(origin_ns - begin[0]) < abs(origin_ns - begin[1]) else 1
            begin_ns, end_ns, origin_us = begin[clock], end[clock], origin_ns / 1e3
            kept = trace_dir / raw.name
            shutil.move(str(raw), kept)
            events += window_events(json.loads(kept.read_text()), origin_us, begin_ns / 1e3, end_ns / 1e3)
        path = trace_dir / "onnxruntime.trace.json"
        path.write_text(json.dumps({"traceEvents": events}))
        return path

    return stop


def window_events(events: list[dict[str, Any]], origin_us: float, begin_us: float,
                  end_us: float) -> list[dict[str, Any]]:
    """The complete events inside [begin, end] (wall-clock microseconds; ORT's `ts` count from
    the session's profiling start, `origin_us`), in wall-clock time, a node's named by its op
    type (its node name kept in args)."""
    out = []
    for e in events:
        if e.get("ph") != "X":
            continue
        ts = origin_us + float(e["ts"])
        if ts < begin_us or ts + float(e.get("dur", 0)) > end_us:
            continue
        args = e.get("args") or {}
        name = args.get("op_name") or e.get("name", "")
        if e.get("cat") == "Node" and str(e.get("name", "")).endswith(("_fence_before", "_fence_after")):
            name = f"{name} fence"
        out.append({**e, "ts": ts, "name": name, "args": {**args, "node": e.get("name")}})
    return out
