"""The lm workload in PyTorch: a Llama-style decoder with canonical module names (nn.Linear
without bias per projection, nn.RMSNorm, an nn.Parameter embedding) and causal
F.scaled_dot_product_attention (is_causal=True; torch picks its fused kernel).

Generation (`decoder`): a static KV cache, prefill and decode step torch.compile'd in compiled
mode; with --precision int8 every nn.Linear dynamically quantised (torch.ao's quantize_dynamic,
eager mode only). ONNX Runtime exports `PastPresent`, the same model as a pure function of the
token ids and the cache (the decode-with-past graph, backends/onnxruntime/generate.py).
"""

from __future__ import annotations

import copy
import math
import typing
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from dlbench.backends.base import Unsupported
from dlbench.backends.torch import program
from dlbench.backends.torch.layers import one_value, pick
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import lm as workload

# What this implementation writes out; anything else in the numerics block is refused.
_FIXED = {"rope_pairs": "half", "attention_mask": "causal", "mlp": "swiglu", "attention_scale": "rsqrt_head_dim"}


# Why compiled mode has no int8 decoder (found running it: dynamo refuses the packed weights).
INT8_NOT_COMPILED = (
    "torch int8 decodes in eager mode only (--mode eager): torch.compile cannot trace torch.ao's dynamically"
    " quantised Linear (dynamo: 'Failed to convert args/kwargs to proxy' on its packed-weight ScriptObject);"
    " torch 2.13 points to torchao's quantize_ for compiled int8, which dlbench does not depend on")


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    built = program.build(trial, LmModel(workload.MODEL_SIZES[spec.model_size], spec.numerics))
    int8 = trial.precision == "int8"
    if int8 and built.compiled:
        raise Unsupported(INT8_NOT_COMPILED)
    built.decoder_factory = lambda state, batch, max_len: decoder(state.model, batch, max_len, built.compiled, int8)
    built.export_factory = lambda state: past_present(state.model)
    return built


