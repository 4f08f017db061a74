"""The solver scenario's tables and work-precision diagram (runner/solve.py writes the series):

- work precision: one row per problem x framework x solver x dtype; per tolerance the achieved
  error as log10 (or the failure: `max` steps, `dt` step-size collapse, `nan`, `fail`, `skip`:
  not tried after a failure at a looser tolerance), then the warm time and the counters at
  rtol 1e-6, the question "who reaches 1e-6, at what cost";
- gradients: the neural ODE's gradient error and time per framework x method x dtype x rtol;
- the diagram: per problem log10 error against log10 warm seconds, one curve per framework x
  solver x dtype, as SciMLBenchmarks draws them (report/figures.py places it per workload).
A value of several repeats is the median over the processes.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from dlbench.report.cells import label_cells, label_columns
from dlbench.report.model import Config, Report
from dlbench.report.scenarios import SOLVE_GRADIENTS_TABLE, SOLVE_TABLE, configs_in
from dlbench.report.tabledata import MISSING, Cell, Column, Table

HEADLINE_RTOL = 1e-6
FAILURE_TOKENS = {1: "max", 2: "dt", 3: "nan", 4: "fail", 5: "skip"}  # runner/solve.py STATUS_CODES
AXES = ("workload", "framework")
# The namespaces of the series and notes runner/scenarios/solve.py writes: a solver's points, a
# gradient method's points.
SOLVER_SERIES, GRADIENT_SERIES = "solve.", "gradient."


@dataclass(frozen=True)
class Curve:
    solver: str
    dtype: str
    kind: str
    # rtol -> quantity -> value (median over the configuration's ok processes)
    points: dict[float, dict[str, float]]


def _solve_configs(report: Report, table: str = SOLVE_TABLE) -> list[Config]:
    return [c for c in configs_in(report, table) if c.ok]


def curves(config: Config, prefix: str = SOLVER_SERIES) -> list[Curve]:
    """The configuration's solver (or, prefix GRADIENT_SERIES, method) curves from its series."""
    gathered: dict[tuple[str, str], dict[float, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for t in config.ok:
        for name, points in t.series.items():
            parts = name.split(".")
            if len(parts) != 4 or f"{parts[0]}." != prefix:
                continue
            for rtol, value in points:
                if not math.isnan(value):
                    gathered[(parts[1], parts[2])][rtol][parts[3]].append(value)
    notes = config.ok[0].data.get("notes") or {}
    return [Curve(solver, dtype, str(notes.get(f"{prefix}{solver}.kind", "")),
                  {r: {q: statistics.median(v) for q, v in qs.items()} for r, qs in sorted(pts.items(), reverse=True)})
            for (solver, dtype), pts in gathered.items()]


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


def work_precision_table(report: Report) -> Table | None:
    configs = _solve_configs(report)
    if not configs:
        return None
    rtols = sorted({r for c in configs for cv in curves(c) for r in cv.points}, reverse=True)
    axes = report.varying(configs, AXES)
    columns = [*label_columns(report, axes), Column("solver", key=True), Column("kind"), Column("dtype", key=True),
               *(Column(f"{r:.0e}", "right") for r in rtols),
               Column("ms @1e-6", "right"), Column("nfe @1e-6", "right"), Column("njev @1e-6", "right")]
    rows = []
    for c in configs:
        for cv in curves(c):
            at = _at(cv, HEADLINE_RTOL) or {}
            ok = at.get("status", 1) == 0
            rows.append((*label_cells(report, c, axes), Cell(cv.solver), Cell(cv.kind.split(" ")[0]), Cell(cv.dtype),
                         *(_error_cell(_at(cv, r)) for r in rtols),
                         _number(at.get("wall_s") if ok else None, 1e3), _number(at.get("nfe") if ok else None),
                         _number(at.get("njev") if ok else None)))
    notes = ["per rtol: log10 of the error at the output times (per component the largest deviation over"
             " the times over that component's peak, the largest over components) against the float64 SciPy"
             " reference at rtol 1e-12; atol = rtol x the problem's scale; max: the step cap, dt: the step size"
             " collapsed, nan: a non-finite solution, fail: another failure, skip: not tried after a failure at a"
             " looser tolerance; ms @1e-6: the median warm solve at rtol 1e-6 (first solve, compile included,"
             " apart), nfe / njev: field and Jacobian evaluations as the library counts them"]
    notes += _absences(configs)
    return Table(SOLVE_TABLE, "Work precision", "ODE solvers: achieved error per tolerance (log10) and cost at 1e-6",
                 tuple(columns), tuple(rows), tuple(notes))


def _absences(configs: list[Config]) -> list[str]:
    said: dict[str, None] = {}
    for c in configs:
        notes = c.ok[0].data.get("notes") or {}
        for key, why in notes.items():
            if key.startswith(f"{SOLVER_SERIES}absent."):
                said[f"{c.axes['framework']}: {why}"] = None
            elif key.endswith(".failures") and key.startswith(SOLVER_SERIES):
                said[f"{c.axes['workload']} {c.axes['framework']} {key.split('.')[1]} {key.split('.')[2]}: {why}"] = None
    return list(said)


def gradient_table(report: Report) -> Table | None:
    configs = [c for c in _solve_configs(report, SOLVE_GRADIENTS_TABLE) if any(curves(c, GRADIENT_SERIES))]
    if not configs:
        return None
    axes = report.varying(configs, AXES)
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
    point: what the work-precision chart plots."""
    out = []
    for c in _solve_configs(report):
        for cv in curves(c):
            ok = [(r, p) for r, p in cv.points.items() if p.get("status", 1) == 0 and p.get("error", 0) > 0
                  and p.get("wall_s", 0) > 0]
            if ok:
                out.append((str(c.axes["workload"]), f"{c.axes['framework']} {cv.solver} {cv.dtype}",
                            [math.log10(p["wall_s"]) for _, p in ok], [math.log10(p["error"]) for _, p in ok],
                            [f"rtol {r:.0e}" for r, _ in ok]))
    return out
