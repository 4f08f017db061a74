"""The transformer encoder in JAX: pre-LN blocks (or BERT's post-LN ones), JAX's fused attention entry point
(jax.nn.dot_product_attention) fed from the canonical (D, D) kernels, exact GELU. Canonical
names and layouts are JAX's own: nothing is converted."""

from __future__ import annotations

import math
import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import Params, dense
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import transformer

# spec.Numerics.gelu -> jax.nn.gelu's `approximate` (it defaults to the tanh form: pinned).
GELU_APPROXIMATE = {"erf": False, "tanh": True}


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, TransformerModel(trial))


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, scale: float) -> jax.Array:
    """JAX's fused attention entry point on (B, L, heads, dh); implementation=None lets XLA
    (or cuDNN on a GPU, where it applies) choose."""
    return jax.nn.dot_product_attention(q, k, v, scale=scale, implementation=None)


def attention_formula(q: jax.Array, k: jax.Array, v: jax.Array, scale: float) -> jax.Array:
    """softmax(q k^T scale) v over the keys, all in the inputs' dtype, same layout."""
    logits = jnp.einsum("btnh,bsnh->bnts", q, k) * scale
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, axis=-1), v)


@typing.final
class TransformerModel:
    def __init__(self, trial: TrialSpec) -> None:
        self.encoder = Encoder(trial.workload.numerics, transformer.MODEL_SIZES[trial.workload.model_size])
        self._post = self.encoder.post

    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        h = jnp.take(params["embed.tokens"], x, axis=0) + params["embed.positions"]
        if self._post:
            h = self.encoder.layer_norm(params, "embed.ln", h)
        h = self.encoder(params, h)
        if not self._post:
            h = self.encoder.layer_norm(params, "final_ln", h)
        return dense(params, "head", jnp.mean(h, axis=1)), buffers

    def numerics(self) -> dict[str, Any]:
        return self.encoder.numerics()


@typing.final
class Encoder:
    """The blocks: pre-LN h + f(LN(h)) or post-LN (BERT) LN(h + f(h)); vit.py uses them too."""

    def __init__(self, numerics: Numerics, size: transformer.Size) -> None:
        self.post = size.norm == transformer.POST
        self._depth: int = size.depth
        self._heads: int = size.heads
        self._head_dim: int = size.dim // size.heads
        if numerics.gelu not in GELU_APPROXIMATE:
            raise program.refuse("transformer", "gelu", numerics.gelu, GELU_APPROXIMATE)
        self._gelu_approximate = GELU_APPROXIMATE[numerics.gelu]
        self._ln_eps = numerics.ln_eps
        if numerics.attention_scale != "rsqrt_head_dim":
            raise program.refuse("transformer", "attention_scale", numerics.attention_scale, ["rsqrt_head_dim"])
        self._scale = 1.0 / math.sqrt(self._head_dim)
        # jax.nn.dot_product_attention always runs its softmax in float32 (jax 0.10.2): the
        # float64 reference would be float32-accurate there (its loss was 2e-10 relative off
        # the NumPy float64 one), so the float64 build writes the same formula out.
        self._attend = dot_product_attention if numerics.dtype == "float32" else attention_formula

    def __call__(self, params: Params, h: jax.Array) -> jax.Array:
        for i in range(self._depth):
            b = f"block{i}"
            if self.post:
                h = self.layer_norm(params, f"{b}.ln1", h + self._attention(params, f"{b}.attn", h))
                h = self.layer_norm(params, f"{b}.ln2", h + self._mlp(params, f"{b}.mlp", h))
            else:
                h = h + self._attention(params, f"{b}.attn", self.layer_norm(params, f"{b}.ln1", h))
                h = h + self._mlp(params, f"{b}.mlp", self.layer_norm(params, f"{b}.ln2", h))
        return h

    def _attention(self, params: Params, name: str, h: jax.Array) -> jax.Array:
        batch, length, dim = h.shape
        # (B, L, D) -> (B, L, heads, dh): head j takes columns j*dh:(j+1)*dh, in order.
        split = (batch, length, self._heads, self._head_dim)
        q, k, v = (dense(params, f"{name}.{p}", h).reshape(split) for p in ("query", "key", "value"))
        o = self._attend(q, k, v, self._scale)
        return dense(params, f"{name}.out", o.reshape(batch, length, dim))

    def _mlp(self, params: Params, name: str, h: jax.Array) -> jax.Array:
        h = jax.nn.gelu(dense(params, f"{name}.fc1", h), approximate=self._gelu_approximate)
        return dense(params, f"{name}.fc2", h)

    def layer_norm(self, params: Params, name: str, h: jax.Array) -> jax.Array:
        """Over the features: biased variance, eps inside the square root."""
        mean = jnp.mean(h, axis=-1, keepdims=True)
        var = jnp.var(h, axis=-1, keepdims=True)
        return (h - mean) * lax.rsqrt(var + self._ln_eps) * params[f"{name}.scale"] + params[f"{name}.bias"]

    def numerics(self) -> dict[str, Any]:
        gelu_names = {v: k for k, v in GELU_APPROXIMATE.items()}
        rsqrt = math.isclose(self._scale, 1.0 / math.sqrt(self._head_dim), rel_tol=1e-12)
        return {
            "ln_eps": self._ln_eps,
            "gelu": gelu_names[self._gelu_approximate],
            "attention_scale": "rsqrt_head_dim" if rsqrt else repr(self._scale),
        }
