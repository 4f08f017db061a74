"""Headroom (`dlbench tune`, issue 32): each framework as commonly written (the default) against
the variants its backend declares (backends/base.py: Option.variant). Pure: the search order,
which candidates fit the budget, the verdict of each candidate against the default of its own
phase, the combination rule, the best candidate and the command that re-runs it. The runner
(runner/tune.py) runs what this decides; the report (report/tune.py) shows it.

The search (docs/methodology.md, "Headroom"):
  phase 1, one factor at a time: the default, then each value the backend's variants try (in the
      backend's declared order), then the framework's other supported modes (a factor too);
      every candidate R repeats, interleaved in rounds;
  phase 2: where at least two factors each had a value decided faster than the default with
      parity passing, the combination of their best values (one per factor), run R more repeats
      interleaved with R new repeats of the default and of the best single candidate, so that the
      final comparison is within one phase;
  verdict: analysis/compare.py `decide_quiet` of the candidate's headline values against its
      phase's default (faster / slower / same / undecided), over the trials that were not busy
      (analysis/busy.py; a verdict they cannot settle is undecided and says the machine was busy),
      with the speed-up as the ratio of those medians and its conservative interval
      (stats.ratio_ci) at its true level; a candidate with any parity failure "fails parity" and
      never wins, one with a trial that did not finish ok has that status and never wins;
  best: the candidate decided faster, parity passing, with the highest median speed-up (phase 2's
      where phase 2 decided one faster), else "default: no variant decided faster".
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from dlbench.analysis import busy, compare, stats
from dlbench.analysis.busy import Sample
from dlbench.analysis.interference import Interference
from dlbench.analysis.metrics import higher_is_better

DEFAULT = "default"
COMBINATION = "combination"
MODE = "mode"  # the factor of the framework's modes
# What a trial with one of these statuses says about a candidate (no value for the statistics).
NOT_RUN_BUDGET = "not tried: budget"
# The verdict of a candidate that ran in round 1 and was then dropped for the budget (runner/tune.py
# _readmit): its trials are kept and shown, never judged (too few to decide anything).
DROPPED = "dropped (budget)"
UNSUPPORTED = "unsupported"
# Verdicts (beside the statistics' faster / slower / same / undecided).
FASTER, SLOWER, SAME, UNDECIDED = "faster", "slower", "same", "undecided"
FAILS_PARITY = "fails parity"
NO_BEST = "default: no variant decided faster"


@dataclass(frozen=True)
class Factor:
    """One thing the search varies: a declared variant option (its name without the framework)
    or the mode (MODE). `values` are those tried besides the default, in the declared order."""

    name: str
    values: tuple[str, ...]
    # An option: the modes it applies in (empty: every mode), and the variant's data.
    modes: tuple[str, ...] = ()
    why: str = ""
    source: str = ""
    addresses: tuple[str, ...] = ()
    # Other options set with each tried value (Variant.together: JAX's loop=scan needs several
    # steps per call to mean anything).
    together: tuple[tuple[str, str], ...] = ()

    def applies_in(self, mode: str) -> bool:
        return self.name == MODE or not self.modes or mode in self.modes

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Factor:
        return cls(str(d["name"]), tuple(d.get("values", ())), tuple(d.get("modes", ())), str(d.get("why", "")),
                   str(d.get("source", "")), tuple(d.get("addresses", ())),
                   tuple((str(k), str(v)) for k, v in d.get("together", ())))


@dataclass(frozen=True)
class Candidate:
    """One configuration the search runs for a cell: a mode and the options set (sorted)."""

    name: str
    mode: str
    options: tuple[tuple[str, str], ...] = ()

    def settings(self, framework: str, default_mode: str) -> str:
        """`jax.pool=reshape`, `mode eager`, `torch.memory_format=channels_last, mode eager`;
        `default` for the default."""
        parts = [f"{framework}.{k}={v}" for k, v in self.options]
        if self.mode != default_mode:
            parts.append(f"mode {self.mode}")
        return ", ".join(parts) or DEFAULT

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "mode": self.mode, "options": dict(self.options)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Candidate:
        return cls(str(d["name"]), str(d["mode"]), tuple(sorted((str(k), str(v)) for k, v in d.get("options", {}).items())))


def phase_one(default_mode: str, factors: Sequence[Factor]) -> list[Candidate]:
    """The search order: the default, then each option factor's values in the declared order,
    then the mode factor's values last (a candidate changes one factor)."""
    out = [Candidate(DEFAULT, default_mode)]
    for f in sorted(factors, key=lambda f: f.name == MODE):  # stable: the declared order otherwise
        for v in f.values:
            if f.name == MODE:
                out.append(Candidate(f"{MODE}={v}", v))
            else:
                options = dict(f.together)
                options[f.name] = v
                out.append(Candidate(f"{f.name}={v}", default_mode, tuple(sorted(options.items()))))
    return out


