"""`dlbench tune` (issue 32): the search's pure rules (order, budget, verdicts, combination, best),
the search run with a stand-in executor and a fake clock (no process: values and parity chosen
per candidate), and one tune of the fake backend through the CLI (4 short worker processes) whose
store the terminal report, the HTML report in headless Chromium and the exports read. No timed
assertion: the statistics are asserted on values the tests choose."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from dlbench.analysis import findings
from dlbench.analysis import tune as tuning
from dlbench.analysis.tune import Candidate, Cell, Entry, Factor, Judged, Trials
from dlbench.cli.main import main
from dlbench.report import model
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner import tune
from dlbench.runner.executor import Outcome, Progress
from dlbench.runner.plan import Costs, PlannedTrial, Sweep, estimate_s, learn
from dlbench.spec import configuration_key, to_dict

from cdp import Chromium
from conftest import TESTS_DIR
from test_report import RENDERED_CHARTS, _browser

FAST = [100.0, 101.0, 99.0, 100.5]  # a default's samples/s over 4 repeats


# --- the pure rules ---------------------------------------------------------------------------


def test_the_search_order_is_default_then_declared_variants_then_modes():
    factors = [Factor("pool", ("reshape",)), Factor(tuning.MODE, ("eager",)), Factor("fmt", ("channels_last", "x"))]
    names = [c.name for c in tuning.phase_one("compiled", factors)]
    assert names == ["default", "pool=reshape", "fmt=channels_last", "fmt=x", "mode=eager"]
    eager = tuning.phase_one("compiled", factors)[-1]
    assert (eager.mode, eager.options) == ("eager", ())
    assert tuning.factor_of(eager, "compiled") == ("mode", "eager")
    assert tuning.factor_of(Candidate("c", "eager", (("pool", "reshape"),)), "compiled") is None


def test_the_budget_admits_prefixes_position_by_position():
    # 2 repeats; cell 0's candidates cost 10 s a trial, cell 1's second 50 s
    assert tuning.admit([[10, 10, 10], [10, 50]], 2, 100) == [3, 1]  # 20+20, +20, (100 no), +20
    assert tuning.admit([[10, 10, 10], [10, 50]], 2, 30) == [1, 0]  # cell 1's default does not fit
    assert tuning.admit([[10, 10], [10, 10]], 1, 1000) == [2, 2]
    assert tuning.admit([[10]], 1, 5) == [0]
    assert tuning.round_fits(50, 40, 100) and not tuning.round_fits(70, 40, 100)


def _j(name: str, mode: str, options: tuple[tuple[str, str], ...], speedup: float, verdict: str,
       phase: int = 1) -> Judged:
    return Judged(Candidate(name, mode, options), phase, 4, "4 ok", "pass", 1.0, speedup=speedup, verdict=verdict)


def test_the_combination_takes_the_best_value_of_every_winning_factor():
    factors = [Factor("pool", ("reshape", "slices")), Factor("fmt", ("cl",), modes=("compiled",)),
               Factor("wait", ("passive",)), Factor(tuning.MODE, ("eager",))]
    judged = [_j("default", "compiled", (), 1.0, tuning.DEFAULT),
              _j("pool=reshape", "compiled", (("pool", "reshape"),), 1.8, tuning.FASTER),
              _j("pool=slices", "compiled", (("pool", "slices"),), 1.3, tuning.FASTER),
              _j("fmt=cl", "compiled", (("fmt", "cl"),), 1.1, tuning.FASTER),
              _j("wait=passive", "compiled", (("wait", "passive"),), 1.5, tuning.UNDECIDED),
              _j("mode=eager", "eager", (), 1.2, tuning.FASTER)]
    won = tuning.winners(judged, "compiled")
    assert {k: j.candidate.name for k, j in won.items()} == {"pool": "pool=reshape", "fmt": "fmt=cl", "mode": "mode=eager"}
    combined = tuning.combination("compiled", won, factors)
    # fmt applies in compiled mode only: left out of an eager combination
    assert combined == Candidate(tuning.COMBINATION, "eager", (("pool", "reshape"),))
    # one factor won: no combination (the best single candidate is it)
    assert tuning.combination("compiled", {"pool": won["pool"]}, factors) is None
    # two options in the default mode
    assert tuning.combination("compiled", {"pool": won["pool"], "fmt": won["fmt"]}, factors) == \
        Candidate(tuning.COMBINATION, "compiled", (("fmt", "cl"), ("pool", "reshape")))


def test_verdicts_against_the_default_and_a_parity_failure_never_wins():
    default = Trials(Candidate("default", "eager"), 1, ("ok",) * 4, tuple(FAST), ("pass",) * 4)
    twice = tuple(2 * v for v in FAST)
    fast = tuning.judge(default, Trials(Candidate("a=1", "eager", (("a", "1"),)), 1, ("ok",) * 4, twice, ("pass",) * 4),
                          "samples_per_s")
    assert fast.verdict == tuning.FASTER and fast.speedup == pytest.approx(2.0)
    assert fast.low is not None and fast.high is not None and fast.low <= 2.0 <= fast.high and fast.level
    # the same values, faster still, but one trial failed parity
    cheat = tuning.judge(default, Trials(Candidate("b=1", "eager", (("b", "1"),)), 1, ("ok",) * 4,
                                           tuple(3 * v for v in FAST), ("pass", "fail", "pass", "pass")),
                           "samples_per_s")
    assert cheat.verdict == tuning.FAILS_PARITY and not cheat.wins
    crashed = tuning.judge(default, Trials(Candidate("c=1", "eager", (("c", "1"),)), 1, ("ok", "crashed", "ok", "ok"),
                                             twice[:3], ("pass",) * 3), "samples_per_s")
    assert crashed.verdict == "crashed" and not crashed.wins
    same = tuning.judge(default, Trials(Candidate("d=1", "eager", (("d", "1"),)), 1, ("ok",) * 8,
                                          tuple(FAST * 2), ("pass",) * 8), "samples_per_s")
    assert same.verdict in (tuning.SAME, tuning.UNDECIDED)
    # 3 + 3 repeats can never decide (Mann-Whitney's smallest p is 0.1)
    three = tuning.judge(Trials(default.candidate, 1, ("ok",) * 3, tuple(FAST[:3]), ("pass",) * 3),
                           Trials(Candidate("a=1", "eager", (("a", "1"),)), 1, ("ok",) * 3, twice[:3], ("pass",) * 3),
                           "samples_per_s")
    assert three.verdict == tuning.UNDECIDED and three.more_repeats
    # a time (lower is better): half the time is a 2x speed-up
    halved = tuning.judge(Trials(default.candidate, 1, ("ok",) * 4, tuple(FAST), ()),
                            Trials(Candidate("a=1", "eager", (("a", "1"),)), 1, ("ok",) * 4,
                                   tuple(v / 2 for v in FAST), ()), "step_s_median")
    assert halved.verdict == tuning.FASTER and halved.speedup == pytest.approx(2.0)
    assert tuning.best([cheat, fast, crashed]) is fast
    assert tuning.best([cheat, crashed]) is None


def test_the_best_is_phase_twos_where_it_decided_one_and_the_command_reruns_it():
    one = _j("pool=reshape", "compiled", (("pool", "reshape"),), 1.9, tuning.FASTER)
    two = _j(tuning.COMBINATION, "eager", (("pool", "reshape"),), 1.7, tuning.FASTER, phase=2)
    assert tuning.best([one, two]) is two
    assert tuning.best([one, _j(tuning.COMBINATION, "eager", (), 1.7, tuning.UNDECIDED, phase=2)]) is one
    cell = Cell("cnn", "jax", "compiled", "samples_per_s", run_args=("-w", "cnn", "-f", "jax", "--preset", "cpu"))
    assert tuning.rerun_command(cell, one.candidate) == "dlbench run -w cnn -f jax --preset cpu --option jax.pool=reshape"
    assert tuning.rerun_command(cell, two.candidate).endswith("--option jax.pool=reshape --mode eager")
    assert two.candidate.settings("jax", "compiled") == "jax.pool=reshape, mode eager"


def test_a_finding_cites_the_variant_measured_for_its_category():
    ratio = findings.ratio_findings({"jax": {"pooling": 0.0996, "convolution": 0.01},
                                     "torch": {"pooling": 0.01, "convolution": 0.01}})
    (f,) = ratio
    assert f.category == "pooling"
    measured = [tuning.MeasuredVariant(7, "cnn", "jax", "jax.pool=reshape", ("pooling",), 1.8, "faster"),
                tuning.MeasuredVariant(3, "cnn", "jax", "jax.pool=slices", ("pooling",), 1.2, "faster"),
                tuning.MeasuredVariant(8, "mlp", "jax", "jax.pool=other", ("pooling",), 9.0, "faster")]
    cited = findings.with_variant(f, "cnn", "jax", measured)
    assert cited.text.startswith(f.text)
    assert cited.text.endswith("; `jax.pool=reshape` measured 1.80x the default's headline (faster; tune run 7)")
    assert findings.with_variant(f, "cnn", "torch", measured) == f  # another framework's variant: nothing
    host = findings.share_findings("jax", {"host overhead and idle": 0.5, "matmul": 0.5})[0]
    assert host.category == "host overhead and idle" and findings.with_variant(host, "cnn", "jax", measured) == host


# --- the search with a stand-in executor and a fake clock --------------------------------------

# samples/s of the fake by candidate: flavour=spicy 2x, compiled 1.5x, kernels=sloppy 3x but it
# fails parity (the stand-in's choice, mirroring the fake backend's real behaviour).
def _speed(spec_dict: dict) -> float:
    options = spec_dict["policy"].get("options") or {}
    factor = 2.0 if options.get("flavour") == "spicy" else 1.0
    factor *= 3.0 if options.get("kernels") == "sloppy" else 1.0
    factor *= 1.5 if spec_dict["policy"]["mode"] == "compiled" else 1.0
    return factor


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stand_in(clock: Clock, seconds_per_trial: float, seen: list[tuple[int, int]]):
    """An executor that runs nothing: each trial ok with the samples/s its options choose (a
    little spread by repeat), parity failing for kernels=sloppy, and the clock advanced."""
    def run_trials(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]], progress: Progress) -> Outcome:
        outcome = Outcome()
        for tid, planned in trials:
            spec = to_dict(planned.spec)
            value = 1000.0 * _speed(spec) * (1 + 0.003 * (planned.spec.repeat % 4))
            sloppy = (spec["policy"].get("options") or {}).get("kernels") == "sloppy"
            store.finish_trial(tid, TrialResult(status="ok", metrics={"samples_per_s": value},
                                                parity={"verdict": "fail" if sloppy else "pass"}))
            seen.append((tid, planned.spec.repeat))
            clock.now += seconds_per_trial
            outcome.count("ok")
        return outcome
    return run_trials


def _search(repeats: int, budget_s: float) -> tune.Search:
    sweep = Sweep(frameworks=("fake",), frameworks_explicit=True, modes=("eager",), preset="tiny", dataset_size=64,
                  batch_sizes=(16,), order_seed=5)
    return tune.prepare(sweep, repeats, budget_s, Costs(), lambda s: ("-w", "cnn", "-f", "fake", "--preset", "tiny"))


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[tuple[Store, int]]:
    store = Store(tmp_path / "t.sqlite")
    run_id = store.create_run("dlbench tune", {}, True, order_seed=5)
    yield store, run_id
    store.close()


@pytest.mark.usefixtures("fake_env")
def test_phases_combine_the_winners_and_repeat_indices_continue(stored):
    store, run_id = stored
    search = _search(4, 3600)
    (cell,) = search.state.cells
    assert [e.candidate.name for e in cell.entries] == ["default", "flavour=spicy", "kernels=sloppy", "mode=compiled"]
    assert [f.name for f in cell.factors] == ["flavour", "kernels", "mode"]
    clock, seen = Clock(), []
    outcome = tune.run_search(store, run_id, search, stand_in(clock, 10.0, seen), Progress(), clock)
    assert outcome.statuses == {"ok": 28} and not outcome.interrupted  # 4 x 4, then 3 x 4
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert state.stop == "done" and state.phase == 2 and state.spent_s == pytest.approx(280.0)
    (cell,) = state.cells
    rows = {r.id: r for r in store.trials(run_id)}
    repeats = {(e.candidate.name, e.phase): sorted(rows[t].spec["repeat"] for t in e.trial_ids) for e in cell.entries}
    assert repeats == {("default", 1): [0, 1, 2, 3], ("flavour=spicy", 1): [0, 1, 2, 3],
                       ("kernels=sloppy", 1): [0, 1, 2, 3], ("mode=compiled", 1): [0, 1, 2, 3],
                       ("combination", 2): [4, 5, 6, 7], ("default", 2): [4, 5, 6, 7],
                       ("flavour=spicy", 2): [4, 5, 6, 7]}
    # every trial's configuration and repeat is unique in the run; the variants are in the keys
    pairs = [(configuration_key(r.spec), r.spec["repeat"]) for r in rows.values()]
    assert len(set(pairs)) == len(pairs) == 28
    assert len({configuration_key(r.spec) for r in rows.values()}) == 5
    # rounds interleave: each round holds one repeat of every candidate
    assert [r for _, r in seen[:4]] == [0] * 4 and [r for _, r in seen[16:19]] == [4] * 3
    result = tuning.cell_result(cell, tune.outcomes(store.trials(run_id)))
    verdicts = {(j.candidate.name, j.phase): j.verdict for j in result.judged}
    assert verdicts[("kernels=sloppy", 1)] == tuning.FAILS_PARITY  # 3x the default, never the best
    assert verdicts[("flavour=spicy", 1)] == verdicts[("mode=compiled", 1)] == tuning.FASTER
    best = result.best
    assert best is not None and best.phase == 2 and best.candidate.name == tuning.COMBINATION
    assert best.candidate == Candidate(tuning.COMBINATION, "compiled", (("flavour", "spicy"),))
    assert best.speedup == pytest.approx(3.0, rel=0.01)
    assert result.command() == "dlbench run -w cnn -f fake --preset tiny --option fake.flavour=spicy"  # compiled: run's default
    # what a finding may cite: flavour addresses pooling
    assert [(m.settings, m.addresses) for m in state.measured] == [("fake.flavour=spicy", ("pooling",))] * 2


def interrupting(clock: Clock, seconds_per_trial: float, seen: list[tuple[int, int]], at: int):
    """stand_in, but its `at`-th trial is interrupted (SIGTERM): stored `interrupted`, the
    outcome interrupted, half a trial's time gone."""
    real, calls = stand_in(clock, seconds_per_trial, seen), [0]

    def run_trials(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]], progress: Progress) -> Outcome:
        calls[0] += 1
        if calls[0] != at:
            return real(store, run_id, trials, progress)
        ((tid, _),) = trials
        store.finish_trial(tid, TrialResult(status="interrupted", error="interrupted by SIGTERM"))
        clock.now += seconds_per_trial / 2
        outcome = Outcome(interrupted=True)
        outcome.count("interrupted")
        return outcome
    return run_trials


