"""The ddpm workload in PyTorch: the two-resolution U-Net as a practitioner writes it (nn.Conv2d
with explicit symmetric padding, nn.GroupNorm with the spec's groups and eps, F.silu, a sinusoidal
embedding through a small MLP, F.interpolate(mode="nearest") to go up). The input is NCHW with the
timestep as its last channel; the output is the predicted noise flattened in canonical HWC order."""

from __future__ import annotations

import math
import typing
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dlbench.backends.torch import program
from dlbench.backends.torch.layers import conv_padding, one_value, pick
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import ddpm as workload

# spec extras the torch model implements, each with the one value it implements.
IMPLEMENTED = {"time_embedding": "sin_cos_period_10000", "upsample": "nearest_x2", "activation": "silu"}


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    return program.build(trial, DdpmModel(workload.MODEL_SIZES[spec.model_size], spec.numerics))


def _conv(cin: int, cout: int, k: int = 3, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=True)


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(workload.MAX_PERIOD) * torch.arange(half, device=t.device, dtype=t.dtype) / half)
    args = t[:, None] * freqs[None, :]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, time_dim: int, groups: int, eps: float) -> None:
        super().__init__()
        self.gn1 = nn.GroupNorm(groups, cin, eps=eps, affine=True)
        self.conv1 = _conv(cin, cout)
        self.time = nn.Linear(time_dim, cout)
        self.gn2 = nn.GroupNorm(groups, cout, eps=eps, affine=True)
        self.conv2 = _conv(cout, cout)
        self.skip = _conv(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.gn1(x))) + self.time(F.silu(temb))[:, :, None, None]
        h = self.conv2(F.silu(self.gn2(h)))
        return h + (x if self.skip is None else self.skip(x))


class Stage(nn.Module):
    """A named level of the U-Net holding `block` and its `conv` (down.conv / up.conv)."""

    def __init__(self, block: Block | None, conv: nn.Conv2d | None) -> None:
        super().__init__()
        if block is not None:
            self.block = block
        if conv is not None:
            self.conv = conv


class TimeMlp(nn.Module):
    def __init__(self, embed: int, dim: int) -> None:
        super().__init__()
        self.dense1 = nn.Linear(embed, dim)
        self.dense2 = nn.Linear(dim, dim)


class Out(nn.Module):
    def __init__(self, ch: int, groups: int, eps: float) -> None:
        super().__init__()
        self.gn = nn.GroupNorm(groups, ch, eps=eps, affine=True)
        self.conv = _conv(ch, workload.CHANNELS)


class UNet(nn.Module):
    def __init__(self, s: workload.Size, groups: int, eps: float) -> None:
        super().__init__()
        self.embed = s.embed
        self.time = TimeMlp(s.embed, s.time_dim)
        self.stem = _conv(workload.CHANNELS, s.ch1)
        self.down = Stage(Block(s.ch1, s.ch1, s.time_dim, groups, eps), _conv(s.ch1, s.ch1, 3, stride=2))
        self.mid = Stage(Block(s.ch1, s.ch2, s.time_dim, groups, eps), None)
        self.up = Stage(Block(s.ch2 + s.ch1, s.ch1, s.time_dim, groups, eps), _conv(s.ch2, s.ch2))
        self.out = Out(s.ch1, groups, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = workload.CHANNELS
        img, t = x[:, :c], x[:, c, 0, 0]
        temb = self.time.dense2(F.silu(self.time.dense1(time_embedding(t, self.embed))))
        skip = self.down.block(self.stem(img), temb)
        h = self.mid.block(self.down.conv(skip), temb)
        h = self.up.conv(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.up.block(torch.cat([h, skip], dim=1), temb)
        out = self.out.conv(F.silu(self.out.gn(h)))
        return out.permute(0, 2, 3, 1).flatten(1)  # canonical HWC order


@typing.final
class DdpmModel:
    memory_format = torch.contiguous_format
    layouts: Mapping[str, program.Layout] = {}

    def __init__(self, size: workload.Size, numerics: Numerics) -> None:
        for name, value in IMPLEMENTED.items():
            pick({value: value}, numerics.value(name), f"the torch ddpm's {name}")
        self._size = size
        self._groups = int(numerics.value("group_norm_groups"))
        self._eps = float(numerics.value("group_norm_eps"))

    def module(self) -> nn.Module:
        return UNet(self._size, self._groups, self._eps)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        norms = [m for m in module.modules() if isinstance(m, nn.GroupNorm)]
        return {
            "padding": conv_padding(module),
            "group_norm_groups": one_value(m.num_groups for m in norms),
            "group_norm_eps": one_value(float(m.eps) for m in norms),
            **IMPLEMENTED,  # written in forward() above, not settings of a module
        }
