"""The seed CNN in TensorFlow itself: tf.nn ops on the program's variables (program.py holds the
training machinery). Canonical layouts are TF's own, so parameters cross unchanged."""

from __future__ import annotations

import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors
from dlbench.spec import TrialSpec
from dlbench.workloads import cnn

PADDING = "VALID"  # passed to every conv2d and max_pool2d
FLATTEN_ORDER = "HWC"  # what tf.reshape of an NHWC tensor gives


@typing.final
class CNN:
    layout = SameLayout()

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        p = params
        h = tf.nn.conv2d(x, p["conv1.kernel"], strides=1, padding=PADDING)
        h = tf.nn.relu(tf.nn.bias_add(h, p["conv1.bias"]))
        h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding=PADDING)
        h = tf.nn.conv2d(h, p["conv2.kernel"], strides=1, padding=PADDING)
        h = tf.nn.relu(tf.nn.bias_add(h, p["conv2.bias"]))
        h = tf.nn.max_pool2d(h, ksize=2, strides=2, padding=PADDING)
        h = tf.reshape(h, [-1, cnn.FLAT])  # NHWC rows flatten in HWC order, as canonical
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(h, p["dense1.kernel"]), p["dense1.bias"]))
        return tf.nn.bias_add(tf.matmul(h, p["dense2.kernel"]), p["dense2.bias"]), {}

    def numerics(self) -> dict[str, Any]:
        return {"padding": PADDING, "flatten_order": FLATTEN_ORDER}


def build(trial: TrialSpec) -> Program:
    return program.build(trial, cnn, CNN())
