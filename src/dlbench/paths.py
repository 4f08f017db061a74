"""Where dlbench keeps files of its own (ground floor: imports nothing of dlbench).

One cache directory holds the float64 parity references, ONNX exports and the warm compile
cache: DLBENCH_CACHE_DIR when set, else $XDG_CACHE_HOME/dlbench (~/.cache/dlbench).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_base() -> Path:
    """dlbench's cache directory: DLBENCH_CACHE_DIR, else $XDG_CACHE_HOME/dlbench."""
    base = os.environ.get("DLBENCH_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlbench"


def reference_cache() -> Path:
    """The float64 parity references (runner/reference.py)."""
    return cache_base() / "reference"


def warm_compile_cache(framework: str) -> Path:
    """The shared compile cache of one framework under `compile_cache = "warm"`."""
    return cache_base() / "compile-cache" / framework
