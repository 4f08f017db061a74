"""Backend registry. Importing a backend package is light: frameworks load only in the worker.

Adding a framework is one package under backends/ and one line here. Out-of-tree backends (and
the test suite's fake one) register through DLBENCH_BACKENDS="name=module:Class,...".
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from dlbench.backends.base import Backend
from dlbench.spec import SpecError

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
# Frameworks that can compute the float64 parity reference, in order of preference: JAX's
# implementations use the canonical layouts natively (nothing permuted), torch's need conversions.
# DLBENCH_REFERENCE_FRAMEWORK names another (it must implement float64).
REFERENCE_PREFERENCE = ("jax", "torch")


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


def installed() -> dict[str, dict[str, Any]]:
    """Every registered framework: installed?, the detail (version or what is missing) and its
    distributions' versions, from package metadata (no framework is imported)."""
    out = {}
    for name in registered():
        backend = get_backend(name)
        ok, detail = backend.available()
        out[name] = {"installed": ok, "detail": detail, "distributions": backend.distributions()}
    return out
