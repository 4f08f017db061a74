"""The ddpm U-Net in TensorFlow itself (program.py holds the training machinery): NHWC and HWIO
are TF's own layouts. GroupNorm is written out (tf.nn.moments over H, W and each group's
channels: biased variance, eps inside the square root) with the spec's groups and eps; convolutions
pad explicitly (TF's "SAME" would pad the stride-2 one (0, 1)); nearest x2 by tf.repeat."""

from __future__ import annotations

import functools
import math
import typing
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from dlbench.backends.base import Unsupported
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors
from dlbench.spec import TrialSpec
from dlbench.workloads import ddpm as workload

PADDING = "SYMMETRIC"
IMPLEMENTED = {"time_embedding": "sin_cos_period_10000", "upsample": "nearest_x2", "activation": "silu"}


def _conv(params: Tensors, name: str, h: tf.Tensor, stride: int = 1) -> tf.Tensor:
    kernel = params[f"{name}.kernel"]
    pad = kernel.shape[0] // 2
    out = tf.nn.conv2d(h, kernel, strides=stride, padding=[[0, 0], [pad, pad], [pad, pad], [0, 0]])
    return tf.nn.bias_add(out, params[f"{name}.bias"])


def time_embedding(t: tf.Tensor, dim: int) -> tf.Tensor:
    half = dim // 2
    freqs = tf.exp(-math.log(workload.MAX_PERIOD) * tf.range(half, dtype=t.dtype) / half)
    args = t[:, None] * freqs[None, :]
    return tf.concat([tf.sin(args), tf.cos(args)], axis=1)


@typing.final
class UNet:
    layout = SameLayout()

    def __init__(self, size: workload.Size, groups: int, eps: float) -> None:
        self.size, self.groups, self.eps = size, groups, eps

    def _gn(self, params: Tensors, name: str, x: tf.Tensor) -> tf.Tensor:
        shape = tf.shape(x)
        c = x.shape[-1]
        g = tf.reshape(x, [shape[0], shape[1], shape[2], self.groups, c // self.groups])
        mean, var = tf.nn.moments(g, axes=[1, 2, 4], keepdims=True)  # biased variance
        out = tf.reshape((g - mean) * tf.math.rsqrt(var + self.eps), shape)
        return out * params[f"{name}.scale"] + params[f"{name}.bias"]

    def _block(self, params: Tensors, name: str, x: tf.Tensor, temb: tf.Tensor) -> tf.Tensor:
        h = _conv(params, f"{name}.conv1", tf.nn.silu(self._gn(params, f"{name}.gn1", x)))
        h = h + program.dense(tf.nn.silu(temb), params, f"{name}.time")[:, None, None, :]
        h = _conv(params, f"{name}.conv2", tf.nn.silu(self._gn(params, f"{name}.gn2", h)))
        return h + (_conv(params, f"{name}.skip", x) if f"{name}.skip.kernel" in params else x)

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        c = workload.CHANNELS
        img, t = x[..., :c], x[:, 0, 0, c]
        emb = time_embedding(t, self.size.embed)
        temb = program.dense(tf.nn.silu(program.dense(emb, params, "time.dense1")), params, "time.dense2")
        skip = self._block(params, "down.block", _conv(params, "stem", img), temb)
        h = self._block(params, "mid.block", _conv(params, "down.conv", skip, 2), temb)
        h = _conv(params, "up.conv", tf.repeat(tf.repeat(h, 2, axis=1), 2, axis=2))
        h = self._block(params, "up.block", tf.concat([h, skip], axis=-1), temb)
        out = _conv(params, "out.conv", tf.nn.silu(self._gn(params, "out.gn", h)))
        return tf.reshape(out, [tf.shape(x)[0], -1]), {}

    def numerics(self) -> dict[str, Any]:
        return {"padding": PADDING, "group_norm_groups": self.groups, "group_norm_eps": self.eps, **IMPLEMENTED}


def build(trial: TrialSpec) -> program.TensorFlowProgram:
    n = trial.workload.numerics
    for name, value in IMPLEMENTED.items():
        if n.value(name) != value:
            raise Unsupported(f"the TensorFlow ddpm implements {name} {value!r}, not {n.value(name)!r}")
    size = workload.MODEL_SIZES[trial.workload.model_size]
    model = UNet(size, int(n.value("group_norm_groups")), float(n.value("group_norm_eps")))
    prog = program.build(trial, workload, model)
    if trial.policy.mode != "eager":  # eager: the sampling scenario's host loop, op by op
        # The sampling scenario's whole DDIM loop (Sampler.sample_fn: backends/base.py).
        prog.sampler = functools.partial(compiled_sampler, trial, model)
    return prog


def compiled_sampler(trial: TrialSpec, model: UNet, state: program.State) -> Callable[[np.ndarray], np.ndarray]:
    """Deterministic DDIM as one tf.function (jit_compile in compiled mode) whose loop over the S
    steps AutoGraph turns into a tf.while_loop: x <- a_i x + b_i eps(x, t_i)."""
    coef = workload.ddim_coefficients(trial.workload)
    dtype = program.DTYPES[trial.workload.numerics.dtype]
    table = tf.constant(coef, dtype)
    params = state.params

    @tf.function(jit_compile=trial.policy.mode == "compiled", reduce_retracing=False)
    def loop(x: tf.Tensor) -> tf.Tensor:
        for i in tf.range(len(coef)):
            t = tf.fill(tf.concat([tf.shape(x)[:3], [1]], axis=0), table[i, 0])
            eps, _ = model.forward(params, {}, tf.concat([x, t], axis=-1), False)
            x = table[i, 1] * x + table[i, 2] * tf.reshape(eps, tf.shape(x))
        return x

    return lambda noise: np.asarray(loop(tf.constant(noise, dtype)).numpy())
