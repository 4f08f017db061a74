"""The losses the Keras programs compile with, keyed by the numerics block's loss name
(program.LOSSES), written in keras.ops so that one definition runs on JAX, torch and TensorFlow."""

from __future__ import annotations

import typing
from typing import Any

import keras
from keras import ops


@typing.final
class FocalL1(keras.losses.Loss):
    """`focal_l1_detection` (docs/workloads.md#detect): the output (N, G, G, C + 4) holds C class
    logits then (l, t, r, b); the targets (N, G, G, C + 5) the one-hot classes, the box and the
    positive mask. Sigmoid focal loss summed over every cell and class plus L1 summed over the
    positive cells' box coordinates, both divided by max(1, positives in the batch). `call`
    gives each sample's share (its sums over the batch's positives), reduced by "sum"."""

    def __init__(self, alpha: float, gamma: float) -> None:
        super().__init__(name="focal_l1_detection", reduction="sum")
        self.alpha, self.gamma = alpha, gamma

    def call(self, y_true: Any, y_pred: Any) -> Any:
        classes = y_true.shape[-1] - 5
        z, t, mask = y_pred[..., :classes], y_true[..., :classes], y_true[..., -1]
        # -log p_t, written stably: softplus(-z) for t = 1, softplus(z) for t = 0.
        ce = ops.relu(z) - z * t + ops.log1p(ops.exp(-ops.abs(z)))
        p = ops.sigmoid(z)
        p_t = p * t + (1.0 - p) * (1.0 - t)
        a_t = self.alpha * t + (1.0 - self.alpha) * (1.0 - t)
        focal = ops.sum(a_t * (1.0 - p_t) ** self.gamma * ce, axis=(1, 2, 3))
        box = ops.sum(ops.abs(y_pred[..., classes:classes + 4] - y_true[..., classes:classes + 4]) * mask[..., None],
                      axis=(1, 2, 3))
        return (focal + box) / ops.maximum(ops.sum(mask), 1.0)

    def numerics(self) -> dict[str, Any]:
        return {"loss": "focal_l1_detection", "focal_alpha": self.alpha, "focal_gamma": self.gamma}
