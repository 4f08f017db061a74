"""`dlbench tune`: the headroom search run (analysis/tune.py decides what runs and how it is
judged; this module builds the candidates' trials, runs them in interleaved rounds through any
executor's `execute`, and keeps the search state in the run record after every round).

A candidate is an ordinary trial: the cell's default spec with Policy.options (the variant
options, `--option FRAMEWORK.NAME=VALUE`) and mode set, validated by backends/support.py like
any trial. Each round runs one repeat of every candidate admitted, shuffled with a seed derived
from the run's order seed, the phase and the repeat (as runner/rounds.py does); phase 2's repeats
continue the indices (from R, or R+1 after a catch-up round), so a configuration and its repeat
stay unique in the run.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from dlbench import workloads
from dlbench.analysis import repeats
from dlbench.analysis import tune as tuning
from dlbench.analysis.tune import Candidate, Cell, Entry, Factor, SearchState, TrialOutcome
from dlbench.backends import get_backend, support
from dlbench.monitors.nvml import device_kind
from dlbench.results.store import Store, TrialRow
from dlbench.results.records import TrialResult
from dlbench.runner import retake
from dlbench.runner.executor import Outcome, Progress, RunTrials
from dlbench.runner.plan import Costs, Plan, PlannedTrial, Sweep, at_load, estimate_s, make_plan
from dlbench.spec import MODES, SpecError, TrialSpec, configuration_key, to_dict, trial_from_dict

Clock = Callable[[], float]
# How long a search may wait, in all, for a quiet machine before retaking busy trials (within its
# budget): the same bound as `--repeats auto`'s default wait.
QUIET_WAIT_S = repeats.QUIET_WAIT_S


@dataclass
class Search:
    """A search before and while it runs: the stored state, each candidate's spec (repeat 0) by
    (cell index, candidate), and the sweep's configurations that are not searched, with why."""

    state: SearchState
    specs: dict[tuple[int, Candidate], TrialSpec] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    # Each admitted candidate's estimated seconds per trial (the first round corrects them).
    estimates: dict[tuple[int, Candidate], float] = field(default_factory=dict)
    last_round_trials: int = 0  # how many trials the last round ran (state.round_s is its duration)
    # Every trial run so far: its seconds and its estimate (the pace a next trial is expected at).
    ran_s: float = 0.0
    ran_estimated_s: float = 0.0
    ran_trials: int = 0
    load: float = 1.0  # the present load's stretch of a first guess (cli/run.py busy_machine)

    def expected_s(self, cell: int, candidate: Candidate) -> float:
        """A next trial's expected seconds: its estimate at the pace measured so far (the mean
        trial so far where it has none: phase 2's combination)."""
        estimate = self.estimates.get((cell, candidate))
        if estimate is None:
            return self.ran_s / self.ran_trials if self.ran_trials else 0.0
        return estimate * (self.ran_s / self.ran_estimated_s if self.ran_estimated_s > 0 else 1.0)

    @property
    def trials_phase_one(self) -> int:
        return self.state.repeats * sum(1 for c in self.state.cells for e in c.entries if e.status == "tried")


def device_class() -> str:
    """Variant.values' device class: "gpu" where NVML sees one, else "cpu"."""
    return "gpu" if device_kind() == "cuda" else "cpu"


def factors(spec: TrialSpec, device: str) -> list[Factor]:
    """The cell's factors: each declared variant option that applies to its workload and mode
    on this device class (values other than the option's default, in the backend's order), then
    the framework's other supported modes."""
    backend = get_backend(spec.framework)
    workload, mode = spec.workload.name, spec.policy.mode
    out = []
    for name, option in backend.options.items():
        variant = option.variant
        if variant is None:
            continue
        values = tuple(v for v in variant.values(workload, mode, device) if v != option.default)
        if values:
            out.append(Factor(name, values, variant.modes, variant.why, variant.source, variant.addresses,
                              variant.together))
    modes = tuple(m for m in MODES if m != mode and backend.modes().get(m, "unknown") is None)
    if modes:
        out.append(Factor(tuning.MODE, modes, why="the framework's other modes (a factor like any variant)"))
    return out