def rope_tables(positions: torch.Tensor, head_dim: int, base: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (T, dh), in `dtype` (float32 angles for a float32 model, as the Hugging
    Face Llama computes them): frequency base^(-2i/dh) per pair, repeated over the two halves."""
    inverse = base ** (-torch.arange(0, head_dim, 2, dtype=dtype, device=positions.device) / head_dim)
    angles = positions.to(dtype)[:, None] * inverse[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (N, heads, T, dh): x cos + rotate_half(x) sin, pairs (i, i + dh/2)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Embed(nn.Module):
    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.tokens = nn.Parameter(torch.empty(s.vocab, s.dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.tokens)


class Attention(nn.Module):
    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.query = nn.Linear(s.dim, s.dim, bias=False)
        self.key = nn.Linear(s.dim, s.dim, bias=False)
        self.value = nn.Linear(s.dim, s.dim, bias=False)
        self.out = nn.Linear(s.dim, s.dim, bias=False)
        self.heads, self.head_dim = s.heads, s.head_dim
        self.scale = 1.0 / math.sqrt(s.head_dim)  # SDPA's default, passed explicitly

    def split(self, z: torch.Tensor) -> torch.Tensor:
        # (N, T, D) -> (N, heads, T, dh): head j takes columns j*dh:(j+1)*dh.
        n, length, _ = z.shape
        return z.view(n, length, self.heads, self.head_dim).transpose(1, 2)

    def qkv(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k = apply_rope(self.split(self.query(h)), cos, sin), apply_rope(self.split(self.key(h)), cos, sin)
        return q, k, self.split(self.value(h))

    def merge(self, z: torch.Tensor) -> torch.Tensor:
        n, _, length, _ = z.shape
        return self.out(z.transpose(1, 2).reshape(n, length, -1))  # heads concatenated in order

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(h, cos, sin)
        return self.merge(F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True, scale=self.scale))


class Mlp(nn.Module):
    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.gate = nn.Linear(s.dim, s.mlp_dim, bias=False)
        self.up = nn.Linear(s.dim, s.mlp_dim, bias=False)
        self.down = nn.Linear(s.mlp_dim, s.dim, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(h)) * self.up(h))


class Block(nn.Module):
    def __init__(self, s: workload.Size, eps: float) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(s.dim, eps=eps, elementwise_affine=True)
        self.attn = Attention(s)
        self.mlp_norm = nn.RMSNorm(s.dim, eps=eps, elementwise_affine=True)
        self.mlp = Mlp(s)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = h + self.attn(self.attn_norm(h), cos, sin)
        return h + self.mlp(self.mlp_norm(h))


class Decoder(nn.Module):
    def __init__(self, s: workload.Size, n: Numerics) -> None:
        super().__init__()
        self.size, self.rope_base = s, float(n.extra["rope_base"])
        self.embed = Embed(s)
        self.blocks = [Block(s, float(n.extra["rms_eps"])) for _ in range(s.depth)]
        for i, block in enumerate(self.blocks):
            self.add_module(f"block{i}", block)  # canonical names: block0.attn.query.kernel, ...
        self.final_norm = nn.RMSNorm(s.dim, eps=float(n.extra["rms_eps"]), elementwise_affine=True)
        self.head = nn.Linear(s.dim, s.vocab, bias=False)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # The embedding's dtype: a dynamically quantised head (int8 decoding) has no float weight.
        return rope_tables(positions, self.size.head_dim, self.rope_base, self.embed.tokens.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rope(torch.arange(ids.shape[1], device=ids.device))
        h = self.embed(ids)
        for block in self.blocks:
            h = block(h, cos, sin)
        return self.head(self.final_norm(h))


@typing.final
class LmModel:
    memory_format = torch.contiguous_format
    layouts: Mapping[str, program.Layout] = {}

    def __init__(self, size: workload.Size, numerics: Numerics) -> None:
        for name, value in _FIXED.items():
            pick({value: value}, numerics.value(name), f"the torch lm's {name}")
        self._size, self._numerics = size, numerics

    def module(self) -> nn.Module:
        return Decoder(self._size, self._numerics)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        assert isinstance(module, Decoder)
        attention = [m for m in module.modules() if isinstance(m, Attention)]
        return {
            "rms_eps": one_value(m.eps for m in module.modules() if isinstance(m, nn.RMSNorm)),
            "rope_base": module.rope_base,
            "attention_scale": "rsqrt_head_dim"
            if all(m.scale == 1.0 / math.sqrt(m.head_dim) for m in attention) else repr([m.scale for m in attention]),
            **{k: _FIXED[k] for k in ("rope_pairs", "attention_mask", "mlp")},
        }


# --- generation: a static KV cache and a compiled decode step (as gpt-fast) ---------------------


def forward_cached(model: Decoder, ids: torch.Tensor, positions: torch.Tensor,
                   caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Logits (B, V) of the last of `ids` (B, t) at `positions` (t,), writing their keys and
    values into the static caches (B, heads, max_len, dh) in place. Every query attends to the
    whole cache under a mask of the positions <= its own, so prefill and decode are one
    function and the decode step's shapes never change (one compiled graph for every step)."""
    max_len = caches[0][0].shape[2]
    visible = torch.arange(max_len, device=ids.device)[None, :] <= positions[:, None]  # (t, max_len)
    cos, sin = model.rope(positions)
    h = model.embed(ids)
    for block, (k_cache, v_cache) in zip(model.blocks, caches):
        attn = block.attn
        q, k, v = attn.qkv(block.attn_norm(h), cos, sin)
        k_cache.index_copy_(2, positions, k)
        v_cache.index_copy_(2, positions, v)
        o = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=visible, dropout_p=0.0, scale=attn.scale)
        h = h + attn.merge(o)
        h = h + block.mlp(block.mlp_norm(h))
    return model.head(model.final_norm(h[:, -1]))


