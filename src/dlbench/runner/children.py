"""The parent's one way to start, watch and stop a child process (pyperf's `_manager.py` keeps
one `spawn_worker` and one killer; so does dlbench). Every Python child dlbench starts goes
through here: a trial's worker (runner/spawn.py), the numerical probe (runner/probe_client.py),
the untimed warm import (runner/warm.py), the matmul-ceiling measurement (runner/ceiling.py) and
the contract's program child (testing/program.py).

Each child is `python -m MODULE ARGS`, never a `-c` code string, and:
- leads a new session and process group, so its helpers (loader workers, compiler daemons) go
  with it when the group is killed;
- dies with the thread that started it (PR_SET_PDEATHSIG, processes.die_with_parent);
- carries a cookie in its environment (`DLBENCH_CHILD=<random token>`) that every descendant
  inherits, so one that left the group (a plugin's `setsid`, a daemon's double fork) is still
  found and killed with it (Jenkins' ProcessTreeKiller finds a build's processes by its
  BUILD_ID variable the same way; a process that clears its own environment escapes both);
- writes stdout and stderr to a log file, of which the parent only ever reads the last
  TAIL_CHARS characters: a worker printing a gigabyte costs disk in the scratch directory,
  never the parent's memory (the parent is outside --memory-limit).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlbench import processes
from dlbench.monitors.memory import ProcessTree

COOKIE_VAR = "DLBENCH_CHILD"
TAIL_CHARS = 2000
POLL_S = 0.1
# The watchdog re-lists the child's descendants once a second (a /proc walk: 2.8 ms with 117
# processes here); each poll between reads the known processes' RSS only (18 us). Together
# about 0.3 % of one core beside a trial's timed window, as much as the worker's own sampler.
TREE_REFRESH_S = 1.0
KILL_WAIT_S = 5.0

# Called every poll while a child runs; True means "progress": the timeout starts again (the
# probe's limit applies to each workload it probes, not to all of them together).
PollCallback = Callable[[], bool]


@dataclass
class Watched:
    """What the parent saw while the child ran."""

    killed_for: str | None = None  # "timeout", "oom" or "interrupted": the parent killed it
    rss_peak_bytes: int = 0  # the child's process tree, sampled every POLL_S
    signal_name: str = "SIGINT"  # what interrupted the parent, for "interrupted"


@dataclass
class Child:
    """A started child: its Popen, where its output goes, and the cookie its descendants carry."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    cookie: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def exited(self) -> bool:
        """Has the child exited? Checked without reaping it: while the leader is a zombie its
        pid, and so its process group id, cannot be reused, so killing the group kills only
        ours."""
        if self.proc.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # already reaped
            return True

    def kill(self) -> list[int]:
        """Kill the child, its process group and every process carrying its cookie (those that
        left the group), then reap it. Safe to call more than once; returns the cookie
        holders killed outside the group."""
        escaped = [p for p in cookie_holders(self.cookie) if p.pid != self.proc.pid]
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for p in escaped:
            try:
                p.kill()
            except psutil.Error:
                pass
        self.proc.wait()
        psutil.wait_procs(escaped, timeout=KILL_WAIT_S)
        return [p.pid for p in escaped]

    def tail(self, chars: int = TAIL_CHARS) -> str:
        """The last `chars` characters of the child's output, read from the end of its log
        (never the whole file)."""
        return read_tail(self.log_path, chars)


def start_child(module: str, args: Sequence[str], log_path: Path, env: dict[str, str] | None = None,
                interpreter: str | None = None, cpus: Sequence[int] | None = None) -> Child:
    """Start `interpreter -m module args...` (default: this Python) in a session of its own, with
    `env` added to this process's environment and its output appended to `log_path`; pinned to
    `cpus` (before its libraries start their thread pools) when given."""
    cookie = secrets.token_hex(8)
    full_env = {**os.environ, **(env or {}), COOKIE_VAR: cookie}
    die = processes.die_with_parent()
    pin = list(cpus) if cpus is not None else None

    def preexec() -> None:
        if die is not None:
            die()
        if pin is not None:
            os.sched_setaffinity(0, pin)

    cmd = [interpreter or sys.executable, "-m", module, *args]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=full_env, start_new_session=True, preexec_fn=preexec)
    return Child(proc, log_path, cookie)