def candidate_spec(base: TrialSpec, candidate: Candidate) -> TrialSpec:
    return replace(base, policy=replace(base.policy, mode=candidate.mode, options=dict(candidate.options)))


def why_not(spec: TrialSpec) -> str | None:
    """Why a candidate cannot run here (support.validate, then support.unsupported), or None."""
    try:
        backend = support.validate(spec)
    except SpecError as e:
        return str(e)
    return support.unsupported(spec, backend, device_kind())


def prepare(sweep: Sweep, repeats: int, budget_s: float, costs: Costs,
            run_args: Callable[[TrialSpec], tuple[str, ...]], plain_mode: str = "compiled", load: float = 1.0) -> Search:
    """The cells of the sweep (one default trial each: make_plan with one repeat), their
    candidates in the search order, each checked, and which of them the budget admits
    (tuning.admit, by each candidate's estimate at the present `load`: plan.at_load)."""
    plan = make_plan(replace(sweep, repeats=1))
    state = SearchState(repeats, budget_s, sweep.order_seed)
    search = Search(state, skipped=list(plan.notes), load=load)
    device = device_class()
    for planned in plan.trials:
        base = planned.spec
        label = f"{base.workload.name}/{base.framework}"
        if planned.status != "pending":
            search.skipped.append(f"{label}: {planned.status}: {planned.reason}")
            continue
        made = factors(base, device)
        entries = []
        for candidate in tuning.phase_one(base.policy.mode, made):
            spec = candidate_spec(base, candidate)
            reason = why_not(spec)
            entries.append(Entry(candidate, 1, status="tried" if reason is None else tuning.UNSUPPORTED,
                                 reason=reason or ""))
            search.specs[(len(state.cells), candidate)] = spec
        metric = workloads.stored_scenario({"workload": {"name": base.workload.name}, "scenario": base.scenario}).headline
        state.cells.append(Cell(base.workload.name, base.framework, base.policy.mode, metric, tuple(made),
                                tuple(entries), run_args(base), label, plain_mode, to_dict(base)))
    _admit(search, costs)
    return search


def _admit(search: Search, costs: Costs) -> None:
    """Mark the candidates the budget does not admit `not tried: budget`."""
    state = search.state
    tried = [[e for e in c.entries if e.status == "tried"] for c in state.cells]
    estimates = [[_estimate_s(search, i, e.candidate, costs)[0] for e in entries] for i, entries in enumerate(tried)]
    for i, entries in enumerate(tried):
        for e, seconds in zip(entries, estimates[i], strict=True):
            search.estimates[(i, e.candidate)] = seconds
    taken = tuning.admit(estimates, state.repeats, state.budget_s)
    for i, (cell, entries) in enumerate(zip(state.cells, tried, strict=True)):
        dropped = {e.candidate for e in entries[taken[i]:]}
        state.cells[i] = replace(cell, entries=tuple(replace(e, status=tuning.NOT_RUN_BUDGET) if e.candidate in dropped
                                                     else e for e in cell.entries))


def _estimate_s(search: Search, cell: int, candidate: Candidate, costs: Costs) -> tuple[float, str]:
    """A candidate's estimate at the search's load (plan.at_load), and where it comes from."""
    seconds, source = estimate_s(search.specs[(cell, candidate)], costs)
    return at_load(seconds, source, search.load), source


def estimate_phase_one_s(search: Search, costs: Costs) -> tuple[float, set[str]]:
    """(seconds at the present load, the estimates' sources) of phase 1 as admitted."""
    total, sources = 0.0, set()
    for i, cell in enumerate(search.state.cells):
        for e in cell.entries:
            if e.status == "tried":
                seconds, source = _estimate_s(search, i, e.candidate, costs)
                total += search.state.repeats * seconds
                sources.add(source)
    return total, sources


def candidates_plan(search: Search) -> Plan:
    """Every candidate's spec: what tells two trials of the search apart in progress lines."""
    return Plan(trials=[PlannedTrial(spec) for spec in search.specs.values()])


def estimate_default_s(search: Search, costs: Costs) -> list[float]:
    """Each cell's default's estimated seconds per trial."""
    return [_estimate_s(search, i, Candidate(tuning.DEFAULT, c.mode), costs)[0] for i, c in enumerate(search.state.cells)]


