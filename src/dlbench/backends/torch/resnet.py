"""The resnet workload in PyTorch: ResNet-18, CIFAR variant, as torchvision's BasicBlock but with
the canonical module names; BatchNorm in torch's own convention, which is the spec's (momentum is
the weight of the new batch, biased variance to normalise, unbiased for the running variance)."""

from __future__ import annotations

import typing
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dlbench.backends.torch import program
from dlbench.backends.torch.layers import conv_padding, one_value
from dlbench.spec import Numerics, TrialSpec
from dlbench.workloads import resnet as workload


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    return program.build(trial, ResnetModel(workload.MODEL_SIZES[spec.model_size], spec.num_classes, spec.numerics))


def _conv(in_ch: int, out_ch: int, size: int, stride: int) -> nn.Conv2d:
    # Explicit symmetric pads: k//2 zeros on every side, stride 2 included.
    return nn.Conv2d(in_ch, out_ch, size, stride=stride, padding=size // 2, bias=False)


def _bn(ch: int, n: Numerics) -> nn.BatchNorm2d:
    # track_running_stats: predict() uses the running statistics; training updates them.
    return nn.BatchNorm2d(ch, eps=n.bn_eps, momentum=n.bn_momentum, affine=True, track_running_stats=True)


class ConvBn(nn.Module):
    """`<name>.conv` and `<name>.bn`: the stem and the projection shortcuts."""

    def __init__(self, in_ch: int, out_ch: int, size: int, stride: int, n: Numerics) -> None:
        super().__init__()
        self.conv = _conv(in_ch, out_ch, size, stride)
        self.bn = _bn(out_ch, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, n: Numerics) -> None:
        super().__init__()
        self.conv1 = _conv(in_ch, out_ch, 3, stride)
        self.bn1 = _bn(out_ch, n)
        self.conv2 = _conv(out_ch, out_ch, 3, 1)
        self.bn2 = _bn(out_ch, n)
        self.shortcut = ConvBn(in_ch, out_ch, 1, stride, n) if stride != 1 or in_ch != out_ch else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.relu(self.bn1(self.conv1(x)))
        z = self.bn2(self.conv2(z))
        return torch.relu(z + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, width: int, num_classes: int, n: Numerics) -> None:
        super().__init__()
        self.stem = ConvBn(workload.INPUT_SHAPE[2], width, 3, 1, n)
        self.stages: list[nn.Module] = []
        in_ch = width
        for stage in range(4):
            out_ch = width * 2**stage
            blocks: OrderedDict[str, nn.Module] = OrderedDict()
            for j in range(2):
                blocks[f"block{j}"] = BasicBlock(in_ch, out_ch, 2 if stage > 0 and j == 0 else 1, n)
                in_ch = out_ch
            self.stages.append(nn.Sequential(blocks))
            self.add_module(f"layer{stage + 1}", self.stages[-1])  # layer1.block0.conv1.kernel, ...
        self.head = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        for stage in self.stages:
            h = stage(h)
        return self.head(h.mean(dim=(2, 3)))  # global average pool


@typing.final
class ResnetModel:
    # channels_last, as the cnn: full size, batch 32, eager, 4 interleaved rounds of 4 steps on
    # the shared 2-core host (load 7-10): median 8.1 s/step against 8.9 s contiguous NCHW, best
    # 5.8 against 8.3 s. Compiled mode not measured (a cold compile costs minutes there).
    memory_format = torch.channels_last
    layouts: Mapping[str, program.Layout] = {}

    def __init__(self, size: workload.Size, num_classes: int, numerics: Numerics) -> None:
        self._size, self._num_classes, self._numerics = size, num_classes, numerics

    def module(self) -> nn.Module:
        return ResNet(self._size.width, self._num_classes, self._numerics)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        bns = [m for m in module.modules() if isinstance(m, nn.BatchNorm2d)]
        return {
            "padding": conv_padding(module),
            "bn_momentum": one_value(m.momentum for m in bns),
            "bn_eps": one_value(float(m.eps) for m in bns),
            # torch's BatchNorm always updates the running variance with the unbiased batch
            # variance (and normalises with the biased one); it has no switch.
            "bn_running_var": "unbiased",
        }
