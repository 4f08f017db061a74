"""The lm workload in PyTorch: a Llama-style decoder with canonical module names (nn.Linear
without bias per projection, nn.RMSNorm, an nn.Parameter embedding) and causal
F.scaled_dot_product_attention (is_causal=True; torch picks its fused kernel)."""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from dlbench.backends.torch import program
from dlbench.backends.torch.layers import one_value, pick
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import lm as workload

# What this implementation writes out; anything else in the numerics block is refused.
_FIXED = {"rope_pairs": "half", "attention_mask": "causal", "mlp": "swiglu", "attention_scale": "rsqrt_head_dim"}


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    built = program.build(trial, LmModel(workload.MODEL_SIZES[spec.model_size], spec.numerics))
    built.decoder_factory = lambda state, batch, max_len: decoder(state.model, batch, max_len, built.compiled)
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
        return rope_tables(positions, self.size.head_dim, self.rope_base, self.head.weight.dtype)

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


def decoder(model: nn.Module, batch: int, max_len: int, compiled: bool) -> StaticCacheDecoder:
    assert isinstance(model, Decoder)
    model.eval()
    return StaticCacheDecoder(model, batch, max_len, compiled)

