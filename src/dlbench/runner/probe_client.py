"""The parent side of a numerical probe (runner/probe.py): a child process per framework,
started (processes.start_child), watched and, whatever happens to the parent, never left behind
(runner/children.py).

Used by the float64 parity reference (runner/reference.py) and by `dlbench check`. One process
probes the workloads of a request in turn; its limits (ProbeLimits: a run's --timeout per
workload and its --memory-limit) bound it like a trial. When the process dies, hangs past the
timeout or passes the memory limit while probing one workload, that workload gets the failure,
named as its own, and the workloads after it are probed in a fresh process: one plugin's
`os._exit` or endless build never takes the others' results away.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench import processes
from dlbench.runner import children

# What bounds a probe when the caller states nothing (`dlbench check`): per workload probed.
PROBE_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class ProbeLimits:
    """Per workload probed: seconds (the import and set-up count into the first), and the most
    RSS the probe's process tree may reach (None: no limit)."""

    timeout_s: float = PROBE_TIMEOUT_S
    memory_limit_bytes: int | None = None

    def text(self) -> str:
        memory = "" if self.memory_limit_bytes is None else f", memory limit {children.gib(self.memory_limit_bytes)}"
        return f"timeout {self.timeout_s:g} s per workload{memory}"


def run_probe(request: Path, out_dir: Path, limits: ProbeLimits = ProbeLimits(),
              env: dict[str, str] | None = None) -> str | None:
    """Probe every trial of REQUEST (JSON), results under `out_dir` (`i.json`, `i.npz`), with
    `env` added to this process's environment. Returns None when every trial has its result
    file, else why the others have none (a trial whose probe died has a result file saying so)."""
    body: dict[str, Any] = json.loads(request.read_text())
    names = [t["workload"]["name"] for t in body["trials"]]
    remaining = list(range(len(names)))
    attempt = 0
    while remaining:
        error = _run_once(body, remaining, out_dir, attempt, limits, env)
        remaining = [i for i in remaining if not (out_dir / f"{i}.json").exists()]
        if error is None or not remaining:
            return None if not remaining else "the probe ended without probing every workload"
        culprit = remaining[0]
        if not started(out_dir, culprit):  # it died before any workload: nothing is to blame
            return f"the probe {error}"
        others = f"; {', '.join(names[i] for i in remaining[1:])} probed again in a fresh process" \
            if len(remaining) > 1 else ""
        (out_dir / f"{culprit}.json").write_text(json.dumps({
            "status": "failed", "error": f"the probe process {error} while probing {names[culprit]}{others}"}))
        remaining = remaining[1:]
        attempt += 1
    return None


def started(out_dir: Path, index: int) -> bool:
    """Did the probe begin on trial `index` (runner/probe.py leaves a marker before each)?"""
    return (out_dir / f"{index}.started").exists()


def _run_once(body: dict[str, Any], indices: list[int], out_dir: Path, attempt: int, limits: ProbeLimits,
              env: dict[str, str] | None) -> str | None:
    """One probe process over `indices`; None when it exited normally, else what went wrong."""
    request = out_dir / f"request-{attempt}.json"
    request.write_text(json.dumps({**body, "indices": indices}))
    child = processes.start_child("dlbench.runner.probe", [str(request), str(out_dir)],
                                  out_dir / f"probe-{attempt}.log", env=env)
    watched = children.Watched()
    seen = {i for i in indices if (out_dir / f"{i}.json").exists()}

    def progress() -> bool:  # a new workload's result: its successor gets the full timeout
        done = {i for i in indices if i not in seen and (out_dir / f"{i}.json").exists()}
        seen.update(done)
        return bool(done)

    children.watch(child, watched, limits.timeout_s, limits.memory_limit_bytes, progress)
    return children.why_not_ok(child, watched, limits.timeout_s, limits.memory_limit_bytes)
