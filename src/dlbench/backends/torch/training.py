"""The torch training machinery that every torch program shares, whatever its model and loop
(program.py's supervised TorchProgram, ppo.py's PPO, and what comes next): the optimizer built
from the numerics block, the optimizer's numerics read back from the object that runs, and the
compile counter."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from dlbench.backends.torch import settings
from dlbench.spec import Numerics, Policy


def make_optimizer(parameters: Iterable[torch.Tensor], n: Numerics, policy: Policy) -> torch.optim.Adam:
    """Adam over `parameters` with every value of the numerics block passed explicitly, on the
    implementation the policy's `optimizer` option names (settings.py). The default, fused=True:
    one ATen kernel per parameter; torch.compile leaves it untraced ("don't trace into fused
    optimizer"). On the compiled cpu cnn the whole step with foreach or for-loop Adam measured
    within 6-7 % of it, undecided at 4 repeats (docs/benchmarks.md, Headroom)."""
    fused, foreach = settings.optimizer_flags(policy)
    return torch.optim.Adam(
        list(parameters),
        lr=n.learning_rate,
        betas=(n.beta1, n.beta2),
        eps=n.eps,
        weight_decay=n.weight_decay,
        amsgrad=False,
        maximize=False,
        fused=fused,
        foreach=foreach,
    )


def optimizer_numerics(optimizer: torch.optim.Adam) -> dict[str, Any]:
    """The optimizer's numerics fields (keyed like spec.Numerics) read back from its first
    parameter group."""
    group = optimizer.param_groups[0]
    beta1, beta2 = group["betas"]
    return {
        "optimizer": type(optimizer).__name__.lower() + ("_amsgrad" if group["amsgrad"] else ""),
        "learning_rate": float(group["lr"]),
        "beta1": float(beta1),
        "beta2": float(beta2),
        "eps": float(group["eps"]),
        "eps_placement": "outside_sqrt",  # torch.optim.Adam's formula, not a setting
        "bias_correction": True,  # likewise: torch.optim.Adam always bias-corrects
        "weight_decay": float(group["weight_decay"]),
    }


def optimizer_path(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The implementation the optimizer runs, read back from its first parameter group."""
    group = optimizer.param_groups[0]
    return {"fused": group.get("fused"), "foreach": group.get("foreach")}


def compilations(compiled: bool) -> int:
    """Graphs dynamo has compiled in this process so far (0 in eager mode, which never imports
    dynamo): a change inside a timed window flags the trial."""
    if not compiled:
        return 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
