"""`--repeats auto`: after the first rounds, one more interleaved round at a time until the rule
(analysis/repeats.py) says stop. Each new round repeats every configuration of the run's first
round, shuffled with a seed derived from the run's order seed and the round, and is written to
the store before it runs, like the plan's trials; the rule's state (rounds, time spent, why it
stopped) is written with the run after every round, so `--resume` continues the same rule.
Works with any executor: each round is one call of its `execute`.

Busy trials (analysis/busy.py) count in no interval and no comparison; a round with busy trials
is followed, where the rule would go on, by a retake: after a wait for a quiet machine (at most
the rule's `wait`, within its time budget), one more repeat of each configuration that had a busy
trial; where the wait runs out, the run stops and says the machine was busy."""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from dlbench import workloads
from dlbench.analysis import busy, compare, repeats
from dlbench.analysis.busy import Sample
from dlbench.analysis.interference import busy_summary
from dlbench.analysis.summary import summarize
from dlbench.results.store import Store, TrialRow
from dlbench.runner import retake
from dlbench.runner.executor import Outcome, Progress, RunTrials
from dlbench.runner.plan import PlannedTrial
from dlbench.spec import TrialSpec, configuration_key, trial_from_dict

# Trials decided without running (the plan's): never repeated in later rounds.
SETTLED = ("unsupported", "skipped")


@dataclass
class AutoState:
    """What the store keeps of a run's repeat rule (runs.repeats)."""

    rule: str
    rounds: int = 0
    spent_s: float = 0.0  # wall time of the rounds run so far, over every session of the run
    round_s: float = 0.0  # the last round's duration: the time budget's estimate of the next
    stop: str | None = None  # intervals | decided | budget | busy, once stopped
    text: str | None = None  # the last judgement, in words
    waited_s: float = 0.0  # waited for a quiet machine before retakes (part of spent_s)
    retakes: int = 0  # trials retaken after a busy one

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AutoState:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def state_of(store: Store, run_id: int) -> tuple[repeats.RepeatRule, AutoState] | None:
    """The auto rule of a run and its state, or None for a run with a fixed number of repeats
    (or one stored before the rule was recorded)."""
    stored = store.run(run_id).get("repeats")
    if not isinstance(stored, dict) or not isinstance(stored.get("rule"), str):
        return None
    try:
        rule = repeats.parse(stored["rule"])
    except repeats.RepeatsError:
        return None
    return (rule, AutoState.from_dict(stored)) if rule.auto else None


def unfinished(store: Store, run_id: int) -> bool:
    """An auto run that has not stopped by its rule (its parent died or was interrupted)."""
    found = state_of(store, run_id)
    return found is not None and found[1].stop is None


def _measured(rows: list[TrialRow]) -> list[TrialRow]:
    """The trials the rule judges and later rounds repeat: not the plan's settled ones, and not
    a profiled trial (run --profile: one per configuration, never in the statistics)."""
    return [r for r in rows if r.status not in SETTLED and not r.spec.get("profile")]


def evaluate(store: Store, run_id: int, rule: repeats.RepeatRule, state: AutoState) -> repeats.Judgement:
    """The rule's judgement over what the store holds of the run: each configuration's headline
    median interval, and each adjacent pair of the framework rankings (analysis.compare.rank)."""
    rows = _measured(store.trials(run_id))
    rounds = max((int(r.spec.get("repeat", 0)) for r in rows), default=-1) + 1
    configs: dict[str, list[TrialRow]] = {}
    for r in rows:
        configs.setdefault(configuration_key(r.spec), []).append(r)
    intervals: list[repeats.Interval] = []
    groups: dict[str, tuple[str, list[tuple[str, Sample]]]] = {}
    held_back = False  # an interval or a comparison that busy trials left without a value or undecided
    for trials in configs.values():
        spec = trials[0].spec
        record = workloads.stored_scenario(spec)
        metric = record.headline
        found = [(v, busy.record(t.metrics)) for t in trials if t.status == "ok" and (v := t.metrics.get(metric)) is not None]
        if not found:
            continue  # every trial failed: nothing to narrow (the failures are in the table)
        sample = Sample.of((v for v, _ in found), (r for _, r in found))
        s = summarize(sample.counted)  # no interval of a configuration rests on a busy trial
        held_back |= sample.all_busy
        intervals.append(repeats.Interval(compare.label(spec), s.n, s.rel_half_width, s.level))
        if spec.get("framework") == record.baseline:
            continue  # the record's baseline (SciPy beside the solvers) is no framework to rank
        group = configuration_key(spec, drop=("framework",), drop_policy=("options",))
        groups.setdefault(group, (metric, []))[1].append((compare.label(spec), sample))
    comparisons = []
    for metric, entries in groups.values():
        for ranked in compare.rank(entries, metric, rule.target):
            if ranked.decision is not None:
                comparisons.append((f"{ranked.name} vs {ranked.below}", ranked.decision.verdict != compare.UNDECIDED))
                held_back |= ranked.decision.busy is not None
    said = busy_summary(busy.record(r.metrics) for r in rows if r.status == "ok") if held_back else None
    return repeats.judge(rule, rounds, state.spent_s, state.round_s, intervals, comparisons, said)


