"""`--repeats auto` (issue 26): the rule's judgement over a run's stored trials (synthetic stores,
no process), and the rounds themselves with the fake backend: a run that adds rounds until its
budget, and a resumed run that continues its rule. Three short worker processes in all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dlbench.analysis import repeats
from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner import rounds
from dlbench.runner.executor import Outcome, Progress
from dlbench.runner.plan import Sweep, make_plan
from dlbench.spec import to_dict

TINY = ["--mode", "eager", "--preset", "tiny", "--dataset-size", "64", "--batch-size", "16"]


def _store(path: Path, rule: str, values: dict[str, list[float]], status: str = "ok") -> tuple[Store, int]:
    """A run of fake trials whose samples/s are `values` per framework, repeat by repeat."""
    store = Store(path)
    run = store.create_run("dlbench run", {}, False, order_seed=1, repeats={"rule": rule})
    frameworks = tuple(values)
    plan = make_plan(Sweep(frameworks=frameworks, modes=("eager",), preset="tiny", repeats=len(values[frameworks[0]]),
                           dataset_size=64, batch_sizes=(16,)))
    seen: dict[str, int] = {}
    for seq, planned in enumerate(plan.trials):
        f = planned.spec.framework
        value = values[f][seen.setdefault(f, 0)]
        seen[f] += 1
        tid = store.add_trial(run, seq, planned.spec)
        store.finish_trial(tid, TrialResult(status=status, metrics={"samples_per_s": value}))
    return store, run


@pytest.mark.usefixtures("fake_env")
def test_the_rule_reads_intervals_and_comparisons_from_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,fake2=fake_backend:FakeBackend")
    rule = repeats.parse("auto:3%,max=10")
    # 4 rounds, fake twice as fast: the comparison is decided (4 + 4 reach p = 0.029)
    store, run = _store(tmp_path / "a.sqlite", rule.text, {"fake": [200, 210, 190, 205], "fake2": [100, 99, 101, 100]})
    j = rounds.evaluate(store, run, rule, rounds.AutoState(rule.text))
    assert j.rounds == 4 and j.stop == "decided"
    # 3 rounds: nothing is decided yet, and the progress line says how wide the interval is
    store, run = _store(tmp_path / "b.sqlite", rule.text, {"fake": [200, 210, 190], "fake2": [100, 99, 101]})
    j = rounds.evaluate(store, run, rule, rounds.AutoState(rule.text))
    assert j.stop is None and "widest interval cnn/fake/eager b16 s0 ±5.0% at 75%" in j.text
    # one framework, 6 tight rounds: every interval within 3 % at 95 %
    store, run = _store(tmp_path / "c.sqlite", rule.text, {"fake": [100, 101, 99, 100.5, 99.5, 100.2]})
    assert rounds.evaluate(store, run, rule, rounds.AutoState(rule.text)).stop == "intervals"
    # every trial failed: no round can help
    store, run = _store(tmp_path / "d.sqlite", rule.text, {"fake": [1, 1, 1]}, status="crashed")
    assert rounds.evaluate(store, run, rule, rounds.AutoState(rule.text)).stop == "no-data"


@pytest.mark.usefixtures("fake_env")
def test_next_round_repeats_the_first_rounds_configurations_shuffled(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,fake2=fake_backend:FakeBackend")
    store, run = _store(tmp_path / "s.sqlite", "auto", {"fake": [1, 2, 3], "fake2": [1, 2, 3]})
    added = rounds.next_round(store, run, 3, order_seed=1)
    assert sorted(p.spec.framework for _, p in added) == ["fake", "fake2"]
    assert {p.spec.repeat for _, p in added} == {3}
    rows = store.trials(run)
    assert len(rows) == 8 and [r.status for r in rows[-2:]] == ["pending", "pending"]
    assert {r.spec["framework"] for r in rows[-2:]} == {"fake", "fake2"}
    assert [json.dumps(to_dict(p.spec), sort_keys=True) for _, p in added] == \
        [json.dumps(r.spec, sort_keys=True) for r in rows[-2:]]


@pytest.mark.usefixtures("fake_env")
def test_auto_adds_rounds_until_the_budget_and_says_why(tmp_path, capsys):
    store = str(tmp_path / "s.sqlite")
    assert main(["run", "-f", "fake", *TINY, "--repeats", "auto,min=1,max=2", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "repeats auto,min=1,max=2: round 1: widest interval cnn/fake/eager b16 s0: no interval yet (1 value)" in out
    assert "stopped after 2 rounds: the budget of 2 repeats is spent" in out
    with Store(store) as s:
        assert [t.spec["repeat"] for t in s.trials(1)] == [0, 1] and s.statuses(1) == {"ok": 2}
        state = s.run(1)["repeats"]
    assert state["rule"] == "auto,min=1,max=2" and state["stop"] == "budget" and state["rounds"] == 2
    assert state["spent_s"] > 0 and state["round_s"] > 0
    # the headline table says what ended it
    assert main(["report", "--store", store]) == 0
    assert "repeats auto,min=1,max=2: stopped after 2 rounds: the budget" in capsys.readouterr().out


@pytest.mark.usefixtures("fake_env")
def test_a_resumed_auto_run_continues_its_rule(tmp_path, capsys):
    """A run whose parent died after round 1 of auto,min=1,max=2: --resume (no run named) finds
    it although no trial is left to re-run, runs round 2, and stops by the same rule."""
    path = tmp_path / "s.sqlite"
    store, run = _store(path, "auto,min=1,max=2", {"fake": [1000.0]})
    store.set_run_repeats(run, {"rule": "auto,min=1,max=2", "rounds": 1, "spent_s": 5.0, "round_s": 5.0,
                                "stop": None, "text": "round 1"})
    store.close()
    assert main(["run", "--resume", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "repeats auto,min=1,max=2: continuing after round 1" in out
    assert "stopped after 2 rounds: the budget of 2 repeats is spent" in out
    with Store(path) as s:
        assert [(t.spec["repeat"], t.status) for t in s.trials(run)] == [(0, "ok"), (1, "ok")]
        state = s.run(run)["repeats"]
        assert state["stop"] == "budget" and state["spent_s"] > 5.0 and s.run(run)["status"] == "ok"
    # stopped: nothing left to resume
    assert main(["run", "--resume", "--store", str(path)]) == 0
    assert "nothing to resume" in capsys.readouterr().out


def test_bad_auto_rules_are_one_line_exit_2(capsys, tmp_path):
    assert main(["run", "-f", "torch", "--repeats", "auto:3", "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the target ':3' is not :PCT%" in err
    suite = tmp_path / "suite.toml"
    suite.write_text('repeats = "auto,max=often"\n')
    assert main(["run", str(suite), "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "key 'repeats': 'auto,max=often' is not an integer from 1 to 1000, or auto" in capsys.readouterr().err


# --- retakes after busy trials (issue 45) ------------------------------------------------------


class _Said(Progress):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def _hogged(busy_at: set[int]):
    """An executor that runs nothing: fake at 200 samples/s, fake2 at 100, each a little spread;
    the n-th trial it runs (from 0) in `busy_at` ran beside a hog: 0.3x and foreign CPU 70 %."""
    count = [0]

    def run_trials(store: Store, run_id: int, trials: list, progress: Progress) -> Outcome:
        outcome = Outcome()
        for tid, planned in trials:
            hog = count[0] in busy_at
            speed = (200.0 if planned.spec.framework == "fake" else 100.0) * (1 + 0.002 * (count[0] % 5))
            store.finish_trial(tid, TrialResult(status="ok", metrics={
                "samples_per_s": speed * (0.3 if hog else 1.0), "foreign_cpu_share": 0.7 if hog else 0.01}))
            count[0] += 1
            outcome.count("ok")
        return outcome
    return run_trials


def _auto_run(path: Path, rule: str) -> tuple[Store, int, list]:
    """A run of fake and fake2 with `rule`'s first rounds registered, pending (as `run` does)."""
    store = Store(path)
    run = store.create_run("dlbench run", {}, False, order_seed=1, repeats={"rule": rule})
    plan = make_plan(Sweep(frameworks=("fake", "fake2"), modes=("eager",), preset="tiny",
                           repeats=repeats.parse(rule).first, dataset_size=64, batch_sizes=(16,)))
    trials = [(store.add_trial(run, seq, p.spec), p) for seq, p in enumerate(plan.trials)]
    return store, run, trials