def factor_of(candidate: Candidate, default_mode: str) -> tuple[str, str] | None:
    """(factor, value) of a candidate that changes one factor; None for the default and for a
    combination."""
    changed = [*candidate.options, *([(MODE, candidate.mode)] if candidate.mode != default_mode else [])]
    if len(changed) == 1:
        return changed[0]
    # a phase-1 candidate whose variant sets companions (Factor.together) is named by its factor
    name, sep, value = candidate.name.partition("=")
    if sep and candidate.name not in (DEFAULT, COMBINATION) and (name, value) in changed:
        return name, value
    return None


# --- the budget -----------------------------------------------------------------------------


def admit(estimates_s: Sequence[Sequence[float]], repeats: int, budget_s: float) -> list[int]:
    """How many candidates of each cell (a prefix of its search order) phase 1 runs: taken
    position by position over the cells (every default first, then each cell's first variant,
    ...), each admitted while `repeats` runs of it still fit the budget with those admitted
    before; a cell's candidate that does not fit ends that cell's list (the later ones are
    "not tried: budget"), smaller ones of other cells may still fit."""
    taken = [0] * len(estimates_s)
    closed = [False] * len(estimates_s)
    total = 0.0
    for position in range(max((len(e) for e in estimates_s), default=0)):
        for cell, estimates in enumerate(estimates_s):
            if closed[cell] or position >= len(estimates):
                continue
            cost = repeats * estimates[position]
            if total + cost > budget_s:
                closed[cell] = True
                continue
            total += cost
            taken[cell] += 1
    return taken


def round_fits(spent_s: float, next_round_s: float, budget_s: float) -> bool:
    """Whether a round expected to take `next_round_s` (the estimate before the first, then the
    last round's duration, as analysis/repeats.py's time rule) ends within the budget."""
    return spent_s + next_round_s <= budget_s


# --- verdicts -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trials:
    """A candidate's trials in one phase: each one's status, headline value and parity verdict."""

    candidate: Candidate
    phase: int
    statuses: tuple[str, ...] = ()
    values: tuple[float, ...] = ()  # the ok trials' headline values
    parities: tuple[str, ...] = ()  # each ok trial's parity verdict (pass, fail, differs, n/a)
    trial_ids: tuple[int, ...] = ()
    records: tuple[Interference, ...] = ()  # each value's interference record (none: unknown)

    @property
    def sample(self) -> Sample:
        return Sample.of(self.values, self.records or None)


