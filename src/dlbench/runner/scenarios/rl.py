"""Reinforcement-learning scenarios (workloads/ppo.py), run by the worker process: each a loop of
rollouts (N environments x T steps in the framework's own array ops) and PPO updates, with the
spec's draws fed in (workloads.ppo.draws) so every framework takes the same actions from the same
states as long as its logits agree.

- `rl_rollout` (`--scenario rollout`): environment steps per second of the rollout alone
  (`env_steps_per_s`), the policy fixed at the canonical parameters.
- `rl_train` (`--scenario train`): whole iterations, rollout then update: `iteration_s`,
  `env_steps_per_s` (of the rollouts inside the iterations), `update_samples_per_s` (E x N x T
  samples per update).
- `rl_converge` (the time-to-target `--scenario`): from the canonical parameters until the mean return of
  the last RETURN_WINDOW finished episodes reaches `target_accuracy` x 500 (the normalised
  return; 0.95 is CartPole's customary 475) or a budget runs out (`max_steps` iterations,
  `max_time_s`); the first compile counts, as a user waits for it. Reports `steps_to_target` in
  environment steps, `time_to_target_s`, and the curve (`return`, `return_by_time`); the
  episodes are ordered by the step they ended at (then by environment), and every episode's
  return at its global env step is kept as `episodic_return`, the published curves' form.

Where the rollout runs (`host` or `fused`) is the policy (Policy.rollout), recorded as
`policy_effective["rollout"]`. Before timing, the parity phase writes the fixed frozen batch's
loss and gradients like every training trial's. Nothing here imports a framework.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from dlbench.analysis.window import FLAG_METRIC, too_short
from dlbench.backends import support
from dlbench.backends.base import Rollout
from dlbench.runner.scenarios import profiled, train
from dlbench.runner.context import TrialContext, allocator_metrics
from dlbench.spec import ConvergeOptions, TrialSpec
from dlbench.workloads import cartpole, ppo

# Episodes averaged for the time-to-target criterion (the last this many finished, over all envs).
RETURN_WINDOW = 20


def _build(ctx: TrialContext) -> tuple[Rollout, Any]:
    program, state = train.build_and_load(ctx, support.build_rollout)
    ctx.result.policy_effective["rollout"] = {"asked": ctx.trial.policy.rollout, "placement": program.rollout_placement}
    return program, state


def _parity(ctx: TrialContext) -> None:
    train._parity(ctx)


def _steps_per_iteration(trial: TrialSpec) -> tuple[int, int]:
    """(environment steps, update samples) of one iteration."""
    s = ppo.size(trial.workload)
    return s.envs * s.steps, s.epochs * s.envs * s.steps


def run_rollout(ctx: TrialContext) -> None:
    """Rollouts only: warm-up rollouts (compile included), then `epochs` timed rollouts."""
    trial, m = ctx.trial, ctx.metrics
    program, state = _build(ctx)
    env = program.env(ppo.initial_obs(trial.workload))
    t = ctx.phases.start("first_step")
    d = ppo.draws(trial.workload, 0)
    env, traj = program.rollout(state, env, d.uniforms, d.resets)
    program.wait(env, traj)
    m["first_step_s"] = ctx.phases.end("first_step", t)
    m["time_to_first_step_s"] = time.monotonic() - ctx.created
    for i in range(1, max(trial.warmup_epochs, 1)):
        d = ppo.draws(trial.workload, i)
        env, traj = program.rollout(state, env, d.uniforms, d.resets)
    program.wait(env, traj)
    _parity(ctx)
    env_steps, _ = _steps_per_iteration(trial)
    first = max(trial.warmup_epochs, 1)
    plan = [ppo.draws(trial.workload, i) for i in range(first, first + trial.epochs)]
    compiles = _compilations(program)
    times = []
    ctx.sampler.begin_window()
    t_window = time.perf_counter()
    for i, d in enumerate(plan):
        t0 = time.perf_counter()
        env, traj = program.rollout(state, env, d.uniforms, d.resets)
        program.wait(env, traj)
        times.append(time.perf_counter() - t0)
        ctx.log.chunk(i, env_steps, times[-1])
    window_s = time.perf_counter() - t_window
    peaks = ctx.sampler.end_window()
    m["rollout_s_median"] = statistics.median(times)
    m["env_steps_per_s"] = env_steps * len(times) / window_s
    _window(ctx, window_s, len(times), times, _compilations(program) - compiles, peaks)
    allocator_metrics(ctx)


def run_train(ctx: TrialContext) -> None:
    """Whole PPO iterations: warm-up iterations (compiles included), then `epochs` timed ones,
    the rollout and the update of each timed apart (a sync between them); a profiled trial's
    timed iterations under the framework's profiler (runner/scenarios/profiled.py)."""
    trial, m = ctx.trial, ctx.metrics
    profiled.prepare(ctx)
    program, state = _build(ctx)
    env = program.env(ppo.initial_obs(trial.workload))
    t = ctx.phases.start("first_step")
    env, state, _ = _iteration(program, state, env, ppo.draws(trial.workload, 0))
    m["first_step_s"] = ctx.phases.end("first_step", t)
    m["time_to_first_step_s"] = time.monotonic() - ctx.created
    for i in range(1, max(trial.warmup_epochs, 1)):
        env, state, _ = _iteration(program, state, env, ppo.draws(trial.workload, i))
    _parity(ctx)
    env_steps, samples = _steps_per_iteration(trial)
    first = max(trial.warmup_epochs, 1)
    plan = [ppo.draws(trial.workload, i) for i in range(first, first + trial.epochs)]
    compiles = _compilations(program)
    times, rollout_s, update_s, losses, ends = [], [], [], [], []
    if trial.profile:
        m[profiled.CALLS_METRIC] = float(len(plan))  # a profiled trial's categories: per iteration
    ctx.sampler.begin_window()
    t_window = time.perf_counter()
    with profiled.window(ctx, ctx.parity_file):
        for i, d in enumerate(plan):
            t0 = time.perf_counter()
            env, state, (r_s, u_s, loss) = _iteration(program, state, env, d)
            times.append(time.perf_counter() - t0)
            ends.append(time.perf_counter() - t_window)
            rollout_s.append(r_s)
            update_s.append(u_s)
            losses.append(loss)
            ctx.log.chunk(i, 1, times[-1])
    window_s = time.perf_counter() - t_window
    peaks = ctx.sampler.end_window()
    m["iteration_s_median"] = statistics.median(times)
    m["env_steps_per_s"] = env_steps * len(times) / sum(rollout_s)
    m["update_samples_per_s"] = samples * len(times) / sum(update_s)
    m["samples_per_s"] = env_steps * len(times) / window_s
    m["final_loss"] = float(np.mean(losses[-1]))
    # The update's minibatch losses, by update step and (spread over the update, which ends
    # each iteration) by seconds since the window began.
    by_step, by_time, _ = train.loss_points([len(v) for v in losses], losses,
                                            [(u, end) for u, end in zip(update_s, ends, strict=True)])
    ctx.result.series["loss"], ctx.result.series["loss_by_time"] = by_step, by_time
    _window(ctx, window_s, len(times), times, _compilations(program) - compiles, peaks)
    allocator_metrics(ctx)


