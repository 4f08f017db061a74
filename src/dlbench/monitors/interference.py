"""The machine's own account of how busy it is, from /proc (Linux): what the interference record
of a trial is made of (analysis/interference.py says what each field means and how it is judged)
and the wait for a quiet machine before a trial (`--quiet-wait`).

Every reader takes the /proc root as an argument so that tests can give it a faked tree.
Off Linux (no /proc/stat) the readers return None and nothing is judged: `unknown`, never quiet.

`InterferenceMonitor` is the per-trial record: a companion of the memory sampler
(monitors/memory.py) that reads the machine's CPU times and the trial tree's own CPU time at the
edges of each timed window and once a second inside it (the foreign share per interval: the
series), and the run queue and the cores' clock four times a second, on the sampler's thread.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from dlbench.analysis.interference import (
    busy_foreign_share,
    CPU_FREQ_MEAN,
    CPU_FREQ_MIN,
    FOREIGN_CPU_SHARE,
    RUN_QUEUE,
    SELF_CPU_SHARE,
    STEAL_SHARE,
)

PROC = Path("/proc")
SYS_CPU = Path("/sys/devices/system/cpu")
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
    """The kernel's runnable tasks now, every process's: the fourth field of /proc/loadavg
    (`2/157`: runnable/total, the kernel's nr_running, as `procs_running` of /proc/stat), which
    is a few dozen bytes where /proc/stat grows with the CPUs and interrupts; /proc/stat where
    loadavg cannot be read."""
    try:
        return int((root / "loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        pass
    try:
        for line in (root / "stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_cpu_s(pids: Iterable[int], root: Path = PROC, waited_children: bool = False) -> float:
    """User + system CPU seconds of the given processes (a process gone meanwhile counts 0).
    Fields 14 and 15 of /proc/PID/stat, after the command name's closing parenthesis; with
    `waited_children` also 16 and 17, the CPU of the children each one has reaped: a loader
    worker or a compiler that ended inside the window leaves the tree's listing but its CPU
    moves into its parent's, so a tree counted that way loses nothing to a child's exit."""
    fields = (11, 12, 13, 14) if waited_children else (11, 12)
    total = 0.0
    for pid in pids:
        try:
            after = (root / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(after[i]) for i in fields) * TICK_S
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


def wait_quiet(limit_s: float, threshold: float | None = None, interval_s: float = 1.0,
               own_pids: Iterable[int] = (), on_wait: Callable[[float, float], None] | None = None,
               root: Path = PROC, sleep: Callable[[float], None] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> float | None:
    """Wait until other processes use at most `threshold` of the machine over one interval, at
    most `limit_s` seconds. Returns the seconds waited, or None when the limit ran out (or /proc
    cannot tell: a wait that cannot judge never says quiet). `on_wait(share, waited_s)` is told
    each busy reading, for a progress line. `threshold` defaults to the busy threshold
    (analysis/interference.py: busy_foreign_share)."""
    limit = busy_foreign_share() if threshold is None else threshold
    pids = [os.getpid(), *own_pids]
    start = clock()
    while True:
        share = busy_share_now(interval_s, pids, root, sleep)
        waited = clock() - start
        if share is None:
            return None
        if share <= limit:
            return waited
        if waited >= limit_s:
            return None
        if on_wait is not None:
            on_wait(share, waited)


# -- the cores' clock ---------------------------------------------------------------------------


class Clock:
    """The clock of the trial's cores in MHz: /sys/.../cpuN/cpufreq/scaling_cur_freq (kHz) where
    the kernel exposes it, else the `cpu MHz` lines of /proc/cpuinfo, else nothing (an ARM
    machine, a container without /sys). A virtual machine's cpuinfo states the host's nominal
    clock, not the current one: recorded as read. cpuinfo is read at most once a second (a large
    machine's is long); one sysfs file is a few dozen microseconds."""

    def __init__(self, cpus: Iterable[int], sys_cpu: Path = SYS_CPU, root: Path = PROC) -> None:
        self._cpus = set(cpus)
        self._root = root
        self._files = [f for f in (sys_cpu / f"cpu{c}" / "cpufreq" / "scaling_cur_freq" for c in sorted(self._cpus))
                       if _mhz_of_khz_file(f) is not None]
        self.source = "sysfs" if self._files else ("cpuinfo" if self._from_cpuinfo() else None)
        self.min_period_s = 1.0 if self.source == "cpuinfo" else 0.0

    def mhz(self) -> list[float]:
        """The clock of each of the trial's cores now (empty where it cannot be read)."""
        if self.source == "sysfs":
            return [v for v in map(_mhz_of_khz_file, self._files) if v is not None]
        return self._from_cpuinfo() if self.source == "cpuinfo" else []

    def _from_cpuinfo(self) -> list[float]:
        try:
            text = (self._root / "cpuinfo").read_text()
        except OSError:
            return []
        out, cpu = [], None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            try:
                if key == "processor":
                    cpu = int(value)
                elif key == "cpu MHz" and (cpu is None or cpu in self._cpus or not self._cpus):
                    out.append(float(value))
            except ValueError:
                continue
        return out


def _mhz_of_khz_file(path: Path) -> float | None:
    try:
        return int(path.read_text().strip()) / 1000.0
    except (OSError, ValueError):
        return None


# -- the per-trial record -----------------------------------------------------------------------

# The run queue and the clock are sampled this often inside a timed window; the foreign share is
# one point of the series per INTERVAL_S (USER_HZ ticks are 10 ms: a shorter interval on a few
# cores counts too few of them); the window's last interval is its own point only from
# MIN_INTERVAL_S on, else it joins the one before. The record so far goes to the snapshot file
# every SNAPSHOT_PERIOD_S, for the parent to read should the worker be killed in its window.
SAMPLE_PERIOD_S = 0.25
INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.2
SNAPSHOT_PERIOD_S = 5.0


class Tree(Protocol):
    """The trial's own processes (monitors/memory.py ProcessTree)."""

    def pids(self, fresh: bool = False) -> list[int]: ...


@dataclass(frozen=True)
class _Reading:
    t: float  # monotonic seconds
    cpu: CpuTimes
    tree_s: float  # the trial tree's CPU seconds, its reaped children's included
    parent_s: float  # the dlbench process that started the worker (it polls its events)


@dataclass
class _Span:
    """Sums over timed windows (or the part of one): wall seconds and /proc's CPU seconds."""

    wall_s: float = 0.0
    total_s: float = 0.0
    busy_s: float = 0.0
    steal_s: float = 0.0
    tree_s: float = 0.0
    parent_s: float = 0.0

    def add(self, a: _Reading, b: _Reading) -> _Span:
        return _Span(self.wall_s + b.t - a.t, self.total_s + b.cpu.total_s - a.cpu.total_s,
                     self.busy_s + b.cpu.busy_s - a.cpu.busy_s, self.steal_s + b.cpu.steal_s - a.cpu.steal_s,
                     self.tree_s + b.tree_s - a.tree_s, self.parent_s + b.parent_s - a.parent_s)

    def foreign_share(self) -> float | None:
        if self.total_s <= 0:
            return None
        return min(1.0, max(0.0, (self.busy_s - self.tree_s - self.parent_s) / self.total_s))


@dataclass
class _Open:
    """The window being timed: its first reading, the latest (where the current interval
    began), the one before (where the last point's interval began; None before the first point)
    and the series' time offset (the wall seconds of the windows before)."""

    start: _Reading
    last: _Reading
    offset_s: float
    before_last: _Reading | None = None


@dataclass
class _Samples:
    queue: list[int] = field(default_factory=list)
    mhz_mean: list[float] = field(default_factory=list)  # one mean over the trial's cores per sample
    mhz_min: float | None = None


class InterferenceMonitor:
    """How busy the machine was during the trial's timed windows (analysis/interference.py
    names and judges the fields), the record over all of them where a scenario has several.

    A companion of the memory sampler: `begin_window`/`end_window` read /proc/stat and the
    tree's CPU at the window's edges (outside the timed region: the scenario starts its clock
    after, stops it before), `tick` is called by the sampler's thread every 25 ms and does work
    only when a period is due. Measured on the 2-core machine (at load 8, so upper bounds): a
    run-queue sample (/proc/loadavg) 55-65 us, with the clock (no cpufreq there: /proc/cpuinfo,
    read once a second) 200-280 us, an interval's readings (/proc/stat and one /proc/PID/stat per
    process of the tree and the parent; the tree's listing is the memory sampler's, refreshed once
    a second anyway) 280-340 us, a tick with nothing due under 3 us: 0.7-1.0 ms a second in all,
    under 0.1 % of one core, against the memory sampler's own < 1 %."""

    def __init__(self, tree: Tree, threads: int, cpus: Iterable[int], snapshot: Path | None = None,
                 root: Path = PROC, sys_cpu: Path = SYS_CPU, clock: Callable[[], float] = time.monotonic,
                 parent_pid: int | None = None) -> None:
        self._tree = tree
        self.threads = max(int(threads), 1)
        self._root = root
        self._cores = Clock(cpus, sys_cpu, root)
        self._now = clock
        self._parent = os.getppid() if parent_pid is None else parent_pid
        self._snapshot = snapshot
        self._lock = threading.Lock()
        self._done = _Span()
        self._open: _Open | None = None
        self._samples = _Samples()
        self._last_sample = self._last_clock = self._last_snapshot = -float("inf")
        self.series: list[tuple[float, float]] = []
        self.available = cpu_times(root) is not None

    def _read(self, fresh: bool = False) -> _Reading | None:
        t = self._now()
        cpu = cpu_times(self._root)
        if cpu is None:
            return None
        return _Reading(t, cpu, process_cpu_s(self._tree.pids(fresh), self._root, waited_children=True),
                        process_cpu_s([self._parent], self._root))

    def begin_window(self) -> None:
        reading = self._read(fresh=True)
        if reading is None:
            return
        with self._lock:
            self._open = _Open(reading, reading, self._done.wall_s)
        self._sample(reading.t)

    def end_window(self) -> None:
        reading = self._read(fresh=True)
        with self._lock:
            w, self._open = self._open, None
            if w is None or reading is None:
                return
            if w.before_last is not None and reading.t - w.last.t < MIN_INTERVAL_S:
                self.series.pop()  # too short to stand alone: the last point covers it too
                self._point(w, w.before_last, reading)
            else:
                self._point(w, w.last, reading)
            self._done = self._done.add(w.start, reading)
        self._write_snapshot()

    def tick(self) -> None:
        """Called by the sampler's thread; does work only inside a window, when a period is due."""
        w = self._open
        if w is None:
            return
        now = self._now()
        if now - self._last_sample >= SAMPLE_PERIOD_S:
            self._sample(now)
        if now - w.last.t < INTERVAL_S:
            return
        reading = self._read()
        with self._lock:
            if self._open is not w or reading is None:
                return
            first = w.before_last is None
            w.before_last = w.last if self._point(w, w.last, reading) else None
            w.last = reading
        if first or now - self._last_snapshot >= SNAPSHOT_PERIOD_S:  # the first second's, then every few
            self._write_snapshot()

    def _sample(self, now: float) -> None:
        queue = procs_running(self._root)
        mhz = self._cores.mhz() if now - self._last_clock >= self._cores.min_period_s else []
        with self._lock:
            self._last_sample = now
            if queue is not None:
                self._samples.queue.append(queue)
            if mhz:
                self._last_clock = now
                self._samples.mhz_mean.append(sum(mhz) / len(mhz))
                low = min(mhz)
                self._samples.mhz_min = low if self._samples.mhz_min is None else min(self._samples.mhz_min, low)

    def _point(self, w: _Open, a: _Reading, b: _Reading) -> bool:
        share = _Span().add(a, b).foreign_share()
        if share is not None:
            self.series.append((w.offset_s + b.t - w.start.t, share))
        return share is not None

    def metrics(self) -> dict[str, float | None]:
        """The record over every window so far (an open one up to its latest reading); every
        field None where no window was measured."""
        with self._lock:
            span, w, s = self._done, self._open, self._samples
            if w is not None:
                span = span.add(w.start, w.last)
            measured = span.total_s > 0
            return {
                FOREIGN_CPU_SHARE: span.foreign_share(),
                RUN_QUEUE: sum(s.queue) / len(s.queue) if s.queue and measured else None,
                STEAL_SHARE: span.steal_s / span.total_s if measured else None,
                CPU_FREQ_MEAN: sum(s.mhz_mean) / len(s.mhz_mean) if s.mhz_mean and measured else None,
                CPU_FREQ_MIN: s.mhz_min if measured else None,
                SELF_CPU_SHARE: span.tree_s / (span.wall_s * self.threads) if span.wall_s > 0 and measured else None,
            }

    def _write_snapshot(self) -> None:
        """The record so far, replaced atomically: what the parent keeps of a worker it kills."""
        if self._snapshot is None:
            return
        self._last_snapshot = self._now()
        with self._lock:
            series = list(self.series)
        tmp = self._snapshot.with_name(self._snapshot.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"metrics": self.metrics(), "series": series}))
            os.replace(tmp, self._snapshot)
        except OSError:
            pass  # a full disk: the worker's own result still carries the record


def read_snapshot(path: Path) -> tuple[dict[str, float | None], list[tuple[float, float]]] | None:
    """A killed worker's last record (`InterferenceMonitor`'s snapshot), or None."""
    try:
        data = json.loads(path.read_text())
        metrics = {k: (None if v is None else float(v)) for k, v in data["metrics"].items()}
        series = [(float(t), float(v)) for t, v in data["series"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return metrics, series
