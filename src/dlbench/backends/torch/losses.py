"""The losses the torch programs train with, keyed by the numerics block's loss name
(program.LOSSES). Written out here rather than taken from a library where libraries normalise
differently (torchvision's sigmoid_focal_loss has no division by the positives)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class FocalL1Loss(nn.Module):
    """`focal_l1_detection` (docs/workloads.md#detect): the output (N, G, G, C + 4) holds C class
    logits then (l, t, r, b); the targets (N, G, G, C + 5) the one-hot classes, the box and the
    positive mask. Sigmoid focal loss summed over every cell and class plus L1 summed over the
    positive cells' box coordinates, both divided by max(1, positives in the batch)."""

    def __init__(self, alpha: float, gamma: float) -> None:
        super().__init__()
        self.alpha, self.gamma = alpha, gamma

    def forward(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        classes = y.shape[-1] - 5
        out = out.to(y.dtype)  # under autocast: the loss in the targets' float32
        z, t, mask = out[..., :classes], y[..., :classes], y[..., -1]
        ce = nn.functional.binary_cross_entropy_with_logits(z, t, reduction="none")
        p = torch.sigmoid(z)
        p_t = p * t + (1 - p) * (1 - t)
        a_t = self.alpha * t + (1 - self.alpha) * (1 - t)
        focal = (a_t * (1 - p_t) ** self.gamma * ce).sum()
        box = ((out[..., classes:classes + 4] - y[..., classes:classes + 4]).abs() * mask[..., None]).sum()
        return (focal + box) / mask.sum().clamp(min=1.0)

    def numerics(self) -> dict[str, Any]:
        return {"loss": "focal_l1_detection", "focal_alpha": self.alpha, "focal_gamma": self.gamma}


class TokenCrossEntropy(nn.Module):
    """`mean_token_cross_entropy` (docs/workloads.md#lm): logits (N, T, V), next-token ids
    (N, T); softmax cross-entropy averaged over every position of every sequence (nn.CrossEntropy
    wants the classes on axis 1, so both are flattened to N x T rows)."""

    def forward(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # autocast: float32 loss
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="mean")

    def numerics(self) -> dict[str, Any]:
        return {"loss": "mean_token_cross_entropy"}