def _ran(store: Store, run_id: int) -> list[tuple[str, int, int, str]]:
    """(candidate, phase, repeat, status) of every trial of the run's search."""
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    rows = {r.id: r for r in store.trials(run_id)}
    return sorted((e.candidate.name, e.phase, rows[t].spec["repeat"], rows[t].status)
                  for c in state.cells for e in c.entries for t in e.trial_ids)


@pytest.mark.usefixtures("fake_env")
@pytest.mark.parametrize("at", [1, 3, 4, 9, 17, 21, 28])
def test_an_interrupted_search_resumed_runs_every_candidate_and_repeat_once(stored, at):
    """Interrupted at its `at`-th trial (round 1, its end, the middle of phase 1, the start and
    the end of phase 2), then resumed (the interrupted trial reset to pending as `tune --resume`
    does): the same trials as a search never stopped, each once, the verdicts the same, the
    search `done` within its budget (issue 48.2)."""
    from dlbench.runner import resume

    store, run_id = stored
    clock, seen = Clock(), []
    whole = store.create_run("dlbench tune", {}, True, order_seed=5)
    tune.run_search(store, whole, _search(4, 3600), stand_in(clock, 10.0, seen), Progress(), clock)
    outcome = tune.run_search(store, run_id, _search(4, 3600), interrupting(clock, 10.0, seen, at), Progress(), clock)
    assert outcome.interrupted
    stopped = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert stopped.stop == "interrupted" and stopped.resumable
    resumption = resume.prepare(store, run_id, retry_failed=False, search=True)
    assert [store.trials(run_id)[-1].id] == [tid for tid, _ in resumption.trials]
    search = tune.rebuild(store, run_id, Costs())
    tune.resume_search(store, run_id, search, stand_in(clock, 10.0, seen), Progress(), clock)
    assert _ran(store, run_id) == _ran(store, whole) and len(_ran(store, run_id)) == 28
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert state.stop == "done" and state.current is None and state.spent_s <= state.budget_s
    judged = {(j.candidate, j.phase): j.verdict for j in
              tuning.cell_result(state.cells[0], tune.outcomes(store.trials(run_id))).judged}
    reference = tuning.SearchState.from_dict(store.run(whole)["tune"])
    assert judged == {(j.candidate, j.phase): j.verdict for j in
                      tuning.cell_result(reference.cells[0], tune.outcomes(store.trials(whole))).judged}


