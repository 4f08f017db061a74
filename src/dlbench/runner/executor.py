"""The local executor: one trial at a time, each in a fresh worker process; the store is written
by this (parent) process only, one transaction per finished trial."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from dlbench import backends, subjects
from dlbench.backends import get_backend
from dlbench.results.records import FAILURE_STATUSES, TrialResult
from dlbench.results.store import Store
from dlbench.runner import annotate, children, protocol, reference, spawn
from dlbench.runner.plan import Plan, PlannedTrial, with_ids
from dlbench.runner.probe_client import PROBE_TIMEOUT_S, ProbeLimits
from dlbench.runner.verdicts import Ceilings, ceilings, judge_efficiency, judge_parity
from dlbench.spec import Policy, SpecError, TrialSpec

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
    parity_failures: int = 0

    @property
    def failed(self) -> int:
        return sum(n for s, n in self.statuses.items() if s in FAILURE_STATUSES)

    def count(self, status: str) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def add(self, part: Outcome) -> None:
        """Fold in the outcome of a later batch of the same run (a round, a search phase)."""
        for status, n in part.statuses.items():
            self.statuses[status] = self.statuses.get(status, 0) + n
        self.interrupted |= part.interrupted
        self.parity_failures += part.parity_failures


# An executor's `execute(store, run_id, trials, progress)`, as its callers take it (this module's
# `execute`, or the Ray executor's bound to its cluster: runner/executors.py opens either).
RunTrials = Callable[[Store, int, list[tuple[int, PlannedTrial]], Progress], Outcome]


def settled(trials: list[tuple[int, PlannedTrial]]) -> tuple[Outcome, list[tuple[int, PlannedTrial]]]:
    """The outcome so far (trials the plan already settled: unsupported, skipped) and the
    trials left to run: what every executor starts from."""
    outcome = Outcome()
    for planned in (p for _, p in trials if p.status != "pending"):
        outcome.count(planned.status)
    return outcome, [(tid, p) for tid, p in trials if p.status == "pending"]


def finish(store: Store, tid: int, spec: TrialSpec, result: TrialResult, parity_file: Path,
           refs: dict[str, reference.Reference | str], limits: Ceilings, outcome: Outcome) -> None:
    """Judge a finished trial (parity, efficiency), store it in one transaction, count it."""
    record_origins(spec, result)
    keep_profile(store, tid, result)
    if result.status == "ok":
        judge_parity(spec, result, parity_file, refs)
        judge_efficiency(spec, result, limits)
        if result.parity.get("verdict") == "fail":
            outcome.parity_failures += 1
    store.finish_trial(tid, result)
    outcome.count(result.status)


def finish_run(store: Store, run_id: int, interrupted: bool) -> str:
    """The parent's steps after a run's trials (a resumed run's included, with those finished
    before), whichever executor ran them: the scaling efficiency of its multi-device trials
    against their paired one-device trials (runner/annotate.py), then the run's status over all
    its trials, stored and returned."""
    annotate.annotate_run(store, run_id)
    failed = any(s in FAILURE_STATUSES for s in store.statuses(run_id))
    status = "interrupted" if interrupted else ("failed" if failed else "ok")
    store.finish_run(run_id, status)
    return status


def keep_profile(store: Store, tid: int, result: TrialResult) -> None:
    """A profiled trial's trace directory moves from the worker's scratch directory to
    `<store>.profiles/trial-<id>/`, kept with the store; the note names the trace file there."""
    trace = result.notes.get(protocol.TRACE_NOTE)
    source = next((p for p in Path(trace or "").parents if p.name.endswith(".profile")), None)
    if trace is None or source is None or not Path(trace).is_file():
        return
    target = Path(f"{store.path}.profiles") / f"trial-{tid}"
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(source), target)
    result.notes[protocol.TRACE_NOTE] = str(target / Path(trace).relative_to(source))


def record_origins(spec: TrialSpec, result: TrialResult) -> None:
    """Where the trial's workload and framework come from (built into dlbench, or which plugin
    distribution and version), stored with the trial in its framework_info."""
    for key, find, name in (("workload_origin", subjects.origin, spec.workload.name),
                            ("framework_origin", backends.origin, spec.framework)):
        try:
            result.framework_info[key] = find(name).to_dict()
        except SpecError as e:  # a plugin uninstalled since the plan (a resumed run)
            result.framework_info[key] = {"source": "unknown", "error": str(e)}


def references(trials: list[TrialSpec], on_message: Callable[[str], None]) -> dict[str, reference.Reference | str]:
    """The float64 fixed-batch references the trials' judges compare with, computed (or read from
    the cache) once before any trial runs, for every executor: one per workload spec of the
    trials whose record has a parent reference (Scenario.parent_reference: a workload's; a
    problem's trial measures against the problem's own reference solution)."""
    judged = [t for t in trials if subjects.record(t).parent_reference]
    if not judged:
        return {}
    return reference.ensure([t.workload for t in judged], 0, on_message, probe_limits(judged))


def probe_limits(specs: list[TrialSpec]) -> ProbeLimits:
    """The parity reference's probe is bound like the trials it serves: each workload by the
    longest --timeout and the largest --memory-limit among them (none if any trial has none)."""
    memory = [s.memory_limit_bytes for s in specs]
    return ProbeLimits(timeout_s=max((s.timeout_s for s in specs), default=PROBE_TIMEOUT_S),
                       memory_limit_bytes=None if not memory or None in memory else max(m for m in memory if m))


def warm_imports(plan: Plan, progress: Progress) -> None:
    """Import each framework once, untimed, in a throwaway process, so the page cache is warm
    alike for every trial (the first trial would otherwise pay the cold disk reads)."""
    for name in dict.fromkeys(t.spec.framework for t in plan.pending):
        warm_import(name, progress.message)


def warm_import(name: str, on_message: Callable[[str], None]) -> None:
    """One framework's untimed import in a throwaway process; marks this machine warm for it."""
    backend = get_backend(name)
    on_message(f"warming the page cache: importing {name} once (untimed)")
    with tempfile.TemporaryDirectory(prefix="dlbench-warm-") as tmp:
        child, watched = children.run_child("dlbench.runner.warm", [name], Path(tmp) / "warm.log",
                                            WARM_IMPORT_TIMEOUT_S,
                                            env=backend.environment(Policy(), tempfile.gettempdir()))
    if watched.killed_for == "timeout":
        on_message(f"importing {name} took over {WARM_IMPORT_TIMEOUT_S} s; going on")
    with contextlib.suppress(OSError):
        warm_marker(name).touch()


