"""The train scenario (`--scenario train`, the default): warm-up epochs, the parity phase, the
timed window of whole epochs in chunks synced at their ends, then held-out evaluation.

Phases, each reported on its own and kept out of the timed window: build, data, ahead-of-time
compile where the framework exposes it, the first step (its compile inside where it does not:
`compile_estimate_s` = first step minus a median step), the rest of the warm-up epochs, the
parity phase (the fixed batch's loss and gradients under the trial's own policy). Nothing here
imports a framework.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from dlbench import workloads
from dlbench.analysis import roofline
from dlbench.analysis.window import FLAG_METRIC, too_short
from dlbench.backends import support
from dlbench.backends.base import Backend, Learner, TimedBatches, Trainable
from dlbench.machine import bf16_on_cpu
from dlbench.runner import fixedbatch, parallel, protocol
from dlbench.runner.scenarios import profiled
from dlbench.runner.context import TrialContext, allocator_metrics, record_options
from dlbench.runner.timing import split_steps
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads.data import Dataset, epoch_augment


def run(ctx: TrialContext) -> None:
    """Every phase of a train trial after the framework import; a profiled trial's timed
    window under the framework's profiler (runner/scenarios/profiled.py)."""
    profiled.prepare(ctx)
    program, state = build_and_load(ctx, support.build_trainable)
    state = _warmup(ctx, program, state)
    _parity(ctx)
    comm_before_s = ctx.backend.data_parallel.comm_s()
    with profiled.window(ctx, ctx.parity_file):
        state = _timed_window(ctx, program, state)
    parallel.comm_metrics(ctx.trial, ctx.backend, comm_before_s, ctx.result)
    evaluate(ctx, program, state)
    allocator_metrics(ctx)


L = TypeVar("L", bound=Learner)


def build_and_load(ctx: TrialContext, build: Callable[[TrialSpec, Backend], L]) -> tuple[L, Any]:
    """The Program and its state from the canonical parameters (build_s), then the training
    split into the framework (data_s). Records the numerics and precision as read back."""
    trial, m = ctx.trial, ctx.metrics
    t = ctx.phases.start("build")
    program = build(trial, ctx.backend)
    state = support.init(trial, ctx.workload, program)
    m["build_s"] = ctx.phases.end("build", t)
    ctx.result.numerics = program.numerics()
    ctx.result.policy_effective["precision"] = {"precision": trial.precision, **program.precision()}
    ctx.result.policy_effective["train_loop"] = program.train_loop()
    record_options(ctx, program)
    if trial.precision == "bf16" and ctx.backend.device_kind() == "cpu":
        ctx.result.policy_effective["precision"]["cpu_bf16"] = bf16_on_cpu()
    t = ctx.phases.start("data")
    program.load(ctx.workload.make_dataset(trial.workload))
    m["data_s"] = ctx.phases.end("data", t)
    return program, state


def _epoch_rows(trial: TrialSpec, epoch: int) -> np.ndarray:
    return workloads.epoch_steps(trial.workload, epoch)[0]


def _epoch_batches(trial: TrialSpec, program: Trainable, epoch: int, rows: np.ndarray, steps: int | None = None) -> Any:
    """The pipeline over the epoch's first `steps` rows (all by default), with the epoch's
    augmentation parameters where the spec augments."""
    n = len(rows) if steps is None else steps
    augment = epoch_augment(trial.workload, epoch)
    return program.batches(rows[:n], None if augment is None else augment.steps(0, n))


def _warmup(ctx: TrialContext, program: Trainable, state: Any) -> Any:
    """Ahead-of-time compile (where exposed), the first step, then the rest of the warm-up
    epochs: all outside the timed window, each reported on its own."""
    trial, backend, phases, m = ctx.trial, ctx.backend, ctx.phases, ctx.metrics
    rows = _epoch_rows(trial, 0)
    t = phases.start("compile")
    compile_s = program.compile(state, next(iter(_epoch_batches(trial, program, 0, rows, 1))))
    phases.end("compile", t)
    if compile_s is not None:
        m["compile_s"] = compile_s
    m["rss_initial_bytes"], vram = ctx.sampler.sample()
    m["vram_initial_bytes"] = vram
    batches = _epoch_batches(trial, program, 0, rows)
    t = phases.start("first_step")
    state, losses = program.train_chunk(state, batches, 1)
    backend.sync(state, losses)
    m["first_step_s"] = phases.end("first_step", t)
    m["time_to_first_step_s"] = time.monotonic() - ctx.created
    t = phases.start("warmup")
    if trial.warmup_epochs > 0:
        state = _run_steps(ctx, program, state, batches, len(rows) - 1)
        for epoch in range(1, trial.warmup_epochs):
            rows = _epoch_rows(trial, epoch)
            state = _run_steps(ctx, program, state, _epoch_batches(trial, program, epoch, rows), len(rows))
    m["warmup_s"] = phases.end("warmup", t)
    return state


