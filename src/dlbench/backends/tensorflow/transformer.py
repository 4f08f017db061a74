"""The BERT-style encoder in TensorFlow itself (program.py holds the training machinery).
Activations stay (batch * length, D) matrices so every projection is one plain MatMul; the
attention is the plain formula, because TF has no fused attention op on the CPU."""

from __future__ import annotations

import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors, dense
from dlbench.spec import TrialSpec
from dlbench.workloads import transformer

GELU = "erf"
ATTENTION_SCALE = "rsqrt_head_dim"


def _gelu_erf(x: tf.Tensor) -> tf.Tensor:
    """Exact GELU, x/2 erfc(-x/sqrt 2): tf.nn.gelu(approximate=False)'s own ops, except that
    the constant takes x's dtype directly. tf.nn.gelu makes 1/sqrt(2) a float32 before casting
    it, so its float64 result is off by up to 5e-9 (measured over N(0, 9) inputs, TF 2.21)."""
    return 0.5 * x * tf.math.erfc(-x * 0.7071067811865476)


@typing.final
class Transformer:
    layout = SameLayout()

    def __init__(self, depth: int, heads: int, ln_eps: float) -> None:
        self.depth = depth
        self.heads = heads
        self.ln_eps = ln_eps

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        p = params
        length, width = p["embed.positions"].shape
        h = tf.gather(p["embed.tokens"], x) + p["embed.positions"]  # (batch, L, D)
        h = tf.reshape(h, [-1, width])
        for i in range(self.depth):
            h = h + self._attention(p, f"block{i}.attn", self._norm(p, f"block{i}.ln1", h), length)
            u = _gelu_erf(dense(self._norm(p, f"block{i}.ln2", h), p, f"block{i}.mlp.fc1"))
            h = h + dense(u, p, f"block{i}.mlp.fc2")
        h = self._norm(p, "final_ln", h)
        pooled = tf.reduce_mean(tf.reshape(h, [-1, length, width]), axis=1)
        return dense(pooled, p, "head"), {}

    def _norm(self, params: Tensors, name: str, h: tf.Tensor) -> tf.Tensor:
        """LayerNorm over the features: biased variance, eps inside the square root."""
        mean, var = tf.nn.moments(h, axes=[-1], keepdims=True)
        scale, bias = params[f"{name}.scale"], params[f"{name}.bias"]
        return tf.nn.batch_normalization(h, mean, var, bias, scale, self.ln_eps)

    def _attention(self, params: Tensors, name: str, h: tf.Tensor, length: int) -> tf.Tensor:
        width = h.shape[-1]
        head_dim = width // self.heads

        def split(t: tf.Tensor) -> tf.Tensor:  # head j takes columns j*dh:(j+1)*dh
            return tf.transpose(tf.reshape(t, [-1, length, self.heads, head_dim]), [0, 2, 1, 3])

        q, k, v = (split(dense(h, params, f"{name}.{part}")) for part in ("query", "key", "value"))
        logits = tf.matmul(q, k, transpose_b=True) * (head_dim**-0.5)
        o = tf.matmul(tf.nn.softmax(logits, axis=-1), v)  # (batch, heads, L, dh)
        o = tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [-1, width])  # heads concatenated in order
        return dense(o, params, f"{name}.out")

    def numerics(self) -> dict[str, Any]:
        return {"ln_eps": self.ln_eps, "gelu": GELU, "attention_scale": ATTENTION_SCALE}


def build(trial: TrialSpec) -> Program:
    spec = trial.workload
    size = transformer.MODEL_SIZES[spec.model_size]
    model = Transformer(size.depth, size.heads, spec.numerics.ln_eps)
    return program.build(trial, transformer, model)
