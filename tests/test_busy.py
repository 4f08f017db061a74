"""Busy trials kept out of decisions (issue 45): the rule of analysis/busy.py over faked
interference records (busy, quiet and unknown mixes), in every verdict that reads it (compare's
decision and gate, the ranking, the overview's marks) and in what the tables say. Pure functions
and synthetic stores: no worker process."""

from __future__ import annotations

import io
import json
import random
import re
from pathlib import Path

import pytest
from rich.console import Console

from dlbench.analysis import compare as cmp
from dlbench.analysis.busy import Sample, Tally, record
from dlbench.analysis.interference import FOREIGN_CPU_SHARE, Interference
from dlbench.cli.main import main
from dlbench.report import model
from dlbench.report.html import render
from dlbench.report.overview import overview_table
from dlbench.report.tables import report_tables
from dlbench.report.terminal import print_report_tables
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

# These tests judge trials at dlbench's own busy threshold (conftest: busy_judged).
pytestmark = pytest.mark.usefixtures("busy_judged")

QUIET = Interference(foreign_cpu_share=0.01)
BUSY = Interference(foreign_cpu_share=0.62)
UNKNOWN = Interference()


def _sample(quiet: list[float], busy: list[float] = ()) -> Sample:
    return Sample.of([*quiet, *busy], [QUIET] * len(quiet) + [BUSY] * len(busy))


# --- the rule ---------------------------------------------------------------------------------


def test_a_sample_counts_what_was_not_busy_and_shows_the_busy_only_where_nothing_else_is_left():
    s = Sample.of([100.0, 40.0, 101.0, 99.0], [QUIET, BUSY, UNKNOWN, QUIET])
    assert s.counted == (100.0, 101.0, 99.0) and s.busy == 1 and not s.all_busy and s.median == 100.0
    every = _sample([], [40.0, 42.0])
    assert every.all_busy and every.counted == () and every.shown == (40.0, 42.0) and every.median == 41.0
    # an export's metrics ({name: {value, unit}}) and a store's ({name: value}) read alike
    assert record({FOREIGN_CPU_SHARE: {"value": 0.62, "unit": "1"}}).state == "busy"
    assert record({FOREIGN_CPU_SHARE: 0.02}).state == "quiet" and record({}).state == "unknown"
    tally = Tally.of([QUIET, BUSY, UNKNOWN])
    assert (tally.busy, tally.unknown, tally.measured) == (1, 1, True)
    assert tally.text() == "1 of 3 trials busy (foreign CPU up to 62%)"
    assert Tally.of([UNKNOWN, UNKNOWN]).text() == "interference not measured in 2 of 2 trials"


def test_busy_trials_are_left_out_of_a_decision_that_the_quiet_ones_settle():
    base = _sample([100.0, 101.0, 99.0, 100.5, 99.5])
    new = _sample([150.0, 151.0, 149.0, 150.5, 149.5], [30.0, 31.0])  # a hog halved two trials
    d = cmp.decide_quiet(base, new)
    assert d.verdict == cmp.DIFFERENT and d.direction == "better" and d.left_out == 2 and d.busy is None
    assert d.shift.estimate == pytest.approx(1.5, rel=0.01)  # the quiet trials' shift, not the mix's
    assert "2 busy left out" in d.reason
    # counting the two busy trials, the same run decided nothing (p = 0.27)
    assert cmp.decide(base.values, new.values).verdict == cmp.UNDECIDED


def test_a_decision_the_quiet_trials_cannot_settle_says_busy_instead_of_more_repeats():
    base = _sample([100.0, 101.0, 99.0])
    new = _sample([150.0], [30.0, 31.0, 32.0, 29.0, 30.5])
    d = cmp.decide_quiet(base, new)
    assert d.verdict == cmp.UNDECIDED and d.more_repeats is None and d.text == "UNDECIDED (busy)"
    assert d.busy == "the machine was busy: foreign CPU up to 62% during 5 of 9 trials"
    # a side with no quiet trial at all: never decided, whatever its numbers say
    every = cmp.decide_quiet(base, _sample([], [30.0, 31.0, 29.0, 30.5]))
    assert every.verdict == cmp.UNDECIDED and every.busy and "NEW: no trial on a quiet machine" in every.reason
    # without a record (a store of the previous release) the values count as before
    plain = cmp.decide_quiet(Sample.of([100.0, 101.0, 99.0, 100.5]), Sample.of([150.0, 151.0, 149.0, 150.5]))
    assert plain.verdict == cmp.DIFFERENT and plain.left_out == 0