def _parity(ctx: TrialContext) -> None:
    """Loss and gradients on the canonical fixed batch from the canonical parameters, under this
    trial's own policy (its mode, its compiled code path), before the timed window; the parent
    compares them with the float64 reference. After the warm-up, so that the extra compile
    cannot warm anything the start-up metrics measure."""
    t = ctx.phases.start("parity")
    # A Program of its own: some frameworks keep the state in program-owned variables (TF,
    # Keras), and init() on the training Program would reset the warmed-up state.
    loss, grads = fixedbatch.grads(ctx.trial, ctx.workload, support.build_learner(ctx.trial, ctx.backend))
    protocol.save_grads(ctx.parity_file, loss, grads)
    ctx.metrics["parity_s"] = ctx.phases.end("parity", t)


def _run_steps(ctx: TrialContext, program: Trainable, state: Any, batches: Any, steps: int) -> Any:
    for n in split_steps(steps, ctx.trial.chunk_steps):
        state, losses = program.train_chunk(state, batches, n)
        ctx.backend.sync(state, losses)
    return state


@dataclass
class Window:
    """What the timed window measured."""

    chunks: list[tuple[int, float, float]]  # (steps, seconds, end time in the window)
    epoch_s: list[float]
    train_s: float
    losses: np.ndarray  # per step (a chunk's mean repeated over its steps: for means over steps only)
    chunk_losses: list[np.ndarray]  # as each train_chunk returned them
    recompiles: int
    peaks: dict[str, int]


def _timed_window(ctx: TrialContext, program: Trainable, state: Any) -> Any:
    """The timed epochs, split into chunks synced at their ends. Epoch orders are drawn before
    the window; each epoch's pipeline is created inside it, as in any training loop."""
    trial, backend, log = ctx.trial, ctx.backend, ctx.log
    first = max(trial.warmup_epochs, 0)
    epochs = [workloads.epoch_steps(trial.workload, e) for e in range(first, first + trial.epochs)]
    chunks: list[tuple[int, float, float]] = []
    epoch_s: list[float] = []
    device_losses = []
    pipelines: list[TimedBatches] = []
    compiles_before = program.compilations()
    log.phase("timed", protocol.PHASE_START)
    ctx.sampler.begin_window()
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
            log.chunk(e, n, t1 - t0)
        epoch_s.append(time.perf_counter() - t_epoch)
    train_s = time.perf_counter() - t_window
    peaks = ctx.sampler.end_window()
    log.phase("timed", protocol.PHASE_END, train_s)
    per_chunk = [program.losses_to_numpy(x) for x in device_losses]
    losses = step_losses([n for n, _, _ in chunks], per_chunk)
    window = Window(chunks, epoch_s, train_s, losses, per_chunk, program.compilations() - compiles_before, peaks)
    _window_metrics(ctx, window)
    _input_wait_metrics(ctx, pipelines, train_s)
    return state


def _input_wait_metrics(ctx: TrialContext, pipelines: list[TimedBatches], train_s: float) -> None:
    """Seconds per step the training loop waited for its next batch (and their share of the
    window), where the loop pulls batches itself; on an asynchronous device (JAX) part of that
    wait overlaps the device's work, so it bounds the stall from above."""
    result = ctx.result
    pulls = sum(p.pulls for p in pipelines)
    if pulls == 0:
        result.metrics["input_wait_per_step_s"] = result.metrics["input_wait_share"] = None
        result.notes["input_wait_per_step_s"] = ("not measurable: the framework pulls batches inside"
                                                 " its own training loop (fit)")
        return
    wait_s = sum(p.wait_s for p in pipelines)
    result.metrics["input_wait_per_step_s"] = wait_s / pulls
    result.metrics["input_wait_share"] = wait_s / train_s


# The note a loss series of chunk means carries (result.notes["loss"]; the report draws such a
# series as points at the chunks' ends).
CHUNK_MEANS_NOTE = ("chunk means: the framework reports one mean loss per training call (Keras's fit), so each"
                    " point is that mean over the chunk's steps, at the chunk's last step")


def loss_points(steps: list[int], per_chunk: list[np.ndarray], timing: list[tuple[float, float]] | None = None
                ) -> tuple[list[tuple[float, float]], list[tuple[float, float]], bool]:
    """The loss series as measured: (by step, by seconds since the window began, chunk means?).
    Per-step values at their own steps (by time: step j of n ends at end - (n - 1 - j) x the
    chunk's per-step time, from `timing`: each chunk's (seconds, end since the window began)); a
    chunk's one mean (Keras's fit) at the chunk's last step and end time, once, never repeated
    over its steps. By time is empty without `timing`."""
    by_step: list[tuple[float, float]] = []
    by_time: list[tuple[float, float]] = []
    means = False
    done = 0
    for i, (n, values) in enumerate(zip(steps, per_chunk, strict=True)):
        if len(values) == n:
            idx, vals = list(range(done, done + n)), [float(v) for v in values]
        elif len(values) == 1:
            idx, vals, means = [done + n - 1], [float(values[0])], True
        else:
            raise RuntimeError(f"train_chunk returned {len(values)} losses for {n} steps")
        by_step += [(float(j), v) for j, v in zip(idx, vals, strict=True)]
        if timing is not None:
            seconds, end = timing[i]
            per_step_s = seconds / n
            by_time += [(end - (done + n - 1 - j) * per_step_s, v) for j, v in zip(idx, vals, strict=True)]
        done += n
    return by_step, by_time, means


