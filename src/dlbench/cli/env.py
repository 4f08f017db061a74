"""`dlbench env`: machine, OS, Python, CPU, RAM, GPU/driver, framework versions, and the
pre-flight checks a run makes (monitors/preflight.py): load, other processes' CPU, steal,
governor, turbo, SMT, each with what to do."""

from __future__ import annotations

import argparse
import json
import os

from rich.table import Table
from rich.text import Text

from dlbench.backends import installed
from dlbench.machine import bf16_on_cpu, fp16_on_cpu
from dlbench.cli.common import add_store_argument
from dlbench.monitors import preflight
from dlbench.report.terminal import make_console
from dlbench.results.environment import capture
from dlbench.runner.bandwidth import bandwidth, describe
from dlbench.runner.ceiling import ceiling
from dlbench.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("env", help="show the machine and the installed frameworks")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_store_argument(p, unused="env describes this machine, not a store")


def _add_row(table: Table, key: str, value: str) -> None:
    """Driver names, package versions and git output are shown, never obeyed by the terminal."""
    table.add_row(key, printable(value))


def main(args: argparse.Namespace) -> int:
    measuring = preflight.Measurement()  # other processes' CPU, measured while the rest is read
    env = capture(installed())
    threads = len(os.sched_getaffinity(0))
    env["matmul_ceiling"] = ceiling(threads)[0]
    env["memory_bandwidth"] = bandwidth(threads)[0]
    found = preflight.findings(measuring.finish())
    env["preflight"] = [f.to_dict() for f in found]
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    table = Table(title="environment", show_header=False)
    table.add_column("key")
    table.add_column("value")
    for key in ("os", "python", "cpu_model", "dlbench", "git_commit"):
        _add_row(table, key, str(env[key]))
    _add_row(table, "cpu_isa", " ".join(env["cpu_isa"]) or "–")
    _add_row(table, "cpu bf16 / fp16", f"{bf16_on_cpu()} / {fp16_on_cpu()}")
    _add_row(table, "cpus", f"{env['cpu_logical']} logical, {env['cpu_physical']} physical, "
             f"{env['cpu_affinity']} in this process's affinity mask")
    _add_row(table, "ram", f"{env['ram_bytes'] / 1024**3:.1f} GiB")
    gpu = env["gpu"]
    gpus = ", ".join(g["name"] for g in gpu["gpus"]) or f"none ({gpu.get('reason', '')})"
    _add_row(table, "gpus", gpus + (f", driver {gpu['driver']}" if gpu.get("driver") else ""))
    _add_row(table, "packages", ", ".join(f"{k} {v}" for k, v in env["packages"].items()))
    for name, fw in env["frameworks"].items():
        dists = ", ".join(f"{k} {v}" for k, v in fw["distributions"].items())
        _add_row(table, name, dists if fw["installed"] else f"not installed ({fw['detail']})")
    data, why = ceiling(threads)
    _add_row(table, "matmul ceiling", f"{data['flops_per_s'] / 1e9:.1f} GFLOP/s float32 ({data['library']},"
             f" {data['threads']} threads, {data['size']}^2 GEMM, cached)" if data else why)
    measured, why = bandwidth(threads)
    _add_row(table, "memory bandwidth", f"{describe(measured)}, cached" if measured else why)
    console = make_console()
    console.print(table)
    console.print(preflight_table(found))
    return 0


LEVEL_STYLE = {"ok": "green", "note": "yellow", "warn": "bold red"}


def preflight_table(found: list[preflight.Finding]) -> Table:
    """One row per check: what was found and what to do (pyperf's `system show`)."""
    table = Table(title="pre-flight (what `dlbench run` checks before its first trial)")
    for name in ("check", "", "found", "what to do"):
        table.add_column(name)
    for f in found:
        table.add_row(f.check, Text(f.level, style=LEVEL_STYLE[f.level]), printable(f.state), printable(f.advice or ""))
    return table
