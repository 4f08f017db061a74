"""MLPerf LoadGen (the `mlcommons-loadgen` package, imported here only when a test runs) driving
the inference scenario's timed load: SingleStream, Offline and Server, each one LoadGen test
with a system under test (SUT) built from the trial's forward function.

- SingleStream: one batch-1 request at a time, the next issued when the last completes (LoadGen's
  issue thread is the caller's: the framework runs on the thread that warmed it up). Inputs are
  the pool of device inputs converted before timing (the query sample library's "loaded" set).
  Per-request latencies come from LoadGen's trace (issue to QuerySamplesComplete).
- Offline: every sample in one query; the SUT runs them in batches of the spec's batch size, each
  batch gathered from the host rows LoadGen asked for and converted to a device input inside the
  timing (a server assembles its batches too); a last partial batch is padded to the batch size
  (a ragged batch would compile again) and only its real samples are answered.
- Server: Poisson arrivals at a target QPS from LoadGen's issue thread; the SUT queues them and
  one serving thread answers each as a batch-1 request, so a latency includes the queueing.
  LoadGen's verdict (VALID/INVALID) holds its p99 against the stated bound.
- Server with token latencies (`token_server`, the generate scenario): the same arrivals and
  queue; the serving thread takes what is queued, up to a static batch, generates for it, reports
  each query's first token (LoadGen's FirstTokenComplete) when it is fetched and its completion
  with the number of tokens; LoadGen's verdict holds the TTFT p99 and the TPOT p99 (per query:
  (completion - first token) / (tokens - 1)) against their bounds.

Settings are a plain dict (recorded in the trial's policy); the results are the detail log's
`result_*` values, the early-stopping estimates from the summary, and the summary text.
"""

from __future__ import annotations

import json
import queue
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

Forward = Callable[[Any], Any]
# LoadGen's seeds (its defaults); recorded with the settings.
SEEDS = {"qsl_rng_seed": 0, "sample_index_rng_seed": 0, "schedule_rng_seed": 0}
_SAMPLE = re.compile(r'"name":"Sample","cat":"default","ph":"b".*?"sample_seq":(\d+).*?"issue_start_ns":(\d+),'
                     r'"complete_ns":(\d+)')
_EARLY = re.compile(r"Early stopping (\d+(?:\.\d+)?)th percentile estimate: (\d+)")


@dataclass
class LoadgenRun:
    """One LoadGen test: the settings it ran with, its detail-log results, the early-stopping
    estimates (percentile -> seconds), the summary text and, where traced, each sample's
    latency in seconds in issue order."""

    scenario: str
    settings: dict[str, Any]
    results: dict[str, Any] = field(default_factory=dict)
    early_stopping_s: dict[str, float] = field(default_factory=dict)
    summary: str = ""
    latencies_s: list[float] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.results.get("result_validity") == "VALID"

    def latency_s(self, percentile: str) -> float | None:
        """LoadGen's own percentile latency ("50.00", "90.00", "99.00") in seconds."""
        return self._seconds(f"result_{percentile}_percentile_latency_ns")

    def ttft_s(self, percentile: str) -> float | None:
        """Under token latencies: LoadGen's percentile of the time to first token, seconds."""
        return self._seconds(f"result_first_token_{percentile}_percentile_latency_ns")

    def tpot_s(self, percentile: str) -> float | None:
        """Under token latencies: LoadGen's percentile of the time per output token, seconds."""
        return self._seconds(f"result_time_per_output_token_{percentile}_percentile_ns")

    def _seconds(self, key: str) -> float | None:
        ns = self.results.get(key)
        return float(ns) * 1e-9 if isinstance(ns, (int, float)) and not isinstance(ns, bool) else None


def missing() -> str | None:
    """Why LoadGen cannot run here, or None."""
    import importlib.util

    if importlib.util.find_spec("mlperf_loadgen") is None:
        return ("MLPerf LoadGen is not installed (pip install 'dlbench[loadgen]'); --load loop runs the"
                " hand-written request loop without it")
    return None


def version() -> str:
    import importlib.metadata

    return importlib.metadata.version("mlcommons-loadgen")


def single_stream(forward: Forward, sync: Callable[..., None], requests: list[Any], min_queries: int,
                  max_duration_s: float) -> LoadgenRun:
    """Batch-1 requests back to back: at least `min_queries`, unless `max_duration_s` ends the
    test first (LoadGen then calls the result INVALID: too few queries)."""
    settings = {"scenario": "SingleStream", "min_query_count": min_queries, "min_duration_ms": 0,
                "max_duration_ms": int(max_duration_s * 1e3), **SEEDS}

    def issue(lg: Any, samples: list[Any]) -> None:
        for s in samples:
            sync(forward(requests[s.index]))
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0)])

    return _run(settings, issue, len(requests), trace=True)


