"""ResNet-18 (CIFAR variant) and ResNet-50 v1.5 in TensorFlow itself (program.py holds the training machinery).

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
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import resnet

PADDING = "SYMMETRIC"  # k//2 zeros on every side, written out as explicit pads
BN_RUNNING_VAR = "unbiased"


def _conv(h: tf.Tensor, kernel: tf.Tensor, stride: int) -> tf.Tensor:
    # Explicit pads: TF's "SAME" would pad a stride-2 3x3 convolution (0, 1), not (1, 1).
    pad = kernel.shape[0] // 2
    return tf.nn.conv2d(h, kernel, strides=stride, padding=[[0, 0], [pad, pad], [pad, pad], [0, 0]])


@typing.final
class ResNet:
    layout = SameLayout()

    def __init__(self, spec: WorkloadSpec) -> None:
        self.momentum = spec.numerics.bn_momentum
        self.eps = spec.numerics.bn_eps
        self.stem = resnet.stem(spec)
        self.max_pool = resnet.max_pool(spec)
        self.blocks = resnet.blocks(spec)

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        updates: dict[str, tf.Tensor] = {}
        norm = _Norm(self, params, buffers, training, updates)
        h = tf.nn.relu(_conv_bn(params, norm, self.stem, x))
        if self.max_pool:
            # 3x3 stride 2 with one pixel of padding: zeros equal torch's -inf here because the
            # input is a ReLU's output (>= 0) and every window holds a real pixel.
            h = tf.nn.max_pool2d(tf.pad(h, [[0, 0], [1, 1], [1, 1], [0, 0]]), 3, 2, "VALID")
        for block in self.blocks:
            h = self._block(params, norm, block, h)
        pooled = tf.reduce_mean(h, axis=[1, 2])  # global average pool
        return program.dense(pooled, params, "head"), updates

    def _block(self, params: Tensors, norm: _Norm, block: resnet.Block, x: tf.Tensor) -> tf.Tensor:
        """BasicBlock or bottleneck: conv-BN pairs with a ReLU after all but the last, plus the
        shortcut (a 1x1 projection where the shape changes), then a ReLU."""
        h = x
        for i, c in enumerate(block.convs):
            h = _conv_bn(params, norm, c, h)
            h = tf.nn.relu(h) if i < len(block.convs) - 1 else h
        if block.shortcut is not None:
            x = _conv_bn(params, norm, block.shortcut, x)
        return tf.nn.relu(h + x)

    def numerics(self) -> dict[str, Any]:
        return {
            "padding": PADDING,
            "bn_momentum": self.momentum,
            "bn_eps": self.eps,
            "bn_running_var": BN_RUNNING_VAR,
        }


def _conv_bn(params: Tensors, norm: _Norm, c: resnet.Conv, h: tf.Tensor) -> tf.Tensor:
    return norm(c.bn, _conv(h, params[f"{c.name}.kernel"], c.stride))


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
    return program.build(trial, resnet, ResNet(trial.workload))
