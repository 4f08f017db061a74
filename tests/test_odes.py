"""The solver scenario's problems (problems/solve.py): float64 reference solutions checked
against invariants and published values, the gradient reference against finite differences,
and the error metric."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlbench.problems import solve as ivp


def test_robertson_reference_conserves_mass() -> None:
    y = ivp.reference(ivp.PROBLEMS["robertson"])
    assert np.max(np.abs(y.sum(axis=1) - 1.0)) < 1e-10
    assert np.all(y >= -1e-14)
    assert 0 < np.max(y[:, 1]) < 4e-5  # y2's peak, 3.6e-5 at t ~ 1e-2 (not an output time)


def test_hires_reference_matches_the_published_final_state() -> None:
    # Hairer and Wanner's test set (Bari IVP test set, "hires"): y(321.8122).
    published = np.array([0.7371312573325668e-3, 0.1442485726316185e-3, 0.5888729740967575e-4,
                          0.1175651343283149e-2, 0.2386356198831331e-2, 0.6238968252742796e-2,
                          0.2849998395185769e-2, 0.2850001604814231e-2])
    y = ivp.reference(ivp.PROBLEMS["hires"])[-1]
    assert np.max(np.abs(y - published) / published) < 1e-8


def test_lotka_volterra_reference_keeps_its_first_integral() -> None:
    # V = delta x - gamma ln x + beta y - alpha ln y is constant along solutions.
    def v(x: np.ndarray, z: np.ndarray) -> np.ndarray:
        return 1.0 * x - 3.0 * np.log(x) + 1.0 * z - 1.5 * np.log(z)

    y = ivp.reference(ivp.PROBLEMS["lotka-volterra"])
    assert np.max(np.abs(v(y[:, 0], y[:, 1]) - v(np.float64(1.0), np.float64(1.0)))) < 1e-10


def test_node_reference_agrees_with_the_node_workloads_field() -> None:
    """The neural ODE's field is node's: a fine fixed-step RK4 of reference_loss's field lands
    on the adaptive reference."""
    p = ivp.PROBLEMS["node-ode"]
    f = ivp.numpy_field(p)
    h, steps = np.array(p.y0), 2000
    dt = p.t1 / steps
    for i in range(steps):
        k1 = f(0, h)
        k2 = f(0, h + dt / 2 * k1)
        k3 = f(0, h + dt / 2 * k2)
        h = h + dt / 6 * (k1 + 2 * k2 + 2 * k3 + f(0, h + dt * k3))
    assert ivp.error(h[None, :], ivp.reference(p)[-1:]) < 1e-10


def test_node_gradient_reference_matches_central_differences() -> None:
    from scipy.integrate import solve_ivp

    p = ivp.PROBLEMS["node-ode"]
    g = ivp.gradient_reference(p)
    rng = np.random.default_rng(0)
    direction = rng.normal(size=g.shape)

    def loss(step: float) -> float:
        params, offset = dict(p.params), 0
        for k in ivp.NODE_GRAD_PARAMS:
            n = params[k].size
            params[k] = params[k] + step * direction[offset:offset + n].reshape(params[k].shape)
            offset += n
        sol = solve_ivp(lambda t, y: ivp.node_field(t, y, params, ivp.NUMPY), (0, p.t1), np.array(p.y0),
                        method="DOP853", rtol=1e-12, atol=1e-14)
        return float(ivp.node_loss(sol.y[:, -1], params, ivp.NUMPY))

    eps = 1e-5
    fd = (loss(eps) - loss(-eps)) / (2 * eps)
    assert fd == pytest.approx(float(g @ direction), rel=1e-6)


def test_error_metric_scales_each_component_by_its_peak() -> None:
    ref = np.array([[1.0, 1e-5], [0.5, 2e-5]])
    assert ivp.error(ref, ref) == 0.0
    # 1e-6 off in the small component is 5 % of its peak, though nothing beside the large one.
    off = ref + np.array([[0.0, 1e-6], [0.0, 0.0]])
    assert ivp.error(off, ref) == pytest.approx(0.05)
    off = ref + np.array([[0.0, 0.0], [-0.1, 0.0]])
    assert ivp.error(off, ref) == pytest.approx(0.1)
    assert ivp.error(np.array([[1.0, np.nan], [0.5, 2e-5]]), ref) == math.inf


def test_relative_error_is_normwise() -> None:
    ref = np.array([3.0, 4.0])
    assert ivp.relative_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert ivp.relative_error(np.array([np.inf, 4.0]), ref) == math.inf


def test_the_reference_is_solved_100x_tighter_than_the_tightest_tolerance(tmp_path, monkeypatch) -> None:
    """A sweep down to rtol 1e-11 is judged against a reference at 1e-13, not the 1e-12 one whose
    own error would then be the solver's (issue 48.4); each tolerance its own cache entry."""
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path))
    solved: list[float] = []
    real = ivp.solve_reference

    def recording(problem: ivp.Problem, rtol: float = ivp.REFERENCE_RTOL) -> np.ndarray:
        solved.append(rtol)
        return real(problem, rtol)

    monkeypatch.setattr(ivp, "solve_reference", recording)
    lv = ivp.PROBLEMS["lotka-volterra"]
    default, tight = ivp.reference(lv), ivp.reference(lv, 1e-11)
    assert ivp.reference(lv, 1e-10) is not None and ivp.reference(lv, 1e-11) is not None  # both cached now
    assert solved == [1e-12, pytest.approx(1e-13)]
    assert 0 < ivp.error(default, tight) < 1e-10


def test_a_sweep_judges_its_points_against_the_reference_for_its_tightest_tolerance(monkeypatch) -> None:
    """The solver sweep asks for the reference of its own tightest tolerance."""
    from dlbench.backends.solve import Solved
    from dlbench.runner.scenarios import solve as scenario

    lv = ivp.PROBLEMS["lotka-volterra"]
    asked: list[float | None] = []
    exact = ivp.reference(lv)

    def reference(problem: ivp.Problem, tightest: float | None = None) -> np.ndarray:
        asked.append(tightest)
        return exact

    monkeypatch.setattr(ivp, "reference", reference)
    settings = scenario.SweepSettings(rtols=(1e-3, 1e-4, 1e-5), dtypes=("float64",), max_steps=10,
                                      gradient_rtols=(), min_time_s=0.0, max_repeats=1)
    points = scenario.sweep_solver(lv, lambda dtype: lambda rtol, atol: Solved(exact), "exact", "float64", settings)
    assert asked == [1e-5] and len(points) == 3
