"""The child process of one trial: `python -m dlbench.runner.worker SPEC OUT`.

The only place a framework is imported. Reads the TrialSpec JSON from SPEC, appends JSON-lines
events to OUT.events (phase boundaries, finished chunks, warnings) and writes the TrialResult
JSON to OUT, never to stdout (frameworks print there). Environment variables and CPU affinity
are set before the framework is imported.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend
from dlbench.backends.base import Backend, Program, TimedBatches, Unsupported, scenario_unsupported
from dlbench.monitors.memory import MemorySampler
from dlbench.monitors.nvml import Nvml
from dlbench.monitors.power import PowerMonitor
from dlbench.monitors.rapl import Rapl
from dlbench.results.records import TrialResult
from dlbench.runner import converge, inference, parallel
from dlbench.runner.probe import fixed_batch_grads, save_grads
from dlbench.runner.timing import (
    EventLog,
    Phases,
    events_path,
    parity_path,
    process_start_monotonic,
    split_steps,
)
from dlbench.spec import TrialSpec, trial_from_dict
from dlbench.workloads.data import batch_indices, epoch_augment, epoch_order, epoch_steps

THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
# Environment variables that change speed or numerics: recorded with every trial.
RECORDED_VARS = THREAD_VARS + (
    "XLA_FLAGS",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_XLA_FLAGS",
    "JAX_PLATFORMS",
    # Allocator policy (Backend.environment): comparable device memory across frameworks.
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "JAX_ENABLE_COMPILATION_CACHE",
    "JAX_COMPILATION_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "CUDA_VISIBLE_DEVICES",
    "KMP_AFFINITY",
    "OMP_PROC_BIND",
)
WARM_CACHE_ROOT = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlbench"


def pin_threads(threads: int | None) -> list[int]:
    """Pin to the first N cores of the current mask and set the BLAS/OpenMP thread variables.
    XLA:CPU sizes its pools from the affinity mask; torch and TF get their own settings in
    Backend.configure."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads is not None:
        if threads > len(allowed):
            raise ValueError(f"threads {threads} exceeds the {len(allowed)} cores available")
        allowed = allowed[:threads]
        os.sched_setaffinity(0, allowed)
    for var in THREAD_VARS:
        os.environ[var] = str(len(allowed))
    return allowed


def setup_environment(trial: TrialSpec, backend: Backend) -> tuple[dict[str, Any], Path | None]:
    """Everything that must happen before the framework is imported. Returns the recorded
    settings and a per-trial cache directory to delete afterwards (cold cache)."""
    cores = pin_threads(trial.policy.threads)
    fresh: Path | None = None
    if trial.policy.compile_cache == "cold":
        fresh = Path(tempfile.mkdtemp(prefix="dlbench-cache-"))
        cache_dir = fresh
    else:
        cache_dir = WARM_CACHE_ROOT / "compile-cache" / trial.framework
        cache_dir.mkdir(parents=True, exist_ok=True)
    env = {**backend.environment(trial.policy, str(cache_dir)), **backend.data_parallel.environment(trial)}
    for key, value in env.items():
        os.environ[key] = value
    recorded = {
        "cores": cores,
        "compile_cache_dir": str(cache_dir),
        "env": {k: os.environ.get(k) for k in RECORDED_VARS},
    }
    return recorded, fresh


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m dlbench.runner.worker SPEC OUT", file=sys.stderr)
        return 2
    spec_path, out_path = Path(args[0]), Path(args[1])
    created = process_start_monotonic()
    log = EventLog(events_path(out_path))
    log.emit("start", pid=os.getpid(), created=created)
    result = TrialResult(status="failed", pid=os.getpid())
    fresh_cache: Path | None = None
    try:
        trial = trial_from_dict(json.loads(spec_path.read_text()))
        trial.validate()
        backend = get_backend(trial.framework)
        recorded, fresh_cache = setup_environment(trial, backend)
        result.policy_effective.update(recorded)
        run_trial(trial, backend, log, created, result, parity_path(out_path))
        result.status = "ok"
    except Unsupported as e:
        result.status, result.error = "unsupported", str(e)
    except Exception as e:  # the trial fails; the parent records it and the sweep goes on
        result.status, result.error = "failed", f"{type(e).__name__}: {e}"
        result.notes["traceback"] = traceback.format_exc()
        log.emit("warning", message=result.error)
    finally:
        if fresh_cache is not None:
            shutil.rmtree(fresh_cache, ignore_errors=True)
    result.write(out_path)
    log.emit("end", status=result.status)
    log.close()
    return 0


