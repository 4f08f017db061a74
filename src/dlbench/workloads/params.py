"""Canonical initial parameters (docs/workloads.md): float32, drawn in `param_shapes` order
from `default_rng((seed, STREAM_PARAMS))`, so every framework starts from identical weights."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, final

import numpy as np

from dlbench.workloads.data import STREAM_PARAMS


@final
@dataclass(frozen=True)
class Init:
    """How one parameter starts: U(-value, value), the constant `value`, or N(0, value²)."""

    kind: Literal["uniform", "constant", "normal"]
    value: float


def fan_in_uniform(fan_in: int) -> Init:
    """Kernels and biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), torch's default bound."""
    return Init("uniform", 1.0 / math.sqrt(fan_in))


ONES = Init("constant", 1.0)  # norm scales
ZEROS = Init("constant", 0.0)  # norm biases
EMBEDDING = Init("normal", 0.02)


def draw_params(
    seed: int, shapes: dict[str, tuple[int, ...]], inits: dict[str, Init]
) -> dict[str, np.ndarray]:
    """One float32 array per name of `shapes`, drawn in that order (constants draw nothing)."""
    rng = np.random.default_rng((seed, STREAM_PARAMS))
    params = {}
    for name, shape in shapes.items():
        init = inits[name]
        if init.kind == "uniform":
            value = rng.uniform(-init.value, init.value, size=shape)
        elif init.kind == "normal":
            value = rng.normal(0.0, init.value, size=shape)
        else:
            value = np.full(shape, init.value)
        params[name] = value.astype(np.float32)
    return params


def dense_inits(prefix: str, fan_in: int) -> dict[str, Init]:
    """`<prefix>.kernel` and `<prefix>.bias` of a dense layer with `fan_in` inputs."""
    return {f"{prefix}.kernel": fan_in_uniform(fan_in), f"{prefix}.bias": fan_in_uniform(fan_in)}


def dense_shapes(prefix: str, fan_in: int, fan_out: int) -> dict[str, tuple[int, ...]]:
    """`<prefix>.kernel` (fan_in, fan_out) then `<prefix>.bias` (fan_out,): the canonical
    order in which they are drawn."""
    return {f"{prefix}.kernel": (fan_in, fan_out), f"{prefix}.bias": (fan_out,)}
