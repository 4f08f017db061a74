"""The lm workload in JAX: a Llama-style decoder as plain functions of the canonical parameter
dict, causal attention through jax.nn.dot_product_attention(is_causal=True). Canonical names and
layouts are JAX's own: nothing is converted."""

from __future__ import annotations

import functools
import math
import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program, settings
from dlbench.backends.jax.layers import Params
from dlbench.spec import GenerateOptions, Numerics, TrialSpec
from dlbench.workloads import lm as workload

# The generator's two forms (the backend option `jax.decode`): a jitted decode step called once
# per token (the default), or the whole decode one jitted lax.while_loop.
DECODE_STEP, DECODE_WHILE_LOOP = "step", "while_loop"
# What this implementation writes out; anything else in the numerics block is refused.
FIXED = {"rope_pairs": "half", "attention_mask": "causal", "mlp": "swiglu", "attention_scale": "rsqrt_head_dim"}


def build(trial: TrialSpec) -> program.JaxProgram:
    model = LmModel(trial)
    built = program.build(trial, model)
    if trial.policy.options.get("decode", DECODE_STEP) == DECODE_WHILE_LOOP:
        built.decoder_factory = lambda state, batch, max_len: WhileLoopDecoder(
            model, state.params, batch, max_len, trial.options_of(GenerateOptions).new_tokens)
    else:
        built.decoder_factory = lambda state, batch, max_len: JitDecoder(model, state.params, batch, max_len)
    return built


def check_fixed(numerics: Numerics) -> None:
    for name, value in FIXED.items():
        if numerics.value(name) != value:
            raise program.refuse("lm", name, numerics.value(name), [value])


def rope_tables(positions: jax.Array, head_dim: int, base: float, dtype: Any) -> tuple[jax.Array, jax.Array]:
    """(cos, sin), each (T, dh) in `dtype`: frequency base^(-2i/dh) per pair over both halves."""
    inverse = base ** (-jnp.arange(0, head_dim, 2, dtype=dtype) / head_dim)
    angles = positions.astype(dtype)[:, None] * inverse[None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x (N, T, heads, dh): x cos + rotate_half(x) sin, pairs (i, i + dh/2)."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def causal_formula(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, offset: int = 0) -> jax.Array:
    """softmax(q k^T scale, keys s <= offset + t) v on (N, T, heads, dh), in the inputs' dtype:
    jax.nn.dot_product_attention runs its softmax in float32 (jax 0.10.2), so the float64
    reference writes the formula out."""
    logits = jnp.einsum("btnh,bsnh->bnts", q, k) * scale
    visible = jnp.arange(k.shape[1])[None, :] <= offset + jnp.arange(q.shape[1])[:, None]
    logits = jnp.where(visible, logits, -jnp.inf)
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, axis=-1), v)


def fused_causal(q: jax.Array, k: jax.Array, v: jax.Array, scale: float) -> jax.Array:
    return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=True, implementation=None)


