"""tests/zoo_matrix.py's ReLU kink check on a two-layer float64 network whose one hidden unit
sits 1e-9 from its kink: each one-sided gradient is told apart, a wrong one is not explained,
and a smooth point is refused as nothing to resolve."""

from __future__ import annotations

import numpy as np

import zoo_matrix
from dlbench.workloads import reference_ops as ops

X = np.array([1.0, -2.0, 0.5])
W2 = np.array([1.5, -0.7, 2.0, 0.3])


def loss(p: dict[str, np.ndarray]) -> float:
    return float(W2 @ ops.relu(p["w1"] @ X + p["b1"]))


def start(near: float) -> dict[str, np.ndarray]:
    w1 = np.array([[0.3, 0.1, -0.2], [0.5, 0.4, 1.0], [-0.6, 0.2, 0.1], [0.2, 0.3, 0.4]])
    b1 = np.array([0.1, 0.2, 0.3, 0.4])
    b1[1] = near - w1[1] @ X  # unit 1's input: `near`
    return {"w1": w1, "b1": b1}


def gradient(p: dict[str, np.ndarray], unit_on: bool) -> dict[str, np.ndarray]:
    mask = (p["w1"] @ X + p["b1"] > 0).astype(float)
    mask[1] = float(unit_on)
    return {"w1": np.outer(W2 * mask, X), "b1": W2 * mask}


def test_each_side_of_a_kink_is_told_apart():
    p = start(1e-9)
    assert zoo_matrix.near_kinks(loss, p) == [(0, (1,))]
    on, off = gradient(p, True), gradient(p, False)
    assert zoo_matrix.kink_sides(loss, p, [off, on]) == [(False,), (True,)]
    assert zoo_matrix.kink_sides(loss, p, [on, off]) == [(True,), (False,)]


def test_a_difference_no_side_explains_is_not_explained():
    p = start(1e-9)
    wrong = {k: v * 1.01 for k, v in gradient(p, True).items()}
    sides = zoo_matrix.kink_sides(loss, p, [wrong, gradient(p, False)])
    assert sides == [None, (False,)]


def test_a_point_far_from_every_kink_has_nothing_to_resolve():
    p = start(0.5)
    assert zoo_matrix.near_kinks(loss, p) == []
    assert isinstance(zoo_matrix.kink_sides(loss, p, [gradient(p, True), gradient(p, False)]), str)
