"""The lstm in PyTorch, on dlbench's torch program machinery (dlbench.backends.torch.program):
nn.Embedding's lookup, the LSTM as ATen's fused kernel (the one nn.LSTM calls), nn.Linear.

The module's attribute names spell the canonical names (`embed.tokens`, `lstm.kernel`, ...).
nn.LSTM itself would spell `lstm.weight_ih_l0` and keep two biases, so the layer here holds the
canonical three tensors and calls the same kernel, torch.lstm, with
  weight_ih = lstm.kernel^T (4H, E), weight_hh = lstm.recurrent_kernel^T (4H, H): torch's gate
    order i,f,g,o is the canonical one, so the conversion is the transpose alone (the `layouts`);
  bias_ih = lstm.bias and bias_hh = zeros: never a parameter, so Adam never moves a second copy.

torch.compile: dynamo does not trace recurrent layers (nn.LSTM is a graph break unless
torch._dynamo.config.allow_rnn; traced, aten.lstm fails in Inductor's mkldnn_rnn_layer on CPU,
torch 2.13), so the LSTM call is left out of the graph, as it is for nn.LSTM: compiled mode
compiles the embedding, head, loss and backward around ATen's fused LSTM.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from dlbench.backends.base import Unsupported
from dlbench.backends.torch import program
from dlbench.spec import Numerics, TrialSpec

from dlbench_lstm import workload

# What ATen's fused LSTM computes; not settings, so a spec asking for anything else is refused.
GATE_ACTIVATION = "sigmoid"
CELL_ACTIVATION = "tanh"
FORGET_BIAS = 0.0


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    return program.build(trial, LstmModel(workload.MODEL_SIZES[spec.model_size], spec.num_classes, spec.numerics))


class Embed(nn.Module):
    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.tokens = nn.Parameter(torch.empty(s.vocab, s.embed))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.tokens)


@torch.compiler.disable
def fused_lstm(x: torch.Tensor, weight_ih: torch.Tensor, weight_hh: torch.Tensor, bias: torch.Tensor,
               train: bool) -> torch.Tensor:
    """The last hidden state of ATen's LSTM over (N, L, E) from a zero state; `bias` is b_ih,
    b_hh is zeros (not trained)."""
    zeros = x.new_zeros(1, x.shape[0], weight_hh.shape[1])
    weights = (weight_ih, weight_hh, bias, torch.zeros_like(bias))
    _, h_n, _ = torch.lstm(x, (zeros, zeros), weights, True, 1, 0.0, train, False, True)
    return h_n[0]


class Lstm(nn.Module):
    """One layer: `kernel` (4H, E) and `recurrent_kernel` (4H, H) in torch's layout, one `bias`."""

    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(4 * s.hidden, s.embed))
        self.recurrent_kernel = nn.Parameter(torch.empty(4 * s.hidden, s.hidden))
        self.bias = nn.Parameter(torch.empty(4 * s.hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused_lstm(x, self.kernel, self.recurrent_kernel, self.bias, self.training)


class Classifier(nn.Module):
    def __init__(self, s: workload.Size, num_classes: int) -> None:
        super().__init__()
        self.embed = Embed(s)
        self.lstm = Lstm(s)
        self.head = nn.Linear(s.hidden, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(self.embed(ids)))


@typing.final
class LstmModel:
    memory_format = torch.contiguous_format
    # Canonical (in, 4H) <-> torch (4H, in); the gate blocks keep their order.
    layouts: Mapping[str, program.Layout] = {"lstm.kernel": program.DenseKernel(),
                                             "lstm.recurrent_kernel": program.DenseKernel()}

    def __init__(self, size: workload.Size, num_classes: int, numerics: Numerics) -> None:
        wanted = {"lstm_gate_activation": GATE_ACTIVATION, "lstm_cell_activation": CELL_ACTIVATION,
                  "lstm_forget_bias": FORGET_BIAS}
        for name, value in wanted.items():
            if numerics.value(name) != value:
                raise Unsupported(f"the torch lstm (ATen's fused LSTM) computes {name} {value!r},"
                                  f" not {numerics.value(name)!r}")
        self._size, self._num_classes = size, num_classes

    def module(self) -> nn.Module:
        return Classifier(self._size, self._num_classes)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        return {"lstm_gate_activation": GATE_ACTIVATION, "lstm_cell_activation": CELL_ACTIVATION,
                "lstm_forget_bias": FORGET_BIAS}