@pytest.mark.usefixtures("fake_env")
def test_a_trial_added_but_not_yet_in_the_state_is_run_in_place_by_the_resume(stored):
    """A stop signal between adding a trial to the store and storing the search state: the resume
    gives that trial to its candidate and runs it, never a second one beside it."""
    from dlbench.runner import resume

    store, run_id = stored
    clock, seen = Clock(), []
    search = _search(4, 3600)
    assert tune.run_search(store, run_id, search, interrupting(clock, 10.0, seen, 2), Progress(), clock).interrupted
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert state.current is not None and state.current["repeat"] == 0
    i, candidate = state.current["keys"][2]  # the round's third: not run yet
    orphan = store.add_trial(run_id, 99, replace(search.specs[(i, Candidate.from_dict(candidate))], repeat=0))
    resume.prepare(store, run_id, retry_failed=False, search=True)
    tune.resume_search(store, run_id, tune.rebuild(store, run_id, Costs()), stand_in(clock, 10.0, seen), Progress(), clock)
    rows = store.trials(run_id)
    assert len(rows) == 28 and {r.status for r in rows} == {"ok"} and orphan in {r.id for r in rows}


@pytest.mark.usefixtures("fake_env")
def test_a_first_round_slower_than_its_estimate_drops_candidates_so_the_rest_get_every_repeat(stored):
    """The estimate (~1 s a trial) admits the whole phase 1; the first round then takes 10 s a
    trial (40 s of a 100 s budget): admitted again at the measured pace, the default and the
    first variant fit their 3 remaining repeats (60 s), the others are dropped with the reason;
    no round passes the budget; phase 2 never starts."""
    store, run_id = stored
    search = _search(4, 100.0)
    assert all(e.status == "tried" for e in search.state.cells[0].entries)  # the rough estimate: ~1 s a trial
    clock, seen = Clock(), []
    outcome = tune.run_search(store, run_id, search, stand_in(clock, 10.0, seen), Progress(), clock)
    assert outcome.statuses == {"ok": 4 + 3 * 2}
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert state.stop == "budget" and state.spent_s == pytest.approx(100.0)
    (cell,) = state.cells
    assert [(e.candidate.name, e.status, len(e.trial_ids)) for e in cell.entries] == [
        ("default", "tried", 4), ("flavour=spicy", "tried", 4),
        ("kernels=sloppy", tuning.NOT_RUN_BUDGET, 1), ("mode=compiled", tuning.NOT_RUN_BUDGET, 1)]
    assert "dropped after round 1 of 4" in cell.entries[2].reason
    result = tuning.cell_result(cell, tune.outcomes(store.trials(run_id)))
    verdicts = {j.candidate.name: j.verdict for j in result.judged}
    assert verdicts["flavour=spicy"] == tuning.FASTER and verdicts["mode=compiled"] == tuning.DROPPED
    # issue 47: a candidate that ran is never "not tried": its trial is shown, its median too
    dropped = next(j for j in result.judged if j.candidate.name == "mode=compiled")
    assert dropped.status == "1 ok" and dropped.median is not None


@pytest.mark.usefixtures("fake_env")
def test_a_first_round_within_its_estimate_keeps_every_candidate(stored):
    """The same search at the estimate's own pace: nothing is dropped after round 1."""
    store, run_id = stored
    search = _search(4, 3600.0)
    per_trial = max(search.estimates.values())
    clock = Clock()
    tune.run_search(store, run_id, search, stand_in(clock, per_trial * 0.5, []), Progress(), clock)
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert all(e.status == "tried" and len(e.trial_ids) == 4 for e in state.cells[0].entries if e.phase == 1)


