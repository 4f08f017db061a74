"""Profiled trials: where the time goes, in one vocabulary for every framework.

Each backend package that can profile has a module `profile.py` (the same name in each) with
  - `start(trace_dir: Path) -> Callable[[], Path]`: start the framework's own profiler writing
    under `trace_dir`; the returned function stops it and returns the trace file, a Chrome trace
    (JSON, gzipped or not) that Perfetto and chrome://tracing load;
  - `RULES`: (regular expression, category) pairs over the framework's op and kernel names,
    the first match wins (searched, case-insensitive);
  - `CONTAINERS`: a regular expression naming spans that only wrap work traced elsewhere (a
    Python thread waiting for the framework's own threads, an executor's region markers): they
    pass their category down, and their own time counts nowhere;
  - optionally `prepare()`, called after the framework's import and before the build (torch
    asks Inductor to name its generated kernels in the trace; ONNX Runtime turns on the
    sessions' own profiling);
  - optionally `BACKWARD`: a regular expression naming the spans of the backward pass (an
    autograd node, a gradient op); what runs inside them is the backward's too;
  - optionally `refine(spans) -> spans`: categories from what the trace's names cannot say
    (JAX: each XLA instruction's dominant op, read from the compiled program, backends/hlo.py),
    and `program_metrics(spans) -> dict`: what the compiler says of the programs that ran
    (XLA's cost analysis: flops and bytes accessed);
  - or instead of all these, `delegate()`: the profile module that does the work (Keras: the
    framework underneath).
This module reads such a trace and attributes its time; it imports no framework.

Attribution: on each thread of the trace, events nest (an ATen op inside an autograd node, a
kernel inside an op). Each event's self time (its duration less its children's) goes to the
category of the event's own name, else of its nearest ancestor that has one, else to "other"
under the event's name; an ancestor in a STICKY category wins over its descendants' own names
(the elementwise kernels of an optimizer step are the optimizer update, the copies inside a data
loader's next batch are the input pipeline). Whatever the trace leaves uncovered inside the profiled window is "host
overhead and idle gaps" (where no traced op ran on any thread: Python, dispatch not traced, the
loop, waiting). Where several threads run ops at once (XLA's and oneDNN's thread pools), the
categories add up to more than the wall time; shares are of the sum of categories and the gaps.
"""

from __future__ import annotations

import gzip
import importlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from dlbench.analysis.categories import (  # noqa: F401 (the vocabulary, re-exported for backends)
    BYTES_METRIC,
    CATEGORIES,
    CATEGORY_BY_METRIC,
    FLOPS_METRIC,
    HOST,
    INPUT,
    INTENSITY_METRIC,
    OTHER,
    STICKY,
    backward_metric_name,
    metric_name,
)

Rules = Sequence[tuple[str, str]]

# XLA's HLO instruction and fusion names, as XLA:CPU's thunk executor records them: shared by the
# frameworks that compile with XLA (JAX; TensorFlow's compiled mode). XLA names a fusion after
# its root ops (`broadcast_maximum_fusion`, `transpose_copy_fusion`); XLA:CPU hands dots and
# convolutions, with what it fused into them, to YNNPACK as `ynn_fusion` (counted as matmul: it
# may hold a convolution). XLA:CPU expands max-pool's backward (select-and-scatter) into iota,
# compare-select and scatter, which land in copies and elementwise here (docs/methodology.md).
XLA_RULES: tuple[tuple[str, str], ...] = (
    (r"select-and-scatter|select_and_scatter|reduce-window|reduce_window", "pooling"),
    (r"^convolution|conv", "convolution"),
    (r"^dot|dot_|_dot|gemm|ynn_fusion|onednn", "matmul"),
    (r"rsqrt", "normalisation"),
    (r"reduce", "loss and reductions"),
    (r"maximum|minimum|add|multiply|subtract|divide|exponential|exp_|log|tanh|erf|select|compare|negate|"
     r"sqrt|power|clamp|abs|sign|convert", "elementwise and activation"),
    (r"transpose|copy|bitcast|concatenate|reshape|broadcast|slice|pad|iota|gather|scatter|stack|"
     r"dynamic-update|tuple", "copies and layout"),
)


@dataclass(frozen=True)
class Span:
    name: str
    start_us: float
    dur_us: float
    track: tuple[Any, Any]  # (pid, tid)
    # XLA's events: the compiled program (hlo_module) and instruction (hlo_op) they ran
    module: str = ""
    op: str = ""
    # set by a profile module's `refine` (from the compiled program): wins over the name's rules
    category: str | None = None
    # part of the backward pass (refine: JAX's transposed ops; else the module's BACKWARD names)
    backward: bool = False
    # a call of a compiled function that wraps the ops traced inside it (TensorFlow marks its
    # tf.function calls with a `tf_function_call` arg, named after the Python function): a container
    call: bool = False


@dataclass
class Breakdown:
    """Seconds per category over the profiled window, and the unmapped time by name."""

    seconds: dict[str, float] = field(default_factory=dict)
    other_names: dict[str, float] = field(default_factory=dict)
    window_s: float = 0.0
    # of `seconds`, the backward pass's, by category (where the trace tells them apart)
    backward: dict[str, float] = field(default_factory=dict)

    def add(self, category: str, seconds: float) -> None:
        self.seconds[category] = self.seconds.get(category, 0.0) + seconds

    def total_s(self) -> float:
        return sum(self.seconds.values())

    def top_other(self, n: int = 5) -> list[tuple[str, float]]:
        return sorted(self.other_names.items(), key=lambda kv: -kv[1])[:n]


