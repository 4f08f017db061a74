"""The vit workload in TensorFlow itself (program.py holds the training machinery): the patch
embedding as one stride-P VALID convolution plus bias, the class token prepended, learned
positions, the transformer workload's pre-LN blocks on (batch * length, D) rows
(transformer.py's Encoder), a final LayerNorm and the head on the class token."""

from __future__ import annotations

import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors, dense
from dlbench.backends.tensorflow.transformer import Encoder
from dlbench.spec import TrialSpec
from dlbench.workloads import vit


@typing.final
class Vit:
    layout = SameLayout()

    def __init__(self, size: vit.Size, ln_eps: float) -> None:
        self.size = size
        self.encoder = Encoder(size.encoder, ln_eps)

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        p, s = params, self.size
        z = tf.nn.conv2d(x, p["embed.patch.kernel"], strides=s.patch, padding="VALID") + p["embed.patch.bias"]
        z = tf.reshape(z, [-1, s.patches, s.dim])  # patches in row-major order
        cls = tf.broadcast_to(tf.reshape(p["embed.cls"], [1, 1, s.dim]), [tf.shape(z)[0], 1, s.dim])
        h = tf.reshape(tf.concat([cls, z], axis=1) + p["embed.positions"], [-1, s.dim])
        h = tf.reshape(self.encoder(p, h, s.patches + 1), [-1, s.patches + 1, s.dim])
        h = self.encoder.norm(p, "final_ln", h[:, 0])  # the class token
        return dense(h, p, "head"), {}

    def numerics(self) -> dict[str, Any]:
        return self.encoder.numerics()


def build(trial: TrialSpec) -> Program:
    spec = trial.workload
    return program.build(trial, vit, Vit(vit.MODEL_SIZES[spec.model_size], spec.numerics.ln_eps))