# --- the ranking --------------------------------------------------------------------------------


def test_a_ranking_with_a_hog_switched_on_and_off_equals_the_quiet_one_or_says_busy():
    """Frameworks a (1.5x b) and b; a hog on for a random stretch of each run slows the trials it
    overlaps (by 0.3-0.9x) and marks them busy. Over 300 such runs the ranking's verdict is the
    quiet one (a faster) or withheld as busy: never b faster, never "more repeats"."""
    rng = random.Random(45)
    said = {"faster": 0, "busy": 0}
    for _ in range(300):
        samples = {}
        for name, speed in (("a", 150.0), ("b", 100.0)):
            values, records = [], []
            for _ in range(6):
                on = rng.random() < 0.4
                values.append(speed * rng.uniform(0.98, 1.02) * (rng.uniform(0.3, 0.9) if on else 1.0))
                records.append(Interference(foreign_cpu_share=rng.uniform(0.3, 1.0) if on else rng.uniform(0, 0.05)))
            samples[name] = Sample.of(values, records)
        top, second = cmp.rank(list(samples.items()))
        d = top.decision
        assert d is not None
        if d.verdict == cmp.DIFFERENT:
            assert (top.name, d.direction) == ("a", "better")
            said["faster"] += 1
        else:
            assert d.verdict == cmp.UNDECIDED and d.busy and d.more_repeats is None, d
            said["busy"] += 1
    assert said["faster"] > 100 and said["busy"] > 10  # both outcomes happen


def test_a_ratio_the_medians_contradict_says_so_and_a_shift_against_them_is_never_faster():
    """Issue 45: medians 225.9 and 222.8 beside `1.99x`: two groups in each side."""
    top, second = cmp.rank([("x", [225.9, 230.0, 60.0]), ("y", [222.8, 30.0, 28.0])])
    assert top.name == "x" and top.median == 225.9 and second.median == 30.0
    ranked = cmp.rank([("x", [225.9, 226.0, 60.0, 61.0, 62.0, 227.0]), ("y", [222.8, 223.0, 224.0, 30.0, 28.0, 29.0])])
    first = ranked[0]
    assert first.medians_ratio is not None and first.decision is not None
    assert first.decision.shift.estimate / first.medians_ratio > 1.05
    # a shift against the medians' order is undecided, never "faster"
    against = cmp.rank([("x", [100.0, 101.0, 102.0, 10.0, 11.0]), ("y", [99.0, 98.0, 97.0, 96.0, 200.0])])
    d = against[0].decision
    assert d is not None and not (d.verdict == cmp.DIFFERENT and d.direction != "better")


# --- compare: the gate and its exit code ------------------------------------------------------


def _export(values: list[float], shares: list[float | None]) -> dict:
    trials = []
    for i, (v, share) in enumerate(zip(values, shares, strict=True)):
        metrics = {"samples_per_s": {"value": v, "unit": "1/s"}}
        if share is not None:
            metrics[FOREIGN_CPU_SHARE] = {"value": share, "unit": "1"}
        trials.append({"spec": {"workload": {"name": "cnn", "batch_size": 64, "seed": 0}, "framework": "torch",
                                "repeat": i, "policy": {"mode": "compiled"}, "precision": "fp32"},
                       "status": "ok", "metrics": metrics})
    return {"schema_version": 1, "runs": [{"id": 1, "environment": {"cpu_model": "x"}, "trials": trials}]}


def _compare(tmp_path: Path, base: dict, new: dict, *args: str) -> int:
    (tmp_path / "a.json").write_text(json.dumps(base))
    (tmp_path / "b.json").write_text(json.dumps(new))
    return main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), *args])


def test_compare_of_a_quiet_export_against_a_busy_one_is_undecided_never_a_regression(tmp_path, capsys):
    quiet = _export([100.0, 101.0, 99.0, 100.5, 99.5], [0.01] * 5)
    busy = _export([40.0, 41.0, 39.0, 40.5, 39.5], [0.62, 0.7, 0.55, 0.6, 0.65])  # a hog: 2.5x slower
    assert _compare(tmp_path, quiet, busy, "--fail", "median:5%") == 4
    out = capsys.readouterr().out
    assert "REGRESSION" not in out and "UNDECIDED (busy)" in out
    assert "the machine was busy: foreign CPU up to 70% during 5 of 10 trials" in out
    assert "more repeats" not in out
    # the same values without interference records (an older release) are a regression, as before
    plain = _export([40.0, 41.0, 39.0, 40.5, 39.5], [None] * 5)
    assert _compare(tmp_path, quiet, plain, "--fail", "median:5%") == 1