def warm_plan(search: Search) -> Plan:
    """The defaults, for the untimed warm imports before the first round."""
    return Plan(trials=[PlannedTrial(search.specs[(i, Candidate(tuning.DEFAULT, c.mode))])
                        for i, c in enumerate(search.state.cells)])


def outcomes(rows: Iterable[TrialRow]) -> dict[int, TrialOutcome]:
    """Each stored trial's status, headline value and parity verdict, by trial id."""
    return tuning.outcomes(rows, lambda spec: workloads.stored_scenario(spec).headline)


def run_search(store: Store, run_id: int, search: Search, run_trials: RunTrials, progress: Progress,
               clock: Clock = time.monotonic, wait: retake.Wait = retake.wait_for_quiet) -> Outcome:
    """Phase 1's rounds, then phase 2's where a cell has a combination to try, each round only
    where it fits the budget (the last round's duration) and each trial only where it is
    expected to end within it; after each phase, a retake of the trials that ran on a busy
    machine once it is quiet (_retakes); the state stored after every trial."""
    state = search.state
    outcome = Outcome()
    state.stop = None
    for repeat in range(state.repeats):
        if not _round(store, run_id, search, 1, repeat, run_trials, progress, clock, outcome, first=repeat == 0):
            return outcome
        if repeat == 0 and state.repeats > 1 and not state.readmitted:
            _readmit(store, run_id, search, progress)
            state.readmitted = True
    if not _catch_up(store, run_id, search, run_trials, progress, clock, outcome):
        return outcome
    if not _retakes(store, run_id, search, 1, run_trials, progress, clock, outcome, wait):
        return outcome
    if state.stop is None:
        _phase_two(store, run_id, search, run_trials, progress, clock, outcome, wait)
    _finish(store, run_id, search)
    return outcome


# --- resuming: `dlbench tune --resume` ----------------------------------------------------------

def resumable_runs(store: Store) -> list[int]:
    """The tune runs whose search did not end (interrupted, or its process killed), newest first."""
    return [rid for rid, stored in reversed(store.tune_states()) if SearchState.from_dict(stored).resumable]


def rebuild(store: Store, run_id: int, costs: Costs, load: float = 1.0) -> Search:
    """A stored search as it was: each candidate's spec from its cell's default (Cell.base), the
    estimates of phase 1's candidates (at the present `load`) for the pace and a readmission."""
    stored = store.run(run_id)["tune"]
    if not isinstance(stored, dict):
        raise SpecError(f"run {run_id} is not a tune search; finish a run with: dlbench run --resume {run_id}")
    state = SearchState.from_dict(stored)
    if not state.resumable:
        why = ("it ended" + (f" ({state.stop})" if state.stop else "") if state.stop not in (None, "interrupted")
               else "it was stored by an earlier dlbench, which kept no spec of its defaults")
        raise SpecError(f"run {run_id}'s search cannot be resumed: {why}; run the search again")
    search = Search(state, load=load)
    for i, cell in enumerate(state.cells):
        assert cell.base is not None
        try:
            base = trial_from_dict(cell.base)
            base.validate()
        except (SpecError, TypeError, KeyError) as e:
            raise SpecError(f"run {run_id}'s search cannot be resumed: the default of {cell.label} is not a spec"
                            f" this dlbench reads ({e})") from None
        for entry in cell.entries:
            search.specs[(i, entry.candidate)] = candidate_spec(base, entry.candidate)
            if entry.phase == 1 and entry.status in ("tried", tuning.NOT_RUN_BUDGET):
                search.estimates[(i, entry.candidate)] = _estimate_s(search, i, entry.candidate, costs)[0]
    _adopt(store, run_id, search)
    return search