@dataclass(frozen=True)
class Judged:
    """A candidate of one phase against that phase's default."""

    candidate: Candidate
    phase: int
    n: int
    status: str  # `4 ok`, `3 ok, 1 crashed`, NOT_RUN_BUDGET, `unsupported: why`
    parity: str  # fail, differs, pass, n/a, or – where no trial has a verdict
    median: float | None
    speedup: float | None = None  # median(new) / median(default) for a higher-is-better metric
    low: float | None = None
    high: float | None = None
    level: float | None = None  # the interval's level bound (stats.ratio_ci)
    verdict: str = ""  # DEFAULT, FASTER, SLOWER, SAME, UNDECIDED, FAILS_PARITY, or the status
    more_repeats: int | None = None  # undecided: repeats per side that would likely decide it
    reason: str = ""
    busy: int = 0  # its trials that ran on a busy machine (left out of its median and verdict)
    withheld: str | None = None  # undecided because of busy trials: the busy summary

    @property
    def wins(self) -> bool:
        """Decided faster, every trial ok, parity passing: a candidate that may be the best."""
        return self.verdict == FASTER


def status_text(statuses: Sequence[str]) -> str:
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in counts.items()) or "no trial"


def parity_of(parities: Sequence[str]) -> str:
    """The candidate's parity: fail if any trial failed, else differs, pass, n/a; – if none."""
    return next((v for v in ("fail", "differs", "pass", "n/a") if v in parities), "–")


def judge(base: Trials | None, new: Trials, metric: str) -> Judged:
    """`new` against its phase's default `base` (module docstring)."""
    parity = parity_of(new.parities)
    mine = new.sample
    median = statistics.median(mine.shown) if new.values else None
    judged = Judged(new.candidate, new.phase, len(mine.shown), status_text(new.statuses), parity, median,
                    busy=mine.busy)
    if new.candidate.name == DEFAULT:
        return replace(judged, verdict=DEFAULT)
    if parity == "fail":
        return replace(judged, verdict=FAILS_PARITY, reason="a trial failed the parity check: never the best")
    failed = sorted({s for s in new.statuses if s != "ok"})
    if failed:
        return replace(judged, verdict=failed[0], reason=f"a trial ended {failed[0]}: never the best")
    if base is None or not base.values or not new.values:
        return replace(judged, verdict=UNDECIDED, reason="no default value in this phase to compare with")
    theirs = base.sample
    # the speed-up: how many times faster (a ratio of medians, > 1 is faster, whatever the metric's
    # direction), over the values that count
    ratio, low, high, level = (stats.ratio_ci(theirs.shown, mine.shown) if higher_is_better(metric)
                               else stats.ratio_ci(mine.shown, theirs.shown))
    decision = compare.decide_quiet(theirs, mine, metric)
    if decision.verdict == compare.DIFFERENT and not decision.spread_only:
        verdict = FASTER if decision.direction == "better" else SLOWER
    elif decision.verdict == compare.SAME:
        verdict = SAME
    else:
        verdict = UNDECIDED
    return replace(judged, speedup=ratio, low=low, high=high, level=level, verdict=verdict,
                   more_repeats=decision.more_repeats if verdict == UNDECIDED else None, reason=decision.reason,
                   withheld=decision.busy)


def judge_phase(entries: Sequence[Trials], metric: str) -> list[Judged]:
    """Every candidate of one phase against that phase's default (the entry named DEFAULT)."""
    base = next((e for e in entries if e.candidate.name == DEFAULT), None)
    return [judge(base, e, metric) for e in entries]


def winners(judged: Sequence[Judged], default_mode: str) -> dict[str, Judged]:
    """Per factor, its candidate decided faster (parity passing, every trial ok) with the
    highest median speed-up; factors with none are left out."""
    out: dict[str, Judged] = {}
    for j in judged:
        found = factor_of(j.candidate, default_mode)
        if found is None or not j.wins:
            continue
        name = found[0]
        if name not in out or (j.speedup or 0.0) > (out[name].speedup or 0.0):
            out[name] = j
    return out


