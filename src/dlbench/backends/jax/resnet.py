"""ResNet-18 (CIFAR variant) and ResNet-50 v1.5 in JAX. Canonical names and layouts are JAX's own (NHWC, HWIO):
nothing is converted. BatchNorm running statistics are buffers in the training state, updated
inside the jitted step; every 3x3 convolution pads 1 on every side, written out explicitly."""

from __future__ import annotations

import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program, settings
from dlbench.backends.jax.layers import Params, conv, dense
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import resnet

# Degrees of freedom subtracted from the batch size for the running variance.
RUNNING_VAR_DDOF = {"unbiased": 1, "biased": 0}


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, ResnetModel(trial))


def symmetric_pads(kernel_size: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """k//2 zeros on every side: both the torch padding=1 and the canonical "SYMMETRIC"."""
    return ((kernel_size // 2, kernel_size // 2),) * 2


@typing.final
class ResnetModel:
    def __init__(self, trial: TrialSpec) -> None:
        numerics: Numerics = trial.workload.numerics
        self._buffer_shapes = resnet.buffer_shapes(trial.workload)
        self._stem = resnet.stem(trial.workload)
        self._max_pool = resnet.max_pool(trial.workload)
        self._blocks = resnet.blocks(trial.workload)
        self.momentum = numerics.bn_momentum
        self.eps = numerics.bn_eps
        if numerics.bn_running_var not in RUNNING_VAR_DDOF:
            raise program.refuse("resnet", "bn_running_var", numerics.bn_running_var, RUNNING_VAR_DDOF)
        self.ddof = RUNNING_VAR_DDOF[numerics.bn_running_var]
        # Padding per kernel size, passed to XLA as given (read back by numerics()).
        self.pads = {k: symmetric_pads(k) for k in (1, 3, 7)}
        # The `jax.conv1x1` option (settings.py): the 1x1 convolutions as convolutions or as dots.
        self.conv1x1_dot = settings.value(trial.policy, "conv1x1") == "dot"

    def initial_buffers(self) -> dict[str, np.ndarray]:
        # Running mean zeros, running variance ones (torch's and Keras's initial values).
        return {
            name: (np.zeros if name.endswith(".mean") else np.ones)(shape, np.float32)
            for name, shape in self._buffer_shapes.items()
        }

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        f = _Forward(self, params, buffers, train)
        h = jax.nn.relu(f.conv_bn(self._stem, x))
        if self._max_pool:  # 3x3 stride 2, one pixel of -inf padding (never the maximum)
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                                  ((0, 0), (1, 1), (1, 1), (0, 0)))
        for block in self._blocks:
            h = f.block(block, h)
        h = jnp.mean(h, axis=(1, 2))  # global average pool
        return dense(params, "head", h), {**buffers, **f.updates}

    def numerics(self) -> dict[str, Any]:
        symmetric = all(pads == symmetric_pads(k) for k, pads in self.pads.items())
        ddof_names = {v: k for k, v in RUNNING_VAR_DDOF.items()}
        return {
            "padding": "SYMMETRIC" if symmetric else str(self.pads),
            "bn_momentum": self.momentum,
            "bn_eps": self.eps,
            "bn_running_var": ddof_names[self.ddof],
        }


@typing.final
class _Forward:
    """One pass through the network: the parameters, the buffers, the mode, and (training) the
    new running statistics that the BatchNorms write while the step is traced."""

    def __init__(self, model: ResnetModel, params: Params, buffers: Params, train: bool) -> None:
        self._model = model
        self._params = params
        self._buffers = buffers
        self._train = train
        self.updates: Params = {}

    def block(self, block: resnet.Block, x: jax.Array) -> jax.Array:
        """BasicBlock or bottleneck: conv-BN pairs with a ReLU after all but the last, plus the
        shortcut, then a ReLU."""
        h = x
        for i, c in enumerate(block.convs):
            h = self.conv_bn(c, h)
            h = jax.nn.relu(h) if i < len(block.convs) - 1 else h
        if block.shortcut is not None:
            x = self.conv_bn(block.shortcut, x)
        return jax.nn.relu(h + x)

    def conv_bn(self, c: resnet.Conv, x: jax.Array) -> jax.Array:
        kernel = self._params[f"{c.name}.kernel"]
        if self._model.conv1x1_dot and kernel.shape[:2] == (1, 1):
            # The same product without padding: the strided pixels times the (in, out) kernel,
            # whose weight gradient XLA:CPU runs as a dot instead of a convolution over the batch.
            return self.batch_norm(c.bn, x[:, ::c.stride, ::c.stride, :] @ kernel[0, 0])
        return self.batch_norm(c.bn, conv(x, kernel, c.stride, self._model.pads[kernel.shape[0]]))

    def batch_norm(self, name: str, x: jax.Array) -> jax.Array:
        model = self._model
        if self._train:
            mean = jnp.mean(x, axis=(0, 1, 2))
            # Biased, two-pass (as torch and the reference): the one-pass E[x^2] - E[x]^2 of
            # flax's default was 0-15 % faster on one BatchNorm alone (a small share of this
            # convolution-bound step) and cancels badly where |mean| >> std.
            var = jnp.var(x, axis=(0, 1, 2))
            n = x.size // x.shape[-1]
            m = model.momentum
            self.updates[f"{name}.mean"] = (1.0 - m) * self._buffers[f"{name}.mean"] + m * mean
            running_var = var * (n / (n - model.ddof))
            self.updates[f"{name}.var"] = (1.0 - m) * self._buffers[f"{name}.var"] + m * running_var
        else:
            mean, var = self._buffers[f"{name}.mean"], self._buffers[f"{name}.var"]
        inv = lax.rsqrt(var + model.eps) * self._params[f"{name}.scale"]
        return (x - mean) * inv + self._params[f"{name}.bias"]