def offline(forward: Forward, sync: Callable[..., None], to_input: Callable[[np.ndarray], Any], rows: np.ndarray,
            batch_size: int, samples: int, max_duration_s: float) -> LoadgenRun:
    """`samples` held-out samples (rows of `rows`, host arrays) in one query, answered in batches
    of `batch_size`, each gathered and converted inside the timing, the last padded."""
    settings = {"scenario": "Offline", "min_query_count": samples, "min_duration_ms": 0,
                "max_duration_ms": int(max_duration_s * 1e3), "offline_expected_qps": 1.0, **SEEDS}

    def issue(lg: Any, query: list[Any]) -> None:
        for start in range(0, len(query), batch_size):
            chunk = query[start:start + batch_size]
            idx = np.fromiter((s.index for s in chunk), dtype=np.int64, count=len(chunk))
            if len(idx) < batch_size:
                idx = np.resize(idx, batch_size)
            sync(forward(to_input(rows[idx])))
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in chunk])

    return _run(settings, issue, len(rows), trace=False)


def server(forward: Forward, sync: Callable[..., None], requests: list[Any], target_qps: float,
           p99_bound_s: float, min_duration_s: float, min_queries: int) -> LoadgenRun:
    """Poisson arrivals at `target_qps` for at least `min_duration_s` and `min_queries`
    queries; VALID when the p99 latency meets `p99_bound_s` (LoadGen's early stopping
    included)."""
    settings = {"scenario": "Server", "server_target_qps": float(target_qps),
                "server_target_latency_ns": int(p99_bound_s * 1e9), "server_target_latency_percentile": 0.99,
                "min_query_count": min_queries, "min_duration_ms": int(min_duration_s * 1e3),
                "max_duration_ms": 0, **SEEDS}

    def answer(lg: Any, samples: list[Any]) -> None:
        for s in samples:
            sync(forward(requests[s.index]))
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0)])

    def release(lg: Any, samples: list[Any]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

    return _queued(settings, len(requests), 1, answer, release)


# generate(sample indices, first_token) -> tokens each sample got; calls first_token() once the
# first token of every sample is fetched.
Generate = Callable[[list[int], Callable[[], None]], int]


def token_server(generate: Generate, batch: int, pool: int, target_qps: float, ttft_bound_s: float,
                 tpot_bound_s: float, min_duration_s: float, min_queries: int) -> LoadgenRun:
    """Poisson arrivals at `target_qps` under LoadGen's token latencies: the serving thread takes
    the queued queries, up to `batch` at a time (a static batch: what is queued when it starts;
    nothing joins a generation under way), and `generate` runs them; VALID when the TTFT p99 and
    the TPOT p99 meet their bounds (LoadGen's early stopping included). Samples index a pool of
    `pool` prompts."""
    settings = {"scenario": "Server", "server_target_qps": float(target_qps), "use_token_latencies": True,
                "ttft_latency": int(ttft_bound_s * 1e9), "tpot_latency": int(tpot_bound_s * 1e9),
                "min_query_count": min_queries, "min_duration_ms": int(min_duration_s * 1e3),
                "max_duration_ms": 0, **SEEDS}

    def answer(lg: Any, samples: list[Any]) -> None:
        def first_token() -> None:
            lg.FirstTokenComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

        tokens = generate([s.index for s in samples], first_token)
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0, tokens) for s in samples])

    def release(lg: Any, samples: list[Any]) -> None:
        lg.FirstTokenComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0, 2) for s in samples])

    return _queued(settings, pool, batch, answer, release)


Answer = Callable[[Any, list[Any]], None]


def _queued(settings: dict[str, Any], pool: int, batch: int, answer: Answer, release: Answer) -> LoadgenRun:
    """A Server test whose SUT queues LoadGen's queries; one serving thread takes the first
    queued and whatever else is queued, up to `batch`, and `answer(lg, samples)` completes them.
    Once an answer raises, every query left is released unanswered (`release`), so that LoadGen
    ends its test instead of waiting for them, and the error is raised after it."""
    pending: queue.Queue[Any] = queue.Queue()
    lg_holder: list[Any] = []
    failed: list[BaseException] = []

    def serve() -> None:
        lg = lg_holder[0]
        while (first := pending.get()) is not None:
            samples = [first]
            while len(samples) < batch:
                try:
                    more = pending.get_nowait()
                except queue.Empty:
                    break
                if more is None:  # the end: answer these, then stop
                    pending.put(None)
                    break
                samples.append(more)
            try:
                (release if failed else answer)(lg, samples)
            except Exception as e:  # the framework failed: the trial's error, after LoadGen stops
                failed.append(e)
                release(lg, samples)

    def issue(lg: Any, samples: list[Any]) -> None:
        for s in samples:
            pending.put(s)

    def start(lg: Any) -> threading.Thread:
        lg_holder.append(lg)
        worker = threading.Thread(target=serve, name="dlbench-server", daemon=True)
        worker.start()
        return worker

    def stop(worker: threading.Thread) -> None:
        pending.put(None)
        worker.join()

    run = _run(settings, issue, pool, trace=False, around=(start, stop))
    if failed:
        raise RuntimeError(f"the system under test failed in LoadGen's Server test: {failed[0]}") from failed[0]
    return run


