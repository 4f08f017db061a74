"""`dlbench history`: step detection (analysis/history.py) on series with known steps, and the
command on a synthetic store with a planted step and environment changes (no worker process)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis import history
from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.spec import Policy, TrialSpec, WorkloadSpec


def test_running_median_cost_matches_brute_force():
    rng = np.random.default_rng(1)
    y = rng.normal(0, 1, 15).tolist()
    for j, (med, cost) in enumerate(history._running_median_cost(y), start=1):
        assert med == pytest.approx(float(np.median(y[:j])))
        assert cost == pytest.approx(float(np.abs(np.array(y[:j]) - np.median(y[:j])).sum()))


def test_steps_found_where_planted_and_not_in_noise():
    rng = np.random.default_rng(0)
    one = [*(100 + rng.normal(0, 1, 10)), *(80 + rng.normal(0, 1, 10))]
    [step] = history.steps(one)
    assert step.index == 10 and step.change == pytest.approx(-0.2, abs=0.02)
    two = [*(100 + rng.normal(0, 2, 10)), *(90 + rng.normal(0, 2, 10)), *(110 + rng.normal(0, 2, 10))]
    assert [s.index for s in history.steps(two)] == [10, 20]
    assert history.steps((100 + rng.normal(0, 3, 40)).tolist()) == []
    # one slow run is noise; two in a row at the end are a new level
    assert history.steps([*(100 + rng.normal(0, 1, 12)), 60.0, *(100 + rng.normal(0, 1, 12))]) == []
    assert [s.index for s in history.steps([*(100 + rng.normal(0, 1, 12)), 60.0, 61.0])] == [12]
    assert history.steps([]) == [] and history.steps([5.0]) == []


def test_changes_names_each_leaf():
    before = {"versions": {"torch": "2.12.0", "python": "3.12"}, "policy": {"threads": None}}
    after = {"versions": {"torch": "2.13.0", "python": "3.12"}, "policy": {"threads": 2}}
    assert history.changes(before, after) == ["policy.threads: null -> 2", "versions.torch: 2.12.0 -> 2.13.0"]


def _planted(path: Path) -> None:
    """12 runs of cnn/torch (3 repeats each): 1000 samples/s, then from run 7 on 800, when torch
    went from 2.12 to 2.13; run 10 ran with --threads 2; jax alongside, steady."""
    rng = np.random.default_rng(0)
    store = Store(path)
    for run in range(12):
        version = "2.12.0" if run < 6 else "2.13.0"
        env = {"frameworks": {"torch": {"installed": True, "detail": f"torch {version}",
                                        "distributions": {"torch": version}},
                              "jax": {"installed": True, "detail": "jax 0.10", "distributions": {"jax": "0.10.2"}}},
               "hostname": "box", "cpu_model": "cpu"}
        rid = store.create_run("dlbench run", env, False)
        seq = 0
        for framework, level in (("torch", 1000.0 if run < 6 else 800.0), ("jax", 1200.0)):
            for repeat in range(3):
                spec = TrialSpec(workload=WorkloadSpec(), framework=framework, repeat=repeat,
                                 policy=Policy(threads=2 if run == 9 else None))
                value = level * (1 + rng.normal(0, 0.01))
                store.finish_trial(store.add_trial(rid, seq, spec), TrialResult(status="ok", metrics={"samples_per_s": value}))
                seq += 1
        store.finish_run(rid, "ok")
    store.close()


def test_history_marks_the_planted_step_and_what_changed(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    _planted(path)
    page = tmp_path / "history.html"
    assert main(["history", "-f", "torch", "--store", str(path), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert "history: samples_per_s of cnn/torch/compiled" in out and "jax" not in out
    row7 = next(line for line in out.splitlines() if line.startswith("  7 "))
    assert re.search(r"STEP -(19|20)\.\d%", row7) and "versions.torch: 2.12.0 -> 2.13.0" in row7
    assert out.count("STEP") == 2  # the row and its note
    assert "STEP at run 7:" in out
    assert "policy.threads: null -> 2" in next(line for line in out.splitlines() if line.startswith(" 10 "))
    text = page.read_text()
    assert re.search(r"STEP -(19|20)\.\d%", text) and "id='chart-history'" in text and "class='fail'" in text
    # both frameworks, the steady one without a step
    assert main(["history", "median", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "of cnn/jax/compiled" in out and out.count("STEP at run") == 1
    # issue 38: a note every configuration's table shares is printed once, not once per table
    assert out.count("step: the level changes here") == 1


def test_history_of_an_unknown_metric_is_one_line(tmp_path, capsys):
    path = tmp_path / "s.sqlite"
    _planted(path)
    assert main(["history", "samples_per_sec", "--store", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has an ok value of samples_per_sec" in err


def test_runs_on_a_busy_machine_are_marked_and_make_no_step(busy_judged, tmp_path, capsys):
    """Issue 45: 12 runs at 1000 samples/s; runs 6 and 7 ran beside a hog (every trial busy, 400),
    run 9 had one busy trial of three (300); runs 1-2 come from a release that did not measure
    interference. Counting the hog's runs would make two steps; they are marked and make none."""
    rng = np.random.default_rng(1)
    path = tmp_path / "s.sqlite"
    store = Store(path)
    for run in range(12):
        rid = store.create_run("dlbench run", {}, False)
        for repeat in range(3):
            hog = run in (5, 6) or (run == 8 and repeat == 0)
            metrics = {"samples_per_s": (300.0 if run == 8 else 400.0) if hog else 1000 * (1 + rng.normal(0, 0.01))}
            if run >= 2:
                metrics["foreign_cpu_share"] = 0.8 if hog else 0.01
            spec = TrialSpec(workload=WorkloadSpec(), framework="torch", repeat=repeat, policy=Policy())
            store.finish_trial(store.add_trial(rid, repeat, spec), TrialResult(status="ok", metrics=metrics))
        store.finish_run(rid, "ok")
    store.close()
    assert history.steps([400.0 if i in (5, 6) else 1000.0 for i in range(12)])  # counted, they would step
    assert main(["history", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "STEP" not in out
    rows = {int(line.split()[0]): line for line in out.splitlines() if re.match(r"\s*\d+ ", line)}
    assert re.search(r" 400\.0\^", rows[6]) and re.search(r" 400\.0\^", rows[7])
    assert re.search(r" (9\d\d|1\d{3})\.\d\^ \[", rows[9])  # the two quiet trials' median, marked
    assert "^ run 6: 3 of 3 trials busy (foreign CPU up to 80%): its median is the busy trials' own" in out
    assert "^ run 9: 1 of 3 trials busy (foreign CPU up to 80%): left out of its median" in out
    assert "run 1: interference not measured in 3 of 3 trials" in out
