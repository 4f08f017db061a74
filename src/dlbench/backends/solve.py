"""The solver scenario's seam to each framework's ODE library (and to SciPy's, the float64
baseline: backends/scipy/ode.py).

Each framework package has an `ode` module (backends/<framework>/ode.py) that exports:
- `SOLVERS`: solver name -> `SolverInfo` (library, explicit or implicit, the dtypes it runs);
- `ABSENT`: what the framework's libraries do not offer (no implicit solver; no backpropagation
  through the solver): a finding to report, never a silent gap;
- `GRADIENTS`: gradient method name -> the solver it differentiates through;
- `prepare(problem, solver, dtype, max_steps) -> Solve`: a callable of (rtol, atol) that solves
  once, synced, and returns `Solved` (failures as data, never an exception);
- `prepare_count(problem, solver, dtype, max_steps) -> Count | None`: where the timed solve
  cannot count its own field evaluations without changing what is timed (a compiled solve: a
  counter in the traced field counts traces, and a host callback inside it costs a round trip
  per evaluation), a callable of (rtol, atol) that solves once more, untimed, with a field that
  counts its evaluations, and returns `Counts`; None where `Solved` already holds the counts;
- `prepare_gradient(problem, solver, method, dtype, rtol, atol) -> Gradient`: a callable that
  returns d node_loss / d field parameters by name as float64 NumPy arrays.

The `nfe` every module reports is the number of times the solve evaluated the problem's field
(its primal: steps, Newton iterations, the initial step size, the point a Jacobian is taken at),
counted by dlbench in the field itself, never a library's own counter (which differ: SciPy's
nfev leaves out the finite-difference Jacobian's evaluations of Radau and BDF, TFP's BDF counts
its Newton iterations only, diffrax counts steps only). What stays different between libraries,
docs/benchmarks.md "How nfe is counted" says.
Imports no framework.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dlbench.problems import solve as ivp

# Statuses of one solve, beside "ok": what the library said stopped it.
FAILURES = ("max_steps", "step_size_collapse", "nonfinite", "failed")


@dataclass(frozen=True)
class SolverInfo:
    library: str  # "diffrax 0.7.2"
    kind: str  # "explicit" | "implicit"
    dtypes: tuple[str, ...] = ("float64", "float32")


@dataclass
class Solved:
    """One solve: y at the problem's output times (rows, float64) or None where it failed, the
    library's own counters (None where it has none) and the status."""

    y: np.ndarray | None
    status: str = "ok"
    message: str = ""
    steps: int | None = None  # accepted + rejected
    accepted: int | None = None
    rejected: int | None = None
    nfe: int | None = None  # field evaluations, counted in the field (module docstring)
    njev: int | None = None  # Jacobian evaluations (implicit solvers)
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Counts:
    """What an untimed counting solve (`prepare_count`) saw: field evaluations and Jacobians, and
    its steps where the library reports them (the timed solve's, when counting changed nothing)."""

    nfe: int
    njev: int
    steps: int | None = None


Solve = Callable[[float, float], Solved]
Count = Callable[[float, float], Counts]
Gradient = Callable[[], dict[str, np.ndarray]]


@runtime_checkable
class OdeModule(Protocol):
    SOLVERS: dict[str, SolverInfo]
    ABSENT: dict[str, str]
    GRADIENTS: dict[str, str]

    def prepare(self, problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Solve: ...

    def prepare_count(self, problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Count | None: ...

    def prepare_gradient(self, problem: ivp.Problem, solver: str, method: str, dtype: str, rtol: float,
                         atol: float) -> Gradient: ...


def built(module_name: str) -> OdeModule:
    """What a solver module's `build(trial)` returns: the module itself, whose members are the
    protocol (backends/base.py: builder_module names it as a problem's builder)."""
    return typing.cast(OdeModule, sys.modules[module_name])


def classify(message: str) -> str:
    """A library's failure message -> a status of FAILURES (the words each library uses)."""
    low = message.lower()
    if "max" in low and "step" in low:
        return "max_steps"
    if "step size" in low or "underflow" in low or "dt" in low.split() or "too small" in low:
        return "step_size_collapse"
    if "nan" in low or "inf" in low.split() or "non-finite" in low or "nonfinite" in low:
        return "nonfinite"
    return "failed"


def checked(y: np.ndarray, problem: ivp.Problem) -> Solved:
    """An apparently successful solve's output, marked nonfinite when it holds a NaN or inf."""
    y64 = np.asarray(y, dtype=np.float64).reshape(len(problem.times), problem.dimension)
    if not np.all(np.isfinite(y64)):
        return Solved(None, "nonfinite", "the solution holds NaN or inf")
    return Solved(y64)


def ops_of(xp: Any, stack: Callable[[list[Any]], Any], total: Callable[[Any], Any]) -> ivp.Ops:
    """An `Ops` from a framework's array module (its tanh and reshape), `stack` along a new last
    axis (torch says dim=, the others axis=) and `total`, the sum of every element (TensorFlow's
    is reduce_sum)."""

    class _Ops:
        def stack(self, xs: list[Any]) -> Any:
            return stack(xs)

        def tanh(self, x: Any) -> Any:
            return xp.tanh(x)

        def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
            return xp.reshape(x, shape)

        def sum(self, x: Any) -> Any:
            return total(x)

    return _Ops()
