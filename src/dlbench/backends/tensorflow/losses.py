"""The losses the TensorFlow programs train with, keyed by the numerics block's loss name
(program.LOSSES), written out in tf ops."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from dlbench.spec import Numerics


@typing.final
@dataclass(frozen=True)
class CrossEntropy:
    """reduce_mean of sparse_softmax_cross_entropy_with_logits over integer labels."""

    def __call__(self, logits: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def numerics(self) -> dict[str, Any]:
        return {"loss": "mean_softmax_cross_entropy"}


@typing.final
@dataclass(frozen=True)
class FocalL1:
    """`focal_l1_detection` (docs/workloads.md#detect): the output (N, G, G, C + 4) holds C class
    logits then (l, t, r, b); the targets (N, G, G, C + 5) the one-hot classes, the box and the
    positive mask. Sigmoid focal loss summed over every cell and class plus L1 summed over the
    positive cells' box coordinates, both divided by max(1, positives in the batch)."""

    alpha: float
    gamma: float

    def __call__(self, out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        classes = y.shape[-1] - 5
        z, t, mask = out[..., :classes], y[..., :classes], y[..., -1]
        ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=t, logits=z)
        p = tf.sigmoid(z)
        p_t = p * t + (1.0 - p) * (1.0 - t)
        a_t = self.alpha * t + (1.0 - self.alpha) * (1.0 - t)
        focal = tf.reduce_sum(a_t * (1.0 - p_t) ** self.gamma * ce)
        box = tf.reduce_sum(tf.abs(out[..., classes:classes + 4] - y[..., classes:classes + 4]) * mask[..., None])
        return (focal + box) / tf.maximum(tf.reduce_sum(mask), 1.0)

    def numerics(self) -> dict[str, Any]:
        return {"loss": "focal_l1_detection", "focal_alpha": self.alpha, "focal_gamma": self.gamma}


@typing.final
@dataclass(frozen=True)
class SquaredError:
    """Mean squared error over every target value (ddpm's epsilon prediction)."""

    def __call__(self, out: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.square(out - y))

    def numerics(self) -> dict[str, Any]:
        return {"loss": "mean_squared_error"}


@typing.final
@dataclass(frozen=True)
class TokenCrossEntropy:
    """`mean_token_cross_entropy`: logits (N, T, V), ids (N, T); reduce_mean over every
    position of sparse_softmax_cross_entropy_with_logits."""

    def __call__(self, logits: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def numerics(self) -> dict[str, Any]:
        return {"loss": "mean_token_cross_entropy"}


def token_cross_entropy(n: Numerics) -> TokenCrossEntropy:
    return TokenCrossEntropy()


def squared_error(n: Numerics) -> SquaredError:
    return SquaredError()


def cross_entropy(n: Numerics) -> CrossEntropy:
    return CrossEntropy()


def focal_l1(n: Numerics) -> FocalL1:
    return FocalL1(float(n.extra["focal_alpha"]), float(n.extra["focal_gamma"]))
