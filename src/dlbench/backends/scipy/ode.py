"""SciPy's ODE solvers for the solver scenario: scipy.integrate.solve_ivp, float64 only
(backends/solve.py has the seam). The framework-neutral baseline: the solve record's `baseline`
trial runs them, once per problem and repeat, beside the frameworks' trials.

Explicit RK45 and DOP853, implicit BDF, Radau and LSODA (which switches between Adams and BDF),
their Jacobians by SciPy's finite differences. SciPy has no step cap: a solve stops after
SCIPY_EVALS_PER_STEP field evaluations per allowed step. Counters: the timed solve counts its own
field evaluations (a Python increment beside a NumPy field evaluation), the finite-difference
Jacobian's columns included.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp

from dlbench.backends.solve import Count, Gradient, OdeModule, Solve, Solved, SolverInfo, built, checked, classify
from dlbench.problems import solve as ivp
from dlbench.spec import TrialSpec

SOLVERS: dict[str, SolverInfo] = {
    "RK45": SolverInfo("scipy", "explicit", ("float64",)),
    "DOP853": SolverInfo("scipy", "explicit", ("float64",)),
    "BDF": SolverInfo("scipy", "implicit", ("float64",)),
    "Radau": SolverInfo("scipy", "implicit", ("float64",)),
    "LSODA": SolverInfo("scipy", "implicit", ("float64",)),  # switches between Adams and BDF
}
ABSENT: dict[str, str] = {
    "float32": "SciPy's solve_ivp computes in float64 only",
    "gradient": "SciPy's solve_ivp offers no gradient (no backpropagation, no adjoint)",
}
GRADIENTS: dict[str, str] = {}

# SciPy has no step cap; its solves stop after this many field evaluations per allowed step
# (Dormand-Prince takes 6 a step, Radau about 3 Newton iterations of 3 stages).
SCIPY_EVALS_PER_STEP = 12


def build(trial: TrialSpec) -> OdeModule:
    """A solve trial's program: this module (backends/solve.py)."""
    return built(__name__)


class _EvaluationCap(Exception):
    pass


def prepare(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Solve:
    f, cap = ivp.numpy_field(problem), max_steps * SCIPY_EVALS_PER_STEP
    calls = [0]

    def counted(t: float, y: np.ndarray) -> np.ndarray:
        calls[0] += 1
        if calls[0] > cap:
            raise _EvaluationCap(f"max steps: over {cap} field evaluations ({max_steps} steps x"
                                 f" {SCIPY_EVALS_PER_STEP})")
        return f(t, y)

    def solve(rtol: float, atol: float) -> Solved:
        calls[0] = 0
        try:
            sol = solve_ivp(counted, (0.0, problem.t1), np.array(problem.y0), method=solver,
                            t_eval=np.array(problem.times), rtol=rtol, atol=atol)
        except _EvaluationCap as e:
            return Solved(None, "max_steps", str(e), nfe=calls[0])
        # nfe: every call of the field, the finite-difference Jacobian's columns included (SciPy's
        # own nfev leaves those out for Radau and BDF, by its convention in _ivp/base.py).
        if sol.status != 0:
            return Solved(None, classify(sol.message), str(sol.message), nfe=calls[0])
        out = checked(sol.y.T, problem)
        out.nfe, out.njev = calls[0], int(sol.njev)
        out.extra["lu_decompositions"] = float(sol.nlu)
        return out

    return solve


def prepare_count(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Count | None:
    return None  # the timed solve counts: a Python increment beside a NumPy field evaluation


def prepare_gradient(problem: ivp.Problem, solver: str, method: str, dtype: str, rtol: float,
                     atol: float) -> Gradient:
    raise ValueError(ABSENT["gradient"])