def _run_auto(path: Path, text: str, busy_at: set[int], wait) -> tuple[Store, int, repeats.RepeatRule,
                                                                      rounds.AutoState, _Said]:
    """An auto run of fake and fake2 through `_hogged`'s executor, `wait` for the quiet machine."""
    rule = repeats.parse(text)
    store, run, trials = _auto_run(path, rule.text)
    state, said = rounds.AutoState(rule.text), _Said()
    rounds.run_rounds(store, run, rule, state, trials, _hogged(busy_at), said, wait)
    return store, run, rule, state, said


@pytest.mark.usefixtures("fake_env")
def test_auto_retakes_a_busy_trials_configuration_once_the_machine_is_quiet(busy_judged, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,fake2=fake_backend:FakeBackend")
    waits: list[float] = []
    busy_trial = 2  # the third trial of round 1

    def quiet_after_a_while(limit_s: float, progress: Progress) -> float | None:
        waits.append(limit_s)
        return 12.0

    store, run, rule, state, said = _run_auto(tmp_path / "s.sqlite", "auto,min=3,max=10", {busy_trial},
                                              quiet_after_a_while)
    rows = store.trials(run)
    hogged = rows[busy_trial]
    assert hogged.metrics["foreign_cpu_share"] == 0.7
    retaken = [r for r in rows if r.spec["repeat"] == 3]
    # the retake: one more repeat of the busy trial's configuration only, after the wait
    assert [r.spec["framework"] for r in retaken] == [hogged.spec["framework"]]
    assert waits == [rule.wait_s] and state.retakes == 1
    assert any("1 trial busy (foreign CPU up to 70%) in round 3: waiting up to 600 s" in line for line in said.lines)
    assert any(f"retake of what ran on a busy machine, once more after 0 s of waiting for quiet: cnn/"
               f"{hogged.spec['framework']}/eager b16 s0" in line for line in said.lines)
    # then ordinary rounds until decided on quiet trials: the busy one is in no statistic
    assert state.stop == "decided" and "more repeats" not in " ".join(said.lines)
    judged = rounds.evaluate(store, run, rule, state)
    assert judged.stop == "decided"


@pytest.mark.usefixtures("fake_env")
def test_auto_stops_and_says_busy_when_the_machine_stays_busy(busy_judged, tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,fake2=fake_backend:FakeBackend")
    store, run, _, state, _ = _run_auto(tmp_path / "s.sqlite", "auto,min=3,max=10,wait=5min", {0, 1, 3, 5},
                                        lambda limit, progress: None)
    assert state.stop == "busy" and len(store.trials(run)) == 6  # no round after the wait ran out
    assert state.text is not None and state.text.startswith(
        "stopped after 3 rounds: undecided: the machine was busy: foreign CPU up to 70% during 4 of 6 trials;")
    assert "(wait=5min) and it stayed busy" in state.text
    # the budget: max=3 ends the run on the busy trials it has, and says what is left undecided
    _, _, _, state, _ = _run_auto(tmp_path / "b.sqlite", "auto,min=3,max=3", {0}, lambda limit, progress: 0.0)
    assert state.stop == "budget" and state.text is not None
    assert state.text.endswith("; undecided: the machine was busy: foreign CPU up to 70% during 1 of 6 trials")


def test_a_wait_and_a_time_budget_bound_the_retake():
    rule = repeats.parse("auto,time=30min,wait=10min")
    assert rule.wait_s == 600 and repeats.parse("auto").wait_s == repeats.QUIET_WAIT_S
    assert repeats.retake_wait_s(rule, waited_s=0, spent_s=0, retake_s=60) == 600
    assert repeats.retake_wait_s(rule, waited_s=480, spent_s=0, retake_s=60) == 120
    assert repeats.retake_wait_s(rule, waited_s=0, spent_s=1500, retake_s=60) == 240  # 1800 - 1500 - 60
    assert repeats.retake_wait_s(rule, waited_s=0, spent_s=1790, retake_s=60) == 0
    with pytest.raises(repeats.RepeatsError, match="wait=soon is not a duration"):
        repeats.parse("auto,wait=soon")


@pytest.mark.usefixtures("fake_env")
def test_the_report_says_a_retake_happened(busy_judged, tmp_path, monkeypatch):
    from dlbench.report import model
    from dlbench.report.tables import report_tables

    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,fake2=fake_backend:FakeBackend")
    store, run, _, _, _ = _run_auto(tmp_path / "s.sqlite", "auto,min=3,max=10", {2}, lambda limit, progress: 3.0)
    notes = " ".join(next(t for t in report_tables(model.load(store, [run])) if t.id == "results").notes)
    assert "; 1 trial retaken after busy ones (waited 0 s for a quiet machine)" in notes
    assert "^ 1 of " in notes  # the busy trial itself, marked
