"""The local executor: one trial at a time, each in a fresh worker process; the store is written
by this (parent) process only, one transaction per finished trial."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.backends import get_backend
from dlbench.results.records import FAILURE_STATUSES, TrialResult
from dlbench.results.store import Store
from dlbench.runner import spawn
from dlbench.runner.plan import Plan, PlannedTrial, with_ids
from dlbench.spec import Policy

WARM_IMPORT_TIMEOUT_S = 600


class Progress:
    """What the executor tells its caller; the CLI draws it (at most once a second)."""

    def trial_started(self, index: int, total: int, planned: PlannedTrial) -> None: ...
    def event(self, event: dict[str, Any]) -> None: ...
    def trial_finished(self, index: int, total: int, planned: PlannedTrial, result: TrialResult) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class Outcome:
    statuses: dict[str, int] = field(default_factory=dict)
    interrupted: bool = False

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.statuses.items() if s in FAILURE_STATUSES)


def warm_imports(plan: Plan, progress: Progress) -> None:
    """Import each framework once, untimed, in a throwaway process, so the page cache is warm
    alike for every trial (the first trial would otherwise pay the cold disk reads)."""
    for name in dict.fromkeys(t.spec.framework for t in plan.pending):
        backend = get_backend(name)
        env = {**os.environ, **backend.environment(Policy(), tempfile.gettempdir())}
        code = f"from dlbench.backends import get_backend; get_backend({name!r}).import_framework()"
        progress.message(f"warming the page cache: importing {name} once (untimed)")
        try:
            subprocess.run([sys.executable, "-c", code], env=env, timeout=WARM_IMPORT_TIMEOUT_S,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            progress.message(f"importing {name} took over {WARM_IMPORT_TIMEOUT_S} s; going on")


def register(store: Store, run_id: int, plan: Plan) -> list[tuple[int, PlannedTrial]]:
    """Write every planned trial to the store up front (pending, unsupported or skipped), so an
    interrupted sweep shows what is left."""
    out = []
    for seq, planned in enumerate(plan.trials):
        tid = store.add_trial(run_id, seq, planned.spec, status=planned.status)
        if planned.status != "pending":
            store.finish_trial(tid, TrialResult(status=planned.status, error=planned.reason))
        out.append((tid, planned))
    return out


def execute(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]],
            progress: Progress, workdir: Path | None = None) -> Outcome:
    outcome = Outcome()
    for planned in (p for _, p in trials if p.status != "pending"):
        outcome.statuses[planned.status] = outcome.statuses.get(planned.status, 0) + 1
    pending = [(tid, p) for tid, p in trials if p.status == "pending"]
    tmp = workdir or Path(tempfile.mkdtemp(prefix="dlbench-run-"))
    try:
        for i, (tid, planned) in enumerate(pending):
            spec = with_ids(planned.spec, run_id, tid)
            progress.trial_started(i, len(pending), planned)
            store.mark_running(tid)
            try:
                result = spawn.run_trial(spec, tmp, on_event=progress.event,
                                         on_start=functools.partial(store.set_trial_process, tid))
            except KeyboardInterrupt as e:
                store.finish_trial(tid, e.result if isinstance(e, spawn.Interrupted) else
                                   TrialResult(status="interrupted", error="interrupted by the user (SIGINT)"))
                outcome.statuses["interrupted"] = outcome.statuses.get("interrupted", 0) + 1
                outcome.interrupted = True
                return outcome
            store.finish_trial(tid, result)
            outcome.statuses[result.status] = outcome.statuses.get(result.status, 0) + 1
            progress.trial_finished(i, len(pending), planned, result)
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return outcome
