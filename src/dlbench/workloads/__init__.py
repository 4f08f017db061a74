"""Workload registry: one module per workload, framework-neutral (NumPy only).

`validate` adds to `WorkloadSpec.validate` what only the workload module knows: its name, its
model sizes, and whether its inputs are images that can be augmented.
"""

from __future__ import annotations

from types import ModuleType

from dlbench.spec import SpecError, WorkloadSpec
from dlbench.workloads import cnn, mlp, node, resnet, transformer

# Order: as listed by `dlbench list` and run by `-w all`.
WORKLOADS: dict[str, ModuleType] = {
    "mlp": mlp, "cnn": cnn, "resnet": resnet, "transformer": transformer, "node": node,
}


def get(name: str) -> ModuleType:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise SpecError(f"workload {name!r} is not one of: {', '.join(WORKLOADS)}") from None


def validate(spec: WorkloadSpec) -> None:
    """The spec's own checks, then the workload's: a known name and model size, augmentation
    only where the inputs are NHWC images. Raises SpecError with one line."""
    spec.validate()
    module = get(spec.name)
    if spec.model_size not in module.MODEL_SIZES:
        raise SpecError(f"{spec.name} model size {spec.model_size!r} is not one of:"
                        f" {', '.join(module.MODEL_SIZES)}")
    if spec.augment != "none":
        shape, dtype = module.input_spec(spec)
        if len(shape) != 3 or dtype != "float32":
            raise SpecError(f"augment {spec.augment!r} needs NHWC images; {spec.name} takes {shape} {dtype}:"
                            " allowed is none")


def scenario_unsupported(name: str, scenario: str) -> str | None:
    """None when the workload runs `scenario`, else the reason (one line)."""
    runs = get(name).SCENARIOS
    if scenario in runs:
        return None
    return f"{name} has no {scenario} scenario (it runs: {', '.join(runs)})"
