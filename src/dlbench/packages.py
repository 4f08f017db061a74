"""What is installed, from package metadata only: nothing is imported (ground floor)."""

from __future__ import annotations

import importlib.metadata
import importlib.util


def module_installed(module: str) -> bool:
    """True when the top-level module can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_versions(names: tuple[str, ...]) -> dict[str, str]:
    """Distribution name -> version, for those of `names` that are installed."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out
