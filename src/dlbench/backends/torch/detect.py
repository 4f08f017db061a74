"""The detect workload in PyTorch: 3x3 convolutions padding 1 on every side (explicit and
symmetric, stride 2 included), relu, a class head and a box head; the output is permuted to the
canonical (N, G, G, C + 4) inside forward, so predict, parity and ONNX see one NHWC tensor."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dlbench.backends.torch import program
from dlbench.backends.torch.layers import conv_padding
from dlbench.spec import TrialSpec
from dlbench.workloads import detect as workload


def build(trial: TrialSpec) -> program.TorchProgram:
    return program.build(trial, DetectModel())


class Net(nn.Module):
    """Module names follow the canonical parameter names (conv1.kernel <-> conv1.weight)."""

    def __init__(self) -> None:
        super().__init__()
        ch = workload.CHANNELS
        for name, width, stride in workload.BACKBONE:
            setattr(self, name, nn.Conv2d(ch, width, kernel_size=3, stride=stride, padding=1))
            ch = width
        self.cls_head = nn.Conv2d(ch, workload.CLASSES, kernel_size=3, padding=1)
        self.box_head = nn.Conv2d(ch, 4, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for name, _, _ in workload.BACKBONE:
            x = torch.relu(getattr(self, name)(x))
        out = torch.cat([self.cls_head(x), self.box_head(x)], dim=1)
        return out.permute(0, 2, 3, 1)  # NCHW -> the canonical NHWC output


@typing.final
class DetectModel:
    # As the cnn: convolutions in channels_last (NHWC in memory, like the canonical data).
    memory_format = torch.channels_last
    layouts: Mapping[str, program.Layout] = {}

    def module(self) -> nn.Module:
        return Net()

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        return {"padding": conv_padding(module)}