def _adopt(store: Store, run_id: int, search: Search) -> None:
    """A trial of the round in progress that the store holds but the state does not (a stop
    signal landed between adding it and storing the state): given to its candidate, so that the
    resume runs it in place, not a second one beside it."""
    state, current = search.state, search.state.current
    if current is None:
        return
    known = {t for c in state.cells for e in c.entries for t in e.trial_ids}
    phase, repeat = int(current["phase"]), int(current["repeat"])
    by_key = {replace(search.specs[(int(i), Candidate.from_dict(c))], repeat=repeat).config_key():
              (int(i), Candidate.from_dict(c)) for i, c in current["keys"]}
    for row in store.trials(run_id):
        found = by_key.get(configuration_key(row.spec))
        if row.id not in known and found is not None and int(row.spec.get("repeat", 0)) == repeat:
            _add_trial(state, found[0], phase, found[1], row.id)


def resume_search(store: Store, run_id: int, search: Search, run_trials: RunTrials, progress: Progress,
                  clock: Clock = time.monotonic, wait: retake.Wait = retake.wait_for_quiet) -> Outcome:
    """Finish an interrupted search (its unfinished trials reset to pending: runner/resume.py):
    the rest of the round it was in (state.current; the interrupted trial in place), then the
    search from its start, every round it had run passed over (_round), within what is left of
    its budget. Every candidate and repeat runs once, as in a search that was never stopped."""
    outcome = Outcome()
    state = search.state
    state.stop = None
    if state.current is not None and not _run_round(store, run_id, search, run_trials, progress, clock, outcome):
        return outcome
    outcome.add(run_search(store, run_id, search, run_trials, progress, clock, wait))
    return outcome


def _round(store: Store, run_id: int, search: Search, phase: int, repeat: int, run_trials: RunTrials,
           progress: Progress, clock: Clock, outcome: Outcome,
           first: bool = False, only: Callable[[int, Entry], bool] | None = None, label: str = "") -> bool:
    """One round of the phase's tried entries (those `only` keeps, by cell index and entry),
    where it fits (a phase's first round always starts: its phase was admitted); a round the
    search ran before it was interrupted is passed over (`tune --resume` replays the search:
    resume_search). False when the search stops here (the budget, or an interruption: the state
    says which)."""
    state = search.state
    keys = [(i, e.candidate) for i, c in enumerate(state.cells) for e in c.entries
            if e.phase == phase and e.status == "tried" and (only is None or only(i, e))]
    if not keys:
        return True
    rows = {r.id: r for r in store.trials(run_id)}
    if all(_finished(_trial_of(state, rows, i, phase, candidate, repeat)) for i, candidate in keys):
        return True
    if not first and not tuning.round_fits(state.spent_s, state.round_s, state.budget_s):
        state.stop = "budget"
        progress.message(f"tune: phase {phase} stopped before round {repeat + 1}: another round as long as the last"
                         f" ({state.round_s:.0f} s) would pass the budget of {_minutes(state.budget_s)}"
                         f" ({_minutes(state.spent_s)} spent)")
        _finish(store, run_id, search)
        return False
    random.Random(f"{state.order_seed}/tune/{phase}/{repeat}").shuffle(keys)
    state.current = {"phase": phase, "repeat": repeat, "label": label or f"round {repeat + 1}",
                     "keys": [[i, c.to_dict()] for i, c in keys], "spent_s": state.spent_s}
    return _run_round(store, run_id, search, run_trials, progress, clock, outcome)


