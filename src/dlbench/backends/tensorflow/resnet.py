"""ResNet-18 (CIFAR variant) in TensorFlow itself (program.py holds the training machinery).

BatchNorm is written out with the spec's convention (batch mean and biased batch variance to
normalise, eps inside the square root; running statistics updated with weight `bn_momentum` for
the new batch and its unbiased variance) rather than tf.compat.v1.nn.fused_batch_norm: the fused
kernel has no float64 version, and it was no faster (W=64, batch 32, graph mode: 6.15 s vs
6.22 s per step, medians of 6 interleaved rounds; the convolutions dominate)."""

from __future__ import annotations

import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors
from dlbench.spec import TrialSpec
from dlbench.workloads import resnet

PADDING = "SYMMETRIC"  # k//2 zeros on every side, written out as explicit pads
BN_RUNNING_VAR = "unbiased"
STAGES = 4
BLOCKS = 2


def _conv(h: tf.Tensor, kernel: tf.Tensor, stride: int) -> tf.Tensor:
    # Explicit pads: TF's "SAME" would pad a stride-2 3x3 convolution (0, 1), not (1, 1).
    pad = kernel.shape[0] // 2
    return tf.nn.conv2d(h, kernel, strides=stride, padding=[[0, 0], [pad, pad], [pad, pad], [0, 0]])


@typing.final
class ResNet:
    layout = SameLayout()

    def __init__(self, momentum: float, eps: float) -> None:
        self.momentum = momentum
        self.eps = eps

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        updates: dict[str, tf.Tensor] = {}
        norm = _Norm(self, params, buffers, training, updates)
        h = tf.nn.relu(norm("stem.bn", _conv(x, params["stem.conv.kernel"], 1)))
        for stage in range(1, STAGES + 1):
            for block in range(BLOCKS):
                stride = 2 if stage > 1 and block == 0 else 1
                h = self._block(params, norm, f"layer{stage}.block{block}", h, stride)
        pooled = tf.reduce_mean(h, axis=[1, 2])  # global average pool
        return program.dense(pooled, params, "head"), updates

    def _block(
        self, params: Tensors, norm: _Norm, name: str, x: tf.Tensor, stride: int
    ) -> tf.Tensor:
        """BasicBlock: relu(bn1(conv1 x)) -> bn2(conv2 .) + shortcut(x) -> relu."""
        h = tf.nn.relu(norm(f"{name}.bn1", _conv(x, params[f"{name}.conv1.kernel"], stride)))
        h = norm(f"{name}.bn2", _conv(h, params[f"{name}.conv2.kernel"], 1))
        shortcut = f"{name}.shortcut.conv.kernel"
        if shortcut in params:  # the projection of a stage's first block (1x1, stride 2)
            x = norm(f"{name}.shortcut.bn", _conv(x, params[shortcut], stride))
        return tf.nn.relu(h + x)

    def numerics(self) -> dict[str, Any]:
        return {
            "padding": PADDING,
            "bn_momentum": self.momentum,
            "bn_eps": self.eps,
            "bn_running_var": BN_RUNNING_VAR,
        }


@typing.final
class _Norm:
    """BatchNorm over N, H, W of NHWC activations for one forward pass; in training mode it
    records the new running statistics in `updates`."""

    def __init__(
        self,
        model: ResNet,
        params: Tensors,
        buffers: Tensors,
        training: bool,
        updates: dict[str, tf.Tensor],
    ) -> None:
        self.model, self.params, self.buffers = model, params, buffers
        self.training, self.updates = training, updates

    def __call__(self, name: str, h: tf.Tensor) -> tf.Tensor:
        scale, bias = self.params[f"{name}.scale"], self.params[f"{name}.bias"]
        mean, var = self.buffers[f"{name}.mean"], self.buffers[f"{name}.var"]
        if self.training:
            batch_mean, batch_var = tf.nn.moments(h, axes=[0, 1, 2])  # biased variance
            count = h.shape[0] * h.shape[1] * h.shape[2]
            m = self.model.momentum
            self.updates[f"{name}.mean"] = (1 - m) * mean + m * batch_mean
            self.updates[f"{name}.var"] = (1 - m) * var + m * batch_var * (count / (count - 1))
            mean, var = batch_mean, batch_var
        return tf.nn.batch_normalization(h, mean, var, bias, scale, self.model.eps)


def build(trial: TrialSpec) -> Program:
    numerics = trial.workload.numerics
    return program.build(trial, resnet, ResNet(numerics.bn_momentum, numerics.bn_eps))
