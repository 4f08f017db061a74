"""The losses the Keras programs compile with, keyed by the numerics block's loss name
(program.LOSSES), written in keras.ops so that one definition runs on JAX, torch and TensorFlow."""

from __future__ import annotations

import math
import typing
from typing import Any

import keras
import numpy as np
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


@typing.final
class TokenCrossEntropy(keras.losses.SparseCategoricalCrossentropy):
    """`mean_token_cross_entropy` (docs/workloads.md#lm): logits (N, T, V), ids (N, T); Keras's
    sparse cross-entropy with "sum_over_batch_size" divides the sum by the number of per-token
    losses, N x T: the mean over every position. `numerics` checks that on a probe."""

    def __init__(self) -> None:
        super().__init__(from_logits=True, ignore_class=None, reduction="sum_over_batch_size",
                         name="token_cross_entropy")

    def numerics(self) -> dict[str, Any]:
        logits = np.array([[[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]]], np.float32)  # (1, 2, 3)
        y = np.array([[0, 2]], np.int32)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
        wanted = float(-(logp[0, 0, 0] + logp[0, 1, 2]) / 2)
        got = float(ops.convert_to_numpy(self(y, logits)))
        return {"loss": "mean_token_cross_entropy" if math.isclose(got, wanted, rel_tol=1e-6)
                else f"TokenCrossEntropy: {got} on the probe, not {wanted}"}