def blocked_causal(q: jax.Array, k: jax.Array, v: jax.Array, scale: float, blocks: int = 4) -> jax.Array:
    """The formula by `blocks` query blocks, each over its keys' prefix (the keys up to its last
    query): the blocks above the diagonal, which the mask would zero, are never computed, so
    about (blocks + 1) / (2 blocks) of the logits are (the `jax.attention=blocked` variant;
    docs/gaps.md, lm-train-jax). The same values as the formula up to float rounding."""
    t = q.shape[1]
    size = -(-t // blocks)
    return jnp.concatenate([causal_formula(q[:, i:i + size], k[:, :i + size], v[:, :i + size], scale, offset=i)
                            for i in range(0, t, size)], axis=1)


# The `jax.attention` option's values (settings.py): the training forward's causal attention.
ATTENTION = {"fused": fused_causal, "formula": causal_formula, "blocked": blocked_causal}


@typing.final
class LmModel:
    def __init__(self, trial: TrialSpec) -> None:
        numerics = trial.workload.numerics
        check_fixed(numerics)
        self.size = workload.MODEL_SIZES[trial.workload.model_size]
        self.rms_eps = float(numerics.extra["rms_eps"])
        self.rope_base = float(numerics.extra["rope_base"])
        self.scale = 1.0 / math.sqrt(self.size.head_dim)
        # float64 (the parity reference) writes the formula out: the fused entry point runs its
        # softmax in float32 (jax 0.10.2).
        self.attend = causal_formula if numerics.dtype == "float64" else ATTENTION[settings.value(trial.policy, "attention")]

    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def heads(self, params: Params, name: str, z: jax.Array) -> jax.Array:
        """(N, T, D) @ kernel -> (N, T, heads, dh): head j takes columns j*dh:(j+1)*dh."""
        n, t, _ = z.shape
        return (z @ params[f"{name}.kernel"]).reshape(n, t, self.size.heads, self.size.head_dim)

    def mlp(self, params: Params, b: str, h: jax.Array) -> jax.Array:
        z = rms_norm(h, params[f"{b}.mlp_norm.scale"], self.rms_eps)
        gated = jax.nn.silu(z @ params[f"{b}.mlp.gate.kernel"]) * (z @ params[f"{b}.mlp.up.kernel"])
        return h + gated @ params[f"{b}.mlp.down.kernel"]

    def logits(self, params: Params, h: jax.Array) -> jax.Array:
        return rms_norm(h, params["final_norm.scale"], self.rms_eps) @ params["head.kernel"]

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        n, t = x.shape
        h = jnp.take(params["embed.tokens"], x, axis=0)
        cos, sin = rope_tables(jnp.arange(t), self.size.head_dim, self.rope_base, h.dtype)
        for i in range(self.size.depth):
            b = f"block{i}"
            z = rms_norm(h, params[f"{b}.attn_norm.scale"], self.rms_eps)
            q = apply_rope(self.heads(params, f"{b}.attn.query", z), cos, sin)
            k = apply_rope(self.heads(params, f"{b}.attn.key", z), cos, sin)
            v = self.heads(params, f"{b}.attn.value", z)
            o = self.attend(q, k, v, self.scale)
            h = self.mlp(params, b, h + o.reshape(n, t, self.size.dim) @ params[f"{b}.attn.out.kernel"])
        return self.logits(params, h), buffers

    def numerics(self) -> dict[str, Any]:
        rsqrt = math.isclose(self.scale, 1.0 / math.sqrt(self.size.head_dim), rel_tol=1e-12)
        return {
            "rms_eps": self.rms_eps,
            "rope_base": self.rope_base,
            "attention_scale": "rsqrt_head_dim" if rsqrt else repr(self.scale),
            **{k: FIXED[k] for k in ("rope_pairs", "attention_mask", "mlp")},
        }


# --- generation: jitted prefill and decode step, the cache donated (as MaxText) ----------------

Cache = tuple[jax.Array, jax.Array]  # keys, values: (depth, B, max_len, heads, dh)


def forward_cached(model: LmModel, params: Params, cache: Cache, ids: jax.Array,
                   start: jax.Array) -> tuple[jax.Array, Cache]:
    """Logits (B, V) of the last of `ids` (B, t) at positions start..start+t-1, their keys and
    values written into the cache (a traced start: one compiled step serves every position).
    Each query attends to the whole cache under a mask of the positions <= its own."""
    keys, values = cache
    n, t = ids.shape
    max_len = keys.shape[2]
    positions = start + jnp.arange(t)
    visible = jnp.arange(max_len)[None, :] <= positions[:, None]  # (t, max_len)
    h = jnp.take(params["embed.tokens"], ids, axis=0)
    cos, sin = rope_tables(positions, model.size.head_dim, model.rope_base, h.dtype)
    for i in range(model.size.depth):
        b = f"block{i}"
        z = rms_norm(h, params[f"{b}.attn_norm.scale"], model.rms_eps)
        q = apply_rope(model.heads(params, f"{b}.attn.query", z), cos, sin)
        k = apply_rope(model.heads(params, f"{b}.attn.key", z), cos, sin)
        v = model.heads(params, f"{b}.attn.value", z)
        # Written into the stacked (donated) cache in place: `keys.at[i].set(dus(keys[i], ...))`
        # copied layer i's whole cache twice per token (decode at batch 8 ran at 3.9x
        # Keras-on-JAX's time per token; docs/benchmarks.md, lm).
        keys = lax.dynamic_update_slice(keys, k[None], (i, 0, start, 0, 0))
        values = lax.dynamic_update_slice(values, v[None], (i, 0, start, 0, 0))
        o = jax.nn.dot_product_attention(q, keys[i], values[i], mask=visible[None, None], scale=model.scale,
                                         implementation=None)
        h = model.mlp(params, b, h + o.reshape(n, t, model.size.dim) @ params[f"{b}.attn.out.kernel"])
    return model.logits(params, h[:, -1]), (keys, values)


def decode_step(model: LmModel, params: Params, cache: Cache, logits: jax.Array,
                position: jax.Array) -> tuple[jax.Array, Cache]:
    return forward_cached(model, params, cache, jnp.argmax(logits, axis=-1)[:, None].astype(jnp.int32), position)


@typing.final
class JitDecoder:
    """Prefill and the decode step each jax.jit'd with the cache donated (XLA updates it in
    place instead of copying depth x B x max_len x D per token), positions traced."""

    how = "jitted prefill and decode step, cache donated"

    def __init__(self, model: LmModel, params: Params, batch: int, max_len: int) -> None:
        s = model.size
        dtype = params["embed.tokens"].dtype
        shape = (s.depth, batch, max_len, s.heads, s.head_dim)
        self.params, self.cache = params, (jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))
        self.position = jnp.int32(0)
        self._prefill = jax.jit(functools.partial(forward_cached, model), donate_argnums=(1,))
        self._step = jax.jit(functools.partial(decode_step, model), donate_argnums=(1,))

    def prefill(self, prompt: np.ndarray) -> jax.Array:
        cache = (jnp.zeros_like(self.cache[0]), jnp.zeros_like(self.cache[1]))
        logits, self.cache = self._prefill(self.params, cache, jnp.asarray(prompt, jnp.int32), jnp.int32(0))
        self.position = jnp.int32(prompt.shape[1])
        return logits

    def decode(self, logits: jax.Array) -> jax.Array:
        out, self.cache = self._step(self.params, self.cache, logits, self.position)
        self.position = self.position + 1
        return out

    def tokens(self, logits: jax.Array) -> np.ndarray:
        return np.asarray(jnp.argmax(logits, axis=-1))

    def to_numpy(self, logits: jax.Array) -> np.ndarray:
        return np.asarray(logits, dtype=np.float32)

    def cache_bytes(self) -> int:
        return int(self.cache[0].nbytes + self.cache[1].nbytes)

    def compilations(self) -> int:
        """Compiled variants of prefill and step so far (jax.jit's own cache)."""
        return int(self._prefill._cache_size() + self._step._cache_size())



