"""Clocks and the events file of the worker protocol.

Every timestamp is CLOCK_MONOTONIC (`time.monotonic`), which on Linux is system-wide, so the
parent and the worker read the same clock. Durations are taken after a device sync only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import IO, Any

from dlbench.runner import protocol as p

EVENTS_SCHEMA_VERSION = 1


def process_start_monotonic(pid: int | None = None) -> float:
    """When this process was created, on the monotonic clock, from /proc (field 22 of
    /proc/PID/stat, in clock ticks since boot). Falls back to "now" off Linux."""
    pid = pid or os.getpid()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # The command name may contain spaces; fields after the closing parenthesis are fixed.
        fields = stat.rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        now = time.monotonic()
        age_s = uptime_s - start_ticks / os.sysconf("SC_CLK_TCK")
        return now - max(age_s, 0.0)
    except (OSError, IndexError, ValueError):
        return time.monotonic()


class EventLog:
    """Appends JSON lines (`OUT.events`) and flushes each one: a killed worker keeps every event
    already written."""

    def __init__(self, path: Path) -> None:
        self._f: IO[str] = open(path, "a", buffering=1)

    def _emit(self, event: str, fields: dict[str, Any]) -> None:
        record = {p.VERSION_KEY: EVENTS_SCHEMA_VERSION, p.TIME_KEY: time.monotonic(), p.EVENT_KEY: event, **fields}
        self._f.write(json.dumps(record, default=float) + "\n")

    # One method per event (runner/protocol.py: EVENTS), so each key is written in one place.
    def start(self, pid: int, created: float) -> None:
        self._emit(p.START, {"pid": pid, "created": created})

    def phase(self, name: str, state: str, seconds: float | None = None) -> None:
        fields: dict[str, Any] = {p.PHASE_NAME: name, p.PHASE_STATE: state}
        if seconds is not None:
            fields[p.SECONDS] = seconds
        self._emit(p.PHASE, fields)

    def chunk(self, epoch: int, steps: int, seconds: float) -> None:
        self._emit(p.CHUNK, {p.EPOCH: epoch, p.STEPS: steps, p.SECONDS: seconds})

    def eval(self, step: int, accuracy: float, train_s: float) -> None:
        self._emit(p.EVAL, {"step": step, "accuracy": accuracy, "train_s": train_s})

    def warning(self, message: str) -> None:
        self._emit(p.WARNING, {"message": message})

    def end(self, status: str) -> None:
        self._emit(p.END, {"status": status})

    def close(self) -> None:
        self._f.close()


class Phases:
    """Named phase durations, each also written as a start/end pair to the events file."""

    def __init__(self, log: EventLog) -> None:
        self._log = log
        self.seconds: dict[str, float] = {}

    def start(self, name: str) -> float:
        self._log.phase(name, p.PHASE_START)
        return time.perf_counter()

    def end(self, name: str, started: float) -> float:
        elapsed = time.perf_counter() - started
        self.seconds[name] = elapsed
        self._log.phase(name, p.PHASE_END, elapsed)
        return elapsed


def split_steps(total: int, chunk: int) -> list[int]:
    """Chunk sizes covering `total` steps, each at most `chunk`."""
    sizes = [chunk] * (total // chunk)
    if total % chunk:
        sizes.append(total % chunk)
    return sizes