def warm_marker(name: str) -> Path:
    """Marks a framework imported on this machine since it booted (the page cache is warm):
    a Ray task imports a framework once per node, and not where the driver already did."""
    return Path(tempfile.gettempdir()) / f"dlbench-warm-{os.getuid()}-{int(psutil.boot_time())}-{name}"


def register(store: Store, run_id: int, plan: Plan) -> list[tuple[int, PlannedTrial]]:
    """Write every planned trial to the store up front (pending, unsupported or skipped), so an
    interrupted sweep shows what is left."""
    out = []
    for seq, planned in enumerate(plan.trials):
        tid = store.add_trial(run_id, seq, planned.spec, status=planned.status)
        if planned.status != "pending":
            result = TrialResult(status=planned.status, error=planned.reason)
            record_origins(planned.spec, result)
            store.finish_trial(tid, result)
        out.append((tid, planned))
    return out


def execute(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]],
            progress: Progress, workdir: Path | None = None) -> Outcome:
    outcome, pending = settled(trials)
    refs = references([p.spec for _, p in pending], progress.message)
    limits = ceilings([p.spec for _, p in pending], progress.message)
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
                outcome.count("interrupted")
                outcome.interrupted = True
                return outcome
            finish(store, tid, spec, result, protocol.parity_path(spawn.out_path_for(spec, tmp)), refs, limits, outcome)
            progress.trial_finished(i, len(pending), planned, result)
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return outcome
