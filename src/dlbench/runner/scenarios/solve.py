"""The solver scenario (on an ODE problem, problems/solve.py), run by the
worker process: a work-precision sweep of every solver the trial's framework offers
(backends/<framework>/ode.py), in each dtype, over the tolerances, as SciMLBenchmarks draws its
work-precision diagrams: per point the error at the output times against the float64 reference,
the warm wall time (the first solve, compilation included, apart), the field and Jacobian
evaluations (counted in the field: backends/solve.py; for a compiled solve by a second, untimed
solve), the steps and any failure (max steps, step-size collapse) as data.
On the neural ODE, the gradient of its loss by each method the library offers (backpropagation
through the solver, adjoint), its time and its error against the float64 adjoint reference.

A solver that fails at a tolerance is not retried at the tighter ones: those points are recorded
as `skipped`, naming the failure (an explicit solver on a stiff problem fails at every tolerance,
each attempt running to the step cap).

SciPy's solvers, the framework-neutral float64 baseline, are a trial of their own: the record's
`baseline` framework "scipy" (backends/scipy/ode.py), which the plan adds once per problem and
repeat and which runs this same sweep (runner/plan.py: _baselines; the report shows its rows as
the baseline, report/solve.py). Stores from before it hold SciPy's curves inside a framework's
trial, under `scipy-` names with a note `solve.baseline`; the report reads both.

Everything lands in the trial's series (t = rtol; exports keep every point) and notes:
`solve.<solver>.<dtype>.<quantity>` for quantity in POINT_SERIES, `gradient.<method>.<dtype>.*`,
`solve.<solver>.kind`, `solve.<solver>.<dtype>.failures` (`.counting` where an untimed counting solve
failed) and `solve.absent.<what>`.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dlbench.backends import support
from dlbench.backends.solve import FAILURES, Count, Gradient, OdeModule, Solve, Solved
from dlbench.runner import protocol
from dlbench.runner.context import TrialContext
from dlbench.spec import SolveOptions
from dlbench.problems import solve as ivp

# Status codes of the `status` series (0 ok), so failures are points of the export like the rest.
STATUS_CODES = {"ok": 0, **{name: i + 1 for i, name in enumerate(FAILURES)}, "skipped": len(FAILURES) + 1}
POINT_SERIES = ("error", "wall_s", "first_s", "nfe", "njev", "steps", "rejected", "status")
HEADLINE_RTOL = 1e-6


@dataclass(frozen=True)
class SweepSettings:
    rtols: tuple[float, ...]
    dtypes: tuple[str, ...]
    max_steps: int
    gradient_rtols: tuple[float, ...]
    min_time_s: float = 0.2  # each point's warm solves run until this much time and 3 solves
    max_repeats: int = 20


@dataclass
class Point:
    solver: str
    dtype: str
    rtol: float
    atol: float
    status: str
    message: str = ""
    error: float | None = None
    wall_s: float | None = None  # median of the warm solves
    first_s: float | None = None  # the first solve of this solver and dtype includes compilation
    repeats: int = 0
    counters: dict[str, float] = field(default_factory=dict)


def timed(solve: Callable[[], Solved], settings: SweepSettings) -> tuple[Solved, list[float]]:
    """Warm solves until min_time_s and at least 3 (max_repeats at most): the last outcome and
    every solve's seconds. A failed solve is timed once (its time is that of reaching the cap)."""
    times: list[float] = []
    while True:
        t = time.perf_counter()
        out = solve()
        times.append(time.perf_counter() - t)
        if out.status != "ok" or len(times) >= settings.max_repeats \
                or (len(times) >= 3 and sum(times) >= settings.min_time_s):
            return out, times


def _counters(out: Solved) -> dict[str, float]:
    found = {"nfe": out.nfe, "njev": out.njev, "steps": out.steps, "rejected": out.rejected, **out.extra}
    return {k: float(v) for k, v in found.items() if v is not None}