@pytest.mark.usefixtures("fake_env")
def test_candidates_that_do_not_fit_are_not_tried_in_search_order(stored):
    store, run_id = stored
    probe = _search(2, 3600)
    each = [estimate_s(probe.specs[(0, e.candidate)], Costs())[0] for e in probe.state.cells[0].entries]
    search = _search(2, 2 * (each[0] + each[1]) + 1e-6)  # the default and the first variant
    entries = search.state.cells[0].entries
    assert [(e.candidate.name, e.status) for e in entries] == [
        ("default", "tried"), ("flavour=spicy", "tried"), ("kernels=sloppy", tuning.NOT_RUN_BUDGET),
        ("mode=compiled", tuning.NOT_RUN_BUDGET)]
    clock = Clock()  # at the estimates' own pace: round 1 admits neither more nor fewer
    tune.run_search(store, run_id, search, stand_in(clock, (each[0] + each[1]) / 2, []), Progress(), clock)
    result = tuning.cell_result(tuning.SearchState.from_dict(store.run(run_id)["tune"]).cells[0],
                                  tune.outcomes(store.trials(run_id)))
    assert [(j.candidate.name, j.verdict) for j in result.judged][2:] == [
        ("kernels=sloppy", tuning.NOT_RUN_BUDGET), ("mode=compiled", tuning.NOT_RUN_BUDGET)]


@pytest.mark.usefixtures("fake_env")
def test_a_first_round_faster_than_its_estimate_admits_the_candidates_left_out(stored):
    """The budget admits the default and the first variant by the (cautious) estimates; round 1
    then runs at a tenth of them: the two left out are admitted with 4 repeats each, in rounds
    2-4 and a catch-up round with the default, so every candidate is judged; repeat indices stay
    unique and phase 2 continues after the catch-up."""
    store, run_id = stored
    probe = _search(4, 3600)
    each = [estimate_s(probe.specs[(0, e.candidate)], Costs())[0] for e in probe.state.cells[0].entries]
    search = _search(4, 4 * (each[0] + each[1]) + 1e-6)
    assert [e.status for e in search.state.cells[0].entries] == ["tried", "tried", tuning.NOT_RUN_BUDGET,
                                                                 tuning.NOT_RUN_BUDGET]
    clock, seen = Clock(), []
    pace = 0.1 * (each[0] + each[1]) / 2
    outcome = tune.run_search(store, run_id, search, stand_in(clock, pace, seen), Progress(), clock)
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    (cell,) = state.cells
    rows = {r.id: r for r in store.trials(run_id)}
    repeats = {(e.candidate.name, e.phase): sorted(rows[t].spec["repeat"] for t in e.trial_ids) for e in cell.entries}
    assert repeats == {("default", 1): [0, 1, 2, 3, 4], ("flavour=spicy", 1): [0, 1, 2, 3],
                       ("kernels=sloppy", 1): [1, 2, 3, 4], ("mode=compiled", 1): [1, 2, 3, 4],
                       ("combination", 2): [5, 6, 7, 8], ("default", 2): [5, 6, 7, 8],
                       ("flavour=spicy", 2): [5, 6, 7, 8]}
    assert outcome.statuses == {"ok": 2 + 3 * 4 + 3 + 3 * 4}
    assert [r for _, r in seen[14:17]] == [4] * 3  # the catch-up round: the two admitted late and the default
    pairs = [(configuration_key(r.spec), r.spec["repeat"]) for r in rows.values()]
    assert len(set(pairs)) == len(pairs)
    assert state.stop == "done" and clock.now <= state.budget_s
    verdicts = {(j.candidate.name, j.phase): j.verdict
                for j in tuning.cell_result(cell, tune.outcomes(store.trials(run_id))).judged}
    assert verdicts[("kernels=sloppy", 1)] == tuning.FAILS_PARITY
    assert verdicts[("mode=compiled", 1)] == verdicts[("flavour=spicy", 1)] == tuning.FASTER


@pytest.mark.usefixtures("fake_env")
def test_a_faster_first_round_admits_only_what_fits_the_budget_left(stored):
    """At 0.7 of the estimates' pace the budget left holds the remaining repeats of the two
    admitted, the catch-up's default, but not 4 repeats of another candidate: nothing more."""
    store, run_id = stored
    probe = _search(4, 3600)
    each = [estimate_s(probe.specs[(0, e.candidate)], Costs())[0] for e in probe.state.cells[0].entries]
    search = _search(4, 4 * (each[0] + each[1]) + 1e-6)
    pace = 0.7 * (each[0] + each[1]) / 2
    scale = 2 * pace / (each[0] + each[1])
    left = search.state.budget_s - 2 * pace - 3 * 2 * pace  # after round 1 and the two's other repeats
    assert 4 * scale * each[2] > left - pace  # the next candidate's 4 repeats, beside the catch-up's default
    clock = Clock()
    tune.run_search(store, run_id, search, stand_in(clock, pace, []), Progress(), clock)
    (cell,) = tuning.SearchState.from_dict(store.run(run_id)["tune"]).cells
    assert [(e.candidate.name, e.status, len(e.trial_ids)) for e in cell.entries if e.phase == 1] == [
        ("default", "tried", 4), ("flavour=spicy", "tried", 4),
        ("kernels=sloppy", tuning.NOT_RUN_BUDGET, 0), ("mode=compiled", tuning.NOT_RUN_BUDGET, 0)]
    assert clock.now <= 4 * (each[0] + each[1]) + 1e-6


@pytest.mark.usefixtures("fake_env")
def test_candidates_admitted_after_round_1_take_every_cells_default_first(stored):
    """Two cells (cnn and mlp on the fake), the budget admitting cnn's default alone; round 1
    runs fast enough for one more candidate: mlp's default, not cnn's first variant (a cell
    without its default judges nothing)."""
    store, run_id = stored
    sweep = Sweep(workloads=("cnn", "mlp"), frameworks=("fake",), frameworks_explicit=True, modes=("eager",),
                  preset="tiny", dataset_size=64, batch_sizes=(16,), order_seed=5)

    def prepare(budget_s: float) -> tune.Search:
        return tune.prepare(sweep, 4, budget_s, Costs(), lambda s: ("-w", s.workload.name, "-f", "fake"))

    probe = prepare(3600)
    est = [[estimate_s(probe.specs[(i, e.candidate)], Costs())[0] for e in c.entries]
           for i, c in enumerate(probe.state.cells)]
    budget = 4 * est[0][0] + 1e-6
    search = prepare(budget)
    assert [[e.status for e in c.entries][:2] for c in search.state.cells] == [
        ["tried", tuning.NOT_RUN_BUDGET], [tuning.NOT_RUN_BUDGET, tuning.NOT_RUN_BUDGET]]
    scale = 0.38
    left = budget - 4 * scale * est[0][0] - scale * est[0][0]  # its rounds and the catch-up's default
    assert 4 * scale * est[1][0] <= left < 4 * scale * (est[1][0] + min(est[0][1], est[1][1]))  # room for one
    clock = Clock()
    tune.run_search(store, run_id, search, stand_in(clock, scale * est[0][0], []), Progress(), clock)
    cells = tuning.SearchState.from_dict(store.run(run_id)["tune"]).cells
    assert [[(e.candidate.name, e.status, len(e.trial_ids)) for e in c.entries][:2] for c in cells] == [
        [("default", "tried", 4), ("flavour=spicy", tuning.NOT_RUN_BUDGET, 0)],
        [("default", "tried", 4), ("flavour=spicy", tuning.NOT_RUN_BUDGET, 0)]]  # mlp's: rounds 2-4, catch-up


