"""The machine before a run, as pyperf's `system show` reports it: each check one finding, what
was found and what to do. `dlbench env` shows every finding; `run` and `tune` print the warnings
before the first trial and record every finding in the run's environment (`preflight`).

The checks: the load average against the cores; the CPU other processes take now (over about a
second, the biggest consumers by name, with psutil); steal time (a virtual machine's neighbours);
the frequency governor and turbo/boost where /sys exposes them; SMT (logical CPUs per core); and
whether `--threads` exceeds the cores other processes leave free. Contention is a warning (a trial
taken now would be busy: analysis/interference.py); the governor, turbo and SMT are notes (they
make timings less steady, but alike for every framework of an interleaved run).

Measuring and judging are apart: `Measurement` reads the machine (begun early, finished when the
caller is ready, so that planning overlaps the interval), `findings` is a pure function of what
it read, so that tests judge faked machines.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import psutil

from dlbench.analysis.interference import BUSY_STEAL_SHARE, busy_foreign_share
from dlbench.monitors.interference import PROC, SYS_CPU, cpu_times, foreign_share, process_cpu_s, steal_share

Level = Literal["ok", "note", "warn"]
# The interval other processes' CPU is measured over; the most consumers a finding names, and
# the least CPU (in cores) a consumer must take to be named.
INTERVAL_S = 1.0
TOP = 3
TOP_MIN_CORES = 0.05


@dataclass(frozen=True)
class Finding:
    check: str  # what was looked at: "load", "other processes", "threads", "steal", "governor", ...
    level: Level  # warn: a trial taken now would be busy; note: timings less steady; ok
    state: str  # what was found
    advice: str | None = None  # what to do about it

    def line(self) -> str:
        return f"{self.check}: {self.state}" + (f"; {self.advice}" if self.advice else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Machine:
    """What the checks read. None where this machine does not say (no /proc, no cpufreq)."""

    load_1min: float | None
    cores: int  # the CPUs dlbench's trials may use (this process's affinity mask)
    cpus: int  # the machine's online CPUs (what /proc/stat's shares are of)
    interval_s: float
    foreign_share: float | None  # other processes' CPU over the interval, a share of the machine
    steal_share: float | None  # over the interval
    steal_since_boot_s: float | None
    top: tuple[tuple[str, float], ...]  # (process name, cores used over the interval), biggest first
    governors: tuple[str, ...]  # distinct scaling governors of the CPUs (empty: not exposed)
    turbo: bool | None  # None: not exposed
    turbo_switch: str | None  # the file that turns it off
    threads_per_core: int | None


def findings(m: Machine, threads: int | None = None) -> list[Finding]:
    """One finding per check, in the order a reader acts on them (contention first)."""
    out = [_load(m), _others(m)]
    if threads is not None:
        out.append(_threads(m, threads))
    out += [f for f in (_steal(m), _governor(m), _turbo(m), _smt(m)) if f is not None]
    return out


def warnings(found: Iterable[Finding]) -> list[Finding]:
    """The findings that matter before a run: contention now."""
    return [f for f in found if f.level == "warn"]


def _load(m: Machine) -> Finding:
    if m.load_1min is None:
        return Finding("load", "note", "no load average on this system")
    state = f"load average {m.load_1min:.1f} over the last minute on {m.cpus} CPUs"
    if m.load_1min > m.cpus:
        # a minute's average, recent work of dlbench's own included: a warning only where the
        # CPU other processes take now cannot be measured (that check says it otherwise)
        return Finding("load", "note" if m.foreign_share is not None else "warn",
                       state + ": more runnable tasks than CPUs",
                       "work that shares the CPU makes trials slower and noisier; let it finish, or run with"
                       " --quiet-wait (e.g. --quiet-wait 10min)")
    if m.load_1min > m.cpus / 2:
        return Finding("load", "note", state, "recent work (the minute's average, this command's own included)")
    return Finding("load", "ok", state)


def _others(m: Machine) -> Finding:
    if m.foreign_share is None:
        return Finding("other processes", "note", "not measurable here (no /proc/stat): trials record interference"
                       " as unknown")
    names = ", ".join(f"{name} {cores:.1f} cores" for name, cores in m.top)
    state = (f"other processes took {m.foreign_share:.0%} of the CPU over the last {m.interval_s:.1f} s"
             + (f" ({names})" if names else ""))
    if m.foreign_share > busy_foreign_share():
        return Finding("other processes", "warn", state,
                       f"over the busy threshold ({busy_foreign_share():.0%}): trials taken now are marked busy and kept"
                       " out of verdicts; stop them, or run with --quiet-wait DURATION to wait before each trial")
    return Finding("other processes", "ok", state)


def _threads(m: Machine, threads: int) -> Finding:
    busy_cores = (m.foreign_share or 0.0) * m.cpus
    free = max(min(m.cores, m.cpus - busy_cores), 0.0)
    state = f"--threads {threads}; other processes leave about {free:.1f} of {m.cores} cores free"
    if threads > free + 0.5:
        return Finding("threads", "warn", state,
                       f"the trial's threads would wait for the CPU (OpenMP pools that spin lose most): use --threads"
                       f" {max(int(free + 0.5), 1)} or wait for a quiet machine (--quiet-wait)")
    return Finding("threads", "ok", state)


def _steal(m: Machine) -> Finding | None:
    if m.steal_share is not None and m.steal_share > BUSY_STEAL_SHARE:
        return Finding("steal", "warn", f"the hypervisor gave {m.steal_share:.0%} of this VM's CPU time to others"
                       f" over the last {m.interval_s:.1f} s",
                       "timings vary with the VM's neighbours: trials taken now are marked busy; a dedicated host"
                       " or a quieter time")
    if m.steal_since_boot_s:
        return Finding("steal", "note", "a virtual machine (steal time counted since boot)",
                       "its neighbours can take CPU time at any moment: every trial records the steal it saw")
    return None


def _governor(m: Machine) -> Finding:
    if not m.governors:
        return Finding("governor", "note", "not exposed here (a VM or a container)",
                       "every trial records the clock its cores ran at, where readable")
    state = f"CPU frequency governor {'/'.join(m.governors)}"
    if m.governors != ("performance",):
        return Finding("governor", "note", state, "for steadier clocks: sudo cpupower frequency-set -g performance"
                       " (pyperf system tune does the same)")
    return Finding("governor", "ok", state)


def _turbo(m: Machine) -> Finding | None:
    if m.turbo is None:
        return None
    if m.turbo:
        return Finding("turbo", "note", "turbo boost on: the clock rises and falls with temperature and load",
                       f"for steadier timings turn it off: {m.turbo_switch}")
    return Finding("turbo", "ok", "turbo boost off")


def _smt(m: Machine) -> Finding | None:
    if m.threads_per_core is None:
        return None
    if m.threads_per_core > 1:
        return Finding("smt", "note", f"SMT on: {m.threads_per_core} logical CPUs per core",
                       "--threads counts logical CPUs; two threads on one core share its units")
    return Finding("smt", "ok", "SMT off: one logical CPU per core")


# -- reading the machine -----------------------------------------------------------------------------


class Measurement:
    """Begun now, finished later: other processes' CPU between the two (psutil, every process
    outside this one's tree), the machine's CPU times, and the rest read at the finish."""

    def __init__(self, root: Path = PROC, sys_cpu: Path = SYS_CPU, clock: Callable[[], float] = time.monotonic) -> None:
        self._root, self._sys, self._clock = root, sys_cpu, clock
        self._t0 = clock()
        self._cpu0 = cpu_times(root)
        self._own0 = process_cpu_s(_own_pids(), root)
        self._procs0 = _process_cpu()

    def finish(self, min_interval_s: float = INTERVAL_S, sleep: Callable[[float], None] = time.sleep) -> Machine:
        """The machine, measured over at least `min_interval_s` since the start (sleeping the rest)."""
        left = min_interval_s - (self._clock() - self._t0)
        if left > 0:
            sleep(left)
        interval = self._clock() - self._t0
        cpu1, own1 = cpu_times(self._root), process_cpu_s(_own_pids(), self._root)
        top = _top(self._procs0, _process_cpu(), interval)
        turbo, switch = read_turbo(self._sys)
        both = self._cpu0 is not None and cpu1 is not None
        return Machine(
            load_1min=_load_1min(), cores=len(os.sched_getaffinity(0)),
            cpus=cpu1.cpus if cpu1 is not None else (os.cpu_count() or 1), interval_s=interval,
            foreign_share=foreign_share(self._cpu0, cpu1, own1 - self._own0) if both else None,  # type: ignore[arg-type]
            steal_share=steal_share(self._cpu0, cpu1) if both else None,  # type: ignore[arg-type]
            steal_since_boot_s=cpu1.steal_s if cpu1 is not None else None,
            top=top, governors=read_governors(self._sys), turbo=turbo, turbo_switch=switch,
            threads_per_core=read_threads_per_core(self._sys))


def check(threads: int | None = None, interval_s: float = INTERVAL_S) -> list[Finding]:
    """Measure now (over `interval_s`) and judge."""
    return findings(Measurement().finish(interval_s), threads)


def _load_1min() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _own_pids() -> list[int]:
    """This process and its descendants: dlbench's own work is not another process's."""
    me = psutil.Process()
    try:
        return [me.pid, *(p.pid for p in me.children(recursive=True))]
    except psutil.Error:
        return [me.pid]


def _process_cpu() -> dict[int, tuple[str, float]]:
    """pid -> (name, user + system CPU seconds) of every process this user may read."""
    own = set(_own_pids())
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        times = p.info.get("cpu_times")
        if p.pid in own or times is None:
            continue
        out[p.pid] = (str(p.info.get("name") or p.pid), times.user + times.system)
    return out


def _top(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
         interval_s: float) -> tuple[tuple[str, float], ...]:
    """The biggest consumers over the interval by process name (a build's many cc1plus are one),
    in cores; a process that started in between counts from zero."""
    if interval_s <= 0:
        return ()
    by_name: dict[str, float] = {}
    for pid, (name, cpu_s) in after.items():
        used = cpu_s - before.get(pid, (name, 0.0))[1]
        if used > 0:
            by_name[name] = by_name.get(name, 0.0) + used / interval_s
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1])
    return tuple((name, cores) for name, cores in ranked[:TOP] if cores >= TOP_MIN_CORES)


def read_governors(sys_cpu: Path = SYS_CPU) -> tuple[str, ...]:
    found: dict[str, None] = {}
    for path in sorted(sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            found[path.read_text().strip()] = None
        except OSError:
            continue
    return tuple(found)


def read_turbo(sys_cpu: Path = SYS_CPU) -> tuple[bool | None, str | None]:
    """(turbo on?, the command that turns it off): intel_pstate's no_turbo, else the cpufreq
    `boost` switch (acpi-cpufreq, amd-pstate); (None, None) where neither is exposed."""
    for path, on_when, off in ((sys_cpu / "intel_pstate" / "no_turbo", "0", "1"),
                               (sys_cpu / "cpufreq" / "boost", "1", "0")):
        try:
            value = path.read_text().strip()
        except OSError:
            continue
        return value == on_when, f"echo {off} | sudo tee {path}"
    return None, None


def read_threads_per_core(sys_cpu: Path = SYS_CPU) -> int | None:
    """Logical CPUs per core, from cpu0's thread siblings (`0-1`, `0,4`, `0`)."""
    try:
        text = (sys_cpu / "cpu0" / "topology" / "thread_siblings_list").read_text().strip()
    except OSError:
        return None
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        try:
            count += int(high) - int(low) + 1 if high else 1
        except ValueError:
            return None
    return count or None