def run_trial(
    trial: TrialSpec, backend: Backend, log: EventLog, created: float, result: TrialResult,
    parity_file: Path,
) -> None:
    """Fills `result` as it goes, so that a failure keeps every metric measured before it."""
    m = result.metrics
    reason = scenario_unsupported(trial.framework, backend.capabilities, trial.scenario)
    if reason is not None:
        raise Unsupported(reason)
    nvml, nvml_reason = Nvml.open(wanted=trial.devices)
    power = PowerMonitor(nvml, nvml_reason, *Rapl.open())
    power.idle_baseline()  # before the import: nothing of the trial runs yet
    sampler = MemorySampler(nvml, companions=(power,))
    sampler.start()
    power.start()
    try:
        m["rss_start_bytes"] = sampler.sample()[0]
        phases = Phases(log)
        t = phases.start("import")
        backend.import_framework()
        m["import_s"] = phases.end("import", t)
        m["rss_after_import_bytes"] = sampler.sample()[0]
        result.policy_effective["framework"] = backend.configure(trial.policy)
        parallel.setup(trial, backend, result)
        result.framework_info = backend.info()
        if trial.scenario == "infer":
            inference.run(trial, backend, phases, sampler, created, result, parity_file)
            return
        program, state = _build_and_load(trial, backend, phases, m)
        result.numerics = program.numerics()
        result.policy_effective["precision"] = {"precision": trial.precision, **program.precision()}
        if trial.scenario == "converge":
            converge.run(trial, backend, program, state, phases, log, sampler, created, result, parity_file)
            return
        state = _warmup(trial, backend, program, state, phases, sampler, created, m)
        _parity(trial, backend, phases, m, parity_file)
        comm_before_s = backend.data_parallel.comm_s()
        state = _timed_window(trial, backend, program, state, log, sampler, result)
        parallel.comm_metrics(trial, backend, comm_before_s, result)
        _evaluate(trial, program, state, phases, m)
        _allocator_metrics(backend, result)
    finally:
        sampler.stop()
        power.stop()
        _memory_metrics(sampler, nvml, nvml_reason, result)
        _power_metrics(power, result)


def _build_and_load(
    trial: TrialSpec, backend: Backend, phases: Phases, m: dict[str, float | None]
) -> tuple[Program, Any]:
    wl = workloads.get(trial.workload.name)
    t = phases.start("build")
    program = backend.build(trial)
    state = program.init(wl.init_params(trial.workload))
    m["build_s"] = phases.end("build", t)
    t = phases.start("data")
    program.load(wl.make_dataset(trial.workload))
    m["data_s"] = phases.end("data", t)
    return program, state


def _epoch_rows(trial: TrialSpec, epoch: int) -> np.ndarray:
    spec = trial.workload
    return batch_indices(epoch_order(spec.seed, epoch, spec.dataset_size), spec.batch_size)


def _epoch_batches(trial: TrialSpec, program: Program, epoch: int, rows: np.ndarray, steps: int | None = None) -> Any:
    """The pipeline over the epoch's first `steps` rows (all by default), with the epoch's
    augmentation parameters where the spec augments."""
    n = len(rows) if steps is None else steps
    augment = epoch_augment(trial.workload, epoch)
    return program.batches(rows[:n], None if augment is None else augment.steps(0, n))


def _warmup(
    trial: TrialSpec,
    backend: Backend,
    program: Program,
    state: Any,
    phases: Phases,
    sampler: MemorySampler,
    created: float,
    m: dict[str, float | None],
) -> Any:
    """Ahead-of-time compile (where exposed), the first step, then the rest of the warm-up
    epochs: all outside the timed window, each reported on its own."""
    rows = _epoch_rows(trial, 0)
    t = phases.start("compile")
    compile_s = program.compile(state, next(iter(_epoch_batches(trial, program, 0, rows, 1))))
    phases.end("compile", t)
    if compile_s is not None:
        m["compile_s"] = compile_s
    m["rss_initial_bytes"], vram = sampler.sample()
    m["vram_initial_bytes"] = vram
    batches = _epoch_batches(trial, program, 0, rows)
    t = phases.start("first_step")
    state, losses = program.train_chunk(state, batches, 1)
    backend.sync(state, losses)
    m["first_step_s"] = phases.end("first_step", t)
    m["time_to_first_step_s"] = time.monotonic() - created
    t = phases.start("warmup")
    if trial.warmup_epochs > 0:
        state = _run_steps(trial, backend, program, state, batches, len(rows) - 1)
        for epoch in range(1, trial.warmup_epochs):
            rows = _epoch_rows(trial, epoch)
            state = _run_steps(trial, backend, program, state, _epoch_batches(trial, program, epoch, rows), len(rows))
    m["warmup_s"] = phases.end("warmup", t)
    return state


