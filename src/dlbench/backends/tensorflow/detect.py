"""The detect workload in TensorFlow itself: tf.nn ops on the program's variables. Padding is
written out as one zero row/column on every side ("SAME" would pad a stride-2 convolution of an
even input (0, 1) and break parity); the heads' concatenation is the canonical (N, G, G, C + 4)."""

from __future__ import annotations

import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors
from dlbench.spec import TrialSpec
from dlbench.workloads import detect

PADDING = [[0, 0], [1, 1], [1, 1], [0, 0]]  # NHWC: explicit and symmetric


def _conv(p: Tensors, name: str, x: tf.Tensor, stride: int) -> tf.Tensor:
    return tf.nn.bias_add(tf.nn.conv2d(x, p[f"{name}.kernel"], strides=stride, padding=PADDING), p[f"{name}.bias"])


@typing.final
class Detector:
    layout = SameLayout()

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        for name, _, stride in detect.BACKBONE:
            x = tf.nn.relu(_conv(params, name, x, stride))
        return tf.concat([_conv(params, "cls_head", x, 1), _conv(params, "box_head", x, 1)], axis=-1), {}

    def numerics(self) -> dict[str, Any]:
        return {"padding": "SYMMETRIC" if PADDING == [[0, 0], [1, 1], [1, 1], [0, 0]] else repr(PADDING)}


def build(trial: TrialSpec) -> Program:
    return program.build(trial, detect, Detector())
