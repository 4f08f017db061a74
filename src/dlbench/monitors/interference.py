"""The machine's own account of how busy it is, from /proc (Linux): what the interference record
of a trial is made of (analysis/interference.py says what each field means and how it is judged)
and the wait for a quiet machine before a trial (`--quiet-wait`).

Every reader takes the /proc root as an argument so that tests can give it a faked tree.
Off Linux (no /proc/stat) the readers return None and nothing is judged: `unknown`, never quiet.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dlbench.analysis.interference import BUSY_FOREIGN_SHARE

PROC = Path("/proc")
# /proc/stat and /proc/PID/stat count in clock ticks (USER_HZ).
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate `cpu` line of /proc/stat, in seconds summed over every CPU. `busy` is
    everything but idle, iowait and steal (guest time is already inside user and nice)."""

    busy_s: float
    idle_s: float
    steal_s: float
    cpus: int

    @property
    def total_s(self) -> float:
        return self.busy_s + self.idle_s + self.steal_s


def cpu_times(root: Path = PROC) -> CpuTimes | None:
    """The machine's CPU times now, or None where /proc/stat cannot be read."""
    try:
        lines = (root / "stat").read_text().splitlines()
    except OSError:
        return None
    fields: list[float] = []
    cpus = 0
    for line in lines:
        if line.startswith("cpu "):
            fields = [float(v) * TICK_S for v in line.split()[1:]]
        elif line.startswith("cpu") and line[3:4].isdigit():
            cpus += 1
    if len(fields) < 4 or not cpus:
        return None
    user, nice, system, idle = fields[:4]
    iowait, irq, softirq, steal = (fields[4:8] + [0.0] * 4)[:4]
    return CpuTimes(busy_s=user + nice + system + irq + softirq, idle_s=idle + iowait, steal_s=steal, cpus=cpus)


def procs_running(root: Path = PROC) -> int | None:
    """The kernel's runnable tasks now (`procs_running` of /proc/stat), every process's."""
    try:
        for line in (root / "stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_cpu_s(pids: Iterable[int], root: Path = PROC) -> float:
    """User + system CPU seconds of the given processes (a process gone meanwhile counts 0).
    Fields 14 and 15 of /proc/PID/stat, after the command name's closing parenthesis."""
    total = 0.0
    for pid in pids:
        try:
            after = (root / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(after[11]) + int(after[12])) * TICK_S
        except (OSError, IndexError, ValueError):
            continue
    return total


def foreign_share(before: CpuTimes, after: CpuTimes, own_cpu_s: float) -> float | None:
    """The share of the machine's capacity between two readings that went to processes other
    than those whose CPU seconds `own_cpu_s` counts: (busy - own) / (elapsed x CPUs), where
    elapsed comes from the readings themselves (their total over the CPU count)."""
    total = after.total_s - before.total_s
    if total <= 0:
        return None
    busy = after.busy_s - before.busy_s
    return min(1.0, max(0.0, (busy - own_cpu_s) / total))


def steal_share(before: CpuTimes, after: CpuTimes) -> float | None:
    total = after.total_s - before.total_s
    return None if total <= 0 else max(0.0, (after.steal_s - before.steal_s) / total)


def busy_share_now(interval_s: float = 1.0, own_pids: Iterable[int] = (), root: Path = PROC,
                   sleep: Callable[[float], None] = time.sleep) -> float | None:
    """How much of the machine other processes (not `own_pids`) used over the next
    `interval_s`: the foreign share, measured now. None where /proc cannot tell."""
    pids = list(own_pids)
    before, own_before = cpu_times(root), process_cpu_s(pids, root)
    sleep(interval_s)
    after, own_after = cpu_times(root), process_cpu_s(pids, root)
    if before is None or after is None:
        return None
    return foreign_share(before, after, own_after - own_before)


def wait_quiet(limit_s: float, threshold: float = BUSY_FOREIGN_SHARE, interval_s: float = 1.0,
               own_pids: Iterable[int] = (), on_wait: Callable[[float, float], None] | None = None,
               root: Path = PROC, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> float | None:
    """Wait until other processes use at most `threshold` of the machine over one interval, at
    most `limit_s` seconds. Returns the seconds waited, or None when the limit ran out (or /proc
    cannot tell: a wait that cannot judge never says quiet). `on_wait(share, waited_s)` is told
    each busy reading, for a progress line."""
    pids = [os.getpid(), *own_pids]
    start = clock()
    while True:
        share = busy_share_now(interval_s, pids, root, sleep)
        waited = clock() - start
        if share is None:
            return None
        if share <= threshold:
            return waited
        if waited >= limit_s:
            return None
        if on_wait is not None:
            on_wait(share, waited)