def _run_round(store: Store, run_id: int, search: Search, run_trials: RunTrials, progress: Progress, clock: Clock,
               outcome: Outcome) -> bool:
    """The round in progress (state.current), one trial at a time, each candidate that has no
    finished trial of its repeat yet (a resumed round runs only the rest, its unfinished trial in
    place): a trial starts only where the time spent and its expected length (Search.expected_s)
    stay within the budget, so that the search never passes it by more than one trial's misjudged
    length (the round is cut there); False when the search stops here."""
    state = search.state
    current = state.current
    assert current is not None
    phase, repeat, name = int(current["phase"]), int(current["repeat"]), str(current["label"])
    state.phase = phase
    keys = [(int(i), Candidate.from_dict(c)) for i, c in current["keys"]]
    store.set_run_tune(run_id, state.to_dict())
    rows = {r.id: r for r in store.trials(run_id)}
    todo = [(i, c) for i, c in keys if not _finished(_trial_of(state, rows, i, phase, c, repeat))]
    progress.message(f"tune: phase {phase}, {name}: {len(todo)} trial(s)"
                     + (f" (the rest of {len(keys)}: resumed)" if len(todo) < len(keys) else ""))
    started = clock()
    for n, (i, candidate) in enumerate(todo):
        spent = state.spent_s + (clock() - started)
        expected = search.expected_s(i, candidate)
        if search.ran_trials and spent + expected > state.budget_s:
            state.spent_s, state.round_s, state.stop = spent, clock() - started, "budget"
            state.current = None
            progress.message(f"tune: phase {phase}, {name} cut after {n} of {len(todo)} trial(s): the next, expected"
                             f" to take {expected:.0f} s, would end past the budget of {_minutes(state.budget_s)}"
                             f" ({_minutes(spent)} spent)")
            _finish(store, run_id, search)
            return False
        unfinished = _trial_of(state, rows, i, phase, candidate, repeat)
        if not _one_trial(store, run_id, search, phase, repeat, (i, candidate), run_trials,
                          _InRound(progress, n, len(todo)), clock, outcome, None if unfinished is None else unfinished.id):
            state.spent_s += clock() - started
            _finish(store, run_id, search)
            return False
    state.spent_s += clock() - started
    state.round_s = state.spent_s - float(current["spent_s"])  # a resumed round: with its part before
    state.current = None
    search.last_round_trials = len(keys)
    store.set_run_tune(run_id, state.to_dict())
    return True


def _trial_of(state: SearchState, rows: dict[int, TrialRow], cell: int, phase: int, candidate: Candidate,
              repeat: int) -> TrialRow | None:
    """The candidate's stored trial of this phase and repeat, if it has one."""
    entry = next((e for e in state.cells[cell].entries if e.phase == phase and e.candidate == candidate), None)
    ids = entry.trial_ids if entry is not None else ()
    return next((rows[t] for t in ids if t in rows and int(rows[t].spec.get("repeat", 0)) == repeat), None)


def _finished(row: TrialRow | None) -> bool:
    """A trial that ended (ok or not); not one reset for a resume (pending) or left running."""
    return row is not None and row.status not in ("pending", "running", "interrupted")


def _one_trial(store: Store, run_id: int, search: Search, phase: int, repeat: int, key: tuple[int, Candidate],
               run_trials: RunTrials, progress: Progress, clock: Clock, outcome: Outcome,
               existing: int | None = None) -> bool:
    """Add one candidate's trial to the store (or take its `existing` unfinished one, reset for
    a resume) and run it (the executor's call for one trial); the pace it ran at is kept for the
    next trials' expected length. False: interrupted."""
    state = search.state
    i, candidate = key
    spec = replace(search.specs[key], repeat=repeat)
    if existing is None:
        tid = store.add_trial(run_id, len(store.trials(run_id)), spec)
        _add_trial(state, i, phase, candidate, tid)
        store.set_run_tune(run_id, state.to_dict())
    else:
        tid = existing
    started = clock()
    part = run_trials(store, run_id, [(tid, PlannedTrial(spec))], progress)
    took = clock() - started
    outcome.add(part)
    if part.interrupted:
        state.stop = "interrupted"
        return False
    if key in search.estimates:
        search.ran_s += took
        search.ran_estimated_s += search.estimates[key]
    search.ran_trials += 1
    return True


class _InRound(Progress):
    """The executor's progress for one trial of a round, numbered within the round ([3/8])."""

    def __init__(self, progress: Progress, index: int, total: int) -> None:
        self.progress, self.index, self.total = progress, index, total

    def trial_started(self, index: int, total: int, planned: PlannedTrial) -> None:
        self.progress.trial_started(self.index, self.total, planned)

    def event(self, event: dict[str, Any]) -> None:
        self.progress.event(event)

    def trial_finished(self, index: int, total: int, planned: PlannedTrial, result: TrialResult) -> None:
        self.progress.trial_finished(self.index, self.total, planned, result)

    def message(self, text: str) -> None:
        self.progress.message(text)


