"""Time to accuracy (the `--scenario` whose options are spec.ConvergeOptions), run by the worker
process (runner/worker.py).

From the canonical weights, after the usual untimed import, build and data phases, the trial
trains on the spec's data and order in chunks of `eval_every` (K) steps and evaluates on the
held-out split after each chunk with the clock stopped, until the target's metric reaches it
(workloads.target: the workload's quality at `target_accuracy` or above, or its held-out
perplexity at `target_perplexity` or below) or a budget runs out (`max_steps`, or `max_time_s`
of training time, checked at each evaluation). There are no warm-up epochs: the first step's
compile is part of the time to target, as a user waits for it. Evaluation time is reported on
its own (`eval_s`).

Reported: `reached_target` (1/0), `steps_to_target` and `time_to_target_s` (null with the reason
when not reached), `eval_s`, `train_s` (all training time), the quality after each chunk by step
(`accuracy`) and by training seconds (`accuracy_by_time`), where the target is on another metric
that metric's too (`eval_perplexity`, `eval_perplexity_by_time`) and its last value with the
workload's other extra scores (`perplexity_ratio`), and the loss per step. The status stays
`ok` when a budget runs out: not reaching the target is a result. Nothing here imports a
framework.
"""

from __future__ import annotations

import statistics
import time
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import support
from dlbench.backends.base import Backend, Trainable
from dlbench.results.records import TrialResult
from dlbench.runner import fixedbatch, protocol
from dlbench.runner.scenarios import train
from dlbench.runner.context import TrialContext, allocator_metrics
from dlbench.runner.timing import split_steps
from dlbench.spec import ConvergeOptions, TrialSpec
from dlbench.workloads.base import Target
from dlbench.workloads.data import Dataset


@typing.final
@dataclass
class Curve:
    """What one time-to-accuracy run measured, filled as it trains."""

    steps: int = 0
    train_s: float = 0.0  # training time so far: the clock runs only while training
    eval_s: float = 0.0
    first_step_s: float = 0.0
    compile_s: float | None = None
    # (steps, seconds) per synced chunk after the first step
    chunks: list[tuple[int, float]] = field(default_factory=list)
    losses: list[np.ndarray] = field(default_factory=list)  # per step (a chunk mean repeated: for means only)
    # (steps, the losses train_chunk returned) per chunk, first step included: the loss series
    measured: list[tuple[int, np.ndarray]] = field(default_factory=list)
    # (step, training seconds, held-out quality) after each chunk of K steps
    points: list[tuple[int, float, float]] = field(default_factory=list)
    # the target's metric after each chunk, where it is not the quality (lm's perplexity), and
    # the last evaluation's extra scores
    target_values: list[float] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)
    reached: bool = False
    stop_reason: str = ""
    # Compiles (traces) during training chunks after the first step; evaluation's own compiles
    # (a predict function) are not counted.
    recompiles: int = 0


@typing.final
class Feed:
    """The spec's batches across epochs: a new epoch's pipeline when the last one runs out."""

    def __init__(self, trial: TrialSpec, program: Trainable) -> None:
        self._trial, self._program = trial, program
        self.epoch = -1
        self.left = 0
        self.batches: Iterator[Any] = iter(())
        self.next_epoch()

    def next_epoch(self) -> None:
        self.epoch += 1
        rows, augment = workloads.epoch_steps(self._trial.workload, self.epoch)
        self.batches, self.left = self._program.batches(rows, augment), len(rows)

    def first_batch(self) -> Any:
        """A batch for an ahead-of-time compile: epoch 0's first, from a pipeline of its own."""
        rows, augment = workloads.epoch_steps(self._trial.workload, 0)
        return next(iter(self._program.batches(rows[:1], None if augment is None else augment.steps(0, 1))))


