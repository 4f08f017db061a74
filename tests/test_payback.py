"""When compilation pays back and where the batch-size ranking crosses (analysis/payback.py,
report/payback.py), on cost lines and small synthetic reports: no worker process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlbench.analysis import payback
from dlbench.report import figures, model
from dlbench.report.payback import payback_table, sweep_table
from dlbench.report.terminal import make_console, print_table


def test_crossover_is_where_the_later_starter_is_ahead():
    # torch starts in 5 s and steps in 30 ms; jax compiles for 20 s and steps in 10 ms:
    # 5 + (n-1) 0.03 = 20 + (n-1) 0.01 at n = 751
    torch, jax = payback.Cost("torch", 5.0, 0.030), payback.Cost("jax", 20.0, 0.010)
    x = payback.crossover(jax, torch)
    assert (x.early.label, x.late.label, x.steps) == ("torch", "jax", 751)
    assert x.seconds == pytest.approx(torch.total_s(751)) and x.seconds == pytest.approx(jax.total_s(751))
    assert torch.total_s(750) < jax.total_s(750) and jax.total_s(752) < torch.total_s(752)
    assert "under 751 steps" in x.text()


def test_no_crossover_when_one_is_ahead_at_every_length():
    x = payback.crossover(payback.Cost("a", 5.0, 0.01), payback.Cost("b", 9.0, 0.02))
    assert x.steps is None and x.early.label == "a" and "every run length" in x.text()
    # equal start: the faster stepper is ahead from the first step, no crossover
    x = payback.crossover(payback.Cost("a", 5.0, 0.02), payback.Cost("b", 5.0, 0.01))
    assert x.early.label == "b" and x.steps is None


def test_horizon_shows_every_crossover():
    xs = payback.crossovers([payback.Cost("a", 1.0, 0.1), payback.Cost("b", 11.0, 0.05), payback.Cost("c", 2, 1)])
    assert payback.horizon_steps(xs) >= 2 * max(x.steps for x in xs if x.steps)


def test_batch_crossovers_name_where_the_leader_changes():
    rates = {"torch": {8: 900.0, 32: 1500.0, 128: 1800.0}, "jax": {8: 400.0, 32: 1600.0, 128: 2500.0, 512: 1.0}}
    [x] = payback.batch_crossovers(rates)
    assert (x.below, x.above, x.before, x.after) == (8, 32, "torch", "jax")
    assert payback.batch_crossovers({"torch": rates["torch"]}) == []


def _config(run_id: int, i: int, framework: str, batch: int, metrics: dict[str, float]) -> model.Config:
    spec = {"workload": {"name": "cnn", "batch_size": batch, "dataset_size": 1024, "seed": 0},
            "framework": framework, "policy": {"mode": "compiled"}, "scenario": "train"}
    trial = model.Trial(i, run_id, spec, "ok", None, dict(metrics), {}, [], {})
    return model.Config(run_id, f"k{i}", {a: f(spec) for a, f in model.AXES.items()}, (trial,))


def _report(rows: list[tuple[str, int, float, float, float]]) -> model.Report:
    configs = tuple(_config(1, i, fw, b, {"time_to_first_step_s": ttfs, "step_s_median": step, "samples_per_s": b / step})
                    for i, (fw, b, ttfs, step, _) in enumerate(rows))
    return model.Report((model.Run(1, {}, tuple(t for c in configs for t in c.trials)),), configs,
                        model._label_axes(configs))


def test_payback_table_and_chart_from_a_report(capsys):
    report = _report([("torch", 64, 5.0, 0.030, 0), ("jax", 64, 20.0, 0.010, 0), ("tensorflow", 64, 8.0, 0.040, 0)])
    table = payback_table(report)
    assert table is not None
    # issue 38: only who leads: torch from the first step, jax after 751 steps (16 steps per
    # epoch, 1024 / 64: 46.9 epochs); tensorflow (later start, slower steps) never leads, and no
    # row says "no crossover" without naming the other side
    [(ahead, then, _, _, steps, epochs, _)] = [tuple(c.text for c in r[1:]) for r in table.rows]
    assert (ahead, then, steps, epochs) == ("torch", "jax", "751", "46.9")
    print_table(make_console(), table)
    out = capsys.readouterr().out
    assert "when compilation pays back" in out and "751" in out and "tensorflow" not in out
    chart = figures.payback(report)
    # a line for each configuration that leads, one trace of crossover dots, no text labels
    assert chart is not None and [d.name for d in chart.figure.data][:2] == ["torch", "jax"]
    assert len(chart.figure.data) == 2 + 1 and all(d.text is None for d in chart.figure.data)


def test_payback_leaders_follow_the_lower_envelope():
    """Three lines: a leads, c overtakes it first, then b overtakes c; d is never ahead. The
    leader that stays ahead names its closest rival."""
    a, b, c, d = (payback.Cost("a", 1.0, 0.5), payback.Cost("b", 30.0, 0.01), payback.Cost("c", 5.0, 0.1),
                  payback.Cost("d", 2.0, 0.9))
    lead = payback.leaders([a, b, c, d])
    assert [(x.early.label, x.late.label, x.steps) for x in lead] == [("a", "c", 11), ("c", "b", 279), ("b", "c", None)]


def test_payback_marks_crossovers_from_windows_too_short_to_time():
    """A crossover computed from a timed window too short to time ("17 min" from 43.2 vs 43.1
    ms) is marked `~`, with the note saying why."""
    report = _report([("torch", 64, 5.0, 0.0432, 0), ("jax", 64, 6.0, 0.0431, 0)])
    for c in report.configs:
        c.trials[0].metrics["timed_window_short"] = 1.0
    table = payback_table(report)
    assert table is not None
    [row] = table.rows
    assert "short" in row[4].flags and "short" in row[5].flags and row[5].shown().startswith("~")
    assert any("too short to time" in n for n in table.notes)


def test_batch_sweep_table_and_chart_name_the_crossover():
    report = _report([("torch", 8, 5, 8 / 900, 0), ("torch", 32, 5, 32 / 1500, 0),
                      ("jax", 8, 20, 8 / 400, 0), ("jax", 32, 20, 32 / 1600, 0)])
    table = sweep_table(report)
    assert table is not None
    assert [r[2].text.split()[0] for r in table.rows[:2]] == ["torch", "jax"]
    assert table.rows[-1][2].text == "crossover" and "batch 8" in table.rows[-1][3].text
    chart = figures.batch_sweep(report)
    assert chart is not None and "torch has the higher throughput at batch 8" in chart.note
    # a single batch size is no sweep
    assert sweep_table(_report([("torch", 8, 5, 0.01, 0), ("jax", 8, 5, 0.02, 0)])) is None


def _synthetic_store(path: Path) -> Path:
    """A store as `run -w cnn -f torch,jax -b 8,32 --profile` leaves one, written without any
    worker: timed trials with start-up and step medians, one profiled trial per framework."""
    from dlbench.analysis.categories import CATEGORIES, metric_name
    from dlbench.results.records import TrialResult
    from dlbench.results.store import Store
    from dlbench.runner.plan import workload_spec
    from dlbench.spec import TrialSpec

    store = Store(path)
    run_id = store.create_run("dlbench run -w cnn -f torch,jax -b 8,32 --profile", {}, allow_concurrent=True)
    timed = {("torch", 8): (5.0, 0.010), ("torch", 32): (5.0, 0.030), ("jax", 8): (20.0, 0.020), ("jax", 32): (20.0, 0.020)}
    seq = 0
    for (framework, batch), (startup, step) in timed.items():
        for profile in (False, True) if batch == 8 else (False,):
            spec = TrialSpec(workload=workload_spec("cnn", "tiny", batch_size=batch), framework=framework, profile=profile)
            tid = store.add_trial(run_id, seq, spec)
            seq += 1
            metrics: dict[str, float | None] = {"time_to_first_step_s": startup, "step_s_median": step,
                                                "samples_per_s": batch / step}
            if profile:
                metrics.update({metric_name(c): step * (i + 1) / 66 for i, c in enumerate(CATEGORIES)})
                metrics[metric_name("pooling")] = step * (0.6 if framework == "jax" else 0.1)
            store.finish_trial(tid, TrialResult(status="ok", metrics=metrics))
    return path


def test_html_report_has_the_why_charts_in_headless_chromium(tmp_path, capsys):
    from cdp import Chromium, find_browser
    from test_report import RENDERED_CHARTS, _browser

    from dlbench.cli.main import main

    store = _synthetic_store(tmp_path / "s.sqlite")
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(store), "--html", str(out)]) == 0
    assert main(["report", "--store", str(store), "--wide"]) == 0
    text = capsys.readouterr().out
    assert "where the time goes" in text and "findings" in text and "when compilation pays back" in text
    assert "jax: pooling 12 ms/step, torch 1 ms" in text  # the ratio rule, from the profiled trials
    if find_browser() is None and os.environ.get("DLBENCH_REQUIRE_BROWSER") != "1":
        pytest.skip("no chromium on PATH")
    b = Chromium(_browser())
    try:
        b.open(out)
        rendered = b.evaluate(RENDERED_CHARTS)
    finally:
        b.close()
    assert b.errors() == []
    assert all(rendered.get(k, 0) > 0 for k in ("payback", "batch-sweep", "profile")), rendered
