"""Each framework's ODE solvers against the float64 references (tests/ode_check.py, one process
per framework; under `slow`: JAX's and TensorFlow's first solves compile, and torch's solvers run
in the CI tier through tests/test_solve_scenario.py), and SciPy's baseline in this process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlbench.backends import odesolve
from dlbench.workloads import odes

HERE = Path(__file__).parent


def _check(framework: str, tmp_path: Path) -> dict[str, Any]:
    pytest.importorskip({"jax": "diffrax", "torch": "torchdiffeq", "tensorflow": "tensorflow_probability"}[framework])
    out = tmp_path / "ode.json"
    proc = subprocess.run([sys.executable, str(HERE / "ode_check.py"), framework, str(out)], capture_output=True,
                          text=True, timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found: dict[str, Any] = json.loads(out.read_text())
    return found


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow"])
def test_framework_solvers_meet_the_reference(framework: str, tmp_path: Path) -> None:
    found = _check(framework, tmp_path)
    for key, (status, error, nfe, steps) in found["lotka"].items():
        assert status == "ok", key
        # rtol 1e-6 keeps the global error within a few hundred rtol on this non-stiff problem.
        assert error < 1e-3, (key, error)
        assert (nfe or 0) > 0 or (steps or 0) > 0, key
    capped = found["robertson_capped"]
    assert capped["status"] == "max_steps" and capped["y_is_none"], capped
    for method, error in found["gradients"].items():
        assert error < 1e-5, (method, error)
    kinds = set(found["kinds"].values())
    # A framework without an implicit solver says so.
    assert "implicit" in kinds or "implicit" in found["absent"]


def test_scipy_baseline_solves_and_records_a_capped_failure() -> None:
    lv, rober = odes.get("lotka-volterra"), odes.get("robertson")
    solved = odesolve.scipy_prepare(lv, "DOP853", "float64", 10_000)(1e-8, 1e-11)
    assert solved.status == "ok" and solved.y is not None
    assert odes.error(solved.y, odes.reference(lv)) < 1e-5
    stiff = odesolve.scipy_prepare(rober, "BDF", "float64", 10_000)(1e-6, 1e-12)
    assert stiff.status == "ok" and stiff.njev is not None and stiff.njev > 0
    capped = odesolve.scipy_prepare(rober, "RK45", "float64", 50)(1e-6, 1e-12)
    assert (capped.status, capped.y) == ("max_steps", None)
    assert capped.nfe == 50 * odesolve.SCIPY_EVALS_PER_STEP + 1


def test_failure_messages_are_classified() -> None:
    assert odesolve.classify("max_num_steps exceeded (2000>=2000)") == "max_steps"
    assert odesolve.classify("underflow in dt 1e-20") == "step_size_collapse"
    assert odesolve.classify("Required step size is less than spacing between numbers.") == "step_size_collapse"
    assert odesolve.classify("something else") == "failed"