def _parity(
    trial: TrialSpec, backend: Backend, phases: Phases, m: dict[str, float | None], path: Path
) -> None:
    """Loss and gradients on the canonical fixed batch from the canonical parameters, under this
    trial's own policy (its mode, its compiled code path), before the timed window; the parent
    compares them with the float64 reference. After the warm-up, so that the extra compile
    cannot warm anything the start-up metrics measure."""
    t = phases.start("parity")
    # A Program of its own: some frameworks keep the state in program-owned variables (TF,
    # Keras), and init() on the training Program would reset the warmed-up state.
    loss, grads = fixed_batch_grads(backend.build(trial), trial.workload)
    save_grads(path, loss, grads)
    m["parity_s"] = phases.end("parity", t)


def _run_steps(
    trial: TrialSpec, backend: Backend, program: Program, state: Any, batches: Any, steps: int
) -> Any:
    for n in split_steps(steps, trial.chunk_steps):
        state, losses = program.train_chunk(state, batches, n)
        backend.sync(state, losses)
    return state


def _timed_window(
    trial: TrialSpec,
    backend: Backend,
    program: Program,
    state: Any,
    log: EventLog,
    sampler: MemorySampler,
    result: TrialResult,
) -> Any:
    """The timed epochs, split into chunks synced at their ends. Epoch orders are drawn before
    the window; each epoch's pipeline is created inside it, as in any training loop."""
    first = max(trial.warmup_epochs, 0)
    epochs = [epoch_steps(trial.workload, e) for e in range(first, first + trial.epochs)]
    chunks: list[tuple[int, float, float]] = []  # (steps, seconds, end time in window)
    epoch_s: list[float] = []
    device_losses = []
    pipelines: list[TimedBatches] = []
    compiles_before = program.compilations()
    log.emit("phase", name="timed", state="start")
    sampler.begin_window()
    t_window = time.perf_counter()
    for e, (rows, augment) in enumerate(epochs, start=first):
        t_epoch = time.perf_counter()
        batches = TimedBatches(program.batches(rows, augment))
        pipelines.append(batches)
        for n in split_steps(len(rows), trial.chunk_steps):
            t0 = time.perf_counter()
            state, losses = program.train_chunk(state, batches, n)
            backend.sync(state, losses)
            t1 = time.perf_counter()
            chunks.append((n, t1 - t0, t1 - t_window))
            device_losses.append(losses)
            log.emit("chunk", epoch=e, steps=n, seconds=t1 - t0)
        epoch_s.append(time.perf_counter() - t_epoch)
    train_s = time.perf_counter() - t_window
    window = sampler.end_window()
    log.emit("phase", name="timed", state="end", seconds=train_s)
    recompiles = program.compilations() - compiles_before
    losses = _step_losses([n for n, _, _ in chunks], [program.losses_to_numpy(x) for x in device_losses])
    _window_metrics(trial, result, chunks, epoch_s, train_s, losses, recompiles, window)
    _input_wait_metrics(result, pipelines, train_s)
    return state


def _input_wait_metrics(result: TrialResult, pipelines: list[TimedBatches], train_s: float) -> None:
    """Seconds per step the training loop waited for its next batch (and their share of the
    window), where the loop pulls batches itself; on an asynchronous device (JAX) part of that
    wait overlaps the device's work, so it bounds the stall from above."""
    pulls = sum(p.pulls for p in pipelines)
    if pulls == 0:
        result.metrics["input_wait_per_step_s"] = result.metrics["input_wait_share"] = None
        result.notes["input_wait_per_step_s"] = ("not measurable: the framework pulls batches inside"
                                                 " its own training loop (fit)")
        return
    wait_s = sum(p.wait_s for p in pipelines)
    result.metrics["input_wait_per_step_s"] = wait_s / pulls
    result.metrics["input_wait_share"] = wait_s / train_s


def _step_losses(steps: list[int], per_chunk: list[np.ndarray]) -> np.ndarray:
    """Per-step losses. A Program may return one value per chunk instead (Keras's fit reports
    the chunk's mean): each step of such a chunk then carries the chunk mean, which keeps
    means over steps exact and marks the series as chunk means (NaN-free, flat per chunk)."""
    out = []
    for n, values in zip(steps, per_chunk, strict=True):
        if len(values) == n:
            out.append(values)
        elif len(values) == 1:
            out.append(np.full(n, values[0]))
        else:
            raise RuntimeError(f"train_chunk returned {len(values)} losses for {n} steps")
    return np.concatenate(out)