def compile_rules(rules: Rules) -> list[tuple[re.Pattern[str], str]]:
    for _, category in rules:
        if category not in CATEGORIES:
            raise ValueError(f"category {category!r} is not one of: {', '.join(CATEGORIES)}")
    return [(re.compile(pattern, re.IGNORECASE), category) for pattern, category in rules]


def category_of(name: str, rules: list[tuple[re.Pattern[str], str]]) -> str | None:
    return next((category for pattern, category in rules if pattern.search(name)), None)


def read_chrome_trace(path: Path) -> list[Span]:
    """The complete events ("X") of a Chrome trace (JSON object or array; gzipped or not)."""
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e:
            args = e["args"] if isinstance(e.get("args"), dict) else {}
            out.append(Span(str(e.get("name", "")), float(e["ts"]), float(e.get("dur", 0.0)), (e.get("pid"), e.get("tid")),
                            str(args.get("hlo_module", "")), str(args.get("hlo_op", "")),
                            call="tf_function_call" in args))
    return out


def attribute(spans: Iterable[Span], rules: Rules, containers: str = "",
              window: tuple[float, float] | None = None, backward: str = "") -> Breakdown:
    """Self time of every span to its category (module docstring); spans whose name matches
    `containers` wrap work and count nowhere themselves; `window` (start, end in the trace's
    microseconds) limits the spans counted and sets the window the gaps are measured in
    (default: first start to last end); a span whose name matches `backward`, or inside one, or
    marked by refine, is the backward pass's (Breakdown.backward)."""
    compiled = compile_rules(rules)
    wrapper = re.compile(containers) if containers else None
    backward_re = re.compile(backward) if backward else None
    made = [s for s in spans if s.dur_us > 0]
    if window is not None:
        made = [s for s in made if s.start_us >= window[0] and s.start_us + s.dur_us <= window[1]]
    out = Breakdown()
    if not made:
        return out
    start = window[0] if window else min(s.start_us for s in made)
    end = window[1] if window else max(s.start_us + s.dur_us for s in made)
    out.window_s = (end - start) / 1e6
    by_track: dict[tuple[Any, Any], list[Span]] = {}
    for s in made:
        by_track.setdefault(s.track, []).append(s)
    for track in by_track.values():
        _attribute_track(track, compiled, wrapper, out, backward_re)
    work = [s for s in made if not (s.call or (wrapper and wrapper.search(s.name)))]
    out.add(HOST, max(out.window_s - _union_s(work), 0.0))
    return out


def _attribute_track(spans: list[Span], rules: list[tuple[re.Pattern[str], str]],
                     wrapper: re.Pattern[str] | None, out: Breakdown,
                     backward: re.Pattern[str] | None = None) -> None:
    """Self times on one thread, each to its own or its nearest categorised ancestor's
    category (a STICKY ancestor's first). Spans sorted by start (longest first on ties) nest
    as a stack; a container's own time is dropped."""
    spans = sorted(spans, key=lambda s: (s.start_us, -s.dur_us))
    stack: list[tuple[Span, str | None, list[float], bool]] = []  # span, category, [children's time], backward

    def close(upto: float) -> None:
        while stack and stack[-1][0].start_us + stack[-1][0].dur_us <= upto:
            _settle(*stack.pop(), out)

    for s in spans:
        close(s.start_us)
        parent_category = stack[-1][1] if stack else None
        in_backward = s.backward or (stack[-1][3] if stack else False) or bool(backward and backward.search(s.name))
        if stack:
            stack[-1][2][0] += s.dur_us
        if s.call or (wrapper is not None and wrapper.search(s.name)):
            stack.append((s, parent_category, [float("inf")], in_backward))  # no self time
            continue
        own = None if parent_category in STICKY else (s.category or category_of(s.name, rules))
        stack.append((s, own or parent_category, [0.0], in_backward))
    close(float("inf"))


def _settle(span: Span, category: str | None, children: list[float], in_backward: bool, out: Breakdown) -> None:
    self_s = max(span.dur_us - children[0], 0.0) / 1e6
    if self_s == 0.0:
        return
    if in_backward:
        key = category or OTHER
        out.backward[key] = out.backward.get(key, 0.0) + self_s
    if category is None:
        out.add(OTHER, self_s)
        out.other_names[span.name] = out.other_names.get(span.name, 0.0) + self_s
    else:
        out.add(category, self_s)


def _union_s(spans: list[Span]) -> float:
    """Seconds covered by at least one span (any thread)."""
    total, end = 0.0, float("-inf")
    for s in sorted(spans, key=lambda s: s.start_us):
        stop = s.start_us + s.dur_us
        if stop > end:
            total += stop - max(s.start_us, end)
            end = stop
    return total / 1e6


def profiler_module(backend_module: str) -> ModuleType | None:
    """The `profile` module of the package that defines a backend (`dlbench.backends.torch`
    -> `dlbench.backends.torch.profile`), or None where the framework has none."""
    package = backend_module.rsplit(".", 1)[0] if backend_module.count(".") > 2 else backend_module
    try:
        return importlib.import_module(f"{package}.profile")
    except ModuleNotFoundError as e:
        if e.name != f"{package}.profile":
            raise
        return None
