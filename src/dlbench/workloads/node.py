"""node: a neural ODE classifier of 2-D spiral points. `inp` lifts a point to h0, the
autonomous field f(h) = tanh(h W1 + b1) W2 + b2 is integrated over [0, 1] with S fixed RK4
steps (gradients through the solver, no adjoint), `head` classifies h(1).
Definition: docs/workloads.md#node."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

import numpy as np

from dlbench.spec import Numerics, WorkloadSpec
import dlbench.workloads.reference_ops as ops
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, SUPERVISED_SCENARIOS, Preset, accuracy
from dlbench.workloads.data import Dataset, dataset_makers
from dlbench.workloads.params import dense_inits, dense_shapes, draw_params

NAME = "node"
SCENARIOS = SUPERVISED_SCENARIOS
QUALITY = "accuracy"
score = accuracy


@final
@dataclass(frozen=True)
class Size:
    hidden: int  # H
    field_hidden: int  # Hf
    steps: int  # S RK4 steps of dt = 1/S


MODEL_SIZES = {
    "tiny": Size(hidden=16, field_hidden=32, steps=4),
    "default": Size(hidden=64, field_hidden=128, steps=8),
}

PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=128, batch_size=32, epochs=1, warmup_epochs=1,
                   eval_size=64),
    # Overhead-bound (32 field evaluations per step): ~10 ms per torch eager step here.
    "cpu": Preset(model_size="default", dataset_size=32768, batch_size=128, epochs=3,
                  warmup_epochs=1, eval_size=4096),
    "gpu": Preset(model_size="default", dataset_size=65536, batch_size=512, epochs=5,
                  warmup_epochs=1, eval_size=8192),
}

NUMERICS = Numerics()
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "ode_solver")

# Spirals: arm k at angle 2 pi (k / C + TURNS t) and radius INNER + (1 - INNER) t, t ~ U(0, 1),
# plus N(0, NOISE²) per coordinate. With 10 arms, neighbouring arms are >= 0.13 apart along a
# circle (2 pi INNER / 10) and 0.16 apart along a ray ((1 - INNER) / (10 TURNS)), >= 4 noise std
# from the middle: the nearest arm is the label of > 99 % of the points (98 % with 0.75 turns,
# inner radius 0.1 and noise 0.02).
TURNS = 0.5
INNER = 0.2
NOISE = 0.015


def _size(spec: WorkloadSpec) -> Size:
    size: Size = MODEL_SIZES[spec.model_size]
    return size


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    return (2,), "float32"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    s, c = _size(spec), spec.num_classes
    return {**dense_shapes("inp", 2, s.hidden), **dense_shapes("field.dense1", s.hidden, s.field_hidden),
            **dense_shapes("field.dense2", s.field_hidden, s.hidden), **dense_shapes("head", s.hidden, c)}


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    s = _size(spec)
    inits = {**dense_inits("inp", 2), **dense_inits("field.dense1", s.hidden),
             **dense_inits("field.dense2", s.field_hidden), **dense_inits("head", s.hidden)}
    return draw_params(spec.seed, param_shapes(spec), inits)


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    """Points on C noisy spiral arms; `learnable` labels are the arm index (the natural
    teacher), `random` labels are uniform and drawn after the points."""
    rng = np.random.default_rng((spec.seed, stream))
    arm = rng.integers(0, spec.num_classes, size=n, dtype=np.int32)
    t = rng.uniform(0.0, 1.0, size=n)
    angle = 2 * math.pi * (arm / spec.num_classes + TURNS * t)
    radius = INNER + (1.0 - INNER) * t
    x = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=1)
    x += rng.normal(0.0, NOISE, size=x.shape)
    if spec.labels == "random":
        arm = rng.integers(0, spec.num_classes, size=n, dtype=np.int32)
    return Dataset(x=x.astype(np.float32), y=arm)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """2 per multiply-add: `inp`, 4 S evaluations of the field (two matmuls each), `head`.
    Training adds weight gradients (as the forward) and input gradients for everything but
    `inp`, which is fed by the data."""
    s, c = _size(spec), spec.num_classes
    inp = 2 * 2 * s.hidden
    rest = 4 * s.steps * 2 * (2 * s.hidden * s.field_hidden) + 2 * s.hidden * c
    return 2 * inp + 3 * rest if train else inp + rest


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> float:
    s, p = _size(spec), ops.as_float64(params)

    def field(h: np.ndarray) -> np.ndarray:
        z = np.tanh(h @ p["field.dense1.kernel"] + p["field.dense1.bias"])
        return z @ p["field.dense2.kernel"] + p["field.dense2.bias"]

    h, dt = x.astype(np.float64) @ p["inp.kernel"] + p["inp.bias"], 1.0 / s.steps
    for _ in range(s.steps):
        k1 = field(h)
        k2 = field(h + dt / 2 * k1)
        k3 = field(h + dt / 2 * k2)
        k4 = field(h + dt * k3)
        h = h + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return ops.cross_entropy(h @ p["head.kernel"] + p["head.bias"], y)