def _run(settings: dict[str, Any], issue: Callable[[Any, list[Any]], None], pool: int, trace: bool,
         around: tuple[Callable[[Any], Any], Callable[[Any], Any]] | None = None) -> LoadgenRun:
    """One LoadGen performance test with the settings; its logs in a temporary directory, read
    back and removed."""
    import mlperf_loadgen as lg

    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, settings["scenario"])
    ts.mode = lg.TestMode.PerformanceOnly
    for name, value in settings.items():
        if name != "scenario":
            setattr(ts, name, value)
    sut = lg.ConstructSUT(lambda samples: issue(lg, samples), lambda: None)
    qsl = lg.ConstructQSL(pool, pool, lambda _: None, lambda _: None)
    handle = around[0](lg) if around is not None else None
    with tempfile.TemporaryDirectory(prefix="dlbench-loadgen-") as tmp:
        log = lg.LogSettings()
        log.log_output.outdir = tmp
        log.log_output.copy_summary_to_stdout = False
        log.enable_trace = trace
        try:
            lg.StartTestWithLogSettings(sut, qsl, ts, log)
        finally:
            if around is not None:
                around[1](handle)
            lg.DestroyQSL(qsl)
            lg.DestroySUT(sut)
        run = LoadgenRun(settings["scenario"], settings)
        _read_logs(Path(tmp), run, trace)
    return run


def _read_logs(directory: Path, run: LoadgenRun, trace: bool) -> None:
    for line in (directory / "mlperf_log_detail.txt").read_text().splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            entry = json.loads(line[len(":::MLLOG "):])
        except json.JSONDecodeError:  # LoadGen's git log lines are not always valid JSON
            continue
        if entry["key"].startswith("result_") or entry["key"] in ("loadgen_version", "generated_samples_per_query"):
            run.results[entry["key"]] = entry["value"]
    run.summary = (directory / "mlperf_log_summary.txt").read_text()
    for pct, ns in _EARLY.findall(run.summary):
        run.early_stopping_s[f"p{float(pct):g}"] = int(ns) * 1e-9
    if trace:
        run.latencies_s = trace_latencies(directory / "mlperf_log_trace.json")


def trace_latencies(path: Path) -> list[float]:
    """Each sample's latency (LoadGen's complete_ns, from its issue) from the trace, in issue
    order (sample_seq). Read line by line: the trace's other events are not always valid JSON."""
    found = sorted((int(seq), int(done) - int(start)) for seq, start, done in _SAMPLE.findall(path.read_text()))
    return [ns * 1e-9 for _, ns in found]


@dataclass
class Sweep:
    """The Server runs of a sweep in the order they ran, and the highest target QPS that
    LoadGen called VALID (None when none was)."""

    runs: list[LoadgenRun]
    best: LoadgenRun | None


def server_sweep(run_at: Callable[[float], LoadgenRun], start: float, steps: int, factor: float = 4.0,
                 probes: int = 3, floor: float = 0.0) -> Sweep:
    """The highest QPS whose Server test is VALID: `start` first; then up (VALID) or down
    (INVALID) by `factor` at most `probes` times until the verdict changes (never below
    `floor`); then `steps` bisection steps between the highest VALID and the lowest INVALID
    target. No VALID test: best None."""
    runs = [run_at(start)]
    valid = runs[-1].valid
    lo, hi = (start, None) if valid else (None, start)
    for _ in range(probes):
        q = start * factor ** (len(runs)) if valid else start / factor ** (len(runs))
        if not valid and q < floor:
            break
        runs.append(run_at(q))
        if runs[-1].valid != valid:
            lo, hi = (lo, q) if valid else (q, hi)
            break
        lo, hi = (q, hi) if valid else (lo, q)
    if lo is None:
        return Sweep(runs, None)
    if hi is not None:
        for _ in range(steps):
            mid = (lo + hi) / 2
            runs.append(run_at(mid))
            lo, hi = (mid, hi) if runs[-1].valid else (lo, mid)
    best = max((r for r in runs if r.valid), key=lambda r: float(r.settings["server_target_qps"]))
    return Sweep(runs, best)
