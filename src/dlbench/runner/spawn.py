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
from dlbench.analysis import interference
from dlbench.monitors.interference import SNAPSHOT_PERIOD_S, read_snapshot, wait_quiet
from dlbench.results.records import TrialResult, read_events
from dlbench.runner import children
from dlbench.runner.children import Watched, gib
from dlbench.runner.protocol import EVENT_KEY, PHASE_NAME, events_path, interference_path, parity_path
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
    """Run one trial in a fresh process and return its result, whatever happened; where the
    trial asks (`quiet_wait_s`), first wait for a quiet machine, and record the wait."""
    wait = _wait_quiet(trial, on_event)
    workdir.mkdir(parents=True, exist_ok=True)
    out_path = out_path_for(trial, workdir)
    spec_path = out_path.with_name(out_path.name.replace(".result.json", ".spec.json"))
    log_path = out_path.with_name(out_path.name.replace(".result.json", ".log"))
    for p in (out_path, events_path(out_path), parity_path(out_path), interference_path(out_path)):
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
        raise Interrupted(wait.record(_collect(child, watched, trial, out_path))) from None
    except BaseException:
        child.kill()
        raise
    return wait.record(_collect(child, watched, trial, out_path))


@dataclass
class QuietWait:
    """The wait for a quiet machine before a trial (`--quiet-wait`): how long, whether it ran
    out, and the last share it saw; none where the trial did not ask."""

    limit_s: float | None = None
    waited_s: float = 0.0
    gave_up: bool = False
    last_share: float | None = None

    def record(self, result: TrialResult) -> TrialResult:
        """The wait into the trial's metrics (quiet_wait_s, quiet_wait_gave_up) and, where it ran
        out, a warning: the trial ran on a machine that was still busy."""
        if self.limit_s is None:
            return result
        result.metrics[QUIET_WAIT_METRIC] = self.waited_s
        result.metrics[GAVE_UP_METRIC] = 1.0 if self.gave_up else 0.0
        if self.gave_up:
            busy = f": other processes took {self.last_share:.0%} of the CPU" if self.last_share is not None else (
                ": /proc cannot tell how busy the machine is")
            result.warnings.append(f"waited {self.waited_s:.0f} s for a quiet machine (--quiet-wait) and ran anyway{busy}")
        return result


QUIET_WAIT_METRIC, GAVE_UP_METRIC = "quiet_wait_s", "quiet_wait_gave_up"


def _wait_quiet(trial: TrialSpec, on_event: EventCallback | None) -> QuietWait:
    """Wait (up to the trial's `quiet_wait_s`) until other processes take at most the busy
    threshold of the CPU over a second; each busy second is told as a progress event."""
    if trial.quiet_wait_s is None:
        return QuietWait()
    wait = QuietWait(limit_s=trial.quiet_wait_s)
    start = time.monotonic()

    def told(share: float, waited_s: float) -> None:
        wait.last_share = share
        if on_event is not None:
            on_event({EVENT_KEY: "quiet_wait", PHASE_NAME: f"waiting for a quiet machine: other processes took"
                      f" {share:.0%} of the CPU ({waited_s:.0f} s of at most {trial.quiet_wait_s:g} s)"})

    waited = wait_quiet(trial.quiet_wait_s, on_wait=told)
    wait.waited_s, wait.gave_up = (time.monotonic() - start, True) if waited is None else (waited, False)
    return wait


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
    _keep_interference(result, interference_path(out_path))
    if result.metrics.get("rss_peak_bytes") is None and watched.rss_peak_bytes:
        # the worker died before reporting: the peak the watchdog saw is the best there is
        result.metrics["rss_peak_bytes"] = watched.rss_peak_bytes
    if result.status not in ("ok", "unsupported") and tail:
        result.notes["output_tail"] = tail
    result.events = events
    result.pid = result.pid or child.pid
    return result


def _keep_interference(result: TrialResult, snapshot: Path) -> None:
    """A worker killed (or dead) before writing its result left its interference record so far
    in the snapshot file (monitors/interference.py): kept, so that a trial that hung on a busy
    machine says how busy it was."""
    if result.metrics.get(interference.FOREIGN_CPU_SHARE) is not None:
        return
    kept = read_snapshot(snapshot)
    if kept is None or kept[0].get(interference.FOREIGN_CPU_SHARE) is None:
        return
    metrics, series = kept
    result.metrics.update(metrics)
    if series:
        result.series[interference.SERIES] = series
    result.notes[interference.FOREIGN_CPU_SHARE] = (f"the worker's last record before it ended (up to"
                                                      f" {SNAPSHOT_PERIOD_S:g} s old)")


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