def first_round(store: Store, run_id: int) -> list[TrialSpec]:
    """The run's first round without the trials the plan settled: what every later round repeats."""
    return [trial_from_dict(r.spec) for r in _measured(store.trials(run_id)) if int(r.spec.get("repeat", 0)) == 0]


def next_round(store: Store, run_id: int, repeat: int, order_seed: int | None,
               only: set[str] | None = None) -> list[tuple[int, PlannedTrial]]:
    """Round `repeat`: every measured configuration of the first round again (those whose
    configuration key is in `only`, for a retake), shuffled, written to the store as pending
    after the run's last trial."""
    rows = store.trials(run_id)
    specs = [replace(spec, repeat=repeat) for spec in first_round(store, run_id)
             if only is None or spec.config_key() in only]
    random.Random(f"{order_seed}/{repeat}").shuffle(specs)
    return [(store.add_trial(run_id, len(rows) + i, spec), PlannedTrial(spec)) for i, spec in enumerate(specs)]


def run_rounds(store: Store, run_id: int, rule: repeats.RepeatRule, state: AutoState,
               trials: list[tuple[int, PlannedTrial]], run_trials: RunTrials, progress: Progress,
               wait: retake.Wait = retake.wait_for_quiet) -> Outcome:
    """Run `trials` (the first rounds, or what a resumed run left), then one round at a time
    until the rule stops, a retake of the busy trials' configurations first where a round had
    any (module docstring); the state is stored after every round."""
    outcome = Outcome()
    order_seed = store.run(run_id).get("order_seed")
    while True:
        started = time.monotonic()
        if trials:
            outcome.add(run_trials(store, run_id, trials, progress))
            took = time.monotonic() - started
            state.spent_s += took
            rounds_run = len({p.spec.repeat for _, p in trials})
            full = len(first_round(store, run_id)) * rounds_run
            # a retake's length stands for a round's only in proportion to the trials it ran
            state.round_s = took / max(1, rounds_run) * max(1.0, full / max(1, len(trials)))
        if outcome.interrupted:
            store.set_run_repeats(run_id, state.to_dict())
            return outcome
        judgement = evaluate(store, run_id, rule, state)
        busy_now = retake.busy_rows(store.trials(run_id), (tid for tid, _ in trials))
        planned: list[tuple[int, PlannedTrial]] = []
        if judgement.stop is None and busy_now:
            planned, judgement = _retake(store, run_id, rule, state, judgement, busy_now, progress, wait)
        state.rounds, state.text = judgement.rounds, judgement.text
        progress.message(f"repeats {rule.label}: {judgement.text}")
        if judgement.stop is not None:
            state.stop = judgement.stop
            store.set_run_repeats(run_id, state.to_dict())
            return outcome
        trials = planned or next_round(store, run_id, judgement.rounds, order_seed)
        store.set_run_repeats(run_id, state.to_dict())


def _retake(store: Store, run_id: int, rule: repeats.RepeatRule, state: AutoState, judgement: repeats.Judgement,
            busy_now: list[TrialRow], progress: Progress, wait: retake.Wait
            ) -> tuple[list[tuple[int, PlannedTrial]], repeats.Judgement]:
    """After a round with busy trials that the rule would follow with another: wait for a quiet
    machine (what is left of `wait`, within the time budget), then plan one more repeat of each
    busy trial's configuration; where the machine stays busy, the judgement that stops the run
    and says why."""
    keys = {configuration_key(r.spec) for r in busy_now}
    per_trial_s = state.round_s / max(1, len(first_round(store, run_id)))
    limit = repeats.retake_wait_s(rule, state.waited_s, state.spent_s, per_trial_s * len(keys))
    said = retake.summary(busy_now)
    progress.message(f"repeats {rule.label}: {said} in round {judgement.rounds}: waiting up to {limit:.0f} s for a"
                     " quiet machine to retake them")
    quiet, waited = retake.timed_wait(wait, limit, progress)
    state.waited_s += waited
    state.spent_s += waited
    if not quiet:
        why = (f"waited {state.waited_s:.0f} s in all (wait={_seconds(rule.wait_s)}) and it stayed busy" if limit > 0
               else "no wait left within the budget to retake them")
        summary = busy_summary(busy.record(r.metrics) for r in store.trials(run_id) if r.status == "ok")
        return [], repeats.busy_stop(judgement.rounds, summary or f"the machine was busy: {said}", why)
    planned = next_round(store, run_id, judgement.rounds, store.run(run_id).get("order_seed"), only=keys)
    state.retakes += len(planned)
    names = ", ".join(sorted(compare.label(r.spec) for r in {configuration_key(r.spec): r for r in busy_now}.values()))
    text = (f"{judgement.text}; retake of what ran on a busy machine, once more after {waited:.0f} s of waiting"
            f" for quiet: {names}")
    return planned, repeats.Judgement(judgement.rounds, None, text)


def _seconds(s: float) -> str:
    return f"{s / 60:g}min" if s >= 60 else f"{s:g}s"