def whole_decode(model: LmModel, new_tokens: int, params: Params, cache: Cache,
                 prompt: jax.Array) -> tuple[jax.Array, jax.Array, Cache]:
    """Prefill and every greedy decode step in one compiled call: the logits (G, B, V) of the
    prompt's last position and of each of the G - 1 decode steps (step g reads the argmax of
    step g - 1 at position P + g - 1), the decode steps one lax.while_loop over the donated
    cache; and the greedy ids (B, G)."""
    logits, cache = forward_cached(model, params, cache, prompt, jnp.int32(0))
    start = prompt.shape[1]
    out = jnp.zeros((new_tokens, *logits.shape), logits.dtype).at[0].set(logits)

    def body(carry: tuple[jax.Array, jax.Array, Cache, jax.Array]) -> tuple[jax.Array, jax.Array, Cache, jax.Array]:
        g, last, kv, steps = carry
        nxt, kv = decode_step(model, params, kv, last, start + g - 1)
        return g + 1, nxt, kv, lax.dynamic_update_index_in_dim(steps, nxt, g, axis=0)

    _, _, cache, out = lax.while_loop(lambda carry: carry[0] < new_tokens, body, (jnp.int32(1), logits, cache, out))
    return out, jnp.argmax(out, axis=-1).T, cache


@typing.final
class WhileLoopDecoder:
    """The whole generation one jitted call (`--option jax.decode=while_loop`): prefill, then
    every decode step inside a lax.while_loop, the cache donated; no host round trip between
    tokens. `prefill` runs it and fetches all G greedy ids at once (one sync), so the scenario's
    time to first token holds the whole generation; `decode` hands out the next step (an index
    into what was computed), whose token `tokens` reads from the fetched ids: compare total
    tokens/s with the step decoder, not TTFT or TPOT. The logits stay on the device for parity."""

    how = "whole decode one jitted lax.while_loop, cache donated, ids fetched once (TTFT holds every token)"

    def __init__(self, model: LmModel, params: Params, batch: int, max_len: int, new_tokens: int) -> None:
        s = model.size
        dtype = params["embed.tokens"].dtype
        shape = (s.depth, batch, max_len, s.heads, s.head_dim)
        self.params, self.cache = params, (jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))
        self._run = jax.jit(functools.partial(whole_decode, model, new_tokens), donate_argnums=(1,))
        self._steps: jax.Array | None = None
        self._ids = np.zeros((batch, 0), np.int64)
        self._next = 0

    def prefill(self, prompt: np.ndarray) -> int:
        cache = (jnp.zeros_like(self.cache[0]), jnp.zeros_like(self.cache[1]))
        self._steps, ids, self.cache = self._run(self.params, cache, jnp.asarray(prompt, jnp.int32))
        self._ids = np.asarray(ids)  # the one fetch: waits for the whole generation
        self._next = 1
        return 0

    def decode(self, logits: int) -> int:
        if self._next >= self._ids.shape[1]:
            raise RuntimeError(f"the while-loop decoder generated {self._ids.shape[1]} tokens; asked for more")
        self._next += 1
        return self._next - 1

    def tokens(self, logits: int) -> np.ndarray:
        return self._ids[:, logits]

    def to_numpy(self, logits: int) -> np.ndarray:
        assert self._steps is not None
        return np.asarray(self._steps[logits], dtype=np.float32)

    def cache_bytes(self) -> int:
        return int(self.cache[0].nbytes + self.cache[1].nbytes)

    def compilations(self) -> int:
        """Compiled variants of the whole decode so far (one per prompt length)."""
        return int(self._run._cache_size())
