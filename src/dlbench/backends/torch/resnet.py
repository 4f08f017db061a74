"""The resnet workload in PyTorch: ResNet-18 (CIFAR variant) and ResNet-50 v1.5, as torchvision's
BasicBlock and Bottleneck but with the canonical module names; BatchNorm in torch's own convention, which is the spec's (momentum is
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
from dlbench.spec import Numerics, TrialSpec, WorkloadSpec
from dlbench.workloads import resnet as workload


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    return program.build(trial, ResnetModel(spec))


def _conv(conv: workload.Conv) -> nn.Conv2d:
    # Explicit symmetric pads: k//2 zeros on every side, stride 2 included.
    return nn.Conv2d(conv.in_ch, conv.out_ch, conv.size, stride=conv.stride, padding=conv.size // 2, bias=False)


def _bn(ch: int, n: Numerics) -> nn.BatchNorm2d:
    # track_running_stats: predict() uses the running statistics; training updates them.
    return nn.BatchNorm2d(ch, eps=n.bn_eps, momentum=n.bn_momentum, affine=True, track_running_stats=True)


class ConvBn(nn.Module):
    """`<name>.conv` and `<name>.bn`: the stem and the projection shortcuts."""

    def __init__(self, conv: workload.Conv, n: Numerics) -> None:
        super().__init__()
        self.conv = _conv(conv)
        self.bn = _bn(conv.out_ch, n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class Block(nn.Module):
    """A BasicBlock (conv1, conv2) or a bottleneck (conv1, conv2, conv3), as torchvision's: ReLU
    after every conv-BN pair but the last, then the shortcut added and a ReLU."""

    def __init__(self, block: workload.Block, n: Numerics) -> None:
        super().__init__()
        self.pairs: list[tuple[nn.Conv2d, nn.BatchNorm2d]] = []
        for conv in block.convs:  # canonical names: conv1/bn1, conv2/bn2, conv3/bn3
            pair = (_conv(conv), _bn(conv.out_ch, n))
            self.add_module(conv.name.rsplit(".", 1)[1], pair[0])
            self.add_module(conv.bn.rsplit(".", 1)[1], pair[1])
            self.pairs.append(pair)
        self.shortcut = ConvBn(block.shortcut, n) if block.shortcut is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = x
        for i, (conv, bn) in enumerate(self.pairs):
            z = bn(conv(z))
            z = torch.relu(z) if i < len(self.pairs) - 1 else z
        return torch.relu(z + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, spec: WorkloadSpec) -> None:
        super().__init__()
        n = spec.numerics
        self.stem = ConvBn(workload.stem(spec), n)
        # ResNet-50's 3x3 stride-2 max-pool pads with -inf (never the maximum), as torchvision.
        self.pool = nn.MaxPool2d(3, stride=2, padding=1) if workload.max_pool(spec) else nn.Identity()
        stages: dict[str, OrderedDict[str, nn.Module]] = {}
        for block in workload.blocks(spec):  # "layer2.block0"
            stage, name = block.name.split(".")
            stages.setdefault(stage, OrderedDict())[name] = Block(block, n)
        self.stages: list[nn.Module] = []
        for stage, blocks in stages.items():
            self.stages.append(nn.Sequential(blocks))
            self.add_module(stage, self.stages[-1])  # layer1.block0.conv1.kernel, ...
        self.head = nn.Linear(workload.MODEL_SIZES[spec.model_size].features, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pool(torch.relu(self.stem(x)))
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

    def __init__(self, spec: WorkloadSpec) -> None:
        self._spec = spec

    def module(self) -> nn.Module:
        return ResNet(self._spec)

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