def test_compare_judges_the_quiet_trials_and_says_which_were_left_out(tmp_path, capsys):
    quiet = _export([100.0, 101.0, 99.0, 100.5, 99.5], [0.01] * 5)
    # NEW: the same speed on 5 quiet trials, 2 busy ones at half speed: shown within 5 %, exit 0
    mixed = _export([100.2, 100.1, 99.8, 100.4, 99.9, 50.0, 51.0], [0.0] * 5 + [0.5, 0.6])
    assert _compare(tmp_path, quiet, mixed, "--fail", "median:5%") == 0
    out = capsys.readouterr().out
    assert "PASS median:5%" in out and "5/5^" in out
    assert "^ busy trials of cnn/torch/compiled b64 s0: NEW 2 of 7 (left out)" in out.replace("\n  ", " ")
    # a real regression on the quiet trials is one, busy trials or not
    slower = _export([70.0, 71.0, 69.0, 70.5, 69.5, 20.0], [0.0] * 5 + [0.9])
    assert _compare(tmp_path, quiet, slower, "--fail", "median:5%") == 1
    # too few quiet trials to settle it: undecided, busy
    few = _export([100.2, 20.0, 21.0, 22.0, 20.5], [0.0, 0.9, 0.9, 0.9, 0.9])
    assert _compare(tmp_path, quiet, few, "--fail", "median:5%") == 4
    assert "UNDECIDED median:5%" in capsys.readouterr().out


# --- the report's marks --------------------------------------------------------------------------


def _store(path: Path, values: dict[str, list[tuple[float, float | None]]], workload: str = "cnn") -> Store:
    """One run: per framework, (samples/s, foreign CPU share or None: not measured) per repeat."""
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    seq = 0
    for repeat in range(max(len(v) for v in values.values())):
        for framework, vs in values.items():
            if repeat >= len(vs):
                continue
            value, share = vs[repeat]
            spec = TrialSpec(workload=WorkloadSpec(name=workload), framework=framework, policy=Policy(mode="compiled"),
                             repeat=repeat)
            metrics = {"samples_per_s": value, "time_to_first_step_s": 5.0}
            if share is not None:
                metrics[FOREIGN_CPU_SHARE] = share
            store.finish_trial(store.add_trial(run, seq, spec), TrialResult(status="ok", metrics=metrics,
                                                                             parity={"verdict": "pass"}))
            seq += 1
    return store


def _terminal(report: model.Report) -> str:
    out = io.StringIO()
    print_report_tables(Console(file=out, width=100, highlight=False, markup=False, color_system=None), report)
    return out.getvalue()


def test_busy_rows_carry_their_mark_in_every_table_and_the_ranking_withholds_its_verdict(tmp_path):
    quiet = [(v, 0.01) for v in (200.0, 201.0, 199.0, 200.5, 199.5, 200.2)]
    store = _store(tmp_path / "s.sqlite", {"torch": [(v, 0.7) for v in (20.0, 21.0, 19.0, 20.5)],  # every trial busy
                                           "jax": quiet, "tensorflow": [(100.0, 0.0), (101.0, 0.0), (30.0, 0.5),
                                                                        (99.0, 0.02), (100.5, 0.0), (99.5, 0.0)]})
    report = model.load(store, [1])
    tables = {t.id: t for t in report_tables(report)}
    ranking = tables["ranking"]
    names = [c.text for c in ranking.column("framework")]
    assert names == ["jax", "tensorflow", "torch"]  # tensorflow's busy trial left out of its median
    medians = dict(zip(names, (c.shown() for c in ranking.column("median")), strict=True))
    assert medians == {"jax": "200.1", "tensorflow": "100.0^", "torch": "20.25^"}
    verdicts = [c.text for c in ranking.column("verdict")]
    assert verdicts[0].startswith("faster (p = ")  # jax against tensorflow's quiet trials
    assert verdicts[1] == "undecided: the machine was busy: foreign CPU up to 70% during 5 of 10 trials"
    results = tables["results"]
    samples = results.column("samples/s")
    assert [c.shown() for c in samples] == ["20.2^", "200.1", "100.0^"]
    notes = " ".join(results.notes)
    assert "torch/compiled: ^ 4 of 4 trials busy (foreign CPU up to 70%): its numbers are the busy trials' own" in notes
    assert "tensorflow/compiled: ^ 1 of 6 trials busy (foreign CPU up to 50%): left out" in notes
    text = _terminal(report)
    assert re.search(r"torch\s+20\.2\^", text) and "no finding" in text
    # issue 47: the closing summary, last, with the same marks and the busy verdict, and what decides it
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("summary: "))
    assert len(lines) - start <= 15
    summary = " ".join(" ".join(lines[start:]).split())
    assert re.search(r"cnn: jax 200\.1, 2\.00x tensorflow: faster \(p = [\d.e-]+\); 1 of 2 pairs decided", summary), summary
    assert "--quiet-wait 10min" in summary
    assert "torch" in text and not re.search(r"torch\s+20\.2\s", text)  # never without its mark
    page = render(report, [], None)
    assert "20.25^" in page and "the machine was busy" in page and "td.busy" in page and "class='num busy'" in page
    overview = overview_table(model.load(_store(tmp_path / "two.sqlite", {
        "torch": [(v, 0.7) for v in (20.0, 21.0, 19.0, 20.5)], "jax": quiet}, "mlp"), [1]))
    assert overview is not None
    shares = {row[0].text: row[1].text for row in overview.rows}
    # torch's every trial busy: its share is the busy trials' own, undecided; and so is jax's 100%
    assert shares == {"torch": "10%^? 5s", "jax": "100%? 5s"}
    assert any(n.startswith("^ trials on a busy machine") for n in overview.notes)