def _retakes(store: Store, run_id: int, search: Search, phase: int, run_trials: RunTrials, progress: Progress,
             clock: Clock, outcome: Outcome, wait: retake.Wait) -> bool:
    """The phase's trials that ran on a busy machine, each candidate once more after a wait for
    a quiet machine (at most QUIET_WAIT_S in all, within the budget, where the retakes are
    expected to fit), until none is left unanswered; where the machine stays busy the search
    stops (`busy`: their verdicts say the machine was busy). False where the search stopped."""
    state = search.state
    while state.stop is None:
        by_trial = {tid: (i, e.candidate) for i, c in enumerate(state.cells) for e in c.entries
                    if e.phase == phase and e.status == "tried" for tid in e.trial_ids}
        found = [r for r in retake.busy_rows(store.trials(run_id), by_trial) if r.id not in state.answered]
        if not found:
            return True
        keys = {by_trial[r.id] for r in found}
        needed = sum(search.expected_s(i, c) for i, c in keys)
        limit = max(0.0, min(QUIET_WAIT_S - state.waited_s, state.budget_s - state.spent_s - needed))
        progress.message(f"tune: phase {phase}: {retake.summary(found)}: waiting up to {limit:.0f} s for a quiet"
                         f" machine to retake {len(keys)} candidate(s)")
        quiet, waited = retake.timed_wait(wait, limit, progress, clock)
        state.waited_s += waited
        state.spent_s += waited
        if not quiet:
            state.stop = "busy" if limit > 0 else "budget"
            progress.message("tune: the machine stayed busy: the verdicts those trials hold back say so" if limit > 0
                             else "tune: no time left within the budget to retake them: their verdicts say busy")
            _finish(store, run_id, search)
            return False
        state.retakes += len(keys)
        state.answered += [r.id for r in found]  # stored with the retake round (a resume does not wait again)
        if not _round(store, run_id, search, phase, _next_repeat(store, run_id), run_trials, progress, clock, outcome,
                      first=True, only=lambda i, e: (i, e.candidate) in keys, label="retake after busy trials"):
            return False
    return state.stop is None


def _readmit(store: Store, run_id: int, search: Search, progress: Progress) -> None:
    """After phase 1's first round, the estimates scaled by what the round measured (its seconds
    over its estimated seconds), for the rounds and the budget left. Slower than estimated: admit
    again, so that the candidates kept get every repeat (without this a low estimate let the
    first round eat the budget, and every candidate ended with one repeat, decided nothing); the
    defaults always stay; a dropped candidate keeps its first trial, unjudged. Faster: the
    candidates the first admission left out (rough estimates of a first search on a store are
    cautious) are admitted where all their repeats fit, in the search order; they run in the
    rounds left and one catch-up round with the defaults (_catch_up)."""
    state = search.state
    tried = [[e for e in c.entries if e.phase == 1 and e.status == "tried"] for c in state.cells]
    estimated = sum(search.estimates.get((i, e.candidate), 0.0) for i, entries in enumerate(tried) for e in entries)
    if estimated <= 0 or state.round_s == estimated:
        return
    scale = state.round_s / estimated
    if scale < 1:
        _admit_more(store, run_id, search, progress, scale)
        return
    scaled = [[scale * search.estimates.get((i, e.candidate), 0.0) for e in entries] for i, entries in enumerate(tried)]
    taken = tuning.admit(scaled, state.repeats - 1, state.budget_s - state.spent_s)
    reason = (f"dropped after round 1 of {state.repeats}: the round took {scale:.1f}x its estimate, so the budget"
              " holds fewer candidates (its first trial is kept, not judged)")
    dropped = 0
    for i, (cell, entries) in enumerate(zip(state.cells, tried, strict=True)):
        gone = {e.candidate for e in entries[max(1, taken[i]):]}
        dropped += len(gone)
        state.cells[i] = replace(cell, entries=tuple(
            replace(e, status=tuning.NOT_RUN_BUDGET, reason=reason) if e.phase == 1 and e.candidate in gone else e
            for e in cell.entries))
    if dropped:
        progress.message(f"tune: the first round took {scale:.1f}x its estimate: {dropped} candidate(s) dropped so"
                         " that the others get every repeat within the budget")
        store.set_run_tune(run_id, state.to_dict())


