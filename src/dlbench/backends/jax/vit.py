"""The vit workload in JAX: the patch embedding as one stride-P convolution (VALID, with bias),
the class token prepended, learned positions, then the transformer workload's pre-LN blocks
(transformer.py's Encoder), a final LayerNorm and the head on the class token. Canonical names
and layouts are JAX's own: nothing is converted."""

from __future__ import annotations

import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import Params, conv, dense
from dlbench.backends.jax.transformer import Encoder
from dlbench.spec import TrialSpec
from dlbench.workloads import vit


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, VitModel(trial))


@typing.final
class VitModel:
    def __init__(self, trial: TrialSpec) -> None:
        self._size = vit.MODEL_SIZES[trial.workload.model_size]
        self.encoder = Encoder(trial.workload.numerics, self._size.encoder)

    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        s = self._size
        z = conv(x, params["embed.patch.kernel"], s.patch, "VALID") + params["embed.patch.bias"]
        z = z.reshape(x.shape[0], s.patches, s.dim)  # patches in row-major order
        cls = jnp.broadcast_to(params["embed.cls"], (x.shape[0], 1, s.dim)).astype(z.dtype)
        h = jnp.concatenate([cls, z], axis=1) + params["embed.positions"]
        h = self.encoder(params, h)
        h = self.encoder.layer_norm(params, "final_ln", h[:, 0])  # the class token
        return dense(params, "head", h), buffers

    def numerics(self) -> dict[str, Any]:
        return self.encoder.numerics()
