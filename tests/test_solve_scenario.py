"""`dlbench run --scenario solve` end to end (runner/scenarios/solve.py, report/solve.py): one torch
run of a stiff and a neural-ODE problem over two tolerances, beside SciPy's baseline trial of
each, its failures stored as data, its work-precision and gradient tables, its diagram rendered in
headless Chromium, every point in the JSON export; the baseline planned as trials of its own and
reported from them as from the stores before them; and bad tolerances refused in one line (exit
2) before anything runs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from cdp import Chromium
from dlbench.cli.main import main
from dlbench.report import model, solve
from dlbench.results.store import Store
from dlbench.runner.scenarios.solve import STATUS_CODES
from dlbench.spec import SolveOptions, SpecError
from test_report import RENDERED_CHARTS, _browser

pytest.importorskip("torchdiffeq")


@pytest.fixture(scope="module")
def solved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("solve") / "s.sqlite"
    code = main(["run", "-w", "robertson,node-ode", "-f", "torch", "--scenario", "solve", "--rtol-loosest", "1e-3",
                 "--rtol-tightest", "1e-4", "--solve-max-steps", "150", "--repeats", "1", "--allow-concurrent",
                 "--store", str(store)])
    assert code == 0
    return store


def _trial(store: Path, workload: str, framework: str = "torch") -> model.Trial:
    report = model.load(Store(store), [1])
    return next(t for c, t in report.trials() if c.axes["workload"] == workload and c.axes["framework"] == framework)


def test_a_stiff_problem_records_explicit_failures_and_implicit_successes(solved: Path) -> None:
    t = _trial(solved, "robertson")
    assert t.status == "ok"
    assert not any("scipy" in name for name in t.series)  # SciPy's sweep is its own trial's
    # torch's solvers are explicit: each stops at the step cap, the tighter tolerance is not tried
    for solver in ("torchdiffeq-dopri5", "torchode-tsit5", "torchode-dopri5"):
        for dtype in ("float64", "float32"):
            status = dict(t.series[f"solve.{solver}.{dtype}.status"])
            assert status == {1e-3: STATUS_CODES["max_steps"], 1e-4: STATUS_CODES["skipped"]}, (solver, dtype)
            assert "max" in t.data["notes"][f"solve.{solver}.{dtype}.failures"]
    assert "implicit" in t.data["notes"]["solve.absent.implicit"]
    # SciPy's BDF meets the stiff problem in the baseline's own trial, its error against the reference
    base = _trial(solved, "robertson", "scipy")
    assert base.status == "ok" and base.spec["policy"]["mode"] == t.spec["policy"]["mode"]
    errors = dict(base.series["solve.BDF.float64.error"])
    assert set(errors) == {1e-3, 1e-4} and all(0 < e < 1e-2 for e in errors.values())
    assert dict(base.series["solve.BDF.float64.njev"])[1e-4] >= 1
    assert base.data["notes"]["solve.absent.float32"] == "SciPy's solve_ivp computes in float64 only"


def test_the_neural_ode_solves_and_its_gradients_meet_the_reference(solved: Path) -> None:
    t = _trial(solved, "node-ode")
    for dtype in ("float64", "float32"):
        errors = dict(t.series[f"solve.torchode-tsit5.{dtype}.error"])
        assert all(0 < e < 1e-2 for e in errors.values()), errors
    for method in ("backprop", "adjoint"):
        errors = dict(t.series[f"gradient.{method}.float64.error"])
        assert set(errors) >= {1e-8} and errors[1e-8] < 1e-5, (method, errors)
        assert all(s > 0 for _, s in t.series[f"gradient.{method}.float64.wall_s"])
    assert t.metrics["solve_1e-6_s"] is None  # the sweep stopped at 1e-4: no headline, said as such


def test_tables_and_diagram_show_every_solver(solved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = model.load(Store(solved), [1])
    table = solve.work_precision_table(report)
    assert table is not None
    headers = [c.header for c in table.columns]
    assert headers[:7] == ["workload", "framework", "solver", "kind", "dtype", "1e-03", "1e-04"], headers
    rows = {tuple(c.text for c in row[:5]): [c.text for c in row[5:7]] for row in table.rows}
    assert rows[("robertson", "torch", "torchode-tsit5", "explicit", "float64")] == ["max", "skip"]
    bdf = rows[("robertson", "scipy", "BDF", "implicit", "float64")]  # the baseline's rows, framework-neutral
    assert all(-6 < float(v) < -1 for v in bdf), bdf  # log10 errors
    assert len(rows) == 2 * (3 * 2 + 5)  # per problem: 3 torch solvers x 2 dtypes, 5 SciPy solvers
    gradients = solve.gradient_table(report)
    assert gradients is not None
    method = [c.header for c in gradients.columns].index("method")
    assert {r[method].text for r in gradients.rows} == {"backprop", "adjoint", "torchode-backprop"}
    assert main(["report", "1", "--store", str(solved)]) == 0
    out = capsys.readouterr().out
    assert "Work precision" in out or "achieved error per tolerance" in out
    assert "no adaptive implicit (stiff) solver" in out


def test_export_keeps_every_point(solved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "e.json"
    assert main(["export", "1", "--format", "json", "-o", str(out), "--store", str(solved)]) == 0
    trials: list[dict[str, Any]] = json.loads(out.read_text())["runs"][0]["trials"]
    for framework, curves in (("torch", 3 * 2), ("scipy", 5)):
        rober = next(t for t in trials if t["spec"]["workload"]["name"] == "robertson"
                     and t["spec"]["framework"] == framework)
        statuses = [k for k in rober["series"] if k.endswith(".status")]
        assert len(statuses) == curves and all(len(rober["series"][k]) == 2 for k in statuses)


def test_work_precision_diagram_in_headless_chromium(solved: Path, tmp_path: Path) -> None:
    browser = _browser()
    out = tmp_path / "r.html"
    assert main(["report", "1", "--store", str(solved), "--html", str(out)]) == 0
    b = Chromium(browser)
    try:
        b.open(out)
        rendered = b.evaluate(RENDERED_CHARTS)
        text = b.evaluate("document.body.innerText")
    finally:
        b.close()
    assert b.errors() == []
    traces = {k: n for k, n in rendered.items() if k.endswith("work-precision")}
    # per problem a diagram; robertson's curves are SciPy's implicit ones (torch's failed)
    assert len(traces) == 2 and all(n >= 3 for n in traces.values()), rendered
    assert "achieved error per tolerance" in text and "gradient error and time, backprop vs adjoint" in text


@pytest.mark.parametrize("argv, said", [
    (["--rtol-tightest", "1e-20"], "tightest rtol 1e-20 is not a tolerance: allowed are numbers from 1e-11 to 0.1"),
    (["--rtol-tightest", "1e-14"], "tightest rtol 1e-14 is not a tolerance: allowed are numbers from 1e-11 to 0.1"),
    (["--solve-max-steps", "100000000000000000000"], "solve max steps must be an integer from 1 to 100,000,000"),
    (["--rtol-loosest", "0.5"], "loosest rtol 0.5 is not a tolerance"),
    (["--rtol-loosest", "1e-8", "--rtol-tightest", "1e-4"], "tightest rtol 0.0001 is looser than the loosest 1e-08"),
    (["--solve-max-steps", "0"], "solve max steps must be an integer >= 1, got 0"),
])
def test_bad_tolerances_are_one_line_and_exit_2(argv: list[str], said: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "-w", "robertson", "-f", "torch", "--scenario", "solve", *argv, "--store",
                 str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "s.sqlite").exists()


def test_solve_options_outside_the_solve_scenario_are_refused() -> None:
    with pytest.raises(SpecError, match="apply to the solve scenario only, not 'train'"):
        SolveOptions(solve_rtol_tightest=1e-6).validate("train")
    rtols = SolveOptions().rtols()  # one per decade, 1e-3 .. 1e-10
    assert len(rtols) == 8 and all(math.isclose(r, 10.0**-k) for r, k in zip(rtols, range(3, 11)))
    # a tightest tolerance between decades ends the sweep
    assert SolveOptions(solve_rtol_loosest=1e-3, solve_rtol_tightest=3e-5).rtols() == (1e-3, 1e-4, 3e-5)


def test_a_library_error_is_a_failed_point_and_the_tighter_ones_are_skipped() -> None:
    from dlbench.runner.scenarios.solve import SweepSettings, Sweep, series_and_notes, sweep_solver
    from dlbench.problems import solve as ivp

    def prepare(dtype: str) -> Any:
        def solve(rtol: float, atol: float) -> Any:
            raise RuntimeError("the Newton iteration diverged")
        return solve

    points = sweep_solver(ivp.PROBLEMS["lotka-volterra"], prepare, "broken", "float64",
                          SweepSettings(rtols=(1e-3, 1e-4), dtypes=("float64",), max_steps=10, gradient_rtols=()))
    assert [(p.status, p.rtol) for p in points] == [("failed", 1e-3), ("skipped", 1e-4)]
    series, notes = series_and_notes(Sweep("lotka-volterra", {"broken": "explicit (x)"}, {}, points, []))
    assert series["solve.broken.float64.status"] == [(1e-3, STATUS_CODES["failed"]), (1e-4, STATUS_CODES["skipped"])]
    assert "solve.broken.float64.error" not in series  # no error where nothing was solved
    assert notes["solve.broken.float64.failures"] == "rtol 0.001: failed: RuntimeError: the Newton iteration diverged"


def test_the_scipy_baseline_is_a_planned_trial_once_per_problem_and_repeat() -> None:
    """The record's baseline (scipy) is planned like any trial: one per problem and repeat,
    shuffled into its round, with the mode of the frameworks' trials beside it; none where no
    framework's trial of the problem can run, none for another scenario; its estimate is its
    own (SciPy's sweep), so a solve run's total stays what it was."""
    from dlbench import scenarios
    from dlbench.runner.plan import Costs, estimates
    from dlbench.runner.plan import Sweep as Planned
    from dlbench.runner.plan import make_plan

    assert scenarios.get("solve").baseline == "scipy" and scenarios.get("train").baseline is None
    plan = make_plan(Planned(workloads=("robertson", "hires"), frameworks=("jax", "torch"), scenarios=("solve",),
                             repeats=2, order_seed=3))
    base = [t.spec for t in plan.trials if t.spec.framework == "scipy"]
    assert sorted((s.workload.name, s.repeat) for s in base) == [("hires", 0), ("hires", 1), ("robertson", 0),
                                                                   ("robertson", 1)]
    assert all(t.status == "pending" for t in plan.trials) and {s.policy.mode for s in base} == {"compiled"}
    rounds = [[t.spec.repeat for t in plan.trials[i:i + 6]] for i in (0, 6)]
    assert rounds == [[0] * 6, [1] * 6]  # each round: 4 framework trials and its 2 baseline trials, shuffled
    assert [t.spec.framework for t in plan.trials[:6]] != ["jax", "jax", "torch", "torch", "scipy", "scipy"]
    seconds = dict(zip([(s.workload.name, s.framework, s.repeat) for s in (t.spec for t in plan.trials)],
                       estimates([t.spec for t in plan.trials], Costs())))
    # SciPy's sweep on a stiff problem: 2 explicit curves to the step cap (1.5 s) and 3 implicit
    # ones of 8 points (0.3 s), as the estimate counted it when it ran inside the first trial
    assert seconds[("robertson", "scipy", 0)] == (pytest.approx(2 * 1.5 + 3 * 8 * 0.3), "rough")
    # no framework's trial of the problem runs: no baseline; nor for a scenario without one
    none = make_plan(Planned(workloads=("robertson",), frameworks=("onnxruntime",), scenarios=("solve",), repeats=1))
    assert [t.spec.framework for t in none.trials] == ["onnxruntime"] and none.trials[0].status == "unsupported"
    assert all(t.spec.framework != "scipy" for t in make_plan(Planned(workloads=("mlp",), frameworks=("torch",),
                                                                      preset="tiny", repeats=1)).trials)


def test_the_report_shows_the_baseline_once_per_problem_from_its_own_trials_and_from_stores_before_them() -> None:
    """One run, two frameworks on one problem: SciPy's rows once (framework `scipy`), each point
    the median over the trials that measured it, whether the baseline is its own configuration
    (a trial per repeat, today) or held inside the frameworks' trials (stores from before: in
    the first trial of the problem, or under Ray in every one); never ranked as a framework."""
    from dlbench.report.model import AXES, Config, Report, Run, Trial
    from dlbench.report.overview import best_by_framework
    from dlbench.report.ranking import groups as ranking_groups
    from dlbench.runner.plan import Sweep as Planned
    from dlbench.runner.plan import make_plan
    from dlbench.spec import to_dict

    plan = make_plan(Planned(workloads=("robertson",), frameworks=("jax", "torch"), scenarios=("solve",), repeats=2))
    specs = {(p.spec.framework, p.spec.repeat): to_dict(p.spec) for p in plan.trials}
    bdf = (("wall_s", 0.1), ("nfe", 50.0), ("njev", 5.0), ("status", 0.0))

    def trial(tid: int, framework: str, scipy_error: float | None, repeat: int = 0) -> Trial:
        series = {f"solve.{framework}-rk.float64.{q}": [(1e-6, v)] for q, v in
                  (("error", 1e-5), ("wall_s", 0.01), ("nfe", 100.0), ("status", 0.0))}
        notes = {f"solve.{framework}-rk.kind": f"explicit ({framework}lib)"}
        if scipy_error is not None:  # the form of stores from before the baseline's own trial
            series.update({f"solve.{solve.BASELINE_PREFIX}BDF.float64.{q}": [(1e-6, v)] for q, v in
                           (("error", scipy_error), *bdf)})
            notes.update({"solve.scipy-BDF.kind": "implicit (scipy)", "solve.absent.scipy-float32": "float64 only",
                          solve.BASELINE_NOTE: f"measured here: SciPy's sweep measured in trial {tid}"})
        return Trial(tid, 1, specs[(framework, repeat)], "ok", None, {"solve_1e-6_s": 0.01 * tid}, series, [],
                     {"notes": notes})

    def baseline(tid: int, error: float, repeat: int) -> Trial:  # the baseline's own trial
        series = {f"solve.BDF.float64.{q}": [(1e-6, v)] for q, v in (("error", error), *bdf)}
        notes = {"solve.BDF.kind": "implicit (scipy)", "solve.absent.float32": "float64 only"}
        return Trial(tid, 1, specs[("scipy", repeat)], "ok", None, {"solve_1e-6_s": 0.001}, series, [],
                     {"notes": notes})

    def report(trials: list[Trial]) -> Report:
        by: dict[str, list[Trial]] = {}
        for t in trials:
            by.setdefault(t.spec["framework"], []).append(t)
        configs = tuple(Config(1, name, {a: f(ts[0].spec) for a, f in AXES.items()}, tuple(ts)) for name, ts in by.items())
        return Report((Run(1, {}, tuple(trials)),), configs, ())

    inside = [trial(1, "jax", 1e-3), trial(2, "torch", None)], [trial(1, "jax", 1e-3), trial(2, "torch", 3e-3)]
    own = [trial(1, "jax", None), trial(2, "torch", None), baseline(3, 1e-3, 0), baseline(4, 3e-3, 1)]
    for trials, error, held in ((inside[0], "-3.0", True), (inside[1], "-2.7", True), (own, "-2.7", False)):
        table = solve.work_precision_table(report(trials))
        assert table is not None
        rows = [[c.text for c in row] for row in table.rows]
        assert [r[:3] for r in rows] == [["robertson", "jax", "jax-rk"], ["robertson", "torch", "torch-rk"],
                                         ["robertson", "scipy", "BDF"]], rows
        assert rows[2][5] == error  # log10 of the median error over the trials that measured it
        assert table.notes.count("scipy: float64 only") == 1  # said once, whichever trials say it
        # where and when it was measured: the measuring trial's note, or a trial of its own
        assert ("robertson: SciPy's sweep measured in trial 1" in table.notes) is held
        [said] = [n for n in table.notes if n.startswith("scipy: SciPy's solve_ivp in float64")]
        assert ("in the process of the repeat's first solve trial" in said) is held
        assert ("in a trial of its own" in said) is not held
        names = [name for _, name, *_ in solve.diagram_traces(report(trials))]
        assert names == ["jax jax-rk float64", "torch torch-rk float64", "scipy BDF float64"]
        # scipy is no competitor: the ranking's settings hold the frameworks only (one trial each
        # here: the table shows the settings with a pair to test)
        groups, _ = ranking_groups(report(trials))
        assert {str(c.axes["framework"]) for cs in groups.values() for c in cs} == {"jax", "torch"}
        assert set(best_by_framework(list(report(trials).configs))[1]) == {"jax", "torch"}  # nor in the overview


def test_solver_modules_build_through_the_one_guarded_path_and_a_missing_library_is_unsupported(monkeypatch):
    """A problem's builder is each backend package's `ode` module, built by support.build like a
    workload's program (after the worker's one check, support.require); without its library the trial is unsupported with
    the extra to install, not failed."""
    import sys

    from dlbench.backends import get_backend, support
    from dlbench.backends.base import Unsupported, builder_module
    from dlbench.runner.plan import Sweep as Planned
    from dlbench.runner.plan import make_plan

    assert builder_module("dlbench.backends.torch", "hires") == "dlbench.backends.torch.ode"
    trial = make_plan(Planned(workloads=("hires",), frameworks=("torch",), scenarios=("solve",), repeats=1)).trials[0].spec
    backend = get_backend("torch")
    backend.import_framework()
    module = support.build_solvers(trial, backend)
    assert module.__name__ == "dlbench.backends.torch.ode" and "torchode-tsit5" in module.SOLVERS
    with pytest.raises(Unsupported, match="hires has no train scenario"):  # the child's one check (issue 44.5)
        support.require(dataclasses.replace(trial, scenario="train"), backend)
    monkeypatch.setitem(sys.modules, "torchode", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "dlbench.backends.torch.ode")
    with pytest.raises(Unsupported, match=r"torch has no ODE solvers here: .*torchode.*dlbench\[ode-torch\]"):
        support.build_solvers(trial, backend)


def test_auto_repeats_decide_the_frameworks_comparisons_without_the_baseline(tmp_path: Path) -> None:
    """`--repeats auto` narrows every configuration's interval, the baseline's too, but decides
    only the frameworks' comparisons: SciPy beside them is not ranked, so an undecided SciPy
    against JAX asks for no more rounds."""
    from dlbench.analysis import repeats
    from dlbench.results.records import TrialResult
    from dlbench.runner import rounds
    from dlbench.runner.plan import Sweep as Planned
    from dlbench.runner.plan import make_plan

    rule = repeats.parse("auto:50%,max=10")
    store = Store(tmp_path / "auto.sqlite")
    run = store.create_run("dlbench run", {}, False, order_seed=1, repeats={"rule": rule.text})
    plan = make_plan(Planned(workloads=("robertson",), frameworks=("jax", "torch"), scenarios=("solve",), repeats=4))
    values = {"jax": [1.0, 1.01, 0.99, 1.0], "torch": [2.0, 2.02, 1.98, 2.01], "scipy": [1.0, 1.02, 0.98, 0.995]}
    for seq, planned in enumerate(plan.trials):
        tid = store.add_trial(run, seq, planned.spec)
        value = values[planned.spec.framework][planned.spec.repeat]
        store.finish_trial(tid, TrialResult(status="ok", metrics={"solve_1e-6_s": value}))
    judgement = rounds.evaluate(store, run, rule, rounds.AutoState(rule.text))
    assert judgement.stop == "decided", judgement.text  # jax vs torch decided; scipy is not compared


def test_a_store_from_before_the_baseline_trial_reports_as_that_release_did(tmp_path: Path, capsys, monkeypatch) -> None:
    """tests/fixtures/solve-before-44.sqlite holds SciPy's curves inside each repeat's first torch
    trial of a problem (tests/fixtures/make_previous_release.sh says how it was written); its
    report is what that release printed, to the character."""
    import shutil

    fixtures = Path(__file__).parent / "fixtures"
    store = tmp_path / "before.sqlite"
    shutil.copy(fixtures / "solve-before-44.sqlite", store)
    monkeypatch.delenv("COLUMNS", raising=False)  # a pipe's width, as it was printed
    capsys.readouterr()
    assert main(["report", "--store", str(store)]) == 0
    assert capsys.readouterr().out == (fixtures / "solve-before-44-report.txt").read_text()


def test_the_solve_overview_names_its_metric_and_keeps_a_framework_without_a_value() -> None:
    """Issue 47.5: the solve overview was titled with the internal `solve_1e-6_s`, promised a time
    to first step it does not show, and left out torch (no solve reached 1e-6) instead of `–`."""
    from dlbench.report.model import AXES, Config, Report, Run, Trial
    from dlbench.report.overview import overview_table
    from dlbench.runner.plan import Sweep as Planned
    from dlbench.runner.plan import make_plan
    from dlbench.spec import to_dict

    plan = make_plan(Planned(workloads=("robertson",), frameworks=("jax", "torch", "tensorflow"), scenarios=("solve",),
                             repeats=1))
    values = {"jax": 0.02, "torch": None, "tensorflow": 0.05, "scipy": 0.001}
    trials = [Trial(i, 1, to_dict(p.spec), "ok", None, {"solve_1e-6_s": values[p.spec.framework]}, {}, [], {})
              for i, p in enumerate(plan.trials)]
    configs = tuple(Config(1, t.spec["framework"], {a: f(t.spec) for a, f in AXES.items()}, (t,)) for t in trials)
    table = overview_table(Report((Run(1, {}, tuple(trials)),), configs, ()))
    assert table is not None
    assert table.title == "overview: fastest solve s at rtol 1e-6 as a share of each workload's fastest framework"
    assert "first step" not in " ".join(table.notes)
    # one trial each: undecided (?)
    assert {row[0].text: row[1].text for row in table.rows} == {"jax": "100%?", "torch": "–", "tensorflow": "40%?"}