def combination(default_mode: str, won: Mapping[str, Judged], factors: Sequence[Factor]) -> Candidate | None:
    """Phase 2's candidate: the best value of every factor that won (winners), one per factor;
    an option that does not apply in the combination's mode is left out. None where fewer than
    two factors remain (the best single candidate is then the combination)."""
    mode = won[MODE].candidate.mode if MODE in won else default_mode
    by_name = {f.name: f for f in factors}
    options: dict[str, str] = {}
    for name, j in won.items():
        if name == MODE:
            continue
        factor = by_name.get(name)
        if factor is not None and not factor.applies_in(mode):
            continue
        options.update(j.candidate.options)
    changed = len(options) + (mode != default_mode)
    if changed < 2:
        return None
    return Candidate(COMBINATION, mode, tuple(sorted(options.items())))


def best(judged: Sequence[Judged]) -> Judged | None:
    """The best candidate (module docstring): phase 2's where one of its candidates won, else
    phase 1's; None: the default stays."""
    for phase in (2, 1):
        won = [j for j in judged if j.phase == phase and j.wins]
        if won:
            return max(won, key=lambda j: j.speedup or 0.0)
    return None


# --- one cell's search, from what the store holds -------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One candidate of one phase as the search recorded it: its trials, or why it has none."""

    candidate: Candidate
    phase: int
    trial_ids: tuple[int, ...] = ()
    status: str = "tried"  # tried, NOT_RUN_BUDGET, UNSUPPORTED
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_dict(), "phase": self.phase, "trials": list(self.trial_ids),
                "status": self.status, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Entry:
        return cls(Candidate.from_dict(d["candidate"]), int(d["phase"]), tuple(int(t) for t in d.get("trials", ())),
                   str(d.get("status", "tried")), str(d.get("reason", "")))


@dataclass(frozen=True)
class Cell:
    """One workload x framework (x batch, precision) of a search: its default mode, the factors
    it varies, the entries run (or not) and the command-line arguments that name it."""

    workload: str
    framework: str
    mode: str
    metric: str
    factors: tuple[Factor, ...] = ()
    entries: tuple[Entry, ...] = ()
    run_args: tuple[str, ...] = ()  # `-w cnn -f jax --preset cpu`: what a re-run command starts with
    label: str = ""
    plain_mode: str = "compiled"  # the mode `dlbench run` runs without --mode
    # The default's trial spec (repeat 0) as stored (spec.to_dict): what `tune --resume` builds
    # every candidate's spec from; None in a search stored before it could be resumed.
    base: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "framework": self.framework, "mode": self.mode, "metric": self.metric,
                "factors": [f.to_dict() for f in self.factors], "entries": [e.to_dict() for e in self.entries],
                "run_args": list(self.run_args), "label": self.label, "plain_mode": self.plain_mode,
                "base": self.base}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cell:
        base = d.get("base")
        return cls(str(d["workload"]), str(d["framework"]), str(d["mode"]), str(d.get("metric", "samples_per_s")),
                   tuple(Factor.from_dict(f) for f in d.get("factors", ())),
                   tuple(Entry.from_dict(e) for e in d.get("entries", ())), tuple(d.get("run_args", ())),
                   str(d.get("label", "")), str(d.get("plain_mode", "compiled")),
                   dict(base) if isinstance(base, Mapping) else None)


# (status, headline value or None, parity verdict or None, interference record) of a stored
# trial, by trial id
TrialOutcome = tuple[str, float | None, str | None, Interference]


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    judged: tuple[Judged, ...]  # every entry, in the search order, phase 1 then phase 2
    best: Judged | None

    def command(self) -> str | None:
        """The one command that re-runs the best candidate (None where the default stays)."""
        return None if self.best is None else rerun_command(self.cell, self.best.candidate)


def measured(entry: Entry, outcomes: Mapping[int, TrialOutcome]) -> Trials:
    """An entry's trials as the statistics read them (ids the store no longer has are left out)."""
    statuses: list[str] = []
    values: list[float] = []
    parities: list[str] = []
    records: list[Interference] = []
    for status, value, parity, record in (outcomes[t] for t in entry.trial_ids if t in outcomes):
        if status in ("pending", "running"):
            continue  # not finished (an interrupted round): no status yet
        statuses.append(status)
        if status == "ok" and value is not None:
            values.append(float(value))
            records.append(record)
        if status == "ok" and parity is not None:
            parities.append(parity)
    return Trials(entry.candidate, entry.phase, tuple(statuses), tuple(values), tuple(parities),
                  tuple(t for t in entry.trial_ids if t in outcomes), tuple(records))


