"""The solver scenario's tables and work-precision diagram (runner/solve.py writes the series):

- work precision: one row per problem x framework x solver x dtype; per tolerance the achieved
  error as log10 (or the failure: `max` steps, `dt` step-size collapse, `nan`, `fail`, `skip`:
  not tried after a failure at a looser tolerance), then the warm time and the counters at
  rtol 1e-6, the question "who reaches 1e-6, at what cost";
- gradients: the neural ODE's gradient error and time per framework x method x dtype x rtol;
- the diagram: per problem log10 error against log10 warm seconds, one curve per framework x
  solver x dtype, as SciMLBenchmarks draws them (work_precision, in each problem's section).
A value of several repeats is the median over the processes. SciPy's baseline is one set of rows
and curves per run and problem (framework `scipy`, the record's `baseline`), never a framework's
row: a trial of its own (framework `scipy`, its solvers under their own names) since issue 44, in
the trials of the frameworks before (under `scipy-` names, with a note saying which trial
measured it); both forms read alike.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dlbench.problems.solve import REFERENCE_MARGIN, REFERENCE_RTOL
from dlbench.report.cells import label_cells, label_columns
from dlbench.report.model import Config, Report, Trial
from dlbench.report.scenarios import SOLVE_GRADIENTS_TABLE, SOLVE_TABLE, configs_in
from dlbench.report.tabledata import MISSING, Cell, Column, Table

if TYPE_CHECKING:  # its chart functions import plotly when called (report/plot.py)
    from dlbench.report.plot import Chart

HEADLINE_RTOL = 1e-6
FAILURE_TOKENS = {1: "max", 2: "dt", 3: "nan", 4: "fail", 5: "skip"}  # runner/solve.py STATUS_CODES
AXES = ("workload", "framework")
# The namespaces of the series and notes runner/scenarios/solve.py writes: a solver's points, a
# gradient method's points.
SOLVER_SERIES, GRADIENT_SERIES = "solve.", "gradient."
# SciPy's baseline as stores from before its own trial hold it, inside a framework's trial: its
# solvers' prefix and the note that says which trial measured it.
BASELINE_PREFIX, BASELINE_NOTE = "scipy-", "solve.baseline"


@dataclass(frozen=True)
class Curve:
    solver: str
    dtype: str
    kind: str
    # rtol -> quantity -> value (median over the configuration's ok processes)
    points: dict[float, dict[str, float]]


def _solve_configs(report: Report, table: str = SOLVE_TABLE) -> list[Config]:
    return [c for c in configs_in(report, table) if c.ok]


def is_baseline(solver: str) -> bool:
    """Whether a curve of a framework's trial is SciPy's baseline (stores from before its own
    trial: the prefix)."""
    return solver.startswith(BASELINE_PREFIX)


def is_baseline_config(config: Config) -> bool:
    """Whether a configuration is its record's baseline trial (framework `scipy`), no framework."""
    return config.axes["framework"] == config.record.baseline


def baseline_word(configs: list[Config]) -> str:
    """The framework column's word for the baseline's rows: the record's baseline (`scipy`)."""
    return next((c.record.baseline for c in configs if c.record.baseline), "baseline")


def _held_inside(configs: list[Config]) -> bool:
    """Whether the baseline is held inside the frameworks' trials (a store from before its own
    trial), which the table's note then describes as it did."""
    return any(name.startswith(SOLVER_SERIES + BASELINE_PREFIX) for c in configs if not is_baseline_config(c)
               for t in c.ok for name in t.series)


