"""The mlp workload in PyTorch: three nn.Linear layers on float vectors."""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from dlbench.backends.torch import program
from dlbench.spec import TrialSpec
from dlbench.workloads import mlp as workload


def build(trial: TrialSpec) -> program.TorchProgram:
    size = workload.MODEL_SIZES[trial.workload.model_size]
    return program.build(trial, MlpModel(size, trial.workload.num_classes))


class Mlp(nn.Module):
    def __init__(self, size: workload.Size, num_classes: int) -> None:
        super().__init__()
        self.dense1 = nn.Linear(size.inputs, size.hidden)
        self.dense2 = nn.Linear(size.hidden, size.hidden)
        self.dense3 = nn.Linear(size.hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.dense1(x))
        h = torch.relu(self.dense2(h))
        return self.dense3(h)


@typing.final
class MlpModel:
    memory_format = torch.contiguous_format
    layouts: Mapping[str, program.Layout] = {}

    def __init__(self, size: workload.Size, num_classes: int) -> None:
        self._size, self._num_classes = size, num_classes

    def module(self) -> nn.Module:
        return Mlp(self._size, self._num_classes)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        return {}