def step_losses(steps: list[int], per_chunk: list[np.ndarray]) -> np.ndarray:
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


def _window_metrics(ctx: TrialContext, w: Window) -> None:
    result, m, spec = ctx.result, ctx.metrics, ctx.trial.workload
    steps = sum(n for n, _, _ in w.chunks)
    step_s = [s / n for n, s, _ in w.chunks]
    samples_per_s = steps * spec.batch_size / w.train_s
    median_step_s = statistics.median(step_s)
    m["train_s"] = w.train_s
    m["samples_per_s"] = samples_per_s
    m["step_s_median"] = median_step_s
    m["epoch_s_median"] = statistics.median(w.epoch_s)
    m["final_loss"] = float(np.mean(w.losses[-spec.steps_per_epoch :]))
    m["recompiles_in_window"] = w.recompiles
    m["rss_window_peak_bytes"] = w.peaks["rss"]
    m["vram_window_peak_bytes"] = w.peaks["vram"]
    flops = ctx.workload.flops_per_sample(spec)
    m["flops_per_sample"] = flops
    m["achieved_flops_per_s"] = flops * samples_per_s
    parameters = sum(math.prod(shape) for shape in ctx.workload.param_shapes(spec).values())
    m["min_step_bytes"] = roofline.train_step_min_bytes(parameters, np.dtype(spec.numerics.dtype).itemsize,
                                                        spec.numerics.optimizer)
    first_step_s = m.get("first_step_s")
    if m.get("compile_s") is None and first_step_s is not None:
        m["compile_estimate_s"] = max(first_step_s - median_step_s, 0.0)
    by_step, by_time, means = loss_points([n for n, _, _ in w.chunks], w.chunk_losses, [(s, e) for _, s, e in w.chunks])
    result.series["loss"], result.series["loss_by_time"] = by_step, by_time
    if means:
        result.notes["loss"] = CHUNK_MEANS_NOTE
    result.series["step_s"] = [(end, s / n) for n, s, end in w.chunks]
    result.series["epoch_s"] = [(float(i), s) for i, s in enumerate(w.epoch_s)]
    if w.recompiles:
        result.warnings.append(
            f"recompiled {w.recompiles} time(s) inside the timed window: step times include compiles")
    if not np.all(np.isfinite(w.losses)):
        result.warnings.append("non-finite loss inside the timed window")
    m["timed_steps"] = steps
    short = too_short(steps, w.train_s)
    m[FLAG_METRIC] = 1.0 if short else 0.0
    if short:
        result.warnings.append(short)


def evaluate(ctx: TrialContext, program: Trainable, state: Any) -> None:
    """The workload's quality metric on the held-out split (accuracy for a classifier), outside
    the timed window; for a generative workload also the quality of samples generated from the
    trained parameters (ddpm: a Fréchet distance, not FID)."""
    spec, wl = ctx.trial.workload, ctx.workload
    data = wl.make_eval_dataset(spec)
    t = ctx.phases.start("evaluate")
    outputs = held_out_outputs(program, state, spec, data)
    ctx.metrics[wl.QUALITY] = float(wl.score(spec, outputs, data))
    more = workloads.extra_scores(spec.name)
    if more is not None:  # further scores of the same outputs (detect: map_voc)
        ctx.metrics.update(more(spec, outputs, data))
    ctx.metrics["eval_s"] = ctx.phases.end("evaluate", t)
    generated = workloads.generated_quality(spec.name)
    if generated is not None:  # a generative workload: samples from the trained parameters
        t = ctx.phases.start("generated_quality")
        ctx.metrics.update(generated(spec, lambda x: np.asarray(program.predict(state, x))))
        ctx.metrics["generated_quality_s"] = ctx.phases.end("generated_quality", t)


def held_out_outputs(program: Trainable, state: Any, spec: WorkloadSpec, data: Dataset) -> np.ndarray:
    """The Program's outputs on the held-out split `data`, predicted in slices of the training
    batch size (every call has the shape of the first)."""
    outputs = [np.asarray(program.predict(state, data.x[i : i + spec.batch_size]))
               for i in range(0, len(data), spec.batch_size)]
    return np.concatenate(outputs)
