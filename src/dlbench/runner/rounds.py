"""`--repeats auto`: after the first rounds, one more interleaved round at a time until the rule
(analysis/repeats.py) says stop. Each new round repeats every configuration of the run's first
round, shuffled with a seed derived from the run's order seed and the round, and is written to
the store before it runs, like the plan's trials; the rule's state (rounds, time spent, why it
stopped) is written with the run after every round, so `--resume` continues the same rule.
Works with any executor: each round is one call of its `execute`."""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from dlbench import workloads
from dlbench.analysis import compare, repeats
from dlbench.analysis.summary import summarize
from dlbench.results.store import Store, TrialRow
from dlbench.runner.executor import Outcome, Progress
from dlbench.runner.plan import PlannedTrial
from dlbench.runner.ray_executor import RunTrials
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
    stop: str | None = None  # intervals | decided | budget, once stopped
    text: str | None = None  # the last judgement, in words

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
    groups: dict[str, tuple[str, list[tuple[str, list[float]]]]] = {}
    for trials in configs.values():
        spec = trials[0].spec
        record = workloads.stored_scenario(spec)
        metric = record.headline
        values = [v for t in trials if t.status == "ok" and (v := t.metrics.get(metric)) is not None]
        if not values:
            continue  # every trial failed: nothing to narrow (the failures are in the table)
        s = summarize(values)
        intervals.append(repeats.Interval(compare.label(spec), s.n, s.rel_half_width, s.level))
        if spec.get("framework") == record.baseline:
            continue  # the record's baseline (SciPy beside the solvers) is no framework to rank
        group = configuration_key(spec, drop=("framework",), drop_policy=("options",))
        groups.setdefault(group, (metric, []))[1].append((compare.label(spec), values))
    comparisons = []
    for metric, entries in groups.values():
        for ranked in compare.rank(entries, metric, rule.target):
            if ranked.decision is not None:
                comparisons.append((f"{ranked.name} vs {ranked.below}", ranked.decision.verdict != compare.UNDECIDED))
    return repeats.judge(rule, rounds, state.spent_s, state.round_s, intervals, comparisons)


def first_round(store: Store, run_id: int) -> list[TrialSpec]:
    """The run's first round without the trials the plan settled: what every later round repeats."""
    return [trial_from_dict(r.spec) for r in _measured(store.trials(run_id)) if int(r.spec.get("repeat", 0)) == 0]


def next_round(store: Store, run_id: int, repeat: int, order_seed: int | None) -> list[tuple[int, PlannedTrial]]:
    """Round `repeat`: every measured configuration of the first round again, shuffled, written
    to the store as pending after the run's last trial."""
    rows = store.trials(run_id)
    specs = [replace(spec, repeat=repeat) for spec in first_round(store, run_id)]
    random.Random(f"{order_seed}/{repeat}").shuffle(specs)
    return [(store.add_trial(run_id, len(rows) + i, spec), PlannedTrial(spec)) for i, spec in enumerate(specs)]


def run_rounds(store: Store, run_id: int, rule: repeats.RepeatRule, state: AutoState,
               trials: list[tuple[int, PlannedTrial]], run_trials: RunTrials, progress: Progress) -> Outcome:
    """Run `trials` (the first rounds, or what a resumed run left), then one round at a time
    until the rule stops; the state is stored after every round."""
    outcome = Outcome()
    order_seed = store.run(run_id).get("order_seed")
    while True:
        started = time.monotonic()
        if trials:
            outcome.add(run_trials(store, run_id, trials, progress))
            took = time.monotonic() - started
            state.spent_s += took
            state.round_s = took / max(1, len({p.spec.repeat for _, p in trials}))
        if outcome.interrupted:
            store.set_run_repeats(run_id, state.to_dict())
            return outcome
        judgement = evaluate(store, run_id, rule, state)
        state.rounds, state.text = judgement.rounds, judgement.text
        progress.message(f"repeats {rule.label}: {judgement.text}")
        if judgement.stop is not None:
            state.stop = judgement.stop
            store.set_run_repeats(run_id, state.to_dict())
            return outcome
        trials = next_round(store, run_id, judgement.rounds, order_seed)
        store.set_run_repeats(run_id, state.to_dict())
