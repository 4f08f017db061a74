"""The neural ODE in TensorFlow itself: fixed-step RK4 unrolled into the traced graph (a Python
loop over a static step count), gradients by backpropagating through the solver's operations
(no adjoint). program.py holds the training machinery."""

from __future__ import annotations

import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors, dense
from dlbench.spec import TrialSpec
from dlbench.workloads import node

ODE_SOLVER = "rk4"


@typing.final
class NeuralODE:
    layout = SameLayout()

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        def field(h: tf.Tensor) -> tf.Tensor:  # autonomous: f(h), no time input
            return dense(tf.tanh(dense(h, params, "field.dense1")), params, "field.dense2")

        h = dense(x, params, "inp")
        dt = 1.0 / self.steps  # over [0, 1]
        for _ in range(self.steps):
            k1 = field(h)
            k2 = field(h + (dt / 2) * k1)
            k3 = field(h + (dt / 2) * k2)
            k4 = field(h + dt * k3)
            h = h + (dt / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        return dense(h, params, "head"), {}

    def numerics(self) -> dict[str, Any]:
        return {"ode_solver": ODE_SOLVER}


def build(trial: TrialSpec) -> Program:
    size = node.MODEL_SIZES[trial.workload.model_size]
    return program.build(trial, node, NeuralODE(size.steps))