def _admit_more(store: Store, run_id: int, search: Search, progress: Progress, scale: float) -> None:
    """_readmit's faster case: the budget left after the admitted candidates' remaining repeats
    and a catch-up round of the defaults, offered to the candidates never run, R repeats each."""
    state = search.state

    def estimate(i: int, e: Entry) -> float:  # _admit estimated every candidate it checked
        return scale * search.estimates[(i, e.candidate)]

    admitted = [[e for e in c.entries if e.phase == 1 and e.status == "tried"] for c in state.cells]
    waiting = [[e for e in c.entries if e.phase == 1 and e.status == tuning.NOT_RUN_BUDGET and not e.trial_ids]
               for c in state.cells]
    if not any(waiting):
        return
    left = state.budget_s - state.spent_s - sum((state.repeats - 1) * estimate(i, e)
                                                for i, entries in enumerate(admitted) for e in entries)
    defaults = sum(estimate(i, e) for i, entries in enumerate(admitted) for e in entries
                   if e.candidate.name == tuning.DEFAULT)
    # position by position over the cells as the first admission: the admitted ones hold their
    # places at no cost, so a cell's default comes before another cell's variants
    held = [len(entries) for entries in admitted]
    taken = tuning.admit([[0.0] * held[i] + [estimate(i, e) for e in entries] for i, entries in enumerate(waiting)],
                           state.repeats, left - defaults)
    added = {(i, e.candidate) for i, entries in enumerate(waiting) for e in entries[:taken[i] - held[i]]}
    if not added:
        return
    for i, cell in enumerate(state.cells):
        state.cells[i] = replace(cell, entries=tuple(
            replace(e, status="tried", reason="") if e.phase == 1 and (i, e.candidate) in added else e
            for e in cell.entries))
    # the next round holds every candidate now: its expected length, for the budget check
    state.round_s = sum(estimate(i, e) for i, c in enumerate(state.cells) for e in c.entries
                        if e.phase == 1 and e.status == "tried")
    progress.message(f"tune: the first round took {scale:.1f}x its estimate: {len(added)} more candidate(s)"
                     f" admitted, {state.repeats} repeats each (a catch-up round with the defaults at the end)")
    store.set_run_tune(run_id, state.to_dict())


def _catch_up(store: Store, run_id: int, search: Search, run_trials: RunTrials, progress: Progress,
              clock: Clock, outcome: Outcome) -> bool:
    """The last repeat of the candidates admitted after round 1, with their cells' defaults again
    (so that every round holds the defaults they are judged against); False where the search
    stopped."""
    state = search.state
    short = {(i, e.candidate) for i, c in enumerate(state.cells) for e in c.entries
             if e.phase == 1 and e.status == "tried" and 0 < len(e.trial_ids) < state.repeats}
    if not short or state.stop is not None:
        return True
    per_trial = state.round_s / max(1, search.last_round_trials)
    keep = short | {(i, Candidate(tuning.DEFAULT, state.cells[i].mode)) for i in {i for i, _ in short}}
    state.round_s = per_trial * len(keep)
    # its repeat follows phase 1's rounds (0 .. R-1), whatever ran after it (a resume replays it)
    return _round(store, run_id, search, 1, state.repeats, run_trials, progress, clock, outcome,
                  only=lambda i, e: (i, e.candidate) in keep, label="catch-up round")


def _next_repeat(store: Store, run_id: int) -> int:
    """The first repeat index no trial of the run has yet."""
    return 1 + max((int(r.spec.get("repeat", 0)) for r in store.trials(run_id)), default=-1)


def _add_trial(state: SearchState, cell: int, phase: int, candidate: Candidate, tid: int) -> None:
    c = state.cells[cell]
    state.cells[cell] = replace(c, entries=tuple(
        replace(e, trial_ids=(*e.trial_ids, tid)) if e.phase == phase and e.candidate == candidate else e
        for e in c.entries))