def test_an_older_store_says_once_that_interference_was_not_measured_and_a_mix_names_its_rows(tmp_path):
    old = _store(tmp_path / "old.sqlite", {"torch": [(v, None) for v in (200.0, 201.0, 199.0)],
                                           "jax": [(v, None) for v in (100.0, 101.0, 99.0)]})
    report = model.load(old, [1])
    text = _terminal(report)
    assert text.count("interference not measured") == 1
    assert not any("busy" in c.flags for t in report_tables(report) for row in t.rows for c in row)
    mixed = _store(tmp_path / "mixed.sqlite", {"torch": [(v, None) for v in (200.0, 201.0, 199.0)],
                                               "jax": [(v, 0.0) for v in (100.0, 101.0, 99.0)]})
    notes = " ".join(report_tables(model.load(mixed, [1]))[1].notes)
    assert "torch/compiled: interference not measured in 3 of 3 trials" in notes and "jax/compiled: " not in notes


def test_the_tables_show_the_medians_ratio_where_it_contradicts_the_pairwise_one(tmp_path, capsys):
    """Issue 45: medians 225.9 and 222.8 read `1.99x`: each side's trials in two groups."""
    x = [225.9, 226.0, 60.0, 61.0, 62.0, 227.0]
    y = [222.8, 223.0, 224.0, 30.0, 28.0, 29.0]
    store = _store(tmp_path / "s.sqlite", {"x": [(v, None) for v in x], "y": [(v, None) for v in y]})
    ranking = next(t for t in report_tables(model.load(store, [1])) if t.id == "ranking")
    versus = ranking.column("vs next [interval]")[0].text
    assert re.fullmatch(r"\d\.\d\dx \[[\d.]+, [\d.]+\] \(medians \d\.\d\dx\)", versus), versus
    assert any(n.startswith("(medians x): the medians' ratio, where it differs from the pairwise one") for n in ranking.notes)
    # compare: beside the shift
    assert _compare(tmp_path, _export(y, [None] * 6), _export(x, [None] * 6)) in (0, 1, 4)
    assert re.search(r"\d\.\d{3} \(medians \d\.\d{3}\)", capsys.readouterr().out)


def test_the_busy_threshold_can_be_set_and_a_bad_one_is_refused_in_one_line(monkeypatch, capsys):
    from dlbench.analysis import interference
    from dlbench.cli.main import main

    record = interference.judge({"foreign_cpu_share": 0.3})
    assert record.state == "busy"  # above dlbench's own 10 %
    monkeypatch.setenv("DLBENCH_BUSY_SHARE", "0.5")
    assert record.state == "quiet" and interference.busy_foreign_share() == 0.5
    for bad in ("0", "1.5", "nan", "lots", "\uff10.5"):
        monkeypatch.setenv("DLBENCH_BUSY_SHARE", bad)
        with pytest.raises(interference.SpecError, match="DLBENCH_BUSY_SHARE=.* allowed is a number in"):
            interference.busy_foreign_share()
    monkeypatch.setenv("DLBENCH_BUSY_SHARE", "-1")
    assert main(["env"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DLBENCH_BUSY_SHARE='-1'" in err[0]
