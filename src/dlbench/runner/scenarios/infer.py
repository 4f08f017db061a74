"""The inference scenario (`--scenario infer`), run by the worker process (runner/worker.py).

The trial's own forward in inference mode (Program.infer_fn: torch.compile of the eval model
under torch.inference_mode, a jitted apply, tf.function, ONNX Runtime's session; never a
predict() loop) on the canonical parameters, timed two ways:

- latency: one batch-1 request at a time, until `InferOptions.infer_requests` (default 1000)
  are timed or `InferOptions.infer_budget_s` (default 20 s) is spent, whichever comes first; p50, p90
  and p99 as order statistics, and the p99's distribution-free confidence interval
  (analysis.stats.quantile_ci) at its actual level;
- throughput: the workload spec's batch size back to back, each call synced, until
  protocol.INFER_BATCHES batches are timed or the same budget is spent, whichever comes first.

A request: a device input already in place (Program.infer_input, outside the timing) ->
infer_fn -> the logits on the host, then Backend.sync on them. Fetching the logits is part of a
request (a server returns them, and ONNX Runtime always does), and it is each framework's sync.

Before timing, every timed batch size is warmed up (its first call compiles, reported as
first_request_s and first_batch_s), then the parity phase runs the canonical fixed batch through
both timed paths; the parent compares those logits with the float64 reference's eval logits
(analysis.parity.compare_infer_logits). Nothing here imports a framework.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from dlbench import workloads
from dlbench.analysis import stats
from dlbench.backends import support
from dlbench.backends.base import Backend, Servable
from dlbench.monitors.memory import MemorySampler
from dlbench.results.records import TrialResult
from dlbench.runner import protocol
from dlbench.runner.scenarios import profiled, served
from dlbench.runner.context import TrialContext, allocator_metrics, record_options
from dlbench.runner.timing import Phases
from dlbench.spec import PARITY_BATCH, InferOptions, TrialSpec

# Large-batch calls timed for throughput (fewer when the budget runs out first).
# Warm-up calls per batch size after its first (compiling) call: batch 1, then the large batch.
WARMUP_REQUESTS = 10
WARMUP_BATCHES = 3
# Distinct inputs the timed loops cycle through: held-out samples, converted before timing.
REQUEST_POOL = 64
BATCH_POOL = 4
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}

Metrics = dict[str, float | None]


def run(ctx: TrialContext) -> None:
    """Every phase of an inference trial after the framework import; fills `result` as it goes,
    so that a failure keeps every metric measured before it."""
    trial, backend, phases, sampler, result = ctx.trial, ctx.backend, ctx.phases, ctx.sampler, ctx.result
    created, parity_file, m = ctx.created, ctx.parity_file, ctx.metrics
    profiled.prepare(ctx)
    program, forward = build_forward(ctx, support.build_servable)
    result.numerics = program.numerics()
    result.policy_effective["precision"] = {"precision": trial.precision, **program.precision()}
    record_options(ctx, program)
    # After build, a backend can report what building did (ONNX Runtime: the export cache).
    result.framework_info = backend.info()
    requests, batches = _inputs(ctx, program)
    _warmup(backend, forward, requests, batches, phases, sampler, created, m)
    not_judged = program.precision().get("parity_not_judged")
    if isinstance(not_judged, str):  # a quantised model: judged by its accuracy change instead
        result.notes["parity_not_judged"] = not_judged
    else:
        _parity(ctx, program, forward)
    served.accuracy(trial, ctx.workload, program, forward, result)
    compiles = program.compilations()
    sampler.begin_window()
    with profiled.window(ctx, parity_file):  # a profiled trial's calls under the profiler
        if trial.options_of(InferOptions).infer_load == "loop":
            latency_s, batch_s = _loop(ctx, forward, requests, batches)
        else:
            latency_s, batch_s = served.standard(ctx, program, forward, requests, protocol.INFER_BATCHES)
        if trial.profile:
            m[profiled.CALLS_METRIC] = float(len(latency_s) + len(batch_s))
    window = sampler.end_window()
    m["recompiles_in_window"] = program.compilations() - compiles
    m["rss_window_peak_bytes"], m["vram_window_peak_bytes"] = window["rss"], window["vram"]
    infer_metrics(trial, ctx.workload, result, latency_s, batch_s)
    served.loadgen_metrics(ctx)
    postprocess_metrics(trial, forward, requests, batches, m)
    allocator_metrics(ctx)


def _loop(ctx: TrialContext, forward: Callable[[Any], Any], requests: list[Any],
          batches: list[Any]) -> tuple[list[float], list[float]]:
    """The hand-written loops (`--load loop`): batch-1 requests, then large batches."""
    options, phases, m = ctx.trial.options_of(InferOptions), ctx.phases, ctx.metrics
    t = phases.start("latency")
    latency_s = timed_calls(ctx.backend.sync, forward, requests, options.infer_requests, options.infer_budget_s)
    m["infer_latency_window_s"] = phases.end("latency", t)
    t = phases.start("throughput")
    batch_s = timed_calls(ctx.backend.sync, forward, batches, protocol.INFER_BATCHES, options.infer_budget_s)
    m["infer_throughput_window_s"] = phases.end("throughput", t)
    return latency_s, batch_s


S = TypeVar("S", bound=Servable)


def build_forward(ctx: TrialContext, build: Callable[[TrialSpec, Backend], S]) -> tuple[S, Callable[[Any], Any]]:
    """The Program, its state from the canonical parameters and its inference function (an
    ONNX export or a cached one is loaded here): build_s."""
    t = ctx.phases.start("build")
    program = build(ctx.trial, ctx.backend)
    state = support.init(ctx.trial, ctx.workload, program)
    forward = program.infer_fn(state)
    ctx.metrics["build_s"] = ctx.phases.end("build", t)
    return program, forward


def _inputs(ctx: TrialContext, program: Servable) -> tuple[list[Any], list[Any]]:
    """Device inputs from the held-out split: REQUEST_POOL single samples and BATCH_POOL
    batches of the spec's batch size (rows cycle where the split is smaller): data_s."""
    spec, phases = ctx.trial.workload, ctx.phases
    t = phases.start("data")
    data = ctx.workload.make_eval_dataset(spec)
    requests = [program.infer_input(data.x[i : i + 1]) for i in range(min(REQUEST_POOL, len(data)))]
    rows = np.arange(BATCH_POOL * spec.batch_size).reshape(BATCH_POOL, spec.batch_size) % len(data)
    batches = [program.infer_input(data.x[r]) for r in rows]
    ctx.metrics["data_s"] = phases.end("data", t)
    return requests, batches


