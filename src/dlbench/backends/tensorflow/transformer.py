"""The transformer encoder (pre-LN, or BERT's post-LN) in TensorFlow itself (program.py holds the training machinery).
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
class Encoder:
    """The blocks on (batch * length, D) rows: pre-LN h + f(LN(h)) or post-LN (BERT)
    LN(h + f(h)); vit.py uses them too."""

    def __init__(self, size: transformer.Size, ln_eps: float) -> None:
        self.depth = size.depth
        self.heads = size.heads
        self.post = size.norm == transformer.POST
        self.ln_eps = ln_eps

    def __call__(self, p: Tensors, h: tf.Tensor, length: int) -> tf.Tensor:
        for i in range(self.depth):
            b = f"block{i}"
            if self.post:
                h = self.norm(p, f"{b}.ln1", h + self._attention(p, f"{b}.attn", h, length))
                h = self.norm(p, f"{b}.ln2", h + self._mlp(p, f"{b}.mlp", h))
            else:
                h = h + self._attention(p, f"{b}.attn", self.norm(p, f"{b}.ln1", h), length)
                h = h + self._mlp(p, f"{b}.mlp", self.norm(p, f"{b}.ln2", h))
        return h

    def _mlp(self, p: Tensors, name: str, h: tf.Tensor) -> tf.Tensor:
        return dense(_gelu_erf(dense(h, p, f"{name}.fc1")), p, f"{name}.fc2")

    def norm(self, params: Tensors, name: str, h: tf.Tensor) -> tf.Tensor:
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


@typing.final
class Transformer:
    layout = SameLayout()

    def __init__(self, size: transformer.Size, ln_eps: float) -> None:
        self.encoder = Encoder(size, ln_eps)

    def forward(
        self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool
    ) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        p, e = params, self.encoder
        length, width = p["embed.positions"].shape
        h = tf.gather(p["embed.tokens"], x) + p["embed.positions"]  # (batch, L, D)
        h = tf.reshape(h, [-1, width])
        h = e(p, e.norm(p, "embed.ln", h) if e.post else h, length)
        h = h if e.post else e.norm(p, "final_ln", h)
        pooled = tf.reduce_mean(tf.reshape(h, [-1, length, width]), axis=1)
        return dense(pooled, p, "head"), {}

    def numerics(self) -> dict[str, Any]:
        return self.encoder.numerics()


def build(trial: TrialSpec) -> Program:
    spec = trial.workload
    model = Transformer(transformer.MODEL_SIZES[spec.model_size], spec.numerics.ln_eps)
    return program.build(trial, transformer, model)
