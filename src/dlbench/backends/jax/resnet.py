"""ResNet-18 (CIFAR variant) in JAX. Canonical names and layouts are JAX's own (NHWC, HWIO):
nothing is converted. BatchNorm running statistics are buffers in the training state, updated
inside the jitted step; every 3x3 convolution pads 1 on every side, written out explicitly."""

from __future__ import annotations

import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import Params, conv, dense
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import resnet

STAGES = 4
BLOCKS = 2
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
        self.momentum = numerics.bn_momentum
        self.eps = numerics.bn_eps
        if numerics.bn_running_var not in RUNNING_VAR_DDOF:
            raise program.refuse("resnet", "bn_running_var", numerics.bn_running_var, RUNNING_VAR_DDOF)
        self.ddof = RUNNING_VAR_DDOF[numerics.bn_running_var]
        # Padding per kernel size, passed to XLA as given (read back by numerics()).
        self.pads = {k: symmetric_pads(k) for k in (1, 3)}

    def initial_buffers(self) -> dict[str, np.ndarray]:
        # Running mean zeros, running variance ones (torch's and Keras's initial values).
        return {
            name: (np.zeros if name.endswith(".mean") else np.ones)(shape, np.float32)
            for name, shape in self._buffer_shapes.items()
        }

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        f = _Forward(self, params, buffers, train)
        h = jax.nn.relu(f.conv_bn("stem.conv", "stem.bn", x, 1))
        for stage in range(1, STAGES + 1):
            for block in range(BLOCKS):
                stride = 2 if stage > 1 and block == 0 else 1
                h = f.block(f"layer{stage}.block{block}", h, stride)
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

    def block(self, name: str, x: jax.Array, stride: int) -> jax.Array:
        """BasicBlock: relu(bn1(conv1 x)) -> bn2(conv2 .) + shortcut -> relu."""
        h = jax.nn.relu(self.conv_bn(f"{name}.conv1", f"{name}.bn1", x, stride))
        h = self.conv_bn(f"{name}.conv2", f"{name}.bn2", h, 1)
        if f"{name}.shortcut.conv.kernel" in self._params:
            x = self.conv_bn(f"{name}.shortcut.conv", f"{name}.shortcut.bn", x, stride)
        return jax.nn.relu(h + x)

    def conv_bn(self, conv_name: str, bn_name: str, x: jax.Array, stride: int) -> jax.Array:
        kernel = self._params[f"{conv_name}.kernel"]
        return self.batch_norm(bn_name, conv(x, kernel, stride, self._model.pads[kernel.shape[0]]))

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
