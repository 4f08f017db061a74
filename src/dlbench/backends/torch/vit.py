"""The vit workload in PyTorch: the patch embedding as one stride-P nn.Conv2d (timm's
PatchEmbed), the class token and learned positions as parameters, then the transformer
workload's pre-LN blocks (transformer.py: SDPA attention, exact GELU), a final LayerNorm and the
head on the class token."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dlbench.backends.torch import program
from dlbench.backends.torch import transformer as encoder
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import vit as workload


def build(trial: TrialSpec) -> program.TorchProgram:
    return program.build(trial, VitModel(trial.workload))


class Embed(nn.Module):
    """`embed.patch` (a P x P stride-P convolution with bias), `embed.cls` (D,) and
    `embed.positions` (T + 1, D), position 0 the class token's."""

    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.patch = nn.Conv2d(workload.CHANNELS, s.dim, s.patch, stride=s.patch, padding=0, bias=True)
        self.cls = nn.Parameter(torch.empty(s.dim))
        self.positions = nn.Parameter(torch.empty(s.patches + 1, s.dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.patch(x).flatten(2).transpose(1, 2)  # (N, D, H/P, W/P) -> (N, T, D), row-major
        # expand_as, not expand(len(x), ...): an ONNX export traces len(x) as a constant batch.
        cls = self.cls.expand_as(z[:, :1])
        return torch.cat([cls, z], dim=1) + self.positions


class Vit(nn.Module):
    def __init__(self, spec: WorkloadSpec) -> None:
        super().__init__()
        s, n = workload.MODEL_SIZES[spec.model_size], spec.numerics
        self.embed = Embed(s)
        self.blocks = encoder.add_blocks(self, s.encoder, n)
        self.final_ln = encoder.layer_norm(s.encoder, n)
        self.head = nn.Linear(s.dim, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.final_ln(h[:, 0]))  # the class token


@typing.final
class VitModel:
    # channels_last, as the images arrive (NHWC memory): the patch convolution reads them as
    # they are.
    memory_format = torch.channels_last
    layouts: Mapping[str, program.Layout] = {}

    def __init__(self, spec: WorkloadSpec) -> None:
        self._spec = spec
        self._encoder = encoder.TransformerModel(workload.MODEL_SIZES[spec.model_size].encoder,
                                                 spec.num_classes, spec.numerics)

    def module(self) -> nn.Module:
        return Vit(self._spec)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        return self._encoder.numerics(module)
