"""Starting a child process, who a process is, and what is left of a worker's process group after
its parent died.

`start_child` is the one way dlbench starts a Python child (the parent's children through
runner/children.py, which watches and stops them; a backend's own helpers, such as torch's DDP
ranks, directly: backends sit below the runner). Each child is `python -m MODULE ARGS`, never a
`-c` code string, and:
- leads a new session and process group, so its helpers (loader workers, compiler daemons) go
  with it when the group is killed; or, asked for with own_group=False, stays in its starter's
  group (a trial's DDP ranks: the parent kills the trial's whole group, ranks included);
- dies with the thread that started it (PR_SET_PDEATHSIG, die_with_parent);
- carries a cookie in its environment (`DLBENCH_CHILD=<random token>`) that every descendant
  inherits, so one that left the group (a plugin's `setsid`, a daemon's double fork) is still
  found and killed with it (Jenkins' ProcessTreeKiller finds a build's processes by its
  BUILD_ID variable the same way; a process that clears its own environment escapes both); a
  child in its starter's group keeps its starter's cookie;
- writes stdout and stderr to a log file, of which the parent only ever reads the last
  TAIL_CHARS characters: a worker printing a gigabyte costs disk in the scratch directory,
  never the parent's memory (the parent is outside --memory-limit); a rank writes where its
  worker does, so its traceback is in the trial's tail.

A pid alone names a process only while it lives: after a crash or a reboot the number may
belong to someone else. A process is identified here by (pid, creation time); the creation time
comes from /proc through psutil, in seconds since the epoch at clock-tick resolution (10 ms).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# Two readings of one process's creation time agree exactly (same boot time, same tick count);
# anything within a millisecond is the same process, a reused pid is at least one tick apart.
SAME_PROCESS_TOLERANCE_S = 1e-3
KILL_WAIT_S = 5.0
COOKIE_VAR = "DLBENCH_CHILD"
TAIL_CHARS = 2000
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


@dataclass
class Child:
    """A started child: its Popen, where its output goes (None: where its starter's goes), the
    cookie its descendants carry, and whether it leads a process group of its own."""

    proc: subprocess.Popen[bytes]
    log_path: Path | None
    cookie: str | None
    own_group: bool = True

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
        holders killed outside the group. A child in its starter's group is killed alone: its
        group and cookie are its starter's own."""
        if not self.own_group or self.cookie is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            self.proc.wait()
            return []
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
        (never the whole file); empty where it writes to its starter's output."""
        return "" if self.log_path is None else read_tail(self.log_path, chars)


def start_child(module: str, args: Sequence[str], log_path: Path | None, env: dict[str, str] | None = None,
                interpreter: str | None = None, cpus: Sequence[int] | None = None, own_group: bool = True) -> Child:
    """Start `interpreter -m module args...` (default: this Python) with `env` added to this
    process's environment; pinned to `cpus` (before its libraries start their thread pools) when
    given. `own_group`: in a session and process group of its own, with a cookie of its own
    (the parent's children); else in this process's group, with this process's cookie, so that
    whatever kills this process's group kills it too (a worker's DDP ranks). Its output is
    appended to `log_path`, or goes where this process's goes (None)."""
    full_env = {**os.environ, **(env or {})}
    cookie = os.environ.get(COOKIE_VAR)
    if own_group:
        cookie = full_env[COOKIE_VAR] = secrets.token_hex(8)
    die = die_with_parent()
    pin = list(cpus) if cpus is not None else None

    def preexec() -> None:
        if die is not None:
            die()
        if pin is not None:
            os.sched_setaffinity(0, pin)

    cmd = [interpreter or sys.executable, "-m", module, *args]
    log = open(log_path, "ab") if log_path is not None else None
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT if log is not None else None, env=full_env,
                                start_new_session=own_group, preexec_fn=preexec)
    finally:
        if log is not None:
            log.close()
    return Child(proc, log_path, cookie, own_group)


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