class _Said(Progress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


@pytest.mark.usefixtures("fake_env")
def test_a_loaded_machine_cuts_the_first_round_so_the_budget_is_never_passed_by_more_than_a_trial(stored):
    """Issue 45: at load ~17 `tune --budget 10min` estimated 8.8 min, ran 19.6 and its first round
    could not stop. Trials at 6x their estimate: the first round is cut where the next trial would
    end past the budget, so the search ends within it plus at most one trial."""
    store, run_id = stored
    search = _search(4, 3600)
    each = max(search.estimates.values())
    budget = 4 * 4 * each  # the whole of phase 1 at the estimates' pace
    search = _search(4, budget)
    assert all(e.status == "tried" for e in search.state.cells[0].entries)
    clock, seen, said = Clock(), [], _Said()
    tune.run_search(store, run_id, search, stand_in(clock, 6 * each, seen), said, clock)
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert state.stop == "budget" and clock.now <= budget + 6 * each
    assert len(seen) < 4  # round 1 itself was cut
    assert any("round 1 cut after" in line and "would end past the budget" in line for line in said.lines)
    # no trial of the cut round is left pending in the store
    assert {r.status for r in store.trials(run_id)} == {"ok"}


def _hog(clock: Clock, seconds_per_trial: float, busy_at: set[int]):
    """stand_in's values, but the n-th trial run (from 0) in `busy_at` ran beside a hog: a third
    of its speed and foreign CPU 80 %."""
    count = [0]

    def run_trials(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]], progress: Progress) -> Outcome:
        outcome = Outcome()
        for tid, planned in trials:
            spec = to_dict(planned.spec)
            hog = count[0] in busy_at
            value = 1000.0 * _speed(spec) * (1 + 0.003 * (planned.spec.repeat % 4)) * (0.3 if hog else 1.0)
            store.finish_trial(tid, TrialResult(status="ok", parity={"verdict": "pass"}, metrics={
                "samples_per_s": value, "foreign_cpu_share": 0.8 if hog else 0.01}))
            count[0] += 1
            clock.now += seconds_per_trial
            outcome.count("ok")
        return outcome
    return run_trials


def _flavour_only() -> tune.Search:
    search = _search(4, 3600)
    (cell,) = search.state.cells
    search.state.cells[0] = replace(cell, entries=tuple(
        e if e.candidate.name in ("default", "flavour=spicy") else replace(e, status=tuning.NOT_RUN_BUDGET)
        for e in cell.entries))
    return search


@pytest.mark.usefixtures("fake_env")
def test_tune_retakes_a_busy_trial_once_the_machine_is_quiet(busy_judged, stored):
    store, run_id = stored
    search = _flavour_only()
    clock, said, waits = Clock(), _Said(), []

    def quiet_after(limit_s: float, progress: Progress) -> float:
        waits.append(limit_s)
        clock.now += 40.0
        return 40.0

    # the second trial of round 1 ran beside a hog
    tune.run_search(store, run_id, search, _hog(clock, 10.0, {1}), said, clock, quiet_after)
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert state.retakes == 1 and state.waited_s == pytest.approx(40.0) and waits == [tune.QUIET_WAIT_S]
    rows = {r.id: r for r in store.trials(run_id)}
    busy = [r for r in rows.values() if r.metrics.get("foreign_cpu_share") == 0.8]
    assert len(busy) == 1
    retaken = [r for r in rows.values() if configuration_key(r.spec) == configuration_key(busy[0].spec)
               and r.spec["repeat"] == 4]
    assert len(retaken) == 1 and retaken[0].status == "ok"  # after the 4 rounds, its own repeat index
    pairs = [(configuration_key(r.spec), r.spec["repeat"]) for r in rows.values()]
    assert len(set(pairs)) == len(pairs)
    assert any("1 trial busy (foreign CPU up to 80%): waiting up to 600 s" in line for line in said.lines)
    assert any("retake after busy trials" in line for line in said.lines)
    (cell,) = state.cells
    result = tuning.cell_result(cell, tune.outcomes(store.trials(run_id)))
    spicy = next(j for j in result.judged if j.candidate.name == "flavour=spicy" and j.phase == 1)
    assert spicy.verdict == tuning.FASTER and spicy.speedup == pytest.approx(2.0, rel=0.01)


@pytest.mark.usefixtures("fake_env")
def test_a_search_interrupted_in_its_retake_round_resumes_it_without_waiting_again(busy_judged, stored):
    """The retake of a busy trial interrupted: the resume runs that retake once, in place, at its
    own repeat index, and does not wait for a quiet machine a second time."""
    from dlbench.runner import resume

    store, run_id = stored
    clock, waits = Clock(), []

    def quiet_after(limit_s: float, progress: Progress) -> float:
        waits.append(limit_s)
        clock.now += 40.0
        return 40.0

    hog, calls = _hog(clock, 10.0, {1}), [0]

    def run_trials(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]], progress: Progress) -> Outcome:
        calls[0] += 1
        if calls[0] != 9:  # the retake, after 2 candidates x 4 rounds
            return hog(store, run_id, trials, progress)
        ((tid, _),) = trials
        store.finish_trial(tid, TrialResult(status="interrupted", error="interrupted by SIGTERM"))
        return Outcome(interrupted=True)

    assert tune.run_search(store, run_id, _flavour_only(), run_trials, Progress(), clock, quiet_after).interrupted
    resume.prepare(store, run_id, retry_failed=False, search=True)
    tune.resume_search(store, run_id, tune.rebuild(store, run_id, Costs()), hog, Progress(), clock, quiet_after)
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    # (stopped by "budget": _flavour_only marks the other candidates not tried for it)
    assert state.stop == "budget" and state.current is None and state.retakes == 1 and waits == [tune.QUIET_WAIT_S]
    rows = store.trials(run_id)
    assert len(rows) == 9 and [r.spec["repeat"] for r in rows].count(4) == 1 and rows[-1].status == "ok"
    assert json.loads(sqlite3.connect(store.path).execute(
        "SELECT attempts FROM trials WHERE id=?", (rows[-1].id,)).fetchone()[0])[0]["status"] == "interrupted"


