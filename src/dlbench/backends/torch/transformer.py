"""The transformer workload in PyTorch: a pre-LN encoder with learned positions, mean over the
sequence and a linear head. Attention keeps the canonical separate query/key/value/out kernels
(nn.Linear each, not nn.MultiheadAttention's packed in_proj) and runs
nn.functional.scaled_dot_product_attention, torch's fused kernel (flash attention on CPU)."""

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
from dlbench.workloads import transformer as workload

# spec.Numerics.gelu -> nn.GELU's `approximate`.
_GELU = {"erf": "none", "tanh": "tanh"}


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    return program.build(trial, TransformerModel(workload.MODEL_SIZES[spec.model_size], spec.num_classes, spec.numerics))


class Embed(nn.Module):
    """`embed.tokens` (V, D) and `embed.positions` (L, D), used as they are."""

    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.tokens = nn.Parameter(torch.empty(s.vocab, s.dim))
        self.positions = nn.Parameter(torch.empty(s.seq_len, s.dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.tokens) + self.positions


class Attention(nn.Module):
    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.query = nn.Linear(s.dim, s.dim)
        self.key = nn.Linear(s.dim, s.dim)
        self.value = nn.Linear(s.dim, s.dim)
        self.out = nn.Linear(s.dim, s.dim)
        self.heads = s.heads
        # Passed explicitly (it is also SDPA's default): logits scaled by 1/sqrt(head dim).
        self.scale = 1.0 / math.sqrt(s.head_dim)

    def _split(self, z: torch.Tensor) -> torch.Tensor:
        # (N, L, D) -> (N, heads, L, dh): head j takes columns j*dh:(j+1)*dh.
        n, length, d = z.shape
        return z.view(n, length, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(h)), self._split(self.key(h)), self._split(self.value(h))
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=self.scale)
        n, _, length, _ = z.shape
        return self.out(z.transpose(1, 2).reshape(n, length, -1))  # heads concatenated in order


class Mlp(nn.Module):
    def __init__(self, s: workload.Size, gelu: str) -> None:
        super().__init__()
        self.fc1 = nn.Linear(s.dim, s.mlp_dim)
        self.gelu = nn.GELU(approximate=gelu)
        self.fc2 = nn.Linear(s.mlp_dim, s.dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.gelu(self.fc1(h)))


def layer_norm(s: workload.Size, n: Numerics) -> nn.LayerNorm:
    return nn.LayerNorm(s.dim, eps=n.ln_eps, elementwise_affine=True, bias=True)


class Block(nn.Module):
    """Pre-LN h + f(LN(h)), or post-LN (BERT) LN(h + f(h))."""

    def __init__(self, s: workload.Size, n: Numerics) -> None:
        super().__init__()
        self.ln1 = layer_norm(s, n)
        self.attn = Attention(s)
        self.ln2 = layer_norm(s, n)
        self.mlp = Mlp(s, _GELU[n.gelu])
        self.post = s.norm == workload.POST

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.post:
            h = self.ln1(h + self.attn(h))
            return self.ln2(h + self.mlp(h))
        h = h + self.attn(self.ln1(h))
        return h + self.mlp(self.ln2(h))


def add_blocks(parent: nn.Module, s: workload.Size, n: Numerics) -> list[Block]:
    """The encoder's blocks, registered as `block0`, `block1`, ... (canonical names:
    block0.attn.query.kernel, ...)."""
    blocks = [Block(s, n) for _ in range(s.depth)]
    for i, block in enumerate(blocks):
        parent.add_module(f"block{i}", block)
    return blocks


class Transformer(nn.Module):
    def __init__(self, s: workload.Size, num_classes: int, n: Numerics) -> None:
        super().__init__()
        self.embed = Embed(s)
        self.post = s.norm == workload.POST
        if self.post:  # embed.ln
            self.embed.add_module("ln", layer_norm(s, n))
        self.blocks = add_blocks(self, s, n)
        self.final_ln = nn.Identity() if self.post else layer_norm(s, n)
        self.head = nn.Linear(s.dim, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        if self.post:
            h = self.embed.ln(h)
        for block in self.blocks:
            h = block(h)
        return self.head(self.final_ln(h).mean(dim=1))


@typing.final
class TransformerModel:
    memory_format = torch.contiguous_format
    layouts: Mapping[str, program.Layout] = {}

    def __init__(self, size: workload.Size, num_classes: int, numerics: Numerics) -> None:
        pick(_GELU, numerics.gelu, "the torch transformer's gelu")
        self._size, self._num_classes, self._numerics = size, num_classes, numerics

    def module(self) -> nn.Module:
        return Transformer(self._size, self._num_classes, self._numerics)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        gelu_names = {v: k for k, v in _GELU.items()}
        attention = [m for m in module.modules() if isinstance(m, Attention)]
        head_dims = [m.query.out_features // m.heads for m in attention]
        return {
            "ln_eps": one_value(float(m.eps) for m in module.modules() if isinstance(m, nn.LayerNorm)),
            "gelu": one_value(gelu_names[m.approximate] for m in module.modules() if isinstance(m, nn.GELU)),
            "attention_scale": "rsqrt_head_dim"
            if all(m.scale == 1.0 / math.sqrt(dh) for m, dh in zip(attention, head_dims))
            else repr([m.scale for m in attention]),
        }
