"""The mlp in TensorFlow itself: three dense layers on the program's variables (program.py holds
the training machinery). Small on purpose: per-step framework overhead dominates."""

from __future__ import annotations

import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors, dense
from dlbench.spec import TrialSpec
from dlbench.workloads import mlp


@typing.final
class MLP:
    layout = SameLayout()

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        h = tf.nn.relu(dense(x, params, "dense1"))
        h = tf.nn.relu(dense(h, params, "dense2"))
        return dense(h, params, "dense3"), {}

    def numerics(self) -> dict[str, Any]:
        return {}


def build(trial: TrialSpec) -> Program:
    return program.build(trial, mlp, MLP())
