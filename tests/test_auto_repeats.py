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
