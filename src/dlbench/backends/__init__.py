"""Backend registry. Importing a backend package is light: frameworks load only in the worker.

Adding a framework is one package under backends/ and one line here. Out-of-tree backends come
from installed plugins (entry points in the group `dlbench.backends`: `name = module:Class`,
docs/plugins.md) or from DLBENCH_BACKENDS="name=module:Class,..." (the test suite's fake one).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from dlbench import plugins
from dlbench.backends.base import Backend, Capabilities
from dlbench.plugins import BACKEND_GROUP, BUILTIN, Origin, PluginError
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
    "litert": "dlbench.backends.litert:LiteRTBackend",
}
# The frameworks a sweep runs when it names none (`dlbench run`'s default, runner/plan.py: Sweep).
DEFAULT_FRAMEWORKS = ("torch", "tensorflow", "jax")
# Framework-neutral baselines a scenario's record names (dlbench/scenarios.py: Scenario.baseline):
# backends like the others for the trials the plan adds for them, but no framework a user picks,
# so `-f`, `-f all` and `dlbench list` (which read `registered()`) leave them out.
BASELINES: dict[str, str] = {
    "scipy": "dlbench.backends.scipy:ScipyBackend",
}
# Frameworks that can compute the float64 parity reference, in order of preference: JAX's
# implementations use the canonical layouts natively (nothing permuted), torch's need conversions.
# DLBENCH_REFERENCE_FRAMEWORK names another (it must implement float64).
REFERENCE_PREFERENCE = ("jax", "torch")


def registered() -> dict[str, str]:
    """The built-in backends, then the plugins' that load (a broken or clashing one is left out:
    `check` and `dlbench list` say why), then those named in DLBENCH_BACKENDS (which win: a
    test's stand-in)."""
    usable = {name for name, _, why in plugin_status() if why is None}
    found = {e.name: e.value for e in plugins.entries(BACKEND_GROUP) if e.name in usable}
    return {**REGISTRY, **found, **_environment_backends()}


def _environment_backends() -> dict[str, str]:
    """DLBENCH_BACKENDS="name=module:Class,...": name -> target."""
    extra = {}
    for item in filter(None, os.environ.get("DLBENCH_BACKENDS", "").split(",")):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise SpecError(f"DLBENCH_BACKENDS entry {item!r} is not of the form name=module:Class")
        extra[name.strip()] = target.strip()
    return extra


def get_backend(name: str) -> Backend:
    """The backend registered as `name` (a built-in one wins over a plugin of the same name:
    `check` refuses that name, `dlbench list` shows the clash)."""
    if name in _plugin_names() and name not in _environment_backends() and name not in REGISTRY \
            and name not in BASELINES:
        checked: Backend = type(_plugin_backend(name))()  # a fresh instance, as for the others
        return checked
    known = registered()
    try:
        target = known[name] if name in known else BASELINES[name]
    except KeyError:
        raise SpecError(f"framework {name!r} is not one of: {', '.join(known)}") from None
    module_name, cls_name = target.split(":")
    backend: Backend = getattr(importlib.import_module(module_name), cls_name)()
    return backend


def origin(name: str) -> Origin:
    """Built into dlbench (or named by DLBENCH_BACKENDS), or the plugin distribution that
    registers the framework."""
    found = plugins.named(BACKEND_GROUP, name)
    builtin = name in REGISTRY or name in BASELINES or name in _environment_backends()
    return found[0].origin if found and not builtin else BUILTIN


def check(name: str) -> None:
    """What the CLI asks of a framework name given to it: known, and not one that a plugin
    registers broken or clashing with a built-in. Raises SpecError or PluginError, one line."""
    if name in _plugin_names() and name not in _environment_backends():
        _plugin_backend(name)
    elif name not in registered():
        raise SpecError(f"framework {name!r} is not one of: {', '.join(registered())}")


def plugin_status() -> plugins.Status:
    """Every backend entry point installed: (name, origin, None when usable, else the one-line
    reason), for `dlbench list`."""
    return plugins.status(BACKEND_GROUP, _plugin_backend)


def _plugin_names() -> set[str]:
    return {e.name for e in plugins.entries(BACKEND_GROUP)}


@plugins.cached
def _plugin_backend(name: str) -> Backend:
    """The plugin's backend, instantiated and held to the light part of the contract (data on
    the class that the parent reads without importing a framework)."""
    found = plugins.named(BACKEND_GROUP, name)
    if name in REGISTRY:
        raise PluginError(f"{found[0].describe()} clashes with the built-in framework {name!r}: rename its entry point")
    if len(found) > 1:
        raise PluginError(f"framework {name!r} is registered by several plugins"
                          f" ({'; '.join(e.describe() for e in found)}): uninstall all but one")
    entry = found[0]
    cls = entry.load()
    try:
        backend: Backend = cls()
        ok = isinstance(backend.capabilities, Capabilities) and isinstance(backend.options, dict)
        if ok:
            available, detail = backend.available()
            ok = isinstance(available, bool) and isinstance(detail, str) and isinstance(backend.modes(), dict)
    except BaseException as e:  # noqa: B036 -- the plugin's own code (sys.exit too): one line
        raise PluginError(f"{entry.describe()} breaks the backend contract: {type(e).__name__}: {plugins.first_line(e)}") from None
    if not ok:
        raise PluginError(f"{entry.describe()} breaks the backend contract: capabilities, options, available() or"
                          " modes() are not what backends/base.py: Backend declares")
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
