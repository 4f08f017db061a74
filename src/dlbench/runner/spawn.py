"""The parent side of one trial: start the worker, watch it, kill it, collect what it left.

Whatever happens to the worker (exception, segfault, abort, hang past the timeout, memory over
the limit) becomes the trial's status and error; every event it wrote is kept. Nothing here
raises for a bad trial. The worker is started by processes.start_child, watched and killed by
runner/children.py (its own process group and session, dying with this process, its descendants
killed when it ends, its output read only as a bounded tail).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench import processes
from dlbench.results.records import TrialResult, read_events
from dlbench.runner import children
from dlbench.runner.children import Watched, gib
from dlbench.runner.protocol import events_path, parity_path
from dlbench.spec import TrialSpec, to_dict

# The most the parent reads of a worker's events file per poll (an event is a few hundred bytes).
EVENTS_READ_BYTES = 1 << 20

EventCallback = Callable[[dict[str, Any]], None]
# Called once the worker runs, with its pid and creation time: the store keeps them for resume.
StartCallback = Callable[[int, float], None]


class Interrupted(KeyboardInterrupt):
    """The parent was interrupted while a worker ran; the worker's group is dead and `result`
    holds what it left (status `interrupted`, every event written so far)."""

    def __init__(self, result: TrialResult) -> None:
        super().__init__(result.error)
        self.result = result


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
    log_path.unlink(missing_ok=True)
    child = processes.start_child("dlbench.runner.worker", [str(spec_path), str(out_path)], log_path,
                                  interpreter=trial.interpreter)
    watched = Watched()
    tail = EventTail(events_path(out_path))

    def forward_events() -> bool:
        if on_event is not None:
            for ev in tail.new():
                on_event(ev)
        return False  # a trial's timeout runs from its start, whatever it reports

    try:
        if on_start is not None:
            on_start(child.pid, processes.created_at(child.pid) or time.time())
        children.watch(child, watched, trial.timeout_s, trial.memory_limit_bytes, forward_events)
    except KeyboardInterrupt as e:
        child.kill()  # Ctrl-C in the parent: no orphan keeps the machine busy
        watched.killed_for, watched.signal_name = "interrupted", str(e) or "SIGINT"
        raise Interrupted(_collect(child, watched, trial, out_path)) from None
    except BaseException:
        child.kill()
        raise
    return _collect(child, watched, trial, out_path)


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
                data = f.read(EVENTS_READ_BYTES)  # bounded: the rest comes at the next polls
        except FileNotFoundError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > EVENTS_READ_BYTES:  # no event is that long: not an event
            self._partial = b""
        events = []
        for line in lines:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        return events


def _collect(child: processes.Child, watched: Watched, trial: TrialSpec, out_path: Path) -> TrialResult:
    events = read_events(events_path(out_path))
    tail = child.tail()
    result = _read_result(out_path)
    if watched.killed_for is not None:
        result = result or TrialResult(status=watched.killed_for)
        result.status = watched.killed_for
        result.error = _kill_reason(watched, trial)
    elif result is None:
        assert child.returncode is not None  # watch() reaped it
        result = TrialResult(status="crashed", error=_crash_reason(child.returncode, watched))
    _check_peak(result, trial)
    if result.metrics.get("rss_peak_bytes") is None and watched.rss_peak_bytes:
        # the worker died before reporting: the peak the watchdog saw is the best there is
        result.metrics["rss_peak_bytes"] = watched.rss_peak_bytes
    if result.status not in ("ok", "unsupported") and tail:
        result.notes["output_tail"] = tail
    result.events = events
    result.pid = result.pid or child.pid
    return result


def _kill_reason(watched: Watched, trial: TrialSpec) -> str:
    if watched.killed_for == "interrupted":
        return f"interrupted by {watched.signal_name} to dlbench; process group killed"
    if watched.killed_for == "oom":
        assert trial.memory_limit_bytes is not None
        peak, limit = watched.rss_peak_bytes, trial.memory_limit_bytes
        return (f"process tree RSS reached {gib(peak)} ({peak / limit - 1:+.1%} over the memory limit of"
                f" {gib(limit)}); process group killed")
    return f"no result within the timeout of {trial.timeout_s:g} s; process group killed"


def _crash_reason(rc: int, watched: Watched) -> str:
    why = f"killed by signal {signal.Signals(-rc).name}" if rc < 0 else f"exited with code {rc}"
    hint = ""
    if rc == -signal.SIGKILL:  # not ours: the kernel's out-of-memory killer sends SIGKILL
        hint = (f"; not sent by dlbench: the kernel's out-of-memory killer sends SIGKILL (RSS"
                f" seen {gib(watched.rss_peak_bytes)}; --memory-limit stops a trial before that)")
    return f"worker {why} without a result{hint}"


def _check_peak(result: TrialResult, trial: TrialSpec) -> None:
    """A worker that finished, but whose own peak (sampled every 25 ms, plus the kernel's
    high-water mark) crossed the limit between two polls of the watchdog, is `oom` too: the
    verdict must not depend on when the parent happened to look. Its metrics are kept."""
    peak = result.metrics.get("rss_peak_bytes")
    limit = trial.memory_limit_bytes
    if result.status == "ok" and limit is not None and peak is not None and peak > limit:
        result.status = "oom"
        result.error = (f"peak RSS {gib(peak)} (the worker's own measurement) is over the memory"
                        f" limit of {gib(limit)}")


def _read_result(path: Path) -> TrialResult | None:
    try:
        return TrialResult.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