def _gather(trials: list[Trial], prefix: str, keep: Callable[[str], bool]) -> list[Curve]:
    """The curves (solver or, prefix GRADIENT_SERIES, method) of `keep`'s solvers in these
    trials' series, each point the median over the trials that have it."""
    gathered: dict[tuple[str, str], dict[float, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    kinds: dict[str, str] = {}
    for t in trials:
        notes = t.data.get("notes") or {}
        for name, points in t.series.items():
            parts = name.split(".")
            if len(parts) != 4 or f"{parts[0]}." != prefix or not keep(parts[1]):
                continue
            if f"{prefix}{parts[1]}.kind" in notes:
                kinds.setdefault(parts[1], str(notes[f"{prefix}{parts[1]}.kind"]))
            for rtol, value in points:
                if not math.isnan(value):
                    gathered[(parts[1], parts[2])][rtol][parts[3]].append(value)
    return [Curve(solver, dtype, kinds.get(solver, ""),
                  {r: {q: statistics.median(v) for q, v in qs.items()} for r, qs in sorted(pts.items(), reverse=True)})
            for (solver, dtype), pts in gathered.items()]


def curves(config: Config, prefix: str = SOLVER_SERIES) -> list[Curve]:
    """The configuration's own solver (or, prefix GRADIENT_SERIES, method) curves, SciPy's
    baseline apart (`baseline_groups`)."""
    return _gather(config.ok, prefix, lambda solver: not is_baseline(solver))


def baseline_groups(configs: list[Config]) -> list[tuple[list[Config], list[Curve]]]:
    """SciPy's baseline once per run and problem (and any other axis but the framework): the
    configurations of each group (in their order; its baseline configuration among them, whose
    rows are the curves) and its curves under their solvers' names, each point the median over
    every trial of the group that measured it: the baseline's own trials (one per repeat), or in
    stores from before those the frameworks' trials that hold it (one per repeat in a run; each
    framework's trial in older stores and under Ray)."""
    groups: dict[tuple[object, ...], list[Config]] = {}
    for c in configs:
        key = (c.run_id, *(v for a, v in sorted(c.axes.items()) if a != "framework"))
        groups.setdefault(key, []).append(c)
    out = []
    for cs in groups.values():
        inside = _gather([t for c in cs if not is_baseline_config(c) for t in c.ok], SOLVER_SERIES, is_baseline)
        own = _gather([t for c in cs if is_baseline_config(c) for t in c.ok], SOLVER_SERIES, lambda solver: True)
        out.append((cs, [replace(cv, solver=cv.solver.removeprefix(BASELINE_PREFIX)) for cv in inside] + own))
    return out


def _error_cell(point: dict[str, float] | None) -> Cell:
    if point is None:
        return Cell(MISSING)
    status = int(point.get("status", 0))
    if status:
        return Cell(FAILURE_TOKENS.get(status, "fail"))
    error = point.get("error")
    if error is None:
        return Cell(MISSING)
    return Cell("-inf" if error == 0 else f"{math.log10(error):.1f}")


def _number(value: float | None, scale: float = 1.0, digits: int = 3) -> Cell:
    return Cell(MISSING if value is None else f"{value * scale:.{digits}g}")


def _at(curve: Curve, rtol: float) -> dict[str, float] | None:
    return next((p for r, p in curve.points.items() if math.isclose(r, rtol)), None)


def _reference_words(configs: list[Config]) -> str:
    """The reference's tolerance: 1e-12, or 100x tighter than a sweep's tightest where that is
    tighter (problems/solve.py: reference_rtol; the tightest from each configuration's points)."""
    refs = set()
    for c in configs:
        found = [r for cv in _gather(c.ok, SOLVER_SERIES, lambda s: True) for r in cv.points]
        if found:
            refs.add(min(REFERENCE_RTOL, min(found) / REFERENCE_MARGIN))
    if len(refs) == 1:
        return f"rtol {refs.pop():g}"
    return f"rtol {REFERENCE_RTOL:g}, or {REFERENCE_MARGIN}x tighter than a sweep's tightest tolerance"


def work_precision_table(report: Report) -> Table | None:
    configs = _solve_configs(report)
    if not configs:
        return None
    groups = baseline_groups(configs)
    rtols = sorted({r for c in configs for cv in _gather(c.ok, SOLVER_SERIES, lambda s: True) for r in cv.points},
                   reverse=True)
    axes = report.varying(configs, AXES, named=False)
    columns = [*label_columns(report, axes), Column("solver", key=True), Column("kind"), Column("dtype", key=True),
               *(Column(f"{r:.0e}", "right") for r in rtols),
               Column("ms @1e-6", "right"), Column("nfe @1e-6", "right"), Column("njev @1e-6", "right")]

    def row(labels: list[Cell], solver: str, cv: Curve) -> tuple[Cell, ...]:
        at = _at(cv, HEADLINE_RTOL) or {}
        ok = at.get("status", 1) == 0
        return (*labels, Cell(solver), Cell(cv.kind.split(" ")[0]), Cell(cv.dtype),
                *(_error_cell(_at(cv, r)) for r in rtols),
                _number(at.get("wall_s") if ok else None, 1e3), _number(at.get("nfe") if ok else None),
                _number(at.get("njev") if ok else None))

    rows = []
    word = baseline_word(configs)
    for group, baseline in groups:
        for c in group:
            if not is_baseline_config(c):  # the baseline's rows follow the frameworks'
                rows += [row(label_cells(report, c, axes), cv.solver, cv) for cv in curves(c)]
        labels = [Cell(word) if a == "framework" else cell
                  for a, cell in zip(_label_names(report, axes), label_cells(report, group[0], axes))]
        rows += [row(labels, cv.solver, cv) for cv in baseline]
    notes = ["per rtol: log10 of the error at the output times (per component the largest deviation over"
             " the times over that component's peak, the largest over components) against the float64 SciPy"
             f" reference at {_reference_words(configs)}; atol = rtol x the problem's scale; max: the step cap, dt:"
             " the step size collapsed, nan: a non-finite solution, fail: another failure, skip: not tried after a failure at a"
             " looser tolerance; ms @1e-6: the median warm solve at rtol 1e-6 (first solve, compile included,"
             " apart)",
             "nfe: evaluations of the field, counted in the field (diffrax and TFP: in a second, untimed solve;"
             " SciPy and torch: in the timed one), the initial step size's and each Jacobian's point included;"
             " SciPy's include its finite-difference Jacobian's columns, diffrax's and TFP's Jacobians are by"
             " automatic differentiation and cost tangents, not evaluations; njev: Jacobians (SciPy's and TFP's"
             " own counts, diffrax's linearisations of the field); docs/benchmarks.md#how-nfe-is-counted",
             f"{word}: SciPy's solve_ivp in float64, the framework-neutral baseline, measured once per problem and"
             " repeat in a run"
             + (" (in the process of the repeat's first solve trial of the problem, on the run's machine), the median"
                " over the trials that measured it" if _held_inside(configs) else
                f", in a trial of its own (framework {word}, planned and run like the frameworks' trials), the"
                " median over its repeats")]
    notes += _baseline_notes(groups)
    notes += _absences(configs)
    return Table(SOLVE_TABLE, "Work precision", "ODE solvers: achieved error per tolerance (log10) and cost at 1e-6",
                 tuple(columns), tuple(rows), tuple(notes))


def _label_names(report: Report, axes: tuple[str, ...]) -> list[str]:
    """The names of label_cells' cells, in their order."""
    return (["run"] if report.multi_run else []) + list(axes)


def _baseline_notes(groups: list[tuple[list[Config], list[Curve]]]) -> list[str]:
    """Where and when each group's baseline was measured (the measuring trials' notes)."""
    out: dict[str, None] = {}
    for group, baseline in groups:
        if not baseline:
            continue
        for c in group:
            for t in c.ok:
                said = str((t.data.get("notes") or {}).get(BASELINE_NOTE, ""))
                if said.startswith("measured here: "):
                    out[f"{c.axes['workload']}: {said.removeprefix('measured here: ')}"] = None
    return list(out)


def _absences(configs: list[Config]) -> list[str]:
    said: dict[str, None] = {}
    word = baseline_word(configs)
    for c in sorted(configs, key=is_baseline_config):  # the baseline's own trials after the frameworks'
        for t in c.ok:  # every repeat: the baseline's notes are where it was measured
            notes = t.data.get("notes") or {}
            for key, why in notes.items():
                if key.startswith(f"{SOLVER_SERIES}absent."):
                    who = word if key.startswith(f"{SOLVER_SERIES}absent.{word}-") else c.axes["framework"]
                    said[f"{who}: {why}"] = None
                elif key.startswith(SOLVER_SERIES) and key.endswith((".failures", ".counting")):
                    solver, dtype = key.split(".")[1], key.split(".")[2]
                    who = word if is_baseline(solver) else c.axes["framework"]
                    said[f"{c.axes['workload']} {who} {solver.removeprefix(BASELINE_PREFIX)} {dtype}: {why}"] = None
    return list(said)


def gradient_table(report: Report) -> Table | None:
    configs = [c for c in _solve_configs(report, SOLVE_GRADIENTS_TABLE) if any(curves(c, GRADIENT_SERIES))]
    if not configs:
        return None
    axes = report.varying(configs, AXES, named=False)
    columns = [*label_columns(report, axes), Column("method", key=True), Column("solver"), Column("dtype", key=True),
               Column("rtol", "right", key=True), Column("gradient error", "right"), Column("ms", "right"),
               Column("first ms", "right")]
    rows = []
    for c in configs:
        notes = c.ok[0].data.get("notes") or {}
        for cv in curves(c, GRADIENT_SERIES):
            for rtol, p in cv.points.items():
                failed = int(p.get("status", 0)) != 0
                rows.append((*label_cells(report, c, axes), Cell(cv.solver),
                             Cell(str(notes.get(f"{GRADIENT_SERIES}{cv.solver}.{cv.dtype}.solver", ""))), Cell(cv.dtype),
                             Cell(f"{rtol:.0e}"), Cell("fail") if failed else _number(p.get("error"), digits=2),
                             _number(p.get("wall_s"), 1e3), _number(p.get("first_s"), 1e3)))
    notes_out = ["gradient error: normwise relative error of d loss / d field parameters against the float64"
                 " continuous-adjoint reference (SciPy DOP853, rtol 1e-12); backprop: through the solver's steps;"
                 " adjoint: the library's continuous adjoint; ms: median warm gradient, first: with compilation"]
    notes_out += [f"{c.axes['framework']}: {why}" for c in configs
                  for k, why in (c.ok[0].data.get("notes") or {}).items()
                  if k.startswith(GRADIENT_SERIES) and k.endswith(".failures")]
    return Table(SOLVE_GRADIENTS_TABLE, "Neural ODE gradients", "neural ODE: gradient error and time, backprop vs adjoint",
                 tuple(columns), tuple(rows), tuple(notes_out))


def diagram_traces(report: Report) -> list[tuple[str, str, list[float], list[float], list[str]]]:
    """(problem, curve name, log10 warm seconds, log10 error, hover text) per curve with an ok
    point: what the work-precision chart plots; SciPy's baseline once per problem."""
    out = []
    configs = _solve_configs(report)
    word = baseline_word(configs)
    for group, baseline in baseline_groups(configs):
        named = [(c, f"{c.axes['framework']} {cv.solver} {cv.dtype}", cv) for c in group if not is_baseline_config(c)
                 for cv in curves(c)]
        named += [(group[0], f"{word} {cv.solver} {cv.dtype}", cv) for cv in baseline]
        for c, name, cv in named:
            ok = [(r, p) for r, p in cv.points.items() if p.get("status", 1) == 0 and p.get("error", 0) > 0
                  and p.get("wall_s", 0) > 0]
            if ok:
                out.append((str(c.axes["workload"]), name,
                            [math.log10(p["wall_s"]) for _, p in ok], [math.log10(p["error"]) for _, p in ok],
                            [f"rtol {r:.0e}" for r, _ in ok]))
    return out


def work_precision(report: Report) -> Chart | None:
    """The work-precision diagram: per problem, log10 error against log10 warm seconds
    over the tolerance sweep, one curve per framework x solver x dtype (SciMLBenchmarks' diagram)."""
    import plotly.graph_objects as go

    from dlbench.report import plot

    traces = diagram_traces(report)
    if not traces:
        return None
    fig = go.Figure()
    dashes = {"float64": "solid", "float32": "dot"}
    for i, (problem, name, log_s, log_err, hover) in enumerate(traces):
        framework = name.split(" ")[0]
        label = f"{problem}: {name}" if len({t[0] for t in traces}) > 1 else name
        fig.add_trace(go.Scatter(
            x=log_s, y=log_err, mode="lines+markers", name=plot.escape(label),
            text=hover, hovertemplate="%{text}<br>log10 s %{x:.2f}<br>log10 error %{y:.2f}<extra></extra>",
            line={"color": plot.PALETTE[i % len(plot.PALETTE)] if framework == "scipy" else plot.color(report, framework),
                  "dash": dashes.get(name.rsplit(" ", 1)[-1], "dash"), "width": 1.5}))
    fig.update_xaxes(title_text="log10 warm seconds per solve")
    fig.update_yaxes(title_text="log10 error at the output times")
    return plot.Chart("work-precision", "Work precision", plot.layout(fig, height=520),
                      "One point per tolerance (the loosest upper left, tighter ones down and to the right): the error against the float64 reference and the median warm time of a solve;"
                      " lower-left is better; dotted: float32. Failed points (step cap, step-size collapse) are"
                      " left out here and named in the work-precision table.")