@pytest.mark.usefixtures("fake_env")
def test_tune_says_busy_where_the_machine_stays_busy(busy_judged, stored, capsys):
    store, run_id = stored
    search = _flavour_only()
    clock = Clock()
    # every trial ran beside the hog, and the wait for quiet runs out
    tune.run_search(store, run_id, search, _hog(clock, 10.0, {0, 1, 2, 3, 4, 5, 6, 7}), _Said(), clock,
                    lambda limit, progress: None)
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    assert state.stop == "busy" and state.retakes == 0
    (cell,) = state.cells
    result = tuning.cell_result(cell, tune.outcomes(store.trials(run_id)))
    spicy = next(j for j in result.judged if j.candidate.name == "flavour=spicy")
    assert spicy.verdict == tuning.UNDECIDED and spicy.withheld and spicy.more_repeats is None
    assert result.best is None  # never a winner taken on a busy machine
    from dlbench.report.tables import report_tables

    tables = {t.id: t for t in report_tables(model.load(store, [run_id]))}
    verdicts = [c.text for c in tables["candidates"].column("verdict")]
    assert "undecided (busy)" in verdicts
    notes = " ".join(tables["candidates"].notes)
    assert "left out of its median and verdict; undecided: the machine was busy: foreign CPU up to 80%" in notes
    assert "tune stopped: the machine stayed busy" in " ".join(tables["headroom"].notes)
    # a search that could not judge is no green exit: 4, undecided
    import argparse

    from dlbench.cli import tune as tune_command
    from dlbench.report.terminal import make_console

    args = argparse.Namespace(wide=False, store=str(store.path))
    assert tune_command._report(make_console(), store, run_id, args, False) == 4


@pytest.mark.usefixtures("fake_env")
def test_the_plan_corrects_its_first_guesses_for_the_load_and_the_store_is_not_scaled_again():
    sweep = Sweep(frameworks=("fake",), frameworks_explicit=True, modes=("eager",), preset="tiny", dataset_size=64,
                  batch_sizes=(16,), order_seed=5)
    quiet = tune.prepare(sweep, 4, 3600, Costs(), lambda s: (), load=1.0)
    loaded = tune.prepare(sweep, 4, 3600, Costs(), lambda s: (), load=3.0)
    assert tune.estimate_phase_one_s(loaded, Costs())[0] == pytest.approx(3 * tune.estimate_phase_one_s(quiet, Costs())[0])
    # a budget that holds phase 1 at a quiet machine's pace holds a third of it at load 3
    budget = tune.estimate_phase_one_s(quiet, Costs())[0] + 1e-6
    assert all(e.status == "tried" for e in tune.prepare(sweep, 4, budget, Costs(), lambda s: ()).state.cells[0].entries)
    cut = tune.prepare(sweep, 4, budget, Costs(), lambda s: (), load=3.0).state.cells[0].entries
    assert [e.status for e in cut].count("tried") < len(cut)
    # estimates learnt from the store already hold the load they ran under
    spec = quiet.specs[(0, Candidate("default", "eager"))]
    costs = learn([(to_dict(replace(spec, policy=replace(spec.policy, options=dict(c.options), mode=c.mode))), 7.0,
                    None) for c in (e.candidate for e in quiet.state.cells[0].entries)])
    stored = tune.prepare(sweep, 4, 3600, costs, lambda s: (), load=3.0)
    assert tune.estimate_phase_one_s(stored, costs) == (4 * 4 * 7.0, {"store"})


def test_search_state_round_trips_through_json():
    state = tuning.SearchState(4, 3600.0, 9, cells=[Cell("cnn", "jax", "compiled", "samples_per_s",
                                                            (Factor("pool", ("reshape",), addresses=("pooling",)),),
                                                            (Entry(Candidate("default", "compiled"), 1, (3, 4)),),
                                                            ("-w", "cnn"), "cnn/jax")])
    again = tuning.SearchState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again == state


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,msg", [
    (["--budget", "soon"], "tune --budget 'soon' is not a duration such as 90s, 30min or 2h"),
    (["--budget", "0s"], "tune --budget '0s' is not a duration"),
    (["--repeats", "auto"], "tune --repeats 'auto' is not a whole number from 1 to 1000"),
    (["--repeats", "0"], "tune --repeats '0' is not a whole number"),
    (["--mode", "eager,compiled"], "tune --mode eager,compiled: give one mode"),
    (["-f", "nosuch"], "nosuch"),
    (["-w", "nosuch", "-f", "fake"], "nosuch"),
    (["-f", "fake", "--mode", "fast"], "mode 'fast' is not one of"),
    (["-f", "fake", "--mode", "eager", "--budget", "1s"], "tune --budget 1s admits no trial: a default alone needs about"),
])
@pytest.mark.usefixtures("fake_env")
def test_bad_tune_input_is_one_line_exit_2(tmp_path, capsys, argv, msg):
    assert main(["tune", *argv, "--store", str(tmp_path / "s.sqlite")]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("dlbench: error: ") and captured.err.count("\n") == 1
    assert msg in captured.err and "Traceback" not in captured.err
    path = tmp_path / "s.sqlite"
    if path.exists():  # refused before a run was made
        db = sqlite3.connect(path)
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
        db.close()


# --- one tune of the fake backend through the CLI ----------------------------------------------

TINY = ["--mode", "eager", "--preset", "tiny", "--dataset-size", "64", "-b", "16", "--epochs", "1"]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory, _cache_dir: Path) -> Iterator[tuple[str, str]]:
    """`dlbench tune -f fake --repeats 1`: 4 candidates, one worker process each (about 6 s)."""
    path = tmp_path_factory.mktemp("tune") / "t.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
        mp.setenv("DLBENCH_LOCK", str(path.with_suffix(".lock")))
        mp.syspath_prepend(str(TESTS_DIR))
        mp.setenv("FAKE_BEHAVIOUR", "ok")
        mp.setenv("DLBENCH_REFERENCE_FRAMEWORK", "fake")
        mp.setenv("DLBENCH_CACHE_DIR", str(_cache_dir / "fake"))  # the session's fake references (conftest)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["tune", "-f", "fake", *TINY, "--repeats", "1", "--budget", "30min", "--store", str(path)])
        assert code == 0, out.getvalue()
        yield str(path), out.getvalue()


@pytest.mark.usefixtures("fake_env")
def test_tune_states_its_plan_and_reports_every_candidate(tuned, capsys):
    path, out = tuned
    assert "dlbench tune: 1 cell(s), 4 candidate(s) in phase 1, 4 trial(s) (1 repeats each), estimated" in out
    assert "budget 30 min" in out
    assert "cnn/fake eager: default, flavour=spicy, kernels=sloppy, mode=compiled" in out
    assert "note: with 1 repeat(s) per candidate no candidate can be decided faster" in out
    assert "headroom: each framework as commonly written" in out and "default: no variant decided faster" in out
    with Store(path) as store:
        rows = store.trials(1)
        state = tuning.SearchState.from_dict(store.run(1)["tune"])
        assert store.run(1)["command"].startswith("dlbench tune -f fake")
    assert state.stop == "done" and len(rows) == 4 and {r.status for r in rows} == {"ok"}
    sloppy = next(r for r in rows if (r.spec["policy"].get("options") or {}).get("kernels") == "sloppy")
    assert sloppy.data["parity"]["verdict"] == "fail"  # the fake's sloppy kernels: off by 1 %
    assert "fails parity" in out
    # the headline (model) holds the default only; the report shows the headroom tables again
    with Store(path) as store:
        report = model.load(store, [1])
    assert [c.axes["options"] for c in report.configs] == ["–"]
    assert main(["report", "1", "--store", path]) == 0
    again = capsys.readouterr().out
    assert "headroom: each framework" in again and "candidates: every setting" in again
    assert "fake.kernels=sloppy" in again


