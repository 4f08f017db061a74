"""Who a process is, and what is left of a worker's process group after its parent died.

A pid alone names a process only while it lives: after a crash or a reboot the number may
belong to someone else. A process is identified here by (pid, creation time); the creation time
comes from /proc through psutil, in seconds since the epoch at clock-tick resolution (10 ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Callable, Iterator

import psutil

# Two readings of one process's creation time agree exactly (same boot time, same tick count);
# anything within a millisecond is the same process, a reused pid is at least one tick apart.
SAME_PROCESS_TOLERANCE_S = 1e-3
KILL_WAIT_S = 5.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# A terminal closed (SIGHUP) or a polite kill (SIGTERM, as `timeout` and CI runners send) stops a
# command like Ctrl-C does.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def created_at(pid: int) -> float | None:
    """The creation time of a live process, or None when there is none with this pid."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def is_alive(pid: int, created: float | None) -> bool:
    """True when the process that had this pid and creation time still runs (a zombie does not
    run; a pid recorded without its creation time cannot be told apart from a reused one)."""
    if created is None:
        return False
    try:
        p = psutil.Process(pid)
        same = abs(p.create_time() - created) < SAME_PROCESS_TOLERANCE_S
        return same and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the child receive SIGKILL when this (parent) process dies, so a
    killed `dlbench run` leaves no worker timing itself against the next run. None off Linux.
    The kernel fires it when the *thread* that started the child exits: start workers from a
    thread that outlives them (the local executor uses the main thread)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here: no dlopen after fork
    except (AttributeError, OSError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl: no signal would ever come
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def kill_survivors(pid: int, created: float | None) -> list[int]:
    """Kill what is left of the process group a worker led (the worker itself when it outlived
    its parent, and its children: compilers, loader workers). Returns the pids killed.

    Nothing is killed when the creation time is unknown or when `pid` now names another
    process: a pid is not reused while its process group has members (POSIX), so if the leader
    is gone or is still ours, every member of group `pid` is ours."""
    if created is None:
        return []
    leader = created_at(pid)
    if leader is not None and abs(leader - created) >= SAME_PROCESS_TOLERANCE_S:
        return []
    members = [p for p in psutil.process_iter() if _group_of(p) == pid]
    if not members:
        return []
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone meanwhile, or not ours after all
        return []
    psutil.wait_procs(members, timeout=KILL_WAIT_S)
    return [p.pid for p in members]


def _group_of(p: psutil.Process) -> int | None:
    try:
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return os.getpgid(p.pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return None


@contextlib.contextmanager
def stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt like Ctrl-C, so that whatever a command runs
    in its `finally` (killing a child's process group, marking a run interrupted) runs for them
    too. An ignored signal (nohup) stays ignored; only the main thread may set handlers (an
    embedding caller's thread leaves them alone)."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig, old in previous.items():
        if old is not signal.SIG_IGN and old is not None:
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            if old is not None:
                signal.signal(sig, old)


def flock_holder(path: str | os.PathLike[str]) -> int | None:
    """The pid holding a flock(2) on the file at `path`, from /proc/locks (its lines name the
    holder's pid and the file's device and inode: `1: FLOCK ADVISORY WRITE 4242 00:2e:1234 0
    EOF`); None where no lock is listed or /proc/locks cannot be read."""
    try:
        st = os.stat(path)
        text = open("/proc/locks").read()
    except OSError:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":  # a blocked waiter's line reads `1: -> FLOCK ...`
            continue
        pid, where = parts[4], parts[5].split(":")
        if len(where) == 3 and int(where[2]) == st.st_ino and pid.isdigit() and int(pid) > 0:
            return int(pid)
    return None


def describe(pid: int) -> str:
    """`pid 4242 (dlbench run -w cnn), since 06:41:03` for a live process, else `pid 4242`."""
    import datetime

    try:
        p = psutil.Process(pid)
        command = " ".join(p.cmdline()) or p.name()
        since = datetime.datetime.fromtimestamp(p.create_time()).strftime("%H:%M:%S")
    except (psutil.Error, OSError):
        return f"pid {pid}"
    return f"pid {pid} ({command[:120]}), since {since}"

