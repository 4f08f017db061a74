"""Backend registry. Importing a backend package is light: frameworks load only in the worker."""

from __future__ import annotations

import importlib

from dlbench.backends.base import Backend
from dlbench.spec import FRAMEWORKS, SpecError

# framework name -> "module:class"; adding a framework is one line here and one package.
REGISTRY: dict[str, str] = {
    "torch": "dlbench.backends.torch:TorchBackend",
    "tensorflow": "dlbench.backends.tensorflow:TensorFlowBackend",
    "jax": "dlbench.backends.jax:JaxBackend",
}
assert tuple(REGISTRY) == FRAMEWORKS


def get_backend(name: str) -> Backend:
    try:
        target = REGISTRY[name]
    except KeyError:
        raise SpecError(f"framework {name!r} is not one of: {', '.join(REGISTRY)}") from None
    module_name, cls_name = target.split(":")
    backend: Backend = getattr(importlib.import_module(module_name), cls_name)()
    return backend