@pytest.mark.usefixtures("fake_env")
def test_a_killed_search_says_so_and_tune_resume_finishes_it(tmp_path, monkeypatch, capsys):
    """SIGTERM during the search's first trial (issue 48.2): exit 130 and how to finish it; its
    report says `not run: interrupted` for the candidates never run and why it stopped in words;
    `run --resume` leaves it to `tune --resume` (one line, exit 2, or a hint for the default);
    `tune --resume` runs the interrupted trial again in place and the rest of the search."""
    import signal
    import subprocess
    import sys

    from test_faults import _default_stop_signals, running_trial, wait_for

    monkeypatch.setenv("FAKE_BEHAVIOUR", "hang,ok")  # repeat 0 hangs: the search's first round
    path = tmp_path / "t.sqlite"
    parent = subprocess.Popen([sys.executable, "-m", "dlbench.cli.main", "tune", "-f", "fake", *TINY, "--repeats", "2",
                               "--budget", "30min", "--store", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, preexec_fn=_default_stop_signals)
    wait_for("the first trial to run", running_trial(path, 0))
    parent.send_signal(signal.SIGTERM)
    out, err = parent.communicate(timeout=60)
    assert parent.returncode == 130, err
    assert f"finish it with: dlbench tune --resume 1 --store {path}" in out
    assert "tune interrupted (finish it with: dlbench tune --resume 1)" in out and "(None)" not in out
    assert main(["report", "--wide", "--store", str(path)]) == 0
    report = capsys.readouterr().out
    candidates = report.split("candidates: every setting")[1]
    assert sum("not run: interrupted" in line for line in candidates.splitlines()) == 3, report
    assert "undecided" not in candidates
    assert main(["run", "--resume", "1", "--store", str(path)]) == 2
    assert capsys.readouterr().err == (f"dlbench: error: run 1 is a tune search; finish it with: dlbench tune"
                                       f" --resume 1 --store {path}\n")
    assert main(["run", "--resume", "--store", str(path)]) == 0
    assert "dlbench tune --resume 1" in capsys.readouterr().out
    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
    code = main(["tune", "--resume", "--store", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "resuming the search of run 1" in out and "not run: interrupted" not in out
    with Store(path) as store:
        state = tuning.SearchState.from_dict(store.run(1)["tune"])
        rows = store.trials(1)
        assert store.run(1)["status"] == "ok"
    assert state.stop == "done" and {r.status for r in rows} == {"ok"}
    phase_one = [(e.candidate.name, rows_by[t].spec["repeat"]) for rows_by in [{r.id: r for r in rows}]
                 for e in state.cells[0].entries if e.phase == 1 for t in e.trial_ids]
    assert sorted(phase_one) == sorted((e.candidate.name, r) for e in state.cells[0].entries if e.phase == 1
                                       for r in (0, 1))
    assert main(["tune", "--resume", "--store", str(path)]) == 0
    assert "nothing to resume" in capsys.readouterr().out


@pytest.mark.usefixtures("fake_env")
def test_tune_runs_export_their_options(tuned, tmp_path, capsys):
    path, _ = tuned
    assert main(["export", "1", "--format", "csv", "--store", path]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    options = {r["options"] for r in rows}
    assert {"", "flavour=spicy", "kernels=sloppy"} <= options
    assert main(["export", "1", "--format", "json", "--store", path]) == 0
    exported = json.loads(capsys.readouterr().out)
    text = json.dumps(exported)
    assert '"flavour": "spicy"' in text and '"kernels": "sloppy"' in text
    pytest.importorskip("pyarrow")
    out = tmp_path / "pq"
    assert main(["export", "1", "--format", "parquet", "-o", str(out), "--store", path]) == 0
    import pyarrow.parquet as pq

    tables = [pq.read_table(p).to_pylist() for p in sorted(out.glob("*.parquet"))]
    assert any("kernels=sloppy" in {str(r.get("options")) for r in t} for t in tables)


@pytest.mark.usefixtures("fake_env")
def test_compare_refuses_a_variant_against_the_default_without_force(tuned, tmp_path, capsys):
    """The tune run exported and split into its default's and its flavour=spicy trials (no new
    process): compare names the policy difference either way round, and compares with --force."""
    path, _ = tuned
    assert main(["export", "1", "--format", "json", "--store", path]) == 0
    exported = json.loads(capsys.readouterr().out)

    def part(name: str, keep: dict[str, str]) -> str:
        runs = [{**r, "trials": [t for t in r["trials"] if (t["spec"]["policy"].get("options") or {}) == keep
                                 and t["spec"]["policy"]["mode"] == "eager"]} for r in exported["runs"]]
        out = tmp_path / name
        out.write_text(json.dumps({**exported, "runs": runs}))
        return str(out)

    default, spicy = part("default.json", {}), part("spicy.json", {"flavour": "spicy"})
    for base, new, change in ((default, spicy, "{} -> {'flavour': 'spicy'}"), (spicy, default, "{'flavour': 'spicy'} -> {}")):
        assert main(["compare", base, new]) == 2
        err = capsys.readouterr().err
        assert f"the policy differs: cnn/fake/eager b16 s0: policy options {change}" in err, err
    assert main(["compare", default, spicy, "--force"]) in (0, 4)


def test_headroom_chart_in_headless_chromium(tuned, tmp_path, capsys):
    browser = _browser()
    path, _ = tuned
    html = tmp_path / "tune.html"
    assert main(["report", "1", "--store", path, "--html", str(html)]) == 0
    b = Chromium(browser)
    try:
        b.open(html)
        rendered = b.evaluate(RENDERED_CHARTS)
        text = b.evaluate("document.body.innerText")
        traces = b.evaluate("document.querySelectorAll('#chart-headroom .main-svg .trace').length")
    finally:
        b.close()
    assert b.errors() == []
    assert rendered.get("headroom", 0) >= 1, rendered
    assert traces >= 1  # one per framework: the fake's
    assert "Headroom" in text and "Candidates" in text and "fails parity" in text


def test_the_real_jax_variants_become_validated_candidates():
    """JAX's declared variants on the cnn: the search tries their values as `--option`s, each
    validated like any trial; a variant with companions (loop=scan needs several steps per
    call) carries them; JAX has one mode, so no mode factor. Nothing runs."""
    from dlbench.backends import get_backend

    ok, why = get_backend("jax").available()
    if not ok:
        pytest.skip(why)
    sweep = Sweep(workloads=("cnn",), frameworks=("jax",), frameworks_explicit=True, preset="tiny")
    search = tune.prepare(sweep, 4, 3600, Costs(), lambda s: ("-w", "cnn", "-f", "jax", "--preset", "tiny"))
    (cell,) = search.state.cells
    names = [e.candidate.name for e in cell.entries]
    assert names[0] == "default" and "pool=reshape" in names and "loop=scan" in names
    assert all(e.status == "tried" for e in cell.entries)
    assert not any(n.startswith("mode=") for n in names)
    by_name = {e.candidate.name: e.candidate for e in cell.entries}
    assert search.specs[(0, by_name["pool=reshape"])].policy.options == {"pool": "reshape"}
    scan = by_name["loop=scan"]
    assert search.specs[(0, scan)].policy.options == {"loop": "scan", "steps_per_call": "8"}
    assert tuning.factor_of(scan, "compiled") == ("loop", "scan")
    assert tuning.rerun_command(cell, by_name["pool=reshape"]) == \
        "dlbench run -w cnn -f jax --preset tiny --option jax.pool=reshape"


@pytest.mark.slow
def test_a_real_tune_of_the_jax_mlp_finishes(tmp_path, capsys):
    """A real framework, tiny preset, 2 repeats: the search runs, stores and reports (no timing
    asserted; with JAX's declared variants it tries each, without any only the default)."""
    pytest.importorskip("jax")
    store = str(tmp_path / "real.sqlite")
    assert main(["tune", "-w", "mlp", "-f", "jax", "--preset", "tiny", "--repeats", "2", "--budget", "10min",
                 "--allow-concurrent", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "dlbench tune: 1 cell(s)" in out and "headroom: each framework" in out
    with Store(store) as s:
        state = tuning.SearchState.from_dict(s.run(1)["tune"])
        assert state.stop in ("done", "budget") and s.statuses(1).get("ok", 0) >= 2


# --- what the report says of a search (issue 47) ------------------------------------------------


def _searched_store(path: Path, faster: list[float]) -> Store:
    """A tune run of mlp/torch as a 2-minute search leaves it: the default and one variant with 4
    trials each (windows too short to time), one dropped after its first trial, one never run, one
    unsupported; every trial quiet."""
    from dlbench.spec import Policy, TrialSpec, WorkloadSpec

    cands = {"default": Candidate("default", "eager"),
             "foreach": Candidate("optimizer=foreach", "eager", (("optimizer", "foreach"),)),
             "for-loop": Candidate("optimizer=for-loop", "eager", (("optimizer", "for-loop"),)),
             "mkldnn": Candidate("mkldnn=off", "eager", (("mkldnn", "off"),)),
             "compiled": Candidate("mode=compiled", "compiled")}
    store = Store(path)
    state = tuning.SearchState(repeats=4, budget_s=120.0, order_seed=1, spent_s=110.0, stop="budget")
    run = store.create_run("dlbench tune -w mlp -f torch --mode eager --preset tiny --budget 2min", {}, False,
                           tune=state.to_dict())
    ids: dict[str, list[int]] = {name: [] for name in cands}
    runs = [("default", FAST), ("foreach", faster), ("for-loop", [55.0])]
    seq = 0
    for name, values in runs:
        for repeat, v in enumerate(values):
            c = cands[name]
            spec = TrialSpec(workload=WorkloadSpec(name="mlp", model_size="tiny", batch_size=32), framework="torch",
                             policy=Policy(mode=c.mode, options=dict(c.options)), repeat=repeat)
            tid = store.add_trial(run, seq, spec)
            seq += 1
            store.finish_trial(tid, TrialResult(status="ok", parity={"verdict": "pass"}, metrics={
                "samples_per_s": v, "timed_window_short": 1.0, "foreign_cpu_share": 0.01}))
            ids[name].append(tid)
    dropped = "dropped after round 1 of 4: the round took 2.0x its estimate (its first trial is kept, not judged)"
    entries = (Entry(cands["default"], 1, tuple(ids["default"])), Entry(cands["foreach"], 1, tuple(ids["foreach"])),
               Entry(cands["for-loop"], 1, tuple(ids["for-loop"]), tuning.NOT_RUN_BUDGET, dropped),
               Entry(cands["mkldnn"], 1, (), tuning.NOT_RUN_BUDGET),
               Entry(cands["compiled"], 1, (), tuning.UNSUPPORTED, "no C++ compiler"))
    state.cells = [Cell("mlp", "torch", "eager", "samples_per_s", (), entries, ("-w", "mlp", "-f", "torch", "--preset",
                                                                                 "tiny"), "mlp/torch", "compiled")]
    store.set_run_tune(run, state.to_dict())
    return store


@pytest.mark.parametrize("faster", [[300.0, 310.0, 305.0, 299.0], [90.0, 125.0, 95.0, 120.0]],
                         ids=["decided", "undecided"])
def test_the_tune_report_says_what_ran_and_what_would_decide(tmp_path, capsys, monkeypatch, faster):
    """Issue 47.2: a candidate that ran is never `not tried: budget`, the footer counts the trials
    that ran (not the repeats planned), a speed-up timed over windows too short keeps its `~`, an
    undecided search says what would decide it, and every candidates row is one line at 100
    columns; the closing summary says the headroom."""
    store = _searched_store(tmp_path / "t.sqlite", faster)
    store.close()
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["report", "--store", str(tmp_path / "t.sqlite")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    joined = " ".join(out.split())
    rows = {c: next(line for line in lines if line.startswith(f"torch.{c}") or line.startswith(c))
            for c in ("default", "optimizer=foreach", "optimizer=for-loop", "mkldnn=off", "mode compiled")}
    assert re.match(r"torch\.optimizer=for-loop\s+1 ok\s+~55\.00\s+–\s+dropped \(budget\)", rows[
        "optimizer=for-loop"]), rows
    assert re.match(r"torch\.mkldnn=off\s+–\s+–\s+–\s+not tried: budget", rows["mkldnn=off"]), rows
    assert re.match(r"mode compiled\s+–\s+–\s+–\s+unsupported", rows["mode compiled"]), rows
    assert "mlp/torch mode compiled: unsupported: no C++ compiler" in joined
    assert re.search(r"torch\.optimizer=foreach\s+4 ok\s+~\d+\.?\d*\s+~\d\.\d\dx", rows["optimizer=foreach"])
    start = next(i for i, line in enumerate(lines) if line.startswith("candidate "))
    body = lines[start + 2:start + 2 + len(rows)]
    assert [line.split()[0] for line in body] == ["default", "torch.optimizer=foreach", "torch.optimizer=for-loop",
                                                  "torch.mkldnn=off", "mode"], body  # one line a row
    assert "size tiny · batch 32" in joined  # the title says what was measured
    assert "9 trials ran: the default 4, 2 candidates 4 and 1 (4 planned per candidate and phase)" in joined
    summary = lines[next(i for i, line in enumerate(lines) if line.startswith("summary: the headroom search")):]
    if faster[0] > 200:  # decided faster: the best, with its marked speed-up, ends the report
        assert re.search(r"headroom mlp/torch eager: torch\.optimizer=foreach ~3\.\d\dx \[", summary[1]), summary
        assert "--budget" not in " ".join(summary)
    else:  # nothing decided: what would decide it
        assert "headroom mlp/torch eager: default: no variant decided faster (2 tried: 1 undecided, 1 dropped" \
            " (budget))" in " ".join(" ".join(summary).split())
        said = " ".join(" ".join(summary).split())
        assert re.search(r"candidates not run in full within the budget \(mlp/torch 2\): --budget \d+min would run"
                         r" all 16 phase-1 trials at the pace measured", said), said
        assert re.search(r"ask for about \d+ more repeats each: --repeats \d+", said), said
    assert len(lines) - lines.index(summary[0]) <= 15