def watch(child: Child, watched: Watched, timeout_s: float, memory_limit_bytes: int | None = None,
          on_poll: PollCallback | None = None) -> None:
    """Poll until the child exits; kill it past the timeout (counted from the start, or from the
    last poll that reported progress) or when its process tree's RSS passes the memory limit.
    Whatever it left behind (its group, cookie holders) is killed when it ends, either way."""
    deadline = time.monotonic() + timeout_s
    tree = ProcessTree(psutil.Process(child.pid), refresh_s=TREE_REFRESH_S)
    try:
        while True:
            done = child.exited()
            if not done:
                watched.rss_peak_bytes = max(watched.rss_peak_bytes, _rss(tree))
            if on_poll is not None and on_poll():
                deadline = time.monotonic() + timeout_s
            if done:
                return
            if memory_limit_bytes is not None and watched.rss_peak_bytes > memory_limit_bytes:
                watched.killed_for = "oom"
            elif time.monotonic() > deadline:
                watched.killed_for = "timeout"
            if watched.killed_for is not None:
                return
            time.sleep(POLL_S)
    finally:
        child.kill()


def run_child(module: str, args: Sequence[str], log_path: Path, timeout_s: float,
              env: dict[str, str] | None = None, cpus: Sequence[int] | None = None,
              memory_limit_bytes: int | None = None) -> tuple[Child, Watched]:
    """Start a child and wait for it under the limits; it and its descendants are gone when
    this returns or raises (Ctrl-C included)."""
    child = start_child(module, args, log_path, env=env, cpus=cpus)
    watched = Watched()
    watch(child, watched, timeout_s, memory_limit_bytes)
    return child, watched


def why_not_ok(child: Child, watched: Watched, timeout_s: float, memory_limit_bytes: int | None = None) -> str | None:
    """None when the child exited with 0, else a phrase for "the probe ...": killed for what,
    or how it exited and the last line of its output."""
    if watched.killed_for == "timeout":
        return f"did not finish within {timeout_s:g} s (killed)"
    if watched.killed_for == "oom":
        return (f"reached {gib(watched.rss_peak_bytes)} RSS, over the memory limit of"
                f" {gib(memory_limit_bytes or 0)} (killed)")
    rc = child.returncode
    if rc == 0:
        return None
    why = f"was killed by signal {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"exited with code {rc}"
    last = (child.tail().splitlines() or ["(no output)"])[-1]
    return f"{why} ({last})"


def gib(n: float) -> str:
    """GiB with enough digits that a peak just over a limit reads as more than it."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def read_tail(path: Path, chars: int = TAIL_CHARS) -> str:
    """The last `chars` characters of a text file, reading at most 4 bytes a character from its
    end (UTF-8), whatever its size."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(size - 4 * chars, 0))
            data = f.read()
    except OSError:
        return ""
    return data.decode(errors="replace")[-chars:].strip()


def cookie_holders(cookie: str) -> list[psutil.Process]:
    """The live processes whose environment carries this cookie (our child's descendants, also
    those that left its process group). One /proc walk; processes of other users are skipped."""
    wanted = f"{COOKIE_VAR}={cookie}".encode()
    found = []
    for p in psutil.process_iter():
        try:
            with open(f"/proc/{p.pid}/environ", "rb") as f:
                if wanted in f.read().split(b"\0"):
                    found.append(p)
        except OSError:
            continue
    return found


def _rss(tree: ProcessTree) -> int:
    try:
        return tree.rss_bytes()
    except psutil.Error:
        return 0
