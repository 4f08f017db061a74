"""`dlbench list`: frameworks x workloads x modes: installed? version? supported? why not?"""

from __future__ import annotations

import argparse

from rich.table import Table

from dlbench import workloads
from dlbench.backends import get_backend, precision, registered
from dlbench.backends.base import Capabilities, module_installed
from dlbench.backends.support import scenario_unsupported
from dlbench.cli.common import add_store_argument
from dlbench.machine import bf16_on_cpu
from dlbench.monitors.nvml import device_kind
from dlbench.report.terminal import make_console
from dlbench.spec import MODES, PRECISIONS, SCENARIOS
from dlbench.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("list", help="which framework x workload x mode pairs can run here, and why not")
    add_store_argument(p, unused="list reads what is installed here, not a store")


def main(args: argparse.Namespace) -> int:
    table = Table(title="frameworks x workloads x modes")
    for h in ("framework", "installed", "version", "scenarios", "workload", "mode", "supported"):
        table.add_column(h)
    for name in registered():
        backend = get_backend(name)
        ok, detail = backend.available()
        version = ", ".join(f"{k} {v}" for k, v in backend.distributions().items()) or "–"
        modes = backend.modes()
        scenarios = _scenarios(name, backend.capabilities)
        for w in workloads.WORKLOADS:
            has_impl = module_installed(f"{type(backend).__module__}.{w}")
            for mode in MODES:
                reason = modes.get(mode)
                if not has_impl:
                    reason = f"{name} has no implementation of {w!r}"
                elif not ok:
                    reason = f"not installed: pip install 'dlbench[{name}]'"
                cells = (name, "yes" if ok else f"no ({detail})", version, scenarios, w, mode,
                         "yes" if reason is None else f"no: {reason}")
                table.add_row(*map(printable, cells))  # reasons may quote an import error
    console = make_console()
    console.print(table)
    console.print(precision_table())
    for line in option_lines():
        console.print(line)
    return 0


def option_lines() -> list[str]:
    """Each framework's own options (`--option FRAMEWORK.NAME=VALUE`), one line each."""
    return [f"option {name}.{opt}: {', '.join(o.allowed)} (default {o.default}): {o.help}"
            for name in registered() for opt, o in get_backend(name).options.items()]


def precision_table() -> Table:
    """Framework x device x precision (each backend's precisions), this machine's device first."""
    here = device_kind()
    table = Table(title=f"precisions (--precision) for training; this machine: {here}; bf16 on this CPU:"
                        f" {bf16_on_cpu()}")
    for h in ("framework", "device", *PRECISIONS):
        table.add_column(h)
    devices = sorted(precision.DEVICES, key=lambda d: d != here)
    for name in registered():
        row = get_backend(name).precisions
        for device in devices:
            cells = [precision.unsupported(row, device, p) for p in PRECISIONS]
            table.add_row(name, device + (" (here)" if device == here else ""),
                          *("yes" if r is None else f"no: {r}" for r in cells))
    return table


def _scenarios(name: str, capabilities: Capabilities) -> str:
    """The scenarios the backend's capabilities allow, and why not the others."""
    reasons = {s: scenario_unsupported(name, capabilities, s) for s in SCENARIOS}
    runs = [s for s, r in reasons.items() if r is None]
    text = ", ".join(runs) or "none"
    if len(runs) < len(reasons):
        text += f" (not {', '.join(s for s in reasons if s not in runs)}: capabilities {', '.join(capabilities.names())})"
    return text
