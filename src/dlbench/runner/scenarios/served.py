"""The inference scenario's load under MLPerf LoadGen (runner/scenarios/loadgen.py), run by
runner/scenarios/infer.py after its warm-up and parity phases, inside the timed window:

- `--load standard` (the default): SingleStream, whose per-request latencies become the
  scenario's latency metrics (latency_p50_s, latency_p90_s, latency_p99_s: order statistics of
  LoadGen's own latencies, issue to completion), with LoadGen's early-stopping estimates; then
  Offline, whose samples per second become infer_samples_per_s (the batches' own forward times
  stay the chunk series, infer_batch_s).
- `--load server`: SingleStream as above, then LoadGen's Server at `--qps` (one test), or a
  sweep from half the batch-1 capacity (1 / p50), up or down by a factor of 4 until LoadGen's
  verdict changes, then bisection, for the highest QPS that LoadGen calls VALID against
  `--p99-bound-ms`.

The settings of every test go into the trial's policy (`loadgen`), each test's summary into its
notes. Also here: the held-out accuracy of the served model (every inference trial), and its
change against the float32 model where the program serves a quantised one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from dlbench.backends.base import Servable, Unsupported
from dlbench.runner.scenarios import loadgen
from dlbench.runner.context import TrialContext
from dlbench.spec import InferOptions, TrialSpec

# Host rows LoadGen's Offline samples are drawn from (the held-out split, cycled where smaller).
OFFLINE_POOL = 1024
# Server sweep: the first target as a share of the batch-1 capacity (1 / SingleStream p50: the
# serving thread's handoffs make the real one lower), up or down by SWEEP_FACTOR at most
# SWEEP_PROBES times, then SWEEP_STEPS bisection steps; each sweep test's minimum duration (its
# query count usually decides), the whole budget for a single --qps test.
SWEEP_START = 0.5
SWEEP_FACTOR = 4.0
SWEEP_PROBES = 3
SWEEP_STEPS = 4
SERVER_MIN_RUN_S = 0.25
# LoadGen's early stopping needs about 1,000 queries, none over the bound, before it calls a p99
# VALID (its summary: "would need to run at least N more queries").
SERVER_MIN_QUERIES = 1100


def standard(ctx: TrialContext, program: Servable, forward: Callable[[Any], Any], requests: list[Any],
             max_batches: int) -> tuple[list[float], list[float]]:
    """SingleStream, then Offline (or Server under `--load server`): the per-request latencies and
    the Offline batches' forward seconds."""
    trial, phases, m, result = ctx.trial, ctx.phases, ctx.metrics, ctx.result
    options, sync = trial.options_of(InferOptions), ctx.backend.sync
    why = loadgen.missing()
    if why is not None:
        raise Unsupported(why)
    recorded: dict[str, Any] = {"version": loadgen.version(), "mode": "PerformanceOnly"}
    result.policy_effective["loadgen"] = recorded
    t = phases.start("latency")
    ss = loadgen.single_stream(forward, sync, requests, options.infer_requests, options.infer_budget_s)
    m["infer_latency_window_s"] = phases.end("latency", t)
    recorded["single_stream"] = ss.settings
    _keep(result, ss, "single_stream")
    for pct, seconds in ss.early_stopping_s.items():
        m[f"latency_{pct}_early_stopping_s"] = seconds
    if not ss.latencies_s:
        raise RuntimeError(f"LoadGen's SingleStream test recorded no query: {ss.results.get('result_validity')}")
    if options.infer_load == "server":
        _server(ctx, options, forward, requests, ss, recorded)
        return ss.latencies_s, []
    batch = trial.workload.batch_size
    capacity = 1.0 / statistics.median(ss.latencies_s)  # batch-1 requests per second: a lower bound
    samples = min(max_batches * batch, max(batch, int(options.infer_budget_s * capacity) // batch * batch))
    data = ctx.workload.make_eval_dataset(trial.workload)
    rows = data.x[np.arange(min(OFFLINE_POOL, max(len(data), batch))) % len(data)]
    batch_s: list[float] = []

    def timed(x: Any) -> Any:
        t0 = time.perf_counter()
        out = forward(x)
        sync(out)
        batch_s.append(time.perf_counter() - t0)
        return out

    t = phases.start("throughput")
    off = loadgen.offline(timed, lambda *_: None, program.infer_input, rows, batch, samples, options.infer_budget_s)
    m["infer_throughput_window_s"] = phases.end("throughput", t)
    recorded["offline"] = off.settings
    _keep(result, off, "offline")
    m["loadgen_offline_samples_per_s"] = number(off.results.get("result_samples_per_second"))
    return ss.latencies_s, batch_s


def _server(ctx: TrialContext, options: InferOptions, forward: Callable[[Any], Any], requests: list[Any],
            ss: loadgen.LoadgenRun, recorded: dict[str, Any]) -> None:
    """One Server test at --qps, or the sweep from the batch-1 capacity (run_server)."""
    bound_s = float(options.p99_bound_ms or 0.0) * 1e-3
    per_run_s = options.infer_budget_s if options.server_qps else SERVER_MIN_RUN_S

    def run_at(qps: float) -> loadgen.LoadgenRun:
        return loadgen.server(forward, ctx.backend.sync, requests, qps, bound_s, per_run_s, SERVER_MIN_QUERIES)

    ctx.metrics["server_p99_bound_s"] = bound_s
    latencies = {"server_latency_p99_s": lambda r: r.latency_s("99.00"),
                 "server_latency_p50_s": lambda r: r.latency_s("50.00")}
    run_server(ctx, run_at, Capacity(1.0 / statistics.median(ss.latencies_s), "1 / SingleStream p50"),
               options.server_qps, options.infer_budget_s, recorded, latencies,
               ("infer_server_window_s", f"the p99 bound of {bound_s * 1e3:g} ms"))


@dataclass(frozen=True)
class Capacity:
    """Queries per second the system under test can answer, estimated before the Server tests
    (where a sweep starts), and how."""

    qps: float
    how: str


def run_server(ctx: TrialContext, run_at: Callable[[float], loadgen.LoadgenRun], capacity: Capacity,
               qps: float | None, budget_s: float, recorded: dict[str, Any],
               latencies: dict[str, Callable[[loadgen.LoadgenRun], float | None]],
               names: tuple[str, str]) -> loadgen.Sweep:
    """LoadGen's Server at `qps`, or the sweep (loadgen.server_sweep from SWEEP_START x the
    capacity, never below the rate at which the minimum query count would outlast `budget_s`),
    as a phase whose seconds are metric names[0]; every test's settings into `recorded`. The
    metrics of the highest VALID test (the last test where none was): target and achieved QPS,
    the verdict, and `latencies` (name -> its value of a test); every test as series of those
    over the target QPS. A warning where no test met names[1], the bounds."""
    m, result = ctx.metrics, ctx.result
    t = ctx.phases.start("server")
    if qps is not None:
        only = run_at(float(qps))
        sweep = loadgen.Sweep([only], only if only.valid else None)
    else:
        floor = SERVER_MIN_QUERIES / budget_s
        sweep = loadgen.server_sweep(run_at, SWEEP_START * capacity.qps, SWEEP_STEPS, SWEEP_FACTOR, SWEEP_PROBES, floor)
        recorded["server_sweep"] = {"start_qps": SWEEP_START * capacity.qps, "capacity": capacity.how,
                                    "factor": SWEEP_FACTOR, "probes": SWEEP_PROBES, "steps": SWEEP_STEPS,
                                    "floor_qps": floor}
    m[names[0]] = ctx.phases.end("server", t)
    recorded["server"] = [r.settings for r in sweep.runs]
    shown = sweep.best or sweep.runs[-1]
    _keep(result, shown, "server")
    per_test = {**latencies, "server_achieved_qps": _achieved, "server_valid": lambda r: 1.0 if r.valid else 0.0}
    m.update({name: value(shown) for name, value in per_test.items()})
    m["server_target_qps"] = shown.settings["server_target_qps"]
    m["server_max_qps"] = sweep.best.settings["server_target_qps"] if sweep.best is not None else None
    m["server_tests"] = len(sweep.runs)
    ordered = sorted(sweep.runs, key=lambda r: float(r.settings["server_target_qps"]))
    for name, value in per_test.items():
        result.series[name] = [(float(r.settings["server_target_qps"]), v) for r in ordered
                               if (v := value(r)) is not None]
    if sweep.best is None:
        result.warnings.append(f"server: no target QPS met {names[1]} (LoadGen: {shown.results.get('result_validity')})")
    return sweep


def _achieved(run: loadgen.LoadgenRun) -> float | None:
    return number(run.results.get("result_completed_samples_per_sec", run.results.get("result_scheduled_samples_per_sec")))


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _keep(result: Any, run: loadgen.LoadgenRun, name: str) -> None:
    """LoadGen's summary with the trial, and its verdict."""
    result.notes[f"loadgen_{name}_summary"] = run.summary
    result.metrics[f"loadgen_{name}_valid"] = 1.0 if run.valid else 0.0


def loadgen_metrics(ctx: TrialContext) -> None:
    """After the shared metrics: throughput from LoadGen's Offline test where it ran."""
    m = ctx.metrics
    rate = m.get("loadgen_offline_samples_per_s")
    if rate is None:
        return
    m["infer_samples_per_s"] = rate
    if m.get("flops_per_sample") is not None:
        m["achieved_flops_per_s"] = float(m["flops_per_sample"] or 0.0) * rate


def accuracy(trial: TrialSpec, workload: ModuleType, program: Servable, forward: Callable[[Any], Any],
             result: Any) -> None:
    """Held-out quality of the model as served, in batches of the spec's batch size (the last
    padded). A classifier: infer_accuracy; a program serving a quantised model names its float32
    model's accuracy (precision()["fp32_accuracy"]), and the change is reported
    (infer_accuracy_change). Any other workload: its own `score` (its QUALITY) of the served
    outputs as `infer_<QUALITY>` (detect: infer_map, mAP@0.5 after its NumPy post-processing).
    `workload`: the trial's workload module."""
    spec = trial.workload
    quality = getattr(workload, "QUALITY", "accuracy")
    data = workload.make_eval_dataset(spec)
    m = result.metrics

    def served(x: np.ndarray) -> np.ndarray:
        return np.asarray(forward(program.infer_input(x)))

    if quality != "accuracy":  # not a classifier (detect: mAP of the post-processed outputs)
        m[f"infer_{quality}"] = float(workload.score(spec, outputs_of(served, data.x, spec.batch_size), data))
        return
    m["infer_accuracy"] = accuracy_of(served, data.x, data.y, spec.batch_size)
    fp32 = program.precision().get("fp32_accuracy")
    if isinstance(fp32, float):
        m["infer_accuracy_fp32"] = fp32
        m["infer_accuracy_change"] = m["infer_accuracy"] - fp32
        agreement = program.precision().get("fp32_top1_agreement")
        m["infer_top1_agreement_fp32"] = agreement if isinstance(agreement, float) else None


def accuracy_of(logits_of: Callable[[np.ndarray], np.ndarray], x: np.ndarray, y: np.ndarray, batch: int) -> float:
    """Share of samples whose top logit is the label; fixed-size batches, the last padded."""
    return float(np.mean(predictions(logits_of, x, batch) == y))


def predictions(logits_of: Callable[[np.ndarray], np.ndarray], x: np.ndarray, batch: int) -> np.ndarray:
    return np.argmax(outputs_of(logits_of, x, batch), axis=-1)


def outputs_of(outputs: Callable[[np.ndarray], np.ndarray], x: np.ndarray, batch: int) -> np.ndarray:
    """The served outputs of every row of `x`, in order: fixed-size batches, the last padded
    (with rows from its start) and cut back."""
    out = []
    for start in range(0, len(x), batch):
        rows = np.resize(np.arange(start, min(start + batch, len(x))), batch)
        out.append(outputs(x[rows])[: min(batch, len(x) - start)])
    return np.concatenate(out)
