"""The profiled trial's extra: the timed window under the framework's own profiler, then the
trace's time in the shared categories (backends/profiling.py) as metrics per step.

The trial runs exactly like a timed one; only the window is profiled. Its numbers are its own
configuration's (TrialSpec.profile is part of the key) and never enter the timed trials'
statistics: a profiler perturbs what it measures (docs/methodology.md, profiled trials). The
worker writes the trace beside its result; the parent moves it next to the store
(runner/executor.py: keep_profile) and records the path in the trial's notes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from dlbench.analysis.categories import BYTES_METRIC, FLOPS_METRIC, INTENSITY_METRIC
from dlbench.backends import profiling
from dlbench.runner.context import TrialContext
from dlbench.runner.protocol import TRACE_NOTE, trace_dir_for

OTHER_NOTE = "profile_other_top"
CAVEAT_NOTE = "profile_caveat"
WINDOW_METRIC = "profile_window_s_per_step"
UNMAPPED_METRIC = "profile_unmapped_share"
PROFILED_STEP_METRIC = "profile_step_s_median"
# An inference trial's profiled calls (batch-1 requests and large batches together): its
# categories are per call.
CALLS_METRIC = "profile_calls"


def _module(ctx: TrialContext) -> ModuleType | None:
    module = profiling.profiler_module(type(ctx.backend).__module__) if ctx.trial.profile else None
    delegate = getattr(module, "delegate", None)  # Keras: the framework underneath profiles
    return delegate() if delegate is not None else module


def prepare(ctx: TrialContext) -> None:
    """The backend's preparation before the build (torch: Inductor names its kernels)."""
    prepare_backend = getattr(_module(ctx), "prepare", None)  # optional in a profile module
    if prepare_backend is not None:
        prepare_backend()


@contextlib.contextmanager
def window(ctx: TrialContext, result_path: Path) -> Iterator[None]:
    """Around the timed window of a profiled trial: the profiler on, then the breakdown."""
    if not ctx.trial.profile:
        yield
        return
    module = _module(ctx)
    if module is None:
        ctx.result.notes[TRACE_NOTE] = f"no profiler for {ctx.trial.framework} in dlbench"
        yield
        return
    trace_dir = trace_dir_for(result_path)
    trace_dir.mkdir(parents=True, exist_ok=True)
    stop = module.start(trace_dir)
    try:
        yield
    finally:
        path = stop()
    ctx.result.notes[TRACE_NOTE] = str(path)
    caveat = getattr(module, "CAVEAT", None)
    if caveat:
        ctx.result.notes[CAVEAT_NOTE] = caveat
    spans = profiling.read_chrome_trace(path)
    refine = getattr(module, "refine", None)  # optional in a profile module
    spans = refine(spans) if refine is not None else spans
    record(ctx, profiling.attribute(spans, module.RULES, module.CONTAINERS, backward=getattr(module, "BACKWARD", "")))
    program_metrics = getattr(module, "program_metrics", None)
    if program_metrics is not None:
        ctx.metrics.update(program_metrics(spans))
        ctx.result.units.update({FLOPS_METRIC: "flop", BYTES_METRIC: "B", INTENSITY_METRIC: "flop/B"})


def record(ctx: TrialContext, found: profiling.Breakdown) -> None:
    """Seconds per step of each category; the input pipeline from the loop's own measured wait
    where the trace names none (the wait is then taken out of the gaps, which held it)."""
    m = ctx.metrics
    steps = float(m.get("timed_steps") or m.get(CALLS_METRIC) or 1)  # train: steps; infer: calls
    wait = (m.get("input_wait_per_step_s") or 0.0) * steps
    if found.seconds.get(profiling.INPUT, 0.0) == 0.0 and wait > 0:
        moved = min(wait, found.seconds.get(profiling.HOST, 0.0))
        found.add(profiling.HOST, -moved)
        found.add(profiling.INPUT, moved)
    for category in profiling.CATEGORIES:
        m[profiling.metric_name(category)] = found.seconds.get(category, 0.0) / steps
    for category, seconds in found.backward.items():  # where the trace tells the backward pass apart
        m[profiling.backward_metric_name(category)] = seconds / steps
        ctx.result.units[profiling.backward_metric_name(category)] = "s"
    m[WINDOW_METRIC] = found.window_s / steps
    total = found.total_s()
    m[UNMAPPED_METRIC] = found.seconds.get(profiling.OTHER, 0.0) / total if total else None
    m[PROFILED_STEP_METRIC] = m.get("step_s_median")
    ctx.result.units.update({profiling.metric_name(c): "s" for c in profiling.CATEGORIES})
    ctx.result.units.update({WINDOW_METRIC: "s", PROFILED_STEP_METRIC: "s", UNMAPPED_METRIC: "1"})
    ctx.result.notes[OTHER_NOTE] = json.dumps([[n, s / steps] for n, s in found.top_other()])