def run(ctx: TrialContext) -> None:
    """Every phase of a time-to-accuracy trial after the framework import."""
    trial, m = ctx.trial, ctx.metrics
    program, state = train.build_and_load(ctx, support.build_trainable)
    eval_data = ctx.workload.make_eval_dataset(trial.workload)  # untimed, before the clock
    m["rss_initial_bytes"], m["vram_initial_bytes"] = ctx.sampler.sample()
    ctx.sampler.begin_window()
    ctx.log.phase(ctx.trial.scenario, protocol.PHASE_START)  # the phase is named as the --scenario
    goal = workloads.target(trial)
    curve = train_to_target(ctx, goal, program, state, eval_data)
    ctx.log.phase(ctx.trial.scenario, protocol.PHASE_END, curve.train_s + curve.eval_s)
    window = ctx.sampler.end_window()
    m["rss_window_peak_bytes"], m["vram_window_peak_bytes"] = window["rss"], window["vram"]
    m["recompiles_in_window"] = curve.recompiles
    converge_metrics(ctx, curve)
    target_metrics(goal, curve, ctx.result)
    t = ctx.phases.start("parity")  # after training: its own compile must not shorten the first step's
    loss, grads = fixedbatch.grads(trial, ctx.workload, program)
    protocol.save_grads(ctx.parity_file, loss, grads)
    m["parity_s"] = ctx.phases.end("parity", t)
    allocator_metrics(ctx)


def train_to_target(ctx: TrialContext, goal: Target, program: Trainable, state: Any, eval_data: Dataset) -> Curve:
    trial, backend, log = ctx.trial, ctx.backend, ctx.log
    options = trial.options_of(ConvergeOptions)
    curve = Curve()
    start = time.perf_counter()
    feed = Feed(trial, program)
    curve.compile_s = program.compile(state, feed.first_batch())
    state = _chunk(backend, program, state, feed, 1, curve)
    curve.first_step_s = time.perf_counter() - start
    curve.train_s = curve.first_step_s
    curve.chunks.clear()  # the first step is reported on its own, not as a chunk
    curve.recompiles = 0  # the first step compiles; later compiles are flagged
    ctx.metrics["time_to_first_step_s"] = time.monotonic() - ctx.created
    while True:
        t0 = time.perf_counter()
        until_eval = options.eval_every - curve.steps % options.eval_every
        for n in split_steps(min(until_eval, options.max_steps - curve.steps), trial.chunk_steps):
            state = _chunk(backend, program, state, feed, n, curve)
            log.chunk(feed.epoch, n, curve.chunks[-1][1])
        curve.train_s += time.perf_counter() - t0
        accuracy, value = _evaluate(ctx, program, state, eval_data, goal, curve)
        curve.points.append((curve.steps, curve.train_s, accuracy))
        log.eval(curve.steps, accuracy, curve.train_s)
        if _stop(options, goal, curve, value):
            return curve


def _chunk(backend: Backend, program: Trainable, state: Any, feed: Feed, n: int, curve: Curve) -> Any:
    """n steps (within one epoch: the next epoch's pipeline starts between chunks), synced."""
    if feed.left == 0:
        feed.next_epoch()
    done = 0
    while done < n:
        k = min(n - done, feed.left)
        compiles = program.compilations()
        t0 = time.perf_counter()
        state, losses = program.train_chunk(state, feed.batches, k)
        backend.sync(state, losses)
        curve.chunks.append((k, time.perf_counter() - t0))
        curve.recompiles += program.compilations() - compiles
        values = program.losses_to_numpy(losses)
        curve.measured.append((k, values))
        curve.losses.append(_per_step(values, k))
        curve.steps += k
        feed.left -= k
        done += k
        if feed.left == 0 and done < n:
            feed.next_epoch()
    return state


def _per_step(values: np.ndarray, n: int) -> np.ndarray:
    """A chunk's losses per step; a Program reporting the chunk's mean (Keras's fit) gives each
    step that mean, as the train scenario does."""
    if len(values) == n:
        return values
    if len(values) == 1:
        return np.full(n, values[0])
    raise RuntimeError(f"train_chunk returned {len(values)} losses for {n} steps")


