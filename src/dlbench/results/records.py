"""The trial result: what the worker writes to OUT and the parent stores. Versioned JSON.

Raw samples are kept (every chunk time, every loss, every monitor sample); summaries are
computed from them, never stored alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RESULT_SCHEMA_VERSION = 1

STATUSES = ("ok", "failed", "crashed", "timeout", "oom", "interrupted", "unsupported", "skipped")
# Statuses that mean "something went wrong" (exit code 3); unsupported/skipped are data.
FAILURE_STATUSES = ("failed", "crashed", "timeout", "oom", "interrupted")

@dataclass
class TrialResult:
    status: str
    error: str | None = None
    # name -> value (None with a reason in `notes` when it cannot be measured here)
    metrics: dict[str, float | None] = field(default_factory=dict)
    # name -> unit of the metrics whose producer declares their unit itself (a backend's
    # allocator counters); the store looks here before the neutral registry (analysis/metrics.py)
    units: dict[str, str] = field(default_factory=dict)
    # series name -> list of (t, value); t is a step index or seconds, per series
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    policy_effective: dict[str, Any] = field(default_factory=dict)
    framework_info: dict[str, Any] = field(default_factory=dict)
    numerics: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # The parity verdict against the float64 reference, filled by the parent (analysis/parity)
    parity: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    schema_version: int = RESULT_SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=_json_default)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialResult:
        d = dict(d)
        d["series"] = {k: [tuple(p) for p in v] for k, v in d.get("series", {}).items()}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def write(self, path: Path) -> None:
        """Atomically: a reader never sees half a result."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):  # NumPy scalars from metric arithmetic
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


# The events file's vocabulary (one JSON line per event; runner/schemas/event.schema.json). The
# worker writes it (runner/timing.py EventLog), the parent reads it live (runner/spawn.py, `dlbench
# run`'s progress) and the report reads it stored (report/model.py); runner/protocol.py gives it
# to both sides of the process boundary. It lives here, on the results floor, so the report,
# which may not import the runner, reads the same names.
EVENT_KEY, VERSION_KEY, TIME_KEY = "event", "v", "t"
START, PHASE, CHUNK, EVAL, WARNING, END = "start", "phase", "chunk", "eval", "warning", "end"
EVENTS = (START, PHASE, CHUNK, EVAL, WARNING, END)
# A phase event's name and its state (PHASE_START or PHASE_END, the end with its SECONDS).
PHASE_NAME, PHASE_STATE, PHASE_START, PHASE_END = "name", "state", "start", "end"
# A chunk event: STEPS timed steps of EPOCH that took SECONDS.
EPOCH, STEPS, SECONDS = "epoch", "steps", "seconds"


def event_kind(event: dict[str, Any]) -> str | None:
    """Which event (EVENTS) a line of an events file is."""
    kind = event.get(EVENT_KEY)
    return None if kind is None else str(kind)


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete JSON lines of an events file; a torn last line (a killed worker) is ignored."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events
