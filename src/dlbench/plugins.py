"""Plugins: workloads and backends from installed packages, found through entry points (ground
floor: imports nothing of dlbench but the spec's error type).

A distribution registers a workload with an entry point in the group `dlbench.workloads`
(`lstm = dlbench_lstm.workload`, a module) and a backend in `dlbench.backends`
(`mlx = dlbench_mlx:MlxBackend`, a class). Discovery reads package metadata only
(importlib.metadata); a plugin is imported when its name is asked for, never before, so a
broken plugin costs nothing to the commands that do not use it. Every failure of a plugin is a
`PluginError`: one line naming the plugin (its distribution and version) and what is wrong,
which the CLI prints with exit 2 (docs/plugins.md).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from dlbench.spec import SpecError

WORKLOAD_GROUP = "dlbench.workloads"
BACKEND_GROUP = "dlbench.backends"

T = TypeVar("T")
# The cache_clear of every cache over discovered plugins (`cached`), for `forget`.
_CACHES: list[Callable[[], None]] = []


class PluginError(SpecError):
    """A plugin that cannot be used (clashes with a name, fails to import, breaks the
    contract); the message is one line that names it."""


@dataclass(frozen=True)
class Origin:
    """Where a workload or backend comes from: dlbench itself, or an installed distribution's
    entry point. Recorded with every trial (runner/executor.py) and shown by `list` and the
    report."""

    distribution: str | None = None  # None: built into dlbench
    version: str | None = None
    entry_point: str | None = None  # `lstm = dlbench_lstm.workload`

    @property
    def builtin(self) -> bool:
        return self.distribution is None

    def text(self) -> str:
        """`built-in`, or `plugin dlbench-lstm 0.1.0`."""
        return "built-in" if self.distribution is None else f"plugin {self.distribution} {self.version}"

    def to_dict(self) -> dict[str, str | None]:
        return {"source": "built-in" if self.builtin else "plugin", "distribution": self.distribution,
                "version": self.version, "entry_point": self.entry_point}


BUILTIN = Origin()


@dataclass(frozen=True)
class Entry:
    """One entry point of a plugin group: `name = value` from a distribution."""

    group: str
    name: str
    value: str  # `package.module` or `package.module:attribute`
    origin: Origin

    def describe(self) -> str:
        """`plugin dlbench-lstm 0.1.0 (dlbench.workloads: lstm = dlbench_lstm.workload)`."""
        return f"{self.origin.text()} ({self.group}: {self.name} = {self.value})"

    def load(self) -> Any:
        """The module (or the attribute after the colon); any exception the plugin raises on
        import becomes a PluginError naming it."""
        module_name, _, attribute = self.value.partition(":")
        try:
            target: Any = importlib.import_module(module_name.strip())
            for part in filter(None, attribute.strip().split(".")):
                target = getattr(target, part)
        except BaseException as e:  # noqa: B036 -- a plugin may raise anything on import
            # sys.exit(), KeyboardInterrupt or a BaseException subclass raised by the plugin's own
            # code would otherwise end every command that loads plugins, silently or with the
            # plugin's exit code: it is the plugin's failure, one line, like any other. (A real
            # Ctrl-C landing during a plugin's import is reported the same way, exit 2.)
            raise PluginError(f"{self.describe()} failed to import: {_described(e)}") from None
        return target


def _described(e: BaseException) -> str:
    """`SystemExit: exit code 3` rather than a bare `SystemExit: 3`."""
    if isinstance(e, SystemExit):
        return f"SystemExit: it called sys.exit({e.code!r}) at import"
    return f"{type(e).__name__}: {first_line(e)}"


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (a plugin's may run over several)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else "(no message)"


def cached(fn: Callable[..., T]) -> Callable[..., T]:
    """functools.cache over something derived from the installed plugins, dropped by `forget`.
    A call that raises is not cached: a broken plugin is reported each time it is asked for."""
    wrapped = functools.cache(fn)
    _CACHES.append(wrapped.cache_clear)
    return wrapped


@cached
def entries(group: str) -> tuple[Entry, ...]:
    """Every entry point of `group` in the installed distributions, from their metadata only."""
    found = []
    for ep in importlib.metadata.entry_points(group=group):
        dist = ep.dist
        name = dist.metadata["Name"] if dist is not None else None
        origin = Origin(name or "unknown distribution", dist.version if dist is not None else "?",
                        f"{ep.name} = {ep.value}")
        found.append(Entry(group, ep.name, ep.value, origin))
    return tuple(found)


def named(group: str, name: str) -> list[Entry]:
    """The entries of `group` called `name` (more than one is a clash between plugins)."""
    return [e for e in entries(group) if e.name == name]


Status = list[tuple[str, Origin, str | None]]


def status(group: str, check: Callable[[str], object]) -> Status:
    """Every entry point of `group`: (name, origin, None when `check(name)` passes, else its
    one-line reason), for `dlbench list`."""
    out: Status = []
    for entry in entries(group):
        try:
            check(entry.name)
            out.append((entry.name, entry.origin, None))
        except SpecError as e:
            out.append((entry.name, entry.origin, str(e)))
    return out


def forget() -> None:
    """Drop everything cached over the installed plugins (the tests install and remove plugins
    in one process)."""
    for clear in _CACHES:
        clear()
