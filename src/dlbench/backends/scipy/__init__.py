"""SciPy as a backend of one capability, solve: the solver scenario's framework-neutral float64
baseline (scipy.integrate.solve_ivp: backends/scipy/ode.py), named by that record's `baseline`
(dlbench/scenarios.py). Not a framework a user picks: backends/__init__.py keeps it out of the
registry that `-f`, `-f all` and `dlbench list` read (BASELINES there), and the plan adds its
trials, one per problem and repeat, beside the frameworks' (runner/plan.py). SciPy is a core
dependency: always available. Its trials run like any other (a process of their own, the worker,
support.build), so Ray schedules them as it schedules the rest.
"""

from __future__ import annotations

import typing
from typing import Any

from dlbench.backends.base import (
    Capabilities,
    CostGuess,
    Option,
    Program,
    SingleDevice,
    SolveGuess,
    build_program,
    installed_versions,
    module_installed,
)
from dlbench.backends.precision import NATIVE, Support
from dlbench.spec import MODES, Policy, TrialSpec

_DISTRIBUTIONS = ("scipy", "numpy")


@typing.final
class ScipyBackend:
    name = "scipy"
    capabilities = Capabilities(frozenset({"solve"}), grads=False)
    data_parallel = SingleDevice("SciPy's solve_ivp solves in one process")
    # The solve record runs fp32 only, and SciPy computes in float64 whatever the trial says.
    precisions: Support = dict(NATIVE)
    options: dict[str, Option] = {}
    recorded_environment: tuple[str, ...] = ()
    allocator_units: dict[str, str] = {}
    kernel_alternatives: dict[str, dict[str, str]] = {}
    # The baseline's sweep (2 explicit and 3 implicit curves, float64, no gradients), fitted with
    # the frameworks' guesses on the quiet run of docs/benchmarks.md "ODE solvers": a point about
    # 0.3 s (a stiff problem's Radau at 1e-10 a second, LSODA's some ms), an explicit curve to the
    # step cap 1.5 s, nothing compiled. Its process start (Python, NumPy, SciPy: about a second)
    # was never part of that fit, when the baseline ran inside a framework's trial: left out, so
    # a solve run's estimate stays the one fitted.
    cost_guess = CostGuess(startup_s=0.0, compile_s=0.0, solve=SolveGuess(
        explicit_curves=2, implicit_curves=3, point_s=0.3, capped_curve_s=1.5, compile_s=0.0, gradient_methods=0,
        gradient_point_s=0.0))

    def available(self) -> tuple[bool, str]:
        if not module_installed("scipy"):
            return False, "scipy not installed (pip install scipy)"
        return True, f"scipy {installed_versions(('scipy',)).get('scipy', '?')}"

    def modes(self) -> dict[str, str | None]:
        # SciPy compiles nothing: every mode runs the same solves. The baseline trial takes the
        # mode of the trials it stands beside, so the report shows it in their group.
        return {mode: None for mode in MODES}

    def distributions(self) -> dict[str, str]:
        return installed_versions(_DISTRIBUTIONS)

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        return {}

    def reference_environment(self) -> dict[str, str]:
        return {}

    def import_framework(self) -> None:
        import scipy.integrate  # noqa: F401

    def configure(self, policy: Policy) -> dict[str, Any]:
        # solve_ivp steps in Python on the calling thread; its linear algebra (BDF's and Radau's
        # LU) follows the BLAS thread variables the worker set before the import.
        return {}

    def device_kind(self) -> str:
        return "cpu"

    def build(self, trial: TrialSpec) -> Program:
        return build_program("dlbench.backends.scipy", trial)

    def forget_compiled(self) -> None:
        return None

    def sync(self, *outputs: Any) -> None:
        return None  # solve_ivp returns computed NumPy arrays: nothing runs on after it

    def info(self) -> dict[str, Any]:
        return {"versions": installed_versions(_DISTRIBUTIONS), "device": "cpu"}

    def allocator_stats(self) -> dict[str, float]:
        return {}

