"""The lm workload as a Keras functional model (docs/workloads.md#lm), one definition in keras.ops
for JAX, torch and TensorFlow: Embedding, decoder blocks, RMSNormalization, an untied Dense head.

Keras core has no rotary attention layer (keras.layers.MultiHeadAttention projects and attends
in one call, with no place to rotate q and k), so the block is a layer of our own, written as
keras_hub's Llama attention is: Dense projections without bias, rotary embedding in keras.ops,
then ops.dot_product_attention(is_causal=True), each backend's fused attention.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import layers, ops

from dlbench.backends.base import Unsupported
from dlbench.backends.keras import program
from dlbench.spec import Numerics, TrialSpec, WorkloadSpec
from dlbench.workloads import lm as workload

# What this implementation writes out; anything else in the numerics block is refused.
FIXED = {"rope_pairs": "half", "attention_mask": "causal", "mlp": "swiglu", "attention_scale": "rsqrt_head_dim"}
_NO_BIAS: dict[str, Any] = {"use_bias": False, "kernel_initializer": "zeros"}


def build(trial: TrialSpec) -> program.KerasProgram:
    check_fixed(trial.workload.numerics)
    built = program.build(trial, net)
    built.decoder_factory = lambda state, batch, max_len: CachedCallDecoder(built, state, batch, max_len)
    return built


def check_fixed(numerics: Numerics) -> None:
    for name, value in FIXED.items():
        if numerics.value(name) != value:
            raise Unsupported(f"the Keras lm implements {name} {value!r}, not {numerics.value(name)!r}")


def rope_tables(positions: Any, head_dim: int, base: float, dtype: str) -> tuple[Any, Any]:
    """(cos, sin), each (T, dh) in `dtype`: frequency base^(-2i/dh) per pair over both halves."""
    inverse = ops.power(ops.cast(base, dtype), -ops.cast(ops.arange(0, head_dim, 2), dtype) / head_dim)
    angles = ops.cast(positions, dtype)[:, None] * inverse[None, :]
    angles = ops.concatenate([angles, angles], axis=-1)
    return ops.cos(angles), ops.sin(angles)


def apply_rope(x: Any, cos: Any, sin: Any) -> Any:
    """x (N, T, heads, dh): x cos + rotate_half(x) sin, pairs (i, i + dh/2)."""
    half = x.shape[-1] // 2
    rotated = ops.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class DecoderBlock(layers.Layer):
    """RMSNorm -> causal rotary attention -> residual, RMSNorm -> SwiGLU -> residual."""

    def __init__(self, size: workload.Size, rms_eps: float, rope_base: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size, self.rms_eps, self.rope_base = size, rms_eps, rope_base
        self.scale = 1.0 / math.sqrt(size.head_dim)
        s = size
        self.attn_norm = layers.RMSNormalization(axis=-1, epsilon=rms_eps, name="attn_norm")
        self.mlp_norm = layers.RMSNormalization(axis=-1, epsilon=rms_eps, name="mlp_norm")
        self.proj = {p: layers.Dense(s.dim, **_NO_BIAS, name=p) for p in ("query", "key", "value", "out")}
        self.mlp = {"gate": layers.Dense(s.mlp_dim, **_NO_BIAS, name="gate"),
                    "up": layers.Dense(s.mlp_dim, **_NO_BIAS, name="up"),
                    "down": layers.Dense(s.dim, **_NO_BIAS, name="down")}

    def build(self, input_shape: Any) -> None:
        hidden = (*input_shape[:-1], self.size.mlp_dim)
        for layer in (self.attn_norm, self.mlp_norm, *self.proj.values(), self.mlp["gate"], self.mlp["up"]):
            layer.build(input_shape)
        self.mlp["down"].build(hidden)

    def heads(self, name: str, z: Any) -> Any:
        """(N, T, D) -> (N, T, heads, dh): head j takes columns j*dh:(j+1)*dh."""
        return ops.reshape(self.proj[name](z), (ops.shape(z)[0], -1, self.size.heads, self.size.head_dim))

    def attention(self, h: Any, positions: Any) -> tuple[Any, Any, Any]:
        """q, k (rotated) and v of h at `positions`."""
        z = self.attn_norm(h)
        cos, sin = rope_tables(positions, self.size.head_dim, self.rope_base, h.dtype)
        return apply_rope(self.heads("query", z), cos, sin), apply_rope(self.heads("key", z), cos, sin), self.heads("value", z)

    def finish(self, h: Any, o: Any) -> Any:
        """The residual adds of attention output o (N, T, heads, dh) and the MLP."""
        h = h + self.proj["out"](ops.reshape(o, (ops.shape(o)[0], -1, self.size.dim)))
        z = self.mlp_norm(h)
        return h + self.mlp["down"](ops.silu(self.mlp["gate"](z)) * self.mlp["up"](z))

    def call(self, h: Any) -> Any:
        q, k, v = self.attention(h, ops.arange(ops.shape(h)[1]))
        return self.finish(h, ops.dot_product_attention(q, k, v, scale=self.scale, is_causal=True))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "rms_eps": self.rms_eps, "rope_base": self.rope_base}


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    s = workload.MODEL_SIZES[spec.model_size]
    eps, base = float(spec.numerics.extra["rms_eps"]), float(spec.numerics.extra["rope_base"])
    ids = keras.Input(shape=(s.seq_len,), dtype="int32", name="ids")
    tokens = layers.Embedding(s.vocab, s.dim, embeddings_initializer="zeros", name="embed_tokens")
    blocks = [DecoderBlock(s, eps, base, name=f"block{i}") for i in range(s.depth)]
    final_norm = layers.RMSNormalization(axis=-1, epsilon=eps, name="final_norm")
    head = layers.Dense(s.vocab, **_NO_BIAS, name="head")
    h = tokens(ids)
    for block in blocks:
        h = block(h)
    model = model_class(inputs=ids, outputs=head(final_norm(h)), name="lm")
    params: dict[str, Any] = {"embed.tokens": tokens.embeddings}
    for i, block in enumerate(blocks):
        b = f"block{i}"
        params[f"{b}.attn_norm.scale"] = block.attn_norm.scale
        params.update({f"{b}.attn.{p}.kernel": layer.kernel for p, layer in block.proj.items()})
        params[f"{b}.mlp_norm.scale"] = block.mlp_norm.scale
        params.update({f"{b}.mlp.{p}.kernel": layer.kernel for p, layer in block.mlp.items()})
    params.update({"final_norm.scale": final_norm.scale, "head.kernel": head.kernel})
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=_numerics(blocks, final_norm))


def _numerics(blocks: list[DecoderBlock], final_norm: layers.RMSNormalization) -> dict[str, Any]:
    eps = {final_norm.epsilon} | {n.epsilon for b in blocks for n in (b.attn_norm, b.mlp_norm)}
    scales = {"rsqrt_head_dim" if math.isclose(b.scale, 1.0 / math.sqrt(b.size.head_dim)) else repr(b.scale)
              for b in blocks}
    return {
        "rms_eps": eps.pop() if len(eps) == 1 else sorted(eps),
        "rope_base": blocks[0].rope_base,
        "attention_scale": scales.pop() if len(scales) == 1 else sorted(scales),
        **{k: FIXED[k] for k in ("rope_pairs", "attention_mask", "mlp")},
    }


# --- generation: a cached call in keras.ops (as keras_hub's CachedMultiHeadAttention) -----------

Caches = list[tuple[Any, Any]]  # per block: keys, values (B, max_len, heads, dh)


class CachedCallDecoder:
    """The model's own layers called on one new token with the caches passed in and returned
    (ops.slice_update at a traced position), as a pure function of the variables' values
    (keras.StatelessScope, as Model.stateless_call), compiled as Keras compiles its predict
    step on the backend (jax.jit with the caches donated, tf.function(jit_compile=True),
    torch.compile) in compiled mode."""

    def __init__(self, built: program.KerasProgram, state: Any, batch: int, max_len: int) -> None:
        model = built.live_model(state)
        self.blocks: list[DecoderBlock] = [model.get_layer(f"block{i}") for i in range(len(
            [layer for layer in model.layers if isinstance(layer, DecoderBlock)]))]
        self.embed, self.final_norm, self.head = (model.get_layer(n) for n in ("embed_tokens", "final_norm", "head"))
        self.variables = list(model.trainable_variables)
        self.values = [v.value for v in self.variables]
        s = self.blocks[0].size
        dtype = self.values[0].dtype
        self.empty = [(ops.zeros((batch, max_len, s.heads, s.head_dim), dtype),
                       ops.zeros((batch, max_len, s.heads, s.head_dim), dtype)) for _ in self.blocks]
        self.caches, self.max_len, self.position = self.empty, max_len, 0
        compile_pure, mode = built.native.compile_pure, built.mode
        self._prefill = compile_pure(self._forward, mode, (2,))
        self._step = compile_pure(self._decode, mode, (2,))
        eager = mode == "eager" or built.native.backend == "torch"  # native.py: _torch_compile says why
        self.eager, self.traces = eager, 0
        self.how = f"cached call in keras.ops, {'eager' if eager else 'compiled'} ({built.native.backend})"

    def _forward(self, values: list[Any], ids: Any, caches: Caches, start: Any) -> tuple[Any, Caches]:
        self.traces += 1
        with keras.StatelessScope(state_mapping=list(zip(self.variables, values))):
            n, t = ids.shape
            positions = start + ops.arange(t, dtype="int32")
            visible = ops.arange(self.max_len, dtype="int32")[None, :] <= positions[:, None]
            s = self.blocks[0].size
            mask = ops.broadcast_to(visible[None, None], (n, s.heads, t, self.max_len))
            h = self.embed(ids)
            new: Caches = []
            for block, (keys, vals) in zip(self.blocks, caches):
                q, k, v = block.attention(h, positions)
                keys = ops.slice_update(keys, (0, start, 0, 0), k)
                vals = ops.slice_update(vals, (0, start, 0, 0), v)
                h = block.finish(h, ops.dot_product_attention(q, keys, vals, mask=mask, scale=block.scale))
                new.append((keys, vals))
            return self.head(self.final_norm(h[:, -1])), new

    def _decode(self, values: list[Any], logits: Any, caches: Caches, start: Any) -> tuple[Any, Caches]:
        return self._forward(values, ops.cast(ops.argmax(logits, axis=-1), "int32")[:, None], caches, start)

    def prefill(self, prompt: Any) -> Any:
        zeros = [(ops.zeros_like(k), ops.zeros_like(v)) for k, v in self.empty]
        logits, self.caches = self._prefill(self.values, ops.convert_to_tensor(prompt, "int32"), zeros,
                                            ops.convert_to_tensor(0, "int32"))
        self.position = prompt.shape[1]
        return logits

    def decode(self, logits: Any) -> Any:
        out, self.caches = self._step(self.values, logits, self.caches, ops.convert_to_tensor(self.position, "int32"))
        self.position += 1
        return out

    def tokens(self, logits: Any) -> Any:
        return ops.convert_to_numpy(ops.argmax(logits, axis=-1))

    def to_numpy(self, logits: Any) -> Any:
        return ops.convert_to_numpy(ops.cast(logits, "float32"))

    def cache_bytes(self) -> int:
        return sum(2 * int(math.prod(k.shape)) * 4 for k, _ in self.empty)

    def compilations(self) -> int:
        """Traces of prefill and the step: Python runs _forward only while tracing (or eager)."""
        return self.traces if not self.eager else 0
