"""The cnn workload in PyTorch: conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2, flatten,
dense128-relu, dense(C); VALID padding.

The canonical first dense kernel's rows follow the HWC flatten of the pooled map while torch
flattens CHW: viewed as (H, W, C, out) that kernel is an HWIO kernel of a 6x6 VALID convolution,
so the same permutation as the conv kernels converts it.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from dlbench.backends.torch import program
from dlbench.backends.torch.layers import conv_padding
from dlbench.spec import TrialSpec
from dlbench.workloads import cnn as workload

# The pooled map that the first dense layer flattens: 32 -conv-> 30 -pool-> 15 -conv-> 13
# -pool-> 6 with VALID padding.
_POOLED_CHW = (workload.CONV2_CH, 6, 6)
assert int(np.prod(_POOLED_CHW)) == workload.FLAT


def build(trial: TrialSpec) -> program.TorchProgram:
    return program.build(trial, CnnModel(trial.workload.num_classes))


class Net(nn.Module):
    """Module names follow the canonical parameter names (conv1.kernel <-> conv1.weight)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        in_ch = workload.INPUT_SHAPE[2]
        self.conv1 = nn.Conv2d(in_ch, workload.CONV1_CH, kernel_size=3, padding=0)
        self.conv2 = nn.Conv2d(workload.CONV1_CH, workload.CONV2_CH, kernel_size=3, padding=0)
        self.pool = nn.MaxPool2d(kernel_size=2)
        self.dense1 = nn.Linear(workload.FLAT, workload.HIDDEN)
        self.dense2 = nn.Linear(workload.HIDDEN, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = torch.flatten(x, 1)  # CHW order: dense1's canonical rows are permuted to match
        return self.dense2(torch.relu(self.dense1(x)))


@typing.final
class HwcFlattenDense:
    """dense1.kernel: canonical (H*W*C, out), rows in HWC order; torch (out, C*H*W)."""

    def to_torch(self, a: np.ndarray) -> np.ndarray:
        c, h, w = _POOLED_CHW
        return a.reshape(h, w, c, -1).transpose(3, 2, 0, 1).reshape(a.shape[1], -1)

    def to_canonical(self, a: np.ndarray) -> np.ndarray:
        c, h, w = _POOLED_CHW
        return a.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(c * h * w, -1)


@typing.final
class CnnModel:
    # Images, weights and activations in channels_last (NHWC in memory, like the canonical data):
    # on a 2-core AVX2 CPU with torch 2.13, oneDNN's convolutions and ATen's max-pool are faster
    # there; measured +15 % steps/s in eager mode and +9 % compiled, against contiguous NCHW.
    memory_format = torch.channels_last
    layouts: Mapping[str, program.Layout] = {"dense1.kernel": HwcFlattenDense()}

    def __init__(self, num_classes: int) -> None:
        self._num_classes = num_classes

    def module(self) -> nn.Module:
        return Net(self._num_classes)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        return {
            "padding": conv_padding(module),
            # The network flattens CHW; with dense1's rows permuted it computes the HWC model.
            "flatten_order": "HWC",
        }