def _phase_two(store: Store, run_id: int, search: Search, run_trials: RunTrials, progress: Progress,
               clock: Clock, outcome: Outcome, wait: retake.Wait) -> None:
    """Where two or more factors won in phase 1: their combination, with the default and the
    best single candidate again, R repeats each, only where the whole phase fits the budget (a
    resumed search continues the phase it set up: state.phase_two_start)."""
    state = search.state
    if any(e.phase == 2 for c in state.cells for e in c.entries):  # set up before the search was interrupted
        if state.phase_two_start is None and any(e.phase == 2 and e.status == "tried"
                                                  for c in state.cells for e in c.entries):
            state.phase_two_start = _next_repeat(store, run_id)  # interrupted before its first round
        if state.phase_two_start is not None:
            _phase_two_rounds(store, run_id, search, state.phase_two_start, run_trials, progress, clock, outcome, wait)
        return
    found = outcomes(store.trials(run_id))
    added = 0
    for i, cell in enumerate(state.cells):
        result = tuning.cell_result(cell, found, state.stop)
        won = tuning.winners([j for j in result.judged if j.phase == 1], cell.mode)
        combined = tuning.combination(cell.mode, won, cell.factors)
        if combined is None:
            continue
        single = max(won.values(), key=lambda j: j.speedup or 0.0).candidate
        base = search.specs[(i, Candidate(tuning.DEFAULT, cell.mode))]
        search.specs[(i, combined)] = candidate_spec(base, combined)
        reason = why_not(search.specs[(i, combined)])
        if reason is not None:  # options that each run but not together
            progress.message(f"tune: {cell.label}: the combination {combined.settings(cell.framework, cell.mode)}"
                             f" cannot run: {reason}")
            state.cells[i] = replace(cell, entries=(*cell.entries, Entry(combined, 2, status=tuning.UNSUPPORTED,
                                                                         reason=reason)))
            continue
        entries = [Entry(combined, 2), Entry(Candidate(tuning.DEFAULT, cell.mode), 2), Entry(single, 2)]
        state.cells[i] = replace(cell, entries=(*cell.entries, *entries))
        added += len(entries)
    if not added:
        return
    per_trial_s = state.round_s / max(search.last_round_trials, 1)
    needed_s = state.repeats * added * per_trial_s
    if not tuning.round_fits(state.spent_s, needed_s, state.budget_s):
        state.stop = "budget"
        for i, cell in enumerate(state.cells):
            state.cells[i] = replace(cell, entries=tuple(
                replace(e, status=tuning.NOT_RUN_BUDGET) if e.phase == 2 and e.status == "tried" else e
                for e in cell.entries))
        progress.message(f"tune: phase 2 not run: {added} candidate(s) x {state.repeats} repeats would take about"
                         f" {_minutes(needed_s)} (at phase 1's last round's pace), past the budget of"
                         f" {_minutes(state.budget_s)} ({_minutes(state.spent_s)} spent)")
        return
    state.round_s = per_trial_s * added  # the first phase-2 round's expected duration
    state.phase_two_start = _next_repeat(store, run_id)  # R, or R + 1 after a catch-up round
    _phase_two_rounds(store, run_id, search, state.phase_two_start, run_trials, progress, clock, outcome, wait)


def _phase_two_rounds(store: Store, run_id: int, search: Search, start: int, run_trials: RunTrials,
                      progress: Progress, clock: Clock, outcome: Outcome, wait: retake.Wait) -> None:
    for repeat in range(start, start + search.state.repeats):
        if not _round(store, run_id, search, 2, repeat, run_trials, progress, clock, outcome, first=repeat == start):
            return
    _retakes(store, run_id, search, 2, run_trials, progress, clock, outcome, wait)


def _finish(store: Store, run_id: int, search: Search) -> None:
    """The state with why it stopped and what a finding may cite (the measured variants)."""
    state = search.state
    if state.stop is None:  # ran to its end; "budget" where the budget left candidates untried
        cut = any(e.status == tuning.NOT_RUN_BUDGET for c in state.cells for e in c.entries)
        state.stop = "budget" if cut else "done"
    found = outcomes(store.trials(run_id))
    state.measured = [m for c in state.cells
                      for m in tuning.measured_variants(run_id, tuning.cell_result(c, found, state.stop))]
    store.set_run_tune(run_id, state.to_dict())



def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