def _iteration(program: Rollout, state: Any, env: Any, d: ppo.Draws) -> tuple[Any, Any, tuple[float, float, np.ndarray]]:
    """One rollout and one update, each synced: (env, state, (rollout s, update s, losses))."""
    t0 = time.perf_counter()
    env, traj = program.rollout(state, env, d.uniforms, d.resets)
    program.wait(env, traj)
    t1 = time.perf_counter()
    state, losses = program.update(state, env, traj, d.perms)
    program.wait(state, losses)
    t2 = time.perf_counter()
    return env, state, (t1 - t0, t2 - t1, program.losses_to_numpy(losses))


def run_converge(ctx: TrialContext) -> None:
    """Iterations from the canonical parameters until the return target or a budget."""
    trial, m, result = ctx.trial, ctx.metrics, ctx.result
    options = trial.options_of(ConvergeOptions)
    assert options.target_accuracy is not None  # TrialSpec.validate
    target = options.target_accuracy * cartpole.MAX_STEPS
    program, state = _build(ctx)
    env = program.env(ppo.initial_obs(trial.workload))
    env_steps, _ = _steps_per_iteration(trial)
    returns: list[float] = []
    episodes: list[tuple[int, float]] = []  # (global env step at its end, return), in time order
    points: list[tuple[int, float, float]] = []  # (env steps, training s, mean return of the window)
    train_s, reached, stop = 0.0, False, f"max steps {options.max_steps} iterations"
    m["time_to_first_step_s"] = None
    for i in range(options.max_steps):
        d = ppo.draws(trial.workload, i)
        t0 = time.perf_counter()
        env, traj = program.rollout(state, env, d.uniforms, d.resets)
        state, losses = program.update(state, env, traj, d.perms)
        program.wait(state, losses)
        train_s += time.perf_counter() - t0
        if i == 0:
            m["first_step_s"] = train_s
            m["time_to_first_step_s"] = time.monotonic() - ctx.created
        finished = program.finished(traj)  # outside the clock: a fetch of the episode returns
        ended = finished_episodes(finished, i)
        episodes += ended
        returns += [r for _, r in ended]
        if returns:
            points.append(((i + 1) * env_steps, train_s, float(np.mean(returns[-RETURN_WINDOW:]))))
            ctx.log.chunk(i, 1, train_s)
        if len(returns) >= RETURN_WINDOW and points[-1][2] >= target:
            reached, stop = True, "target reached"
            break
        if train_s >= options.max_time_s:
            stop = f"max time {options.max_time_s:g} s"
            break
    m["reached_target"] = 1.0 if reached else 0.0
    m["train_s"] = train_s
    m["episodes"] = float(len(returns))
    m["final_return"] = points[-1][2] if points else None
    m["steps_to_target"] = float(points[-1][0]) if reached else None
    m["time_to_target_s"] = points[-1][1] if reached else None
    m["env_steps_per_s"] = (len(points) and points[-1][0]) / train_s if train_s else None
    if not reached:
        for name in ("steps_to_target", "time_to_target_s"):
            result.notes[name] = f"return target {target:g} not reached: {stop}"
    result.notes["stop"] = stop
    result.series["return"] = [(float(s), r) for s, _, r in points]
    # Every finished episode's return at the global env step it ended: the form published PPO
    # curves are made from (CleanRL logs charts/episodic_return by global_step).
    result.series["episodic_return"] = [(float(s), r) for s, r in episodes]
    result.series["return_by_time"] = [(t, r) for _, t, r in points]
    # The time-to-accuracy tables and charts read the quality metric as `accuracy`: here the normalised
    # return (mean return of the window / 500).
    result.series["accuracy"] = [(float(s), r / cartpole.MAX_STEPS) for s, _, r in points]
    result.series["accuracy_by_time"] = [(t, r / cartpole.MAX_STEPS) for _, t, r in points]
    m[ctx.workload.QUALITY] = m["final_return"]
    _parity(ctx)  # after training: its compile must not warm anything the clock measures
    allocator_metrics(ctx)