def _window_metrics(
    trial: TrialSpec,
    result: TrialResult,
    chunks: list[tuple[int, float, float]],
    epoch_s: list[float],
    train_s: float,
    losses: np.ndarray,
    recompiles: int,
    window: dict[str, int],
) -> None:
    m = result.metrics
    spec = trial.workload
    steps = sum(n for n, _, _ in chunks)
    step_s = [s / n for n, s, _ in chunks]
    samples_per_s = steps * spec.batch_size / train_s
    median_step_s = statistics.median(step_s)
    m["train_s"] = train_s
    m["samples_per_s"] = samples_per_s
    m["step_s_median"] = median_step_s
    m["epoch_s_median"] = statistics.median(epoch_s)
    last_epoch = losses[-spec.steps_per_epoch :]
    m["final_loss"] = float(np.mean(last_epoch))
    m["recompiles_in_window"] = recompiles
    m["rss_window_peak_bytes"] = window["rss"]
    m["vram_window_peak_bytes"] = window["vram"]
    flops = workloads.get(spec.name).flops_per_sample(spec)
    m["flops_per_sample"] = flops
    m["achieved_flops_per_s"] = flops * samples_per_s
    first_step_s = m.get("first_step_s")
    if m.get("compile_s") is None and first_step_s is not None:
        m["compile_estimate_s"] = max(first_step_s - median_step_s, 0.0)
    result.series["loss"] = [(float(i), float(v)) for i, v in enumerate(losses)]
    result.series["step_s"] = [(end, s / n) for n, s, end in chunks]
    result.series["epoch_s"] = [(float(i), s) for i, s in enumerate(epoch_s)]
    if recompiles:
        result.warnings.append(
            f"recompiled {recompiles} time(s) inside the timed window: step times include compiles"
        )
    if not np.all(np.isfinite(losses)):
        result.warnings.append("non-finite loss inside the timed window")


def _evaluate(
    trial: TrialSpec, program: Program, state: Any, phases: Phases, m: dict[str, float | None]
) -> None:
    """Accuracy on the held-out split, outside the timed window."""
    spec = trial.workload
    data = workloads.get(spec.name).make_eval_dataset(spec)
    t = phases.start("evaluate")
    correct = 0
    for i in range(0, len(data), spec.batch_size):
        logits = program.predict(state, data.x[i : i + spec.batch_size])
        correct += int(np.sum(np.argmax(logits, axis=1) == data.y[i : i + spec.batch_size]))
    m["eval_s"] = phases.end("evaluate", t)
    m["accuracy"] = correct / len(data)


def _memory_metrics(
    sampler: MemorySampler, nvml: Nvml | None, nvml_reason: str, result: TrialResult
) -> None:
    m = result.metrics
    summary = sampler.summary()
    m["rss_peak_bytes"] = summary["rss_peak"]
    result.series["rss_bytes"] = sampler.rss
    if nvml is None:
        for name in ("vram_initial_bytes", "vram_peak_bytes", "vram_window_peak_bytes"):
            m[name] = None
            result.notes[name] = f"no GPU: {nvml_reason}"
    else:
        m["vram_peak_bytes"] = summary["vram_peak"]
        result.series["vram_bytes"] = sampler.vram
        result.framework_info["gpus"] = nvml.devices()


def _allocator_metrics(backend: Backend, result: TrialResult) -> None:
    """The framework allocator's own peaks, named for what they are (Backend.allocator_stats);
    `allocated_peak_bytes` is each one's peak of memory held by live tensors."""
    stats = backend.allocator_stats()
    result.metrics.update(stats)
    if not stats:
        result.metrics["allocated_peak_bytes"] = None
        result.notes["allocated_peak_bytes"] = ("no GPU allocator: on the CPU the frameworks keep no"
                                                " device counters (RSS covers host memory)")


def _power_metrics(power: PowerMonitor, result: TrialResult) -> None:
    m = result.metrics
    samples_per_s, train_s = m.get("samples_per_s"), m.get("train_s")
    samples = samples_per_s * train_s if samples_per_s is not None and train_s is not None else None
    metrics, notes = power.finish(samples, samples_per_s)
    m.update(metrics)
    result.notes.update(notes)
    result.series.update({k: v for k, v in power.series.items() if v})


if __name__ == "__main__":
    sys.exit(main())