def _evaluate(ctx: TrialContext, program: Trainable, state: Any, data: Dataset, goal: Target,
              curve: Curve) -> tuple[float, float]:
    """The workload's held-out quality (accuracy for a classifier) and the target's metric
    (the quality itself, or one of the workload's extra scores of the same outputs: lm's
    perplexity), with the clock stopped (its seconds go to curve.eval_s)."""
    t0 = time.perf_counter()
    spec = ctx.trial.workload
    outputs = train.held_out_outputs(program, state, spec, data)
    accuracy = float(ctx.workload.score(spec, outputs, data))
    value = accuracy
    if goal.metric != ctx.workload.QUALITY:
        extra = workloads.extra_scores(spec.name)
        if extra is None:
            raise ValueError(f"{spec.name} has no extra scores to hold its target metric {goal.metric!r}")
        curve.extra = {k: float(v) for k, v in extra(spec, outputs, data).items()}
        value = curve.extra[goal.metric]
        curve.target_values.append(value)
    curve.eval_s += time.perf_counter() - t0
    return accuracy, value


def _stop(options: ConvergeOptions, goal: Target, curve: Curve, value: float) -> bool:
    """Whether to stop after this evaluation: the target reached (in its direction: a
    perplexity at or below it, an accuracy at or above), or a budget spent (the reason names
    the target's metric and its last value)."""
    last = f"last {goal.metric} {value:.4g}, target {goal.relation} {goal.value:.4g}"
    if goal.reached(value):
        curve.reached = True
    elif curve.steps >= options.max_steps:
        curve.stop_reason = f"not reached within max steps {options.max_steps} ({last})"
    elif curve.train_s >= options.max_time_s:
        curve.stop_reason = (f"not reached within max time {options.max_time_s:g} s of training"
                             f" ({curve.steps} steps, {last})")
    return curve.reached or bool(curve.stop_reason)


def target_metrics(goal: Target, curve: Curve, result: TrialResult) -> None:
    """The target's metric where it is not the quality: its series by step and by training
    time, and the last evaluation's extra scores (lm: eval_perplexity, perplexity_ratio)."""
    if not curve.target_values:
        return
    result.metrics.update(curve.extra)
    result.series[goal.metric] = [(float(s), v) for (s, _, _), v in zip(curve.points, curve.target_values)]
    result.series[f"{goal.metric}_by_time"] = [(t, v) for (_, t, _), v in zip(curve.points, curve.target_values)]


def converge_metrics(ctx: TrialContext, curve: Curve) -> None:
    result = ctx.result
    m = result.metrics
    spec = ctx.trial.workload
    step, time_s, accuracy = curve.points[-1]
    m["reached_target"] = 1.0 if curve.reached else 0.0
    m["steps_to_target"] = float(step) if curve.reached else None
    m["time_to_target_s"] = time_s if curve.reached else None
    if not curve.reached:
        result.notes["steps_to_target"] = result.notes["time_to_target_s"] = curve.stop_reason
    m["accuracy"] = accuracy
    m["eval_s"] = curve.eval_s
    m["evaluations"] = float(len(curve.points))
    m["train_s"] = curve.train_s
    m["steps"] = float(curve.steps)
    m["samples_per_s"] = curve.steps * spec.batch_size / curve.train_s
    m["first_step_s"] = curve.first_step_s
    losses = np.concatenate(curve.losses)
    m["final_loss"] = float(np.mean(losses[-ctx.trial.options_of(ConvergeOptions).eval_every :]))
    if curve.chunks:
        median_step_s = statistics.median(s / n for n, s in curve.chunks)
        m["step_s_median"] = median_step_s
        if curve.compile_s is None:
            m["compile_estimate_s"] = max(curve.first_step_s - median_step_s, 0.0)
    if curve.compile_s is not None:
        m["compile_s"] = curve.compile_s
    flops = ctx.workload.flops_per_sample(spec)
    m["flops_per_sample"] = flops
    m["achieved_flops_per_s"] = flops * m["samples_per_s"]
    result.series["accuracy"] = [(float(s), a) for s, _, a in curve.points]
    result.series["accuracy_by_time"] = [(t, a) for _, t, a in curve.points]
    by_step, _, means = train.loss_points([k for k, _ in curve.measured], [v for _, v in curve.measured])
    result.series["loss"] = by_step
    if means:
        result.notes["loss"] = train.CHUNK_MEANS_NOTE
    if not np.all(np.isfinite(losses)):
        result.warnings.append("non-finite training loss")
    if curve.recompiles:
        result.warnings.append(f"recompiled {curve.recompiles} time(s) after the first step:"
                               " the time to target includes those compiles")
