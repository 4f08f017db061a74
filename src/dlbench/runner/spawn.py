"""The parent side of one trial: start the worker, watch it, kill it, collect what it left.

Whatever happens to the worker (exception, segfault, abort, hang past the timeout) becomes the
trial's status and error; every event it wrote is kept. Nothing here raises for a bad trial.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.results.records import TrialResult, read_events
from dlbench.runner.timing import events_path, parity_path
from dlbench.spec import TrialSpec, to_dict

POLL_S = 0.1
STDERR_TAIL_CHARS = 2000

EventCallback = Callable[[dict[str, Any]], None]


def worker_command(trial: TrialSpec, spec_path: Path, out_path: Path) -> list[str]:
    interpreter = trial.interpreter or sys.executable
    return [interpreter, "-m", "dlbench.runner.worker", str(spec_path), str(out_path)]


def out_path_for(trial: TrialSpec, workdir: Path) -> Path:
    """Where the worker of this trial writes its result (events and parity files beside it)."""
    stem = f"trial-{trial.trial_id if trial.trial_id is not None else os.getpid()}"
    return workdir / f"{stem}.result.json"


def run_trial(
    trial: TrialSpec, workdir: Path, on_event: EventCallback | None = None
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
        )
        try:
            timed_out = _watch(proc, trial.timeout_s, events_path(out_path), on_event)
        except BaseException:
            _kill_group(proc)  # Ctrl-C in the parent: no orphan keeps the machine busy
            raise
    return _collect(proc, timed_out, trial, out_path, log_path)


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
    proc: subprocess.Popen[bytes], timeout_s: float, events: Path, on_event: EventCallback | None
) -> bool:
    deadline = time.monotonic() + timeout_s
    tail = EventTail(events)
    while True:
        done = proc.poll() is not None
        if on_event is not None:
            for ev in tail.new():
                on_event(ev)
        if done:
            return False
        if time.monotonic() > deadline:
            _kill_group(proc)
            return True
        time.sleep(POLL_S)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _collect(
    proc: subprocess.Popen[bytes],
    timed_out: bool,
    trial: TrialSpec,
    out_path: Path,
    log_path: Path,
) -> TrialResult:
    events = read_events(events_path(out_path))
    tail = _tail(log_path)
    result = _read_result(out_path)
    if timed_out:
        result = result or TrialResult(status="timeout")
        result.status = "timeout"
        result.error = f"no result within the timeout of {trial.timeout_s:g} s; process group killed"
    elif result is None:
        rc = proc.returncode
        why = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
        result = TrialResult(status="crashed", error=f"worker {why} without a result")
    if result.status not in ("ok", "unsupported") and tail:
        result.notes["output_tail"] = tail
    result.events = events
    result.pid = result.pid or proc.pid
    return result


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
