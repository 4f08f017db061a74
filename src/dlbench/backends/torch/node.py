"""The node workload in PyTorch: a neural ODE whose fixed-step RK4 solver is a plain Python loop
inside forward(); autograd backpropagates through the solver's operations (no adjoint), and
torch.compile traces the unrolled loop into one graph."""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from dlbench.backends.torch import program
from dlbench.backends.torch.layers import pick
from dlbench.spec import TrialSpec
from dlbench.workloads import node as workload

Field = Callable[[torch.Tensor], torch.Tensor]


def rk4_step(f: Field, h: torch.Tensor, dt: float) -> torch.Tensor:
    """Classic Runge-Kutta 4."""
    k1 = f(h)
    k2 = f(h + dt / 2 * k1)
    k3 = f(h + dt / 2 * k2)
    k4 = f(h + dt * k3)
    return h + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


# spec.Numerics.ode_solver -> one step of the solver.
SOLVERS: dict[str, Callable[[Field, torch.Tensor, float], torch.Tensor]] = {"rk4": rk4_step}


def build(trial: TrialSpec) -> program.TorchProgram:
    spec = trial.workload
    return program.build(trial, NodeModel(workload.MODEL_SIZES[spec.model_size], spec.num_classes, spec.numerics.ode_solver))


class VectorField(nn.Module):
    """f(h) = tanh(h W1 + b1) W2 + b2, autonomous."""

    def __init__(self, s: workload.Size) -> None:
        super().__init__()
        self.dense1 = nn.Linear(s.hidden, s.field_hidden)
        self.dense2 = nn.Linear(s.field_hidden, s.hidden)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.dense2(torch.tanh(self.dense1(h)))


class Node(nn.Module):
    def __init__(self, s: workload.Size, num_classes: int, solver: str) -> None:
        super().__init__()
        self.inp = nn.Linear(2, s.hidden)
        self.field = VectorField(s)
        self.head = nn.Linear(s.hidden, num_classes)
        self.solver = solver
        self.steps = s.steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, dt = self.inp(x), 1.0 / self.steps  # S steps of dt over [0, 1]
        step = SOLVERS[self.solver]
        for _ in range(self.steps):
            h = step(self.field, h, dt)
        return self.head(h)


@typing.final
class NodeModel:
    memory_format = torch.contiguous_format
    layouts: Mapping[str, program.Layout] = {}

    def __init__(self, size: workload.Size, num_classes: int, solver: str) -> None:
        pick(SOLVERS, solver, "the torch node's ode_solver")
        self._size, self._num_classes, self._solver = size, num_classes, solver

    def module(self) -> nn.Module:
        return Node(self._size, self._num_classes, self._solver)

    def numerics(self, module: nn.Module) -> dict[str, Any]:
        assert isinstance(module, Node)
        return {"ode_solver": module.solver}
