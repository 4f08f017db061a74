"""The parent side of one trial: start the worker, watch it, kill it, collect what it left.

Whatever happens to the worker (exception, segfault, abort, hang past the timeout, memory over
the limit) becomes the trial's status and error; every event it wrote is kept. Nothing here
raises for a bad trial. The worker leads its own process group and dies with this process
(PR_SET_PDEATHSIG); whatever it leaves in its group is killed when it ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from dlbench.monitors.memory import ProcessTree
from dlbench.results.records import TrialResult, read_events
from dlbench import processes
from dlbench.runner.protocol import events_path, parity_path
from dlbench.spec import TrialSpec, to_dict

POLL_S = 0.1
STDERR_TAIL_CHARS = 2000
# The watchdog re-lists the worker's descendants once a second (a /proc walk: 2.8 ms with 117
# processes here); each poll between reads the known processes' RSS only (18 us). Together
# about 0.3 % of one core beside the timed window, as much as the worker's own sampler.
TREE_REFRESH_S = 1.0

EventCallback = Callable[[dict[str, Any]], None]
# Called once the worker runs, with its pid and creation time: the store keeps them for resume.
StartCallback = Callable[[int, float], None]


@dataclass
class Watched:
    """What the parent saw while the worker ran."""

    killed_for: str | None = None  # "timeout", "oom" or "interrupted": the parent killed it
    rss_peak_bytes: int = 0  # the worker's process tree, sampled every POLL_S
    signal_name: str = "SIGINT"  # what interrupted the parent, for "interrupted"


class Interrupted(KeyboardInterrupt):
    """The parent was interrupted while a worker ran; the worker's group is dead and `result`
    holds what it left (status `interrupted`, every event written so far)."""

    def __init__(self, result: TrialResult) -> None:
        super().__init__(result.error)
        self.result = result


def worker_command(trial: TrialSpec, spec_path: Path, out_path: Path) -> list[str]:
    interpreter = trial.interpreter or sys.executable
    return [interpreter, "-m", "dlbench.runner.worker", str(spec_path), str(out_path)]


def out_path_for(trial: TrialSpec, workdir: Path) -> Path:
    """Where the worker of this trial writes its result (events and parity files beside it)."""
    stem = f"trial-{trial.trial_id if trial.trial_id is not None else os.getpid()}"
    return workdir / f"{stem}.result.json"


def run_trial(
    trial: TrialSpec,
    workdir: Path,
    on_event: EventCallback | None = None,
    on_start: StartCallback | None = None,
) -> TrialResult:
    """Run one trial in a fresh process and return its result, whatever happened."""
    workdir.mkdir(parents=True, exist_ok=True)
    out_path = out_path_for(trial, workdir)
    spec_path = out_path.with_name(out_path.name.replace(".result.json", ".spec.json"))
    log_path = out_path.with_name(out_path.name.replace(".result.json", ".log"))
    for p in (out_path, events_path(out_path), parity_path(out_path)):
        p.unlink(missing_ok=True)
    spec_path.write_text(json.dumps(to_dict(trial)))
    with open(log_path, "wb") as log:
        # A new session: on timeout the whole process group goes (loader workers, compilers).
        proc = subprocess.Popen(
            worker_command(trial, spec_path, out_path),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=processes.die_with_parent(),
        )
        watched = Watched()
        try:
            if on_start is not None:
                on_start(proc.pid, processes.created_at(proc.pid) or time.time())
            _watch(proc, trial, events_path(out_path), on_event, watched)
        except KeyboardInterrupt as e:
            _kill_group(proc)  # Ctrl-C in the parent: no orphan keeps the machine busy
            watched.killed_for, watched.signal_name = "interrupted", str(e) or "SIGINT"
            raise Interrupted(_collect(proc, watched, trial, out_path, log_path)) from None
        except BaseException:
            _kill_group(proc)
            raise
    return _collect(proc, watched, trial, out_path, log_path)


class EventTail:
    """The events a worker appended since the last poll. The parent polls ten times a second
    while the worker's timed window runs on the same cores, so it reads only the new bytes."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""

    def new(self) -> list[dict[str, Any]]:
        try:
            with open(self._path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events


def _watch(
    proc: subprocess.Popen[bytes],
    trial: TrialSpec,
    events: Path,
    on_event: EventCallback | None,
    watched: Watched,
) -> None:
    """Poll until the worker exits; kill its group past the timeout or the memory limit. Whatever
    it left in its group (loader workers, compiler daemons) goes with it."""
    deadline = time.monotonic() + trial.timeout_s
    limit = trial.memory_limit_bytes
    tail = EventTail(events)
    tree = ProcessTree(psutil.Process(proc.pid), refresh_s=TREE_REFRESH_S)
    while True:
        done = _exited(proc)
        if not done:
            watched.rss_peak_bytes = max(watched.rss_peak_bytes, tree.rss_bytes())
        if on_event is not None:
            for ev in tail.new():
                on_event(ev)
        if done:
            _kill_group(proc)
            return
        if limit is not None and watched.rss_peak_bytes > limit:
            watched.killed_for = "oom"
        elif time.monotonic() > deadline:
            watched.killed_for = "timeout"
        if watched.killed_for is not None:
            _kill_group(proc)
            return
        time.sleep(POLL_S)


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Has the worker exited? Checked without reaping it: while the leader is a zombie its pid,
    and so its process group id, cannot be reused, so killing the group kills only ours."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # already reaped
        return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _collect(
    proc: subprocess.Popen[bytes],
    watched: Watched,
    trial: TrialSpec,
    out_path: Path,
    log_path: Path,
) -> TrialResult:
    events = read_events(events_path(out_path))
    tail = _tail(log_path)
    result = _read_result(out_path)
    if watched.killed_for is not None:
        result = result or TrialResult(status=watched.killed_for)
        result.status = watched.killed_for
        result.error = _kill_reason(watched, trial)
    elif result is None:
        result = TrialResult(status="crashed", error=_crash_reason(proc.returncode, watched))
    _check_peak(result, trial)
    if result.metrics.get("rss_peak_bytes") is None and watched.rss_peak_bytes:
        # the worker died before reporting: the peak the watchdog saw is the best there is
        result.metrics["rss_peak_bytes"] = watched.rss_peak_bytes
    if result.status not in ("ok", "unsupported") and tail:
        result.notes["output_tail"] = tail
    result.events = events
    result.pid = result.pid or proc.pid
    return result


def _gib(n: float) -> str:
    """GiB with enough digits that a peak just over a limit reads as more than it."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _kill_reason(watched: Watched, trial: TrialSpec) -> str:
    if watched.killed_for == "interrupted":
        return f"interrupted by {watched.signal_name} to dlbench; process group killed"
    if watched.killed_for == "oom":
        assert trial.memory_limit_bytes is not None
        peak, limit = watched.rss_peak_bytes, trial.memory_limit_bytes
        return (f"process tree RSS reached {_gib(peak)} ({peak / limit - 1:+.1%} over the memory limit of"
                f" {_gib(limit)}); process group killed")
    return f"no result within the timeout of {trial.timeout_s:g} s; process group killed"


def _crash_reason(rc: int, watched: Watched) -> str:
    why = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
    hint = ""
    if rc == -signal.SIGKILL:  # not ours: the kernel's out-of-memory killer sends SIGKILL
        hint = (f"; not sent by dlbench: the kernel's out-of-memory killer sends SIGKILL (RSS"
                f" seen {_gib(watched.rss_peak_bytes)}; --memory-limit stops a trial before that)")
    return f"worker {why} without a result{hint}"


def _check_peak(result: TrialResult, trial: TrialSpec) -> None:
    """A worker that finished, but whose own peak (sampled every 25 ms, plus the kernel's
    high-water mark) crossed the limit between two polls of the watchdog, is `oom` too: the
    verdict must not depend on when the parent happened to look. Its metrics are kept."""
    peak = result.metrics.get("rss_peak_bytes")
    limit = trial.memory_limit_bytes
    if result.status == "ok" and limit is not None and peak is not None and peak > limit:
        result.status = "oom"
        result.error = (f"peak RSS {_gib(peak)} (the worker's own measurement) is over the memory"
                        f" limit of {_gib(limit)}")


def _read_result(path: Path) -> TrialResult | None:
    try:
        return TrialResult.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return text[-STDERR_TAIL_CHARS:].strip()
