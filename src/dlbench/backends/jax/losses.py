"""The losses the JAX programs train with, keyed by the numerics block's loss name
(program.LOSSES), written out in jax.numpy. Constants are Python floats (weakly typed), so the
float64 reference stays float64."""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dlbench.spec import Numerics


@typing.final
@dataclass(frozen=True)
class CrossEntropy:
    """Mean softmax cross-entropy over integer labels."""

    def __call__(self, logits: jax.Array, y: jax.Array) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

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

    def __call__(self, out: jax.Array, y: jax.Array) -> jax.Array:
        classes = y.shape[-1] - 5
        z, t, mask = out[..., :classes], y[..., :classes], y[..., -1]
        ce = optax.sigmoid_binary_cross_entropy(z, t)
        p = jax.nn.sigmoid(z)
        p_t = p * t + (1.0 - p) * (1.0 - t)
        a_t = self.alpha * t + (1.0 - self.alpha) * (1.0 - t)
        focal = jnp.sum(a_t * (1.0 - p_t) ** self.gamma * ce)
        box = jnp.sum(jnp.abs(out[..., classes:classes + 4] - y[..., classes:classes + 4]) * mask[..., None])
        return (focal + box) / jnp.maximum(jnp.sum(mask), 1.0)

    def numerics(self) -> dict[str, Any]:
        return {"loss": "focal_l1_detection", "focal_alpha": self.alpha, "focal_gamma": self.gamma}


@typing.final
@dataclass(frozen=True)
class SquaredError:
    """Mean squared error over every output value (ddpm's epsilon prediction)."""

    def __call__(self, out: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((out - y) ** 2)

    def numerics(self) -> dict[str, Any]:
        return {"loss": "mean_squared_error"}


@typing.final
@dataclass(frozen=True)
class TokenCrossEntropy:
    """`mean_token_cross_entropy`: logits (N, T, V), ids (N, T), the mean over every position."""

    def __call__(self, logits: jax.Array, y: jax.Array) -> jax.Array:
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

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