def finished_episodes(finished: np.ndarray, iteration: int) -> list[tuple[int, float]]:
    """The episodes that ended in one rollout, `finished` (T, N) (an episode's return where it
    ended, else 0), as (global env step, return) in time order, then environment order. The
    global step counts every environment's steps, as CleanRL's global_step: at rollout step t of
    iteration i it is (i T + t + 1) N."""
    steps, envs = finished.shape
    t, n = np.nonzero(finished > 0)  # row-major: time first, then environment
    return [((iteration * steps + int(a) + 1) * envs, float(finished[a, b])) for a, b in zip(t, n)]


def _compilations(program: Rollout) -> int:
    return program.compilations()


def _window(ctx: TrialContext, window_s: float, n: int, times: list[float], recompiles: int,
            peaks: dict[str, int]) -> None:
    m, result = ctx.metrics, ctx.result
    m["train_s"] = window_s
    m["timed_steps"] = n
    m["recompiles_in_window"] = recompiles
    m["rss_window_peak_bytes"] = peaks["rss"]
    m["vram_window_peak_bytes"] = peaks["vram"]
    result.series["iteration_s"] = [(float(i), s) for i, s in enumerate(times)]
    if recompiles:
        result.warnings.append(f"recompiled {recompiles} time(s) inside the timed window")
    short = too_short(n, window_s)
    m[FLAG_METRIC] = 1.0 if short else 0.0
    if short:
        result.warnings.append(short)
