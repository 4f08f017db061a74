"""Backend registry. Importing a backend package is light: frameworks load only in the worker.

Adding a framework is one package under backends/ and one line here. Out-of-tree backends (and
the test suite's fake one) register through DLBENCH_BACKENDS="name=module:Class,...".
"""

from __future__ import annotations

import importlib
import os

from dlbench.backends.base import Backend
from dlbench.spec import FRAMEWORKS, SpecError

# framework name -> "module:class"
REGISTRY: dict[str, str] = {
    "torch": "dlbench.backends.torch:TorchBackend",
    "tensorflow": "dlbench.backends.tensorflow:TensorFlowBackend",
    "jax": "dlbench.backends.jax:JaxBackend",
    "keras-jax": "dlbench.backends.keras:KerasJax",
    "keras-torch": "dlbench.backends.keras:KerasTorch",
    "keras-tensorflow": "dlbench.backends.keras:KerasTensorFlow",
    "onnxruntime": "dlbench.backends.onnxruntime:OnnxRuntimeBackend",
}
assert tuple(REGISTRY) == FRAMEWORKS


def registered() -> dict[str, str]:
    """The built-in backends plus those named in DLBENCH_BACKENDS."""
    extra = {}
    for item in filter(None, os.environ.get("DLBENCH_BACKENDS", "").split(",")):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise SpecError(f"DLBENCH_BACKENDS entry {item!r} is not of the form name=module:Class")
        extra[name.strip()] = target.strip()
    return {**REGISTRY, **extra}


def get_backend(name: str) -> Backend:
    known = registered()
    try:
        target = known[name]
    except KeyError:
        raise SpecError(f"framework {name!r} is not one of: {', '.join(known)}") from None
    module_name, cls_name = target.split(":")
    backend: Backend = getattr(importlib.import_module(module_name), cls_name)()
    return backend