def _warmup(
    backend: Backend, forward: Callable[[Any], Any], requests: list[Any], batches: list[Any],
    phases: Phases, sampler: MemorySampler, created: float, m: Metrics,
) -> None:
    """The first request (its compile included), the first large batch (its own compile), and
    warm-up calls of both sizes: nothing timed afterwards compiles."""
    m["rss_initial_bytes"], m["vram_initial_bytes"] = sampler.sample()
    t = phases.start("first_request")
    backend.sync(forward(requests[0]))
    m["first_request_s"] = phases.end("first_request", t)
    m["time_to_first_request_s"] = time.monotonic() - created
    t = phases.start("first_batch")
    backend.sync(forward(batches[0]))
    m["first_batch_s"] = phases.end("first_batch", t)
    t = phases.start("warmup")
    for i in range(WARMUP_REQUESTS):
        backend.sync(forward(requests[i % len(requests)]))
    for i in range(WARMUP_BATCHES):
        backend.sync(forward(batches[i % len(batches)]))
    m["warmup_s"] = phases.end("warmup", t)


def _parity(ctx: TrialContext, program: Servable, forward: Callable[[Any], Any]) -> None:
    """The canonical fixed batch through both timed paths, after the warm-up (no new shape,
    nothing compiles): one request per sample, and the fixed batch cycled to the large batch
    size. The parent judges the logits against the float64 reference."""
    spec = ctx.trial.workload
    t = ctx.phases.start("parity")
    x = ctx.workload.fixed_batch(spec, PARITY_BATCH).x
    single = np.concatenate([np.asarray(forward(program.infer_input(x[i : i + 1]))) for i in range(len(x))])
    rows = np.arange(spec.batch_size) % len(x)
    large = np.asarray(forward(program.infer_input(x[rows])))
    protocol.save_logits(ctx.parity_file, {"batch 1": single, f"batch {spec.batch_size}": large})
    ctx.metrics["parity_s"] = ctx.phases.end("parity", t)


def timed_calls(
    sync: Callable[..., None], forward: Callable[[Any], Any], inputs: list[Any], count: int, budget_s: float
) -> list[float]:
    """Seconds of each call, one at a time, each synced: `count` calls, or fewer when
    `budget_s` is spent first (checked after each call, so at least one). Inputs cycle."""
    out: list[float] = []
    deadline = time.perf_counter() + budget_s
    for i in range(count):
        x = inputs[i % len(inputs)]
        t0 = time.perf_counter()
        sync(forward(x))
        t1 = time.perf_counter()
        out.append(t1 - t0)
        if t1 >= deadline:
            break
    return out