def sweep_solver(problem: ivp.Problem, prepare: Callable[[str], Solve], solver: str, dtype: str,
                 settings: SweepSettings, prepare_count: Callable[[str], Count | None] = lambda dtype: None,
                 ) -> list[Point]:
    """One solver in one dtype over the tolerances (loosest first). An exception the library
    raises is that point's failure (`failed`, its message kept), never the trial's. Where the
    module counts apart (`prepare_count`), each solved point is solved once more, after its timed
    solves, for its nfe and njev."""
    ref = ivp.reference(problem, min(settings.rtols))  # 100x tighter than the sweep's tightest
    raw = prepare(dtype)
    count = prepare_count(dtype)

    def solve(rtol: float, atol: float) -> Solved:
        try:
            return raw(rtol, atol)
        except Exception as e:  # noqa: BLE001 (a library's error is a point of data)
            return Solved(None, "failed", f"{type(e).__name__}: {e}"[:300])

    points: list[Point] = []
    failed: Point | None = None
    for i, rtol in enumerate(sorted(settings.rtols, reverse=True)):
        atol = rtol * problem.atol_ratio
        if failed is not None:
            points.append(Point(solver, dtype, rtol, atol, "skipped",
                                f"not tried: {failed.status} at rtol {failed.rtol:g}"))
            continue
        first_s = None
        if i == 0:  # the first solve compiles (jax.jit, tf.function): kept apart
            t = time.perf_counter()
            solve(rtol, atol)
            first_s = time.perf_counter() - t
        out, times = timed(lambda: solve(rtol, atol), settings)
        point = Point(solver, dtype, rtol, atol, out.status, out.message, first_s=first_s,
                      wall_s=statistics.median(times), repeats=len(times), counters=_counters(out))
        if out.y is not None:
            point.error = ivp.error(out.y, ref)
            if count is not None:
                _count_into(point, count)
        else:
            failed = point
            if count is not None:  # its nfe would be the library's own count, not the field's
                point.counters.pop("nfe", None)
        points.append(point)
    return points


def _count_into(point: Point, count: Count) -> None:
    """The untimed counting solve's nfe and njev into the point's counters; where it fails, the
    point keeps no nfe (never the library's step count in its place) and says why."""
    try:
        counts = count(point.rtol, point.atol)
    except Exception as e:  # noqa: BLE001 (the timed solve succeeded: its point stands)
        point.counters.pop("nfe", None)
        point.message = f"counting solve failed: {type(e).__name__}: {e}"[:300]
        return
    point.counters.update(nfe=float(counts.nfe), njev=float(counts.njev))


@dataclass
class GradientPoint:
    method: str
    solver: str
    dtype: str
    rtol: float
    status: str
    message: str = ""
    error: float | None = None
    wall_s: float | None = None
    first_s: float | None = None


def sweep_gradient(problem: ivp.Problem, prepare: Callable[[float], Gradient], method: str, solver: str,
                   dtype: str, settings: SweepSettings) -> list[GradientPoint]:
    ref = ivp.gradient_reference(problem)
    points = []
    for rtol in sorted(settings.gradient_rtols, reverse=True):
        try:
            grad = prepare(rtol)
            t = time.perf_counter()
            grad()
            first_s = time.perf_counter() - t
            times: list[float] = []
            g: dict[str, np.ndarray] | None = None
            while len(times) < 3 or (sum(times) < settings.min_time_s and len(times) < settings.max_repeats):
                t = time.perf_counter()
                g = grad()
                times.append(time.perf_counter() - t)
        except Exception as e:  # a gradient that fails is a point of data, as a solve is
            points.append(GradientPoint(method, solver, dtype, rtol, "failed", f"{type(e).__name__}: {e}"[:300]))
            continue
        assert g is not None
        points.append(GradientPoint(method, solver, dtype, rtol, "ok", error=ivp.relative_error(
            ivp.flat_gradient(g), ref), wall_s=statistics.median(times), first_s=first_s))
    return points


def _prepare(module: OdeModule, problem: ivp.Problem, solver: str, max_steps: int, dtype: str) -> Solve:
    return module.prepare(problem, solver, dtype, max_steps)


def _prepare_count(module: OdeModule, problem: ivp.Problem, solver: str, max_steps: int, dtype: str) -> Count | None:
    return module.prepare_count(problem, solver, dtype, max_steps)


def _prepare_gradient(module: OdeModule, problem: ivp.Problem, solver: str, method: str, dtype: str,
                      rtol: float) -> Gradient:
    return module.prepare_gradient(problem, solver, method, dtype, rtol, rtol * problem.atol_ratio)


@dataclass
class Sweep:
    problem: str
    kinds: dict[str, str]  # solver -> "explicit (library)" / "implicit (library)"
    absent: dict[str, str]
    points: list[Point]
    gradients: list[GradientPoint]


def sweep(problem: ivp.Problem, module: OdeModule, settings: SweepSettings,
          progress: Callable[[str], None] = lambda s: None) -> Sweep:
    """Every solver of `module` in every dtype it supports, then the gradients where the problem
    has one. A dtype a solver does not run is recorded as absent."""
    absent = dict(module.ABSENT)
    points: list[Point] = []
    for solver, info in module.SOLVERS.items():
        for dtype in settings.dtypes:
            if dtype not in info.dtypes:
                if dtype in absent:  # the whole library lacks it: said once
                    continue
                absent[f"{solver}.{dtype}"] = f"{solver} ({info.library}) does not run {dtype}"
                continue
            progress(f"{problem.name} {solver} {dtype}")
            points += sweep_solver(problem, functools.partial(_prepare, module, problem, solver, settings.max_steps),
                                   solver, dtype, settings,
                                   functools.partial(_prepare_count, module, problem, solver, settings.max_steps))
    gradients: list[GradientPoint] = []
    if problem.has_gradient:
        for method, solver in module.GRADIENTS.items():
            for dtype in settings.dtypes:
                progress(f"{problem.name} gradient {method} {dtype}")
                gradients += sweep_gradient(
                    problem, functools.partial(_prepare_gradient, module, problem, solver, method, dtype), method,
                    solver, dtype, settings)
    kinds = {s: f"{i.kind} ({i.library})" for s, i in module.SOLVERS.items()}
    return Sweep(problem.name, kinds, absent, points, gradients)


