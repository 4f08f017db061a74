"""Profiled trials on the Keras backends (backends/profiling.py): Keras runs on the framework
underneath (KERAS_BACKEND, set before the worker imports Keras), so its profiled trial uses that
framework's profiler and op-name mapping (backends/<framework>/profile.py); the Keras layers'
own names in the trace (TensorFlow's name scopes, torch's module calls) fall to the same rules."""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def delegate() -> ModuleType:
    """The profile module of the framework Keras runs on."""
    return importlib.import_module(f"dlbench.backends.{os.environ['KERAS_BACKEND']}.profile")