def infer_metrics(trial: TrialSpec, workload: ModuleType, result: TrialResult, latency_s: list[float],
                  batch_s: list[float]) -> None:
    """Latency quantiles with the p99's CI, throughput, FLOPs (of `workload`, the trial's
    workload module), raw series and warnings."""
    m = result.metrics
    spec, options = trial.workload, trial.options_of(InferOptions)
    for name, q in QUANTILES.items():
        m[f"latency_{name}_s"] = stats.quantile(latency_s, q)
    lo, hi, level = stats.quantile_ci(latency_s, QUANTILES["p99"])
    m["latency_p99_ci_low_s"], m["latency_p99_ci_high_s"], m["latency_p99_ci_level"] = lo, hi, level
    m["latency_mean_s"] = statistics.fmean(latency_s)
    m["infer_requests"] = len(latency_s)
    m["infer_batches"] = len(batch_s)
    m["infer_batch_size"] = spec.batch_size
    flops = workload.flops_per_sample(spec, train=False)
    m["flops_per_sample"] = flops
    if batch_s:  # none under --load server (its throughput is the Server test's)
        m["infer_batch_median_s"] = statistics.median(batch_s)
        m["infer_samples_per_s"] = spec.batch_size * len(batch_s) / sum(batch_s)
        # A few stalls (a 70 ms page fault among 0.1 ms calls) move the total-time rate, not the
        # median call's: both are kept, and a disagreement is said.
        m["infer_samples_per_s_median"] = spec.batch_size / statistics.median(batch_s)
        _throughput_warnings(result, latency_s, batch_s, spec.batch_size)
        m["achieved_flops_per_s"] = flops * m["infer_samples_per_s"]
    first = m.get("first_request_s")
    if first is not None:
        m["compile_estimate_s"] = max(first - stats.quantile(latency_s, QUANTILES["p50"]), 0.0)
    result.series["latency_s"] = [(float(i), s) for i, s in enumerate(latency_s)]
    result.series["infer_batch_s"] = [(float(i), s) for i, s in enumerate(batch_s)]
    if len(latency_s) < options.infer_requests:
        result.warnings.append(
            f"latency: the {options.infer_budget_s:g} s budget ran out after {len(latency_s)} of"
            f" {options.infer_requests} requests (p99 CI level {level:.0%})")
    if batch_s and len(batch_s) < protocol.INFER_BATCHES:
        result.warnings.append(
            f"throughput: the {options.infer_budget_s:g} s budget ran out after {len(batch_s)} of"
            f" {protocol.INFER_BATCHES} batches")
    recompiles = m.get("recompiles_in_window")
    if recompiles:
        result.warnings.append(
            f"recompiled {recompiles:g} time(s) inside the timed loops: latencies include compiles")


def postprocess_metrics(trial: TrialSpec, forward: Callable[[Any], Any], requests: list[Any], batches: list[Any],
                        m: Metrics) -> None:
    """A workload with a post-processing step (workloads.postprocess: detect's decoding and NMS,
    in neutral NumPy) has it timed apart, after the timed windows, on this trial's own outputs:
    each request's output of the pool and each large batch's, one timed call each; medians as
    `postprocess_p50_s` (batch 1) and `postprocess_batch_median_s`. The network's latency above
    never includes it, so the framework comparison stays the network's."""
    post = workloads.postprocess(trial.workload.name)
    if post is None:
        return
    spec = trial.workload
    for key, inputs in (("postprocess_p50_s", requests), ("postprocess_batch_median_s", batches)):
        seconds = []
        for x in inputs:
            out = np.asarray(forward(x))
            t0 = time.perf_counter()
            post(spec, out)
            seconds.append(time.perf_counter() - t0)
        m[key] = statistics.median(seconds)


# The total-time rate below this share of the median call's is flagged: stalls, not throughput.
STALL_SHARE = 0.8


def _throughput_warnings(result: TrialResult, latency_s: list[float], batch_s: list[float], batch: int) -> None:
    """Say when stalls dominate the throughput, and when a large batch is slower per sample than
    batch-1 requests (the measurement, not batching, is then suspect)."""
    m = result.metrics
    total, median = m["infer_samples_per_s"], m["infer_samples_per_s_median"]
    if total is not None and median and total < STALL_SHARE * median:
        result.warnings.append(
            f"throughput: {total:.1f} samples/s over the total time but {median:.1f} at the median call:"
            f" a few slow calls (the slowest {max(batch_s) * 1e3:.1f} ms, the median"
            f" {statistics.median(batch_s) * 1e3:.3f} ms) dominate the total")
    single = 1.0 / statistics.median(latency_s) if latency_s else None
    if median and single and batch > 1 and median < single:
        result.warnings.append(
            f"throughput: batch {batch} runs {median:.1f} samples/s at the median call, below batch-1's"
            f" {single:.1f}: batching does not pay here, or the machine was busy")