def not_run(stop: str | None) -> str:
    """What a candidate the search admitted but never ran says, by why the search stopped:
    `not run: interrupted` (a search interrupted, or whose process was killed: stop None), `not
    run: budget` (a round cut by the budget)."""
    return f"not run: {'interrupted' if stop in (None, 'interrupted') else stop}"


def cell_result(cell: Cell, outcomes: Mapping[int, TrialOutcome], stop: str | None = "done") -> CellResult:
    """Every entry of the cell judged against its phase's default; entries not run keep their
    status as their verdict, one that ran before it was dropped for the budget shows its trials
    with the verdict DROPPED, and an admitted one without a finished trial says why the search
    never ran it (not_run, by the search's `stop`), never "undecided"."""
    judged: list[Judged] = []
    for phase in sorted({e.phase for e in cell.entries}):
        here = [e for e in cell.entries if e.phase == phase]
        ran = [measured(e, outcomes) for e in here if e.status == "tried"]
        by_candidate = {j.candidate: j for j in judge_phase([t for t in ran if t.statuses], cell.metric)}
        for e in here:
            if e.status == "tried" and e.candidate not in by_candidate:
                why = not_run(stop)
                judged.append(Judged(e.candidate, phase, 0, why, "–", None, verdict=why))
            elif e.status == "tried":
                judged.append(by_candidate[e.candidate])
            elif e.trial_ids:  # ran, then dropped for the budget: what it measured, unjudged
                kept = measured(e, outcomes)
                sample = kept.sample
                judged.append(Judged(e.candidate, phase, len(sample.shown), status_text(kept.statuses),
                                     parity_of(kept.parities), statistics.median(sample.shown) if kept.values else None,
                                     verdict=DROPPED, reason=e.reason, busy=sample.busy))
            else:
                status = e.status if not e.reason else f"{e.status}: {e.reason}"
                judged.append(Judged(e.candidate, phase, 0, status, "–", None, verdict=e.status, reason=e.reason))
    return CellResult(cell, tuple(judged), best(judged))


def rerun_command(cell: Cell, candidate: Candidate) -> str:
    """`dlbench run -w cnn -f jax --preset cpu --option jax.pool=reshape` (and --mode where the
    mode is not `run`'s default)."""
    args = ["dlbench", "run", *cell.run_args]
    for k, v in candidate.options:
        args += ["--option", f"{cell.framework}.{k}={v}"]
    if candidate.mode != cell.plain_mode:
        args += ["--mode", candidate.mode]
    return shlex.join(args)


def default_trial_ids(cells: Sequence[Cell]) -> set[int]:
    """The default's trials of every phase: what the headline tables show (as commonly written)."""
    return {t for c in cells for e in c.entries if e.candidate.name == DEFAULT for t in e.trial_ids}


# --- what a finding points to ---------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredVariant:
    """A candidate a search measured, as a "why" finding may cite it (analysis/findings.py)."""

    run_id: int
    workload: str
    framework: str
    settings: str  # `jax.pool=reshape`
    addresses: tuple[str, ...]
    speedup: float
    verdict: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MeasuredVariant:
        return cls(int(d["run_id"]), str(d["workload"]), str(d["framework"]), str(d["settings"]),
                   tuple(d.get("addresses", ())), float(d["speedup"]), str(d["verdict"]))