def _decode_step(model: Decoder, logits: torch.Tensor, position: torch.Tensor,
                 caches: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    return forward_cached(model, logits.argmax(dim=-1, keepdim=True), position, caches)


@typing.final
class StaticCacheDecoder:
    """Preallocated caches, positions as device tensors (no recompilation per position); in
    compiled mode prefill and the decode step are each torch.compile'd with static shapes
    (fullgraph, dynamic=False: gpt-fast's recipe, without CUDA graphs on a CPU)."""

    def __init__(self, model: Decoder, batch: int, max_len: int, compiled: bool) -> None:
        s, p = model.size, next(model.parameters())
        self.model, self.batch, self.compiled = model, batch, compiled
        shape = (batch, s.heads, max_len, s.head_dim)
        self.caches = [(torch.zeros(shape, dtype=p.dtype, device=p.device), torch.zeros(shape, dtype=p.dtype, device=p.device))
                       for _ in range(s.depth)]
        self.position = torch.zeros(1, dtype=torch.int64, device=p.device)
        options = {"backend": "inductor", "mode": "default", "fullgraph": True, "dynamic": False}
        self._prefill = torch.compile(forward_cached, **options) if compiled else forward_cached
        self._step = torch.compile(_decode_step, **options) if compiled else _decode_step
        self.how = ("static cache, torch.compile'd prefill and decode step" if compiled
                    else "static cache, eager")

    def prefill(self, prompt: Any) -> torch.Tensor:
        ids = torch.from_numpy(prompt.astype("int64")).to(self.position.device)
        positions = torch.arange(ids.shape[1], device=ids.device)
        for k, v in self.caches:
            k.zero_()
            v.zero_()
        with torch.no_grad():
            logits = self._prefill(self.model, ids, positions, self.caches)
        self.position = positions[-1:] + 1
        return logits

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            out = self._step(self.model, logits, self.position, self.caches)
        self.position = self.position + 1
        return out

    def tokens(self, logits: torch.Tensor) -> Any:
        return logits.argmax(dim=-1).cpu().numpy()

    def to_numpy(self, logits: torch.Tensor) -> Any:
        return logits.float().cpu().numpy()

    def cache_bytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.caches)

    def compilations(self) -> int:
        """Dynamo graphs so far, process-wide (the worker builds one program)."""
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"]) if self.compiled else 0


def decoder(model: nn.Module, batch: int, max_len: int, compiled: bool, int8: bool = False) -> StaticCacheDecoder:
    assert isinstance(model, Decoder)
    model.eval()
    if not int8:
        return StaticCacheDecoder(model, batch, max_len, compiled)
    found = StaticCacheDecoder(quantize_int8(model), batch, max_len, compiled)
    found.how = f"{found.how}; {INT8_HOW}"
    return found


INT8_HOW = "int8: torch.ao quantize_dynamic of nn.Linear, per-channel"


def quantize_int8(model: Decoder) -> Decoder:
    """A copy of `model` with every nn.Linear replaced by torch.ao's dynamically quantised one:
    int8 weights with one scale per output channel (per_channel_dynamic_qconfig; the per-tensor
    default loses more), activations quantised on each call, the int8 GEMM of the quantized
    engine (x86 / fbgemm on a CPU). The embedding and the norms stay float32. torch 2.13 warns
    that torch.ao's eager quantisation moves to torchao; the warning is silenced here and the
    docs say so (docs/workloads.md#lm)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(model), {nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}, dtype=torch.qint8)
    assert isinstance(quantized, Decoder)
    return quantized


# --- the decode-with-past form, for exporters (ONNX Runtime) -------------------------------------


class PastPresent(nn.Module):
    """The decoder as a pure function, the form Hugging Face's ONNX exports take: (ids (B, t),
    past keys and values (depth, B, heads, L, dh)) -> (logits (B, V) of the last new position,
    present keys and values (depth, B, heads, L + t, dh)). The new tokens sit at positions
    L..L+t-1 and each attends to the past and to the new positions up to its own; with L = 0 it
    is the prefill, with t = 1 a decode step, so one graph with dynamic B, t and L serves both.
    Written from the same modules (and so the same canonical weights) as `forward_cached`."""

    def __init__(self, model: Decoder) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, past_keys: torch.Tensor,
                past_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        m = self.model
        past, t = past_keys.shape[3], ids.shape[1]
        positions = torch.arange(t, device=ids.device) + past
        visible = torch.arange(past + t, device=ids.device)[None, :] <= positions[:, None]  # (t, L + t)
        cos, sin = m.rope(positions)
        h = m.embed(ids)
        keys, values = [], []
        for i, block in enumerate(m.blocks):
            attn = block.attn
            q, k, v = attn.qkv(block.attn_norm(h), cos, sin)
            k, v = torch.cat([past_keys[i], k], dim=2), torch.cat([past_values[i], v], dim=2)
            keys.append(k)
            values.append(v)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, dropout_p=0.0, scale=attn.scale)
            h = h + attn.merge(o)
            h = h + block.mlp(block.mlp_norm(h))
        return m.head(m.final_norm(h[:, -1])), torch.stack(keys), torch.stack(values)


def past_present(model: nn.Module) -> PastPresent:
    """The exportable decode-with-past module of a built lm model (eval mode)."""
    assert isinstance(model, Decoder)
    model.eval()
    return PastPresent(model)

