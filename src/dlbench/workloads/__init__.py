"""Workload registry: one module per workload, framework-neutral (NumPy only)."""

from __future__ import annotations

from types import ModuleType

from dlbench.workloads import cnn, mlp, node, resnet, transformer

# Order: as listed by `dlbench list` and run by `-w all`.
WORKLOADS: dict[str, ModuleType] = {
    "mlp": mlp, "cnn": cnn, "resnet": resnet, "transformer": transformer, "node": node,
}


def get(name: str) -> ModuleType:
    from dlbench.spec import SpecError

    try:
        return WORKLOADS[name]
    except KeyError:
        raise SpecError(f"workload {name!r} is not one of: {', '.join(WORKLOADS)}") from None
