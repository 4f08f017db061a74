"""The machine's quiet, for `run` and `tune`: the pre-flight they print and record before the
first trial (monitors/preflight.py) and `--quiet-wait DURATION`, the wait for a quiet machine
before each trial (the spec's `quiet_wait_s`; runner/spawn.py waits)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from dlbench.analysis import interference, repeats
from dlbench.cli.common import UsageError
from dlbench.monitors import preflight
from dlbench.text import printable, shown


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quiet-wait", metavar="DURATION",
                   help="before each trial, wait until other processes take at most"
                        f" {interference.busy_foreign_share() * 100:.0f}%% of the CPU, for at most DURATION (e.g. 90s,"
                        " 10min); the wait is recorded with the trial, which runs anyway when it runs out")


def wait_s(value: str | float | None) -> float | None:
    """--quiet-wait (or a suite's `quiet-wait`: a duration, or a number of seconds) in seconds."""
    if value is None or isinstance(value, (int, float)):
        return value
    seconds = repeats.duration_s(value)
    if seconds is None:
        raise UsageError(f"--quiet-wait {shown(value)} is not a duration such as 90s, 10min or 1h, up to a week")
    return seconds


def measure() -> preflight.Measurement:
    """Begin the pre-flight's measurement (finished by `record_preflight`, after the planning)."""
    return preflight.Measurement()


def record_preflight(console: Console, measuring: preflight.Measurement, threads: int | None) -> list[dict[str, Any]]:
    """The pre-flight findings, measured since `measuring` began; the warnings printed, one
    line each; every finding returned, for the run's environment (`preflight`)."""
    found = preflight.findings(measuring.finish(), threads)
    for f in preflight.warnings(found):
        console.print(printable(f"  pre-flight: {f.line()}"), style="yellow", highlight=False, soft_wrap=True)
    return [f.to_dict() for f in found]
