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
    return program.build(trial, LmModel(workload.MODEL_SIZES[spec.model_size], spec.numerics))


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
