"""Each framework's ODE solvers against the float64 references (tests/ode_check.py, one process
per framework; under `slow`: JAX's and TensorFlow's first solves compile, and torch's solvers run
in the CI tier through tests/test_solve_scenario.py), SciPy's baseline in this process, and diffrax's
counted field evaluations against its step statistics (tests/ode_count_check.py, in the CI tier)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dlbench.backends import get_backend
from dlbench.backends import solve as solvers
from dlbench.problems import solve as ivp

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
    # the planner's guess of the framework's curves (backends/<framework>: CostGuess.solve) is its solvers x 2 dtypes
    guess = get_backend(framework).cost_guess.solve
    assert guess is not None
    assert (guess.explicit_curves, guess.implicit_curves) == tuple(
        2 * list(found["kinds"].values()).count(kind) for kind in ("explicit", "implicit"))
    # a compiled solve counts its evaluations in a second solve: at least the library's own count
    # (TFP's BDF leaves its Jacobians' points out; diffrax has none)
    counted = found["counts"]
    assert set(counted) == ({"tsit5", "dopri5", "kvaerno5"} if framework == "jax" else
                            {"dormand-prince", "bdf"} if framework == "tensorflow" else set()), counted
    for solver, c in counted.items():
        assert c["nfe"] >= (c["library_nfe"] or 0) and c["nfe"] > 0, (solver, c)
        if found["kinds"][solver] == "implicit":
            assert c["njev"] > 0 and c["nfe"] > c["njev"], (solver, c)
    if framework == "tensorflow":
        assert counted["bdf"]["nfe"] > counted["bdf"]["library_nfe"] and \
            counted["bdf"]["njev"] == counted["bdf"]["library_njev"], counted


def test_scipy_baseline_solves_and_records_a_capped_failure() -> None:
    from dlbench.backends.scipy import ode as scipy_ode

    lv, rober = ivp.PROBLEMS["lotka-volterra"], ivp.PROBLEMS["robertson"]
    solved = scipy_ode.prepare(lv, "DOP853", "float64", 10_000)(1e-8, 1e-11)
    assert solved.status == "ok" and solved.y is not None
    assert ivp.error(solved.y, ivp.reference(lv)) < 1e-5
    stiff = scipy_ode.prepare(rober, "BDF", "float64", 10_000)(1e-6, 1e-12)
    assert stiff.status == "ok" and stiff.njev is not None and stiff.njev > 0
    # nfe counts every call of the field: each finite-difference Jacobian's columns too (SciPy's own
    # nfev leaves them out)
    assert stiff.nfe is not None and stiff.nfe > stiff.njev * rober.dimension
    capped = scipy_ode.prepare(rober, "RK45", "float64", 50)(1e-6, 1e-12)
    assert (capped.status, capped.y) == ("max_steps", None)
    assert capped.nfe == 50 * scipy_ode.SCIPY_EVALS_PER_STEP + 1


def test_failure_messages_are_classified() -> None:
    assert solvers.classify("max_num_steps exceeded (2000>=2000)") == "max_steps"
    assert solvers.classify("underflow in dt 1e-20") == "step_size_collapse"
    assert solvers.classify("Required step size is less than spacing between numbers.") == "step_size_collapse"
    assert solvers.classify("something else") == "failed"


def test_diffrax_counts_field_evaluations_not_steps(tmp_path: Path) -> None:
    """diffrax reports steps only; dlbench counts the field's evaluations in an untimed second
    solve (backends/jax/ode.py). Tsit5 is FSAL with seven stages: six evaluations a step, seven
    on a step that starts from a fresh state (the first, and its retries). diffrax 0.7.2's PID
    controller evaluates nothing for its first step size (`_select_initial_step` returns 0.01 for
    any term but a bare ODETerm, and diffeqsolve hands it a WrapTerm). Kvaerno5 linearises the
    field twice a step, accepted or rejected (the first stage's placeholder Jacobian, then the
    second stage's)."""
    pytest.importorskip("diffrax")
    out = tmp_path / "count.json"
    proc = subprocess.run([sys.executable, str(HERE / "ode_count_check.py"), str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(out.read_text())
    fixed = found["fixed"]
    assert fixed["steps"] >= 50 and fixed["nfe"] == 6 * fixed["steps"] + 1 and fixed["njev"] == 0, fixed
    tsit5 = found["tsit5"]
    nfe, steps, rejected = tsit5["nfe"][0], tsit5["timed_steps"], tsit5["rejected"]
    assert tsit5["status"] == "ok" and tsit5["nfe"][0] == tsit5["nfe"][1], tsit5  # one solve's, never a trace's
    assert tsit5["steps"] == [steps, steps], tsit5  # counting changed nothing the solver did
    assert 6 * steps + 1 <= nfe <= 6 * steps + 1 + rejected, tsit5
    assert tsit5["njev"] == [0, 0], tsit5
    kvaerno = found["kvaerno5"]
    steps = kvaerno["steps"][0]
    assert kvaerno["nfe"][0] == kvaerno["nfe"][1] and kvaerno["steps"][1] == steps, kvaerno
    # an implicit step linearises the field and evaluates it in every Newton iteration of its six
    # implicit stages
    assert kvaerno["njev"][0] == 2 * steps > 0 and kvaerno["nfe"][0] > 6 * steps, kvaerno
