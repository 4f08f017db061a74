"""The lm workload in TensorFlow itself (program.py holds the training machinery): a Llama-style
decoder on the canonical variables. TF has no fused attention op, so causal attention is the
formula with a lower-triangular mask (tf.linalg.band_part), as Keras's own TF backend writes it."""

from __future__ import annotations

import math
import typing
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import lm as workload

# What this implementation writes out; anything else in the numerics block is refused.
FIXED = {"rope_pairs": "half", "attention_mask": "causal", "mlp": "swiglu", "attention_scale": "rsqrt_head_dim"}


def rope_tables(positions: tf.Tensor, head_dim: int, base: float, dtype: tf.DType) -> tuple[tf.Tensor, tf.Tensor]:
    """(cos, sin), each (T, dh) in `dtype`: frequency base^(-2i/dh) per pair over both halves."""
    inverse = tf.pow(tf.constant(base, dtype), -tf.range(0, head_dim, 2, dtype=dtype) / head_dim)
    angles = tf.cast(positions, dtype)[:, None] * inverse[None, :]
    angles = tf.concat([angles, angles], axis=-1)
    return tf.cos(angles), tf.sin(angles)


def apply_rope(x: tf.Tensor, cos: tf.Tensor, sin: tf.Tensor) -> tf.Tensor:
    """x (N, heads, T, dh): x cos + rotate_half(x) sin, pairs (i, i + dh/2)."""
    half = x.shape[-1] // 2
    rotated = tf.concat([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def rms_norm(x: tf.Tensor, scale: tf.Tensor, eps: float) -> tf.Tensor:
    return x * tf.math.rsqrt(tf.reduce_mean(x * x, axis=-1, keepdims=True) + eps) * scale


@typing.final
class Lm:
    layout = SameLayout()

    def __init__(self, size: workload.Size, numerics: Numerics) -> None:
        # What this implementation fixes (FIXED) is read back by numerics(); support refuses a
        # spec that asks otherwise, as for the transformer.
        self.size = size
        self.rms_eps = float(numerics.extra["rms_eps"])
        self.rope_base = float(numerics.extra["rope_base"])
        self.scale = 1.0 / math.sqrt(size.head_dim)

    def split(self, z: tf.Tensor) -> tf.Tensor:
        """(N, T, D) -> (N, heads, T, dh): head j takes columns j*dh:(j+1)*dh."""
        s = self.size
        return tf.transpose(tf.reshape(z, [tf.shape(z)[0], -1, s.heads, s.head_dim]), [0, 2, 1, 3])

    def merge(self, o: tf.Tensor) -> tf.Tensor:
        return tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [tf.shape(o)[0], -1, self.size.dim])

    def attend(self, q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, visible: tf.Tensor) -> tf.Tensor:
        logits = tf.matmul(q, k, transpose_b=True) * self.scale
        logits = tf.where(visible, logits, tf.constant(-math.inf, logits.dtype))
        return tf.matmul(tf.nn.softmax(logits, axis=-1), v)

    def mlp(self, p: Tensors, b: str, h: tf.Tensor) -> tf.Tensor:
        z = rms_norm(h, p[f"{b}.mlp_norm.scale"], self.rms_eps)
        gated = tf.nn.silu(z @ p[f"{b}.mlp.gate.kernel"]) * (z @ p[f"{b}.mlp.up.kernel"])
        return h + gated @ p[f"{b}.mlp.down.kernel"]

    def forward(self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        p, length = params, x.shape[1]
        h = tf.gather(p["embed.tokens"], x)
        cos, sin = rope_tables(tf.range(length), self.size.head_dim, self.rope_base, h.dtype)
        visible = tf.cast(tf.linalg.band_part(tf.ones([length, length]), -1, 0), tf.bool)
        for i in range(self.size.depth):
            b = f"block{i}"
            z = rms_norm(h, p[f"{b}.attn_norm.scale"], self.rms_eps)
            q = apply_rope(self.split(z @ p[f"{b}.attn.query.kernel"]), cos, sin)
            k = apply_rope(self.split(z @ p[f"{b}.attn.key.kernel"]), cos, sin)
            v = self.split(z @ p[f"{b}.attn.value.kernel"])
            h = h + self.merge(self.attend(q, k, v, visible)) @ p[f"{b}.attn.out.kernel"]
            h = self.mlp(p, b, h)
        return rms_norm(h, p["final_norm.scale"], self.rms_eps) @ p["head.kernel"], {}

    def numerics(self) -> dict[str, Any]:
        return {"rms_eps": self.rms_eps, "rope_base": self.rope_base, "attention_scale": "rsqrt_head_dim",
                **{k: FIXED[k] for k in ("rope_pairs", "attention_mask", "mlp")}}


def build(trial: TrialSpec) -> Program:
    spec = trial.workload
    model = Lm(workload.MODEL_SIZES[spec.model_size], spec.numerics)
    built = program.build(trial, workload, model)
    mode = trial.policy.mode
    built.decoder_factory = lambda state, batch, max_len: VariableCacheDecoder(model, state.params, batch, max_len, mode)
    built.export_factory = lambda state: CacheIO(model, state.params)
    return built


# --- generation: tf.function steps with the cache in variables ----------------------------------


@typing.final
class VariableCacheDecoder:
    """Keys and values in tf.Variables laid out (max_len, B, heads, dh), so that each step
    writes its positions with one scatter_update on the first axis (an in-place variable update,
    which XLA compiles); the position is a variable too, so one trace serves every step. Graph
    mode traces tf.function, compiled mode adds jit_compile=True (XLA); eager runs the ops."""

    def __init__(self, model: Lm, params: Tensors, batch: int, max_len: int, mode: str) -> None:
        s, dtype = model.size, params["embed.tokens"].dtype
        self.model, self.params = model, params
        shape = (max_len, batch, s.heads, s.head_dim)
        self.keys = [tf.Variable(tf.zeros(shape, dtype), trainable=False) for _ in range(s.depth)]
        self.values = [tf.Variable(tf.zeros(shape, dtype), trainable=False) for _ in range(s.depth)]
        self.position = tf.Variable(0, dtype=tf.int32, trainable=False)
        wrap = (lambda f: f) if mode == "eager" else (lambda f: tf.function(f, jit_compile=mode == "compiled", reduce_retracing=False))
        self._prefill, self._step = wrap(self._forward), wrap(self._decode)
        self.how = {"eager": "cache in variables, eager", "graph": "cache in variables, tf.function",
                    "compiled": "cache in variables, tf.function(jit_compile=True)"}[mode]

    def _forward(self, ids: tf.Tensor) -> tf.Tensor:
        """Logits (B, V) of the last of ids (B, t) at the next t positions, their keys and values
        written into the cache; each query sees the cached positions <= its own."""
        m, p = self.model, self.params
        t, max_len = tf.shape(ids)[1], self.keys[0].shape[0]
        positions = self.position + tf.range(t)
        visible = tf.range(max_len)[None, :] <= positions[:, None]  # (t, max_len)
        h = tf.gather(p["embed.tokens"], ids)
        cos, sin = rope_tables(positions, m.size.head_dim, m.rope_base, h.dtype)
        for i in range(m.size.depth):
            b = f"block{i}"
            z = rms_norm(h, p[f"{b}.attn_norm.scale"], m.rms_eps)
            q = apply_rope(m.split(z @ p[f"{b}.attn.query.kernel"]), cos, sin)
            k = apply_rope(m.split(z @ p[f"{b}.attn.key.kernel"]), cos, sin)
            v = m.split(z @ p[f"{b}.attn.value.kernel"])
            self.keys[i].scatter_update(tf.IndexedSlices(tf.transpose(k, [2, 0, 1, 3]), positions))
            self.values[i].scatter_update(tf.IndexedSlices(tf.transpose(v, [2, 0, 1, 3]), positions))
            logits = tf.einsum("bhtd,sbhd->bhts", q, self.keys[i]) * m.scale
            logits = tf.where(visible, logits, tf.constant(-math.inf, logits.dtype))
            o = tf.einsum("bhts,sbhd->bhtd", tf.nn.softmax(logits, axis=-1), self.values[i])
            h = m.mlp(p, b, h + m.merge(o) @ p[f"{b}.attn.out.kernel"])
        self.position.assign_add(t)
        return rms_norm(h[:, -1], p["final_norm.scale"], m.rms_eps) @ p["head.kernel"]

    def _decode(self, logits: tf.Tensor) -> tf.Tensor:
        return self._forward(tf.argmax(logits, axis=-1, output_type=tf.int32)[:, None])

    def prefill(self, prompt: Any) -> tf.Tensor:
        for var in (*self.keys, *self.values):
            var.assign(tf.zeros_like(var))
        self.position.assign(0)
        return self._prefill(tf.constant(prompt, tf.int32))

    def decode(self, logits: tf.Tensor) -> tf.Tensor:
        return self._step(logits)

    def tokens(self, logits: tf.Tensor) -> Any:
        return tf.argmax(logits, axis=-1).numpy()

    def to_numpy(self, logits: tf.Tensor) -> Any:
        return tf.cast(logits, tf.float32).numpy()

    def cache_bytes(self) -> int:
        return sum(int(v.shape.num_elements()) * v.dtype.size for v in (*self.keys, *self.values))

    def compilations(self) -> int:
        """Traces of prefill and the decode step so far (0 in eager mode)."""
        return sum(f.experimental_get_tracing_count() for f in (self._prefill, self._step)
                   if isinstance(f, tf.types.experimental.PolymorphicFunction))


# --- the cache as inputs and outputs, for converters (LiteRT) ------------------------------------


@typing.final
class CacheIO:
    """The decoder as two tf.functions of fixed shapes with the KV cache as inputs and outputs
    (no variables: what the TFLite converter turns into a model with builtin ops), laid out
    (depth, B, heads, max_len, dh):
      prefill(ids (B, P)) -> logits (B, V) of the last prompt position, keys, values (the
        prompt's at positions 0..P-1, zeros after);
      step(ids (B, 1), position (), keys, values) -> logits (B, V), keys, values (the new
        token's written at `position` by a one-hot select; each query sees positions <= its own).
    Written from the same formulas and canonical variables as VariableCacheDecoder."""

    def __init__(self, model: Lm, params: Tensors) -> None:
        self.model, self.params = model, params

    def _block(self, i: int, h: tf.Tensor, cos: tf.Tensor, sin: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Block i's queries, keys and values (B, heads, t, dh) of h (B, t, D)."""
        m, p, b = self.model, self.params, f"block{i}"
        z = rms_norm(h, p[f"{b}.attn_norm.scale"], m.rms_eps)
        q = apply_rope(m.split(z @ p[f"{b}.attn.query.kernel"]), cos, sin)
        k = apply_rope(m.split(z @ p[f"{b}.attn.key.kernel"]), cos, sin)
        return q, k, m.split(z @ p[f"{b}.attn.value.kernel"])

    def _finish(self, i: int, h: tf.Tensor, q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, visible: tf.Tensor) -> tf.Tensor:
        m, p, b = self.model, self.params, f"block{i}"
        return m.mlp(p, b, h + m.merge(m.attend(q, k, v, visible)) @ p[f"{b}.attn.out.kernel"])

    def _head(self, h: tf.Tensor) -> tf.Tensor:
        return rms_norm(h[:, -1], self.params["final_norm.scale"], self.model.rms_eps) @ self.params["head.kernel"]

    def prefill(self, batch: int, prompt_len: int, max_len: int) -> Any:
        """The prefill's concrete function for (B, P) prompts and a cache of max_len positions."""
        m = self.model

        def prefill(ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            h = tf.gather(self.params["embed.tokens"], ids)
            cos, sin = rope_tables(tf.range(prompt_len), m.size.head_dim, m.rope_base, h.dtype)
            visible = tf.cast(tf.linalg.band_part(tf.ones([prompt_len, prompt_len]), -1, 0), tf.bool)
            pad = [[0, 0], [0, 0], [0, max_len - prompt_len], [0, 0]]
            keys, values = [], []
            for i in range(m.size.depth):
                q, k, v = self._block(i, h, cos, sin)
                keys.append(tf.pad(k, pad))
                values.append(tf.pad(v, pad))
                h = self._finish(i, h, q, k, v, visible)
            return self._head(h), tf.stack(keys), tf.stack(values)

        return tf.function(prefill).get_concrete_function(tf.TensorSpec((batch, prompt_len), tf.int32, name="ids"))

    def step(self, batch: int, max_len: int) -> Any:
        """The decode step's concrete function for B sequences and a cache of max_len positions."""
        m, s = self.model, self.model.size
        cache = tf.TensorSpec((s.depth, batch, s.heads, max_len, s.head_dim), self.params["embed.tokens"].dtype)

        def step(ids: tf.Tensor, position: tf.Tensor, keys: tf.Tensor, values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
            h = tf.gather(self.params["embed.tokens"], ids)
            cos, sin = rope_tables(position[None], s.head_dim, m.rope_base, h.dtype)
            visible = tf.range(max_len)[None, :] <= position  # (1, max_len)
            here = tf.reshape(tf.one_hot(position, max_len, dtype=h.dtype), [1, 1, max_len, 1]) > 0
            new_keys, new_values = [], []
            for i in range(s.depth):
                q, k, v = self._block(i, h, cos, sin)
                k, v = tf.where(here, k, keys[i]), tf.where(here, v, values[i])
                new_keys.append(k)
                new_values.append(v)
                h = self._finish(i, h, q, k, v, visible)
            return self._head(h), tf.stack(new_keys), tf.stack(new_values)

        return tf.function(step).get_concrete_function(
            tf.TensorSpec((batch, 1), tf.int32, name="ids"), tf.TensorSpec((), tf.int32, name="position"),
            tf.TensorSpec.from_spec(cache, name="keys"), tf.TensorSpec.from_spec(cache, name="values"))