def measured_variants(run_id: int, result: CellResult) -> list[MeasuredVariant]:
    """The cell's single-option candidates that passed parity and have a speed-up, with the
    profile categories their variants address (a finding about one of them cites it)."""
    by_name = {f.name: f for f in result.cell.factors}
    out = []
    for j in result.judged:
        found = factor_of(j.candidate, result.cell.mode)
        if found is None or found[0] == MODE or j.speedup is None or j.verdict in (FAILS_PARITY,):
            continue
        factor = by_name.get(found[0])
        if factor is None or not factor.addresses:
            continue
        out.append(MeasuredVariant(run_id, result.cell.workload, result.cell.framework,
                                   j.candidate.settings(result.cell.framework, result.cell.mode),
                                   factor.addresses, j.speedup, j.verdict))
    return out


@dataclass
class SearchState:
    """What the store keeps of a search (runs.tune): its parameters, progress, why it stopped,
    and the cells with their entries."""

    repeats: int
    budget_s: float
    order_seed: int
    phase: int = 1
    spent_s: float = 0.0
    round_s: float = 0.0
    stop: str | None = None  # done, budget, busy, interrupted
    cells: list[Cell] = field(default_factory=list)
    measured: list[MeasuredVariant] = field(default_factory=list)
    retakes: int = 0  # trials retaken after busy ones (runner/retake.py)
    waited_s: float = 0.0  # waited for a quiet machine before them (part of spent_s)
    # What `tune --resume` continues from (runner/tune.py): whether phase 1's estimates were
    # corrected after its first round, the busy trials a retake answered, the round in progress
    # (phase, repeat, its candidates in order, the time spent when it began) and the repeat phase
    # 2 began at.
    readmitted: bool = False
    answered: list[int] = field(default_factory=list)
    current: dict[str, Any] | None = None
    phase_two_start: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"repeats": self.repeats, "budget_s": self.budget_s, "order_seed": self.order_seed,
                "phase": self.phase, "spent_s": self.spent_s, "round_s": self.round_s, "stop": self.stop,
                "cells": [c.to_dict() for c in self.cells], "measured": [m.to_dict() for m in self.measured],
                "retakes": self.retakes, "waited_s": self.waited_s, "readmitted": self.readmitted,
                "answered": list(self.answered), "current": self.current, "phase_two_start": self.phase_two_start}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SearchState:
        current, start = d.get("current"), d.get("phase_two_start")
        return cls(int(d["repeats"]), float(d["budget_s"]), int(d.get("order_seed", 0)), int(d.get("phase", 1)),
                   float(d.get("spent_s", 0.0)), float(d.get("round_s", 0.0)), d.get("stop"),
                   [Cell.from_dict(c) for c in d.get("cells", ())],
                   [MeasuredVariant.from_dict(m) for m in d.get("measured", ())],
                   int(d.get("retakes", 0)), float(d.get("waited_s", 0.0)), bool(d.get("readmitted", False)),
                   [int(t) for t in d.get("answered", ())], dict(current) if isinstance(current, Mapping) else None,
                   int(start) if start is not None else None)

    @property
    def resumable(self) -> bool:
        """Stopped by an interruption (or its process killed: no stop recorded), with every
        cell's default spec stored (a search of an earlier release cannot be resumed)."""
        return self.stop in (None, "interrupted") and all(c.base is not None for c in self.cells)


class StoredTrial(Protocol):
    """What outcomes() reads of a stored trial (the store's TrialRow, the report's Trial)."""

    @property
    def id(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def spec(self) -> dict[str, Any]: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def metrics(self) -> Mapping[str, Any]: ...


def outcomes(trials: Iterable[StoredTrial], headline: Callable[[dict[str, Any]], str]) -> dict[int, TrialOutcome]:
    """Each stored trial's status, headline value (`headline(spec)` names the metric) and
    parity verdict, by trial id."""
    out: dict[int, TrialOutcome] = {}
    for t in trials:
        parity = (t.data.get("parity") or {}).get("verdict")
        out[t.id] = (t.status, t.metrics.get(headline(t.spec)), None if parity is None else str(parity),
                     busy.record(t.metrics))
    return out
