"""`dlbench env`: machine, OS, Python, CPU, RAM, GPU/driver, framework versions."""

from __future__ import annotations

import argparse
import json
import os

from rich.table import Table

from dlbench.backends import installed
from dlbench.report.terminal import make_console
from dlbench.results.environment import capture
from dlbench.runner.ceiling import ceiling


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("env", help="show the machine and the installed frameworks")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def main(args: argparse.Namespace) -> int:
    env = capture(installed())
    env["matmul_ceiling"] = ceiling(len(os.sched_getaffinity(0)))[0]
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    table = Table(title="environment", show_header=False)
    table.add_column("key")
    table.add_column("value")
    for key in ("os", "python", "cpu_model", "dlbench", "git_commit"):
        table.add_row(key, str(env[key]))
    table.add_row("cpu_isa", " ".join(env["cpu_isa"]) or "–")
    table.add_row("cpus", f"{env['cpu_logical']} logical, {env['cpu_physical']} physical, "
                  f"{env['cpu_affinity']} in this process's affinity mask")
    table.add_row("ram", f"{env['ram_bytes'] / 1024**3:.1f} GiB")
    gpu = env["gpu"]
    gpus = ", ".join(g["name"] for g in gpu["gpus"]) or f"none ({gpu.get('reason', '')})"
    table.add_row("gpus", gpus + (f", driver {gpu['driver']}" if gpu.get("driver") else ""))
    table.add_row("packages", ", ".join(f"{k} {v}" for k, v in env["packages"].items()))
    for name, fw in env["frameworks"].items():
        dists = ", ".join(f"{k} {v}" for k, v in fw["distributions"].items())
        table.add_row(name, dists if fw["installed"] else f"not installed ({fw['detail']})")
    data, why = ceiling(len(os.sched_getaffinity(0)))
    table.add_row("matmul ceiling", f"{data['flops_per_s'] / 1e9:.1f} GFLOP/s float32 ({data['library']},"
                  f" {data['threads']} threads, {data['size']}^2 GEMM, cached)" if data else why)
    make_console().print(table)
    return 0