def series_and_notes(s: Sweep) -> tuple[dict[str, list[tuple[float, float]]], dict[str, str]]:
    """The sweep as a trial's series (t = rtol; `status` at every point, the other quantities where
    the point has them: a failed solve has no error) and
    notes (solver kinds, failure messages, absences)."""
    series: dict[str, list[tuple[float, float]]] = {}
    notes = {f"solve.{solver}.kind": kind for solver, kind in s.kinds.items()}
    notes.update({f"solve.absent.{what}": why for what, why in s.absent.items()})
    for p in s.points:
        key = f"solve.{p.solver}.{p.dtype}"
        values = {"error": p.error, "wall_s": p.wall_s, "first_s": p.first_s, "status": STATUS_CODES[p.status],
                  **{k: p.counters.get(k) for k in ("nfe", "njev", "steps", "rejected")}}
        for quantity, v in values.items():
            if v is not None:  # the status series has every point; the others where it has a value
                series.setdefault(f"{key}.{quantity}", []).append((p.rtol, float(v)))
        # the skipped points' status series names them; an ok point's message is its counting's
        what = {"ok": "counting", "skipped": None}.get(p.status, "failures")
        if what == "failures" or (what == "counting" and p.message):
            said = notes.get(f"{key}.{what}")
            line = f"rtol {p.rtol:g}: {p.status}: {p.message}"
            notes[f"{key}.{what}"] = line if said is None else f"{said}; {line}"
    for g in s.gradients:
        key = f"gradient.{g.method}.{g.dtype}"
        notes[f"{key}.solver"] = g.solver
        for quantity, v in {"error": g.error, "wall_s": g.wall_s, "first_s": g.first_s,
                            "status": STATUS_CODES.get(g.status, STATUS_CODES["failed"])}.items():
            if v is not None:
                series.setdefault(f"{key}.{quantity}", []).append((g.rtol, float(v)))
        if g.status != "ok":
            notes[f"{key}.failures"] = f"rtol {g.rtol:g}: {g.message}"
    return series, notes


def headline(s: Sweep) -> dict[str, float | None]:
    """The trial's metrics: points, failures, and the fastest float64 solve at rtol 1e-6 that
    succeeded (with its error), what the issue's question "who reaches 1e-6, at what cost" asks."""
    at = [p for p in s.points if p.status == "ok" and p.dtype == "float64" and np.isclose(p.rtol, HEADLINE_RTOL)]
    best = min(at, key=lambda p: p.wall_s or math.inf, default=None)
    return {"solve_points": float(len(s.points)),
            "solve_failures": float(sum(p.status not in ("ok", "skipped") for p in s.points)),
            "solve_1e-6_s": None if best is None else best.wall_s,
            "solve_1e-6_error": None if best is None else best.error}


def run(ctx: TrialContext) -> None:
    """The trial: the float64 references (cached), then the sweep of the framework's solvers
    (SciPy's in the baseline's trial: they are its framework's)."""
    trial, phases, result = ctx.trial, ctx.phases, ctx.result
    m = ctx.metrics
    module = support.build_solvers(trial, ctx.backend)
    problem = ctx.problem
    options = trial.options_of(SolveOptions)
    settings = SweepSettings(rtols=options.rtols(), dtypes=protocol.SOLVE_DTYPES, max_steps=options.solve_max_steps,
                             gradient_rtols=protocol.SOLVE_GRADIENT_RTOLS)
    t = phases.start("reference")
    ivp.reference(problem, min(settings.rtols))
    if problem.has_gradient:
        ivp.gradient_reference(problem)
    m["reference_s"] = phases.end("reference", t)

    ctx.sampler.begin_window()  # the sweep is the timed part: the monitors' window (interference, energy)
    t = phases.start("sweep")
    own = sweep(problem, module, settings)
    m["solve_sweep_s"] = phases.end("sweep", t)
    ctx.sampler.end_window()
    series, notes = series_and_notes(own)
    result.series.update(series)
    result.notes.update(notes)
    m.update(headline(own))
