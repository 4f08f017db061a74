"""The local executor: one trial at a time, each in a fresh worker process; the store is written
by this (parent) process only, one transaction per finished trial."""

from __future__ import annotations

import contextlib
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

import psutil

from dlbench import precision
from dlbench.analysis import efficiency, parity
from dlbench.backends import get_backend
from dlbench.results.records import FAILURE_STATUSES, TrialResult
from dlbench.results.store import Store
from dlbench.runner import ceiling, inference, reference, spawn
from dlbench.runner.plan import Plan, PlannedTrial, with_ids
from dlbench.runner.probe import load_grads
from dlbench.runner.timing import parity_path
from dlbench.spec import Policy, TrialSpec

WARM_IMPORT_TIMEOUT_S = 600
# threads -> (the matmul ceiling measured with that many, or None, and why)
Ceilings = dict[int, tuple[dict[str, Any] | None, str]]


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


def settled(trials: list[tuple[int, PlannedTrial]]) -> tuple[Outcome, list[tuple[int, PlannedTrial]]]:
    """The outcome so far (trials the plan already settled: unsupported, skipped) and the
    trials left to run: what every executor starts from."""
    outcome = Outcome()
    for planned in (p for _, p in trials if p.status != "pending"):
        outcome.count(planned.status)
    return outcome, [(tid, p) for tid, p in trials if p.status == "pending"]


def finish(store: Store, tid: int, spec: TrialSpec, result: TrialResult, parity_file: Path,
           refs: dict[str, reference.Reference | str], ceilings: Ceilings, outcome: Outcome) -> None:
    """Judge a finished trial (parity, efficiency), store it in one transaction, count it."""
    if result.status == "ok":
        judge_parity(spec, result, parity_file, refs)
        judge_efficiency(spec, result, ceilings)
        if result.parity.get("verdict") == "fail":
            outcome.parity_failures += 1
    store.finish_trial(tid, result)
    outcome.count(result.status)


def warm_imports(plan: Plan, progress: Progress) -> None:
    """Import each framework once, untimed, in a throwaway process, so the page cache is warm
    alike for every trial (the first trial would otherwise pay the cold disk reads)."""
    for name in dict.fromkeys(t.spec.framework for t in plan.pending):
        warm_import(name, progress.message)


def warm_import(name: str, on_message: Callable[[str], None]) -> None:
    """One framework's untimed import in a throwaway process; marks this machine warm for it."""
    backend = get_backend(name)
    env = {**os.environ, **backend.environment(Policy(), tempfile.gettempdir())}
    code = f"from dlbench.backends import get_backend; get_backend({name!r}).import_framework()"
    on_message(f"warming the page cache: importing {name} once (untimed)")
    try:
        subprocess.run([sys.executable, "-c", code], env=env, timeout=WARM_IMPORT_TIMEOUT_S,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
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
            store.finish_trial(tid, TrialResult(status=planned.status, error=planned.reason))
        out.append((tid, planned))
    return out


def execute(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]],
            progress: Progress, workdir: Path | None = None) -> Outcome:
    outcome, pending = settled(trials)
    refs = reference.ensure([p.spec.workload for _, p in pending], 0, progress.message) if pending else {}
    ceilings = _ceilings(pending, progress)
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
            finish(store, tid, spec, result, parity_path(spawn.out_path_for(spec, tmp)), refs, ceilings, outcome)
            progress.trial_finished(i, len(pending), planned, result)
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return outcome


def judge_parity(trial: TrialSpec, result: TrialResult, path: Path, refs: dict[str, reference.Reference | str]) -> None:
    """The trial's fixed-batch loss and gradients (an inference trial's logits) against the
    float64 reference: the verdict goes into result.parity, the worst numbers into its metrics."""
    ref = refs.get(reference.key(trial.workload, 0), "no reference was computed for this workload")
    if isinstance(ref, str):
        verdict = parity.not_available(ref)
    elif not path.exists():
        verdict = parity.not_available("the worker wrote no fixed-batch gradients")
    elif trial.scenario == "infer":  # eval-mode logits through the timed paths
        verdict = inference.verdict(path, ref.init_logits, trial.workload.numerics.dtype, ref.label)
    else:
        loss, grads, _ = load_grads(path)
        verdict = parity.compare_grads(loss, grads, ref.loss, ref.grads,
                                       precision.parity_dtype(trial.precision, trial.workload.numerics.dtype),
                                       workload=trial.workload.name,
                                       reference=ref.label)
    result.parity = verdict.to_dict()
    result.metrics["parity_rel_err"] = verdict.worst_rel_err
    result.metrics["parity_min_cosine"] = verdict.min_cosine
    if verdict.verdict == "fail":
        result.warnings.append(f"parity FAILED: {verdict.reason}")


def _ceilings(pending: list[tuple[int, PlannedTrial]], progress: Progress) -> Ceilings:
    """The CPU matmul ceiling for every thread count in the sweep (cached per machine)."""
    out = {}
    for threads in sorted({p.spec.policy.threads or len(os.sched_getaffinity(0)) for _, p in pending}):
        cached, _ = ceiling.ceiling(threads, measure_if_missing=False)
        if cached is None:
            progress.message(f"measuring this machine's float32 matmul ceiling with {threads} thread(s), once")
        out[threads] = (cached, "") if cached is not None else ceiling.ceiling(threads)
    return out


def judge_efficiency(trial: TrialSpec, result: TrialResult, ceilings: Ceilings) -> None:
    """mfu on accelerators in the peak table; matmul_ceiling_share against the measured CPU
    ceiling for the trial's thread count; each null with its reason otherwise."""
    achieved = result.metrics.get("achieved_flops_per_s")
    if achieved is None:
        return
    gpus = [g["name"] for g in result.framework_info.get("gpus", [])]
    value, why = efficiency.mfu(achieved, gpus, trial.precision)
    result.metrics["mfu"] = value
    if value is None:
        result.notes["mfu"] = why
    warning = efficiency.busy_but_idle(result.metrics.get("gpu_utilization_mean"), value)
    if warning is not None:
        result.warnings.append(warning)
    threads = len(result.policy_effective.get("cores") or []) or trial.policy.threads or len(os.sched_getaffinity(0))
    data, why = ceilings.get(threads) or ceiling.ceiling(threads)
    if data is None or gpus:
        result.metrics["matmul_ceiling_share"] = None
        result.notes["matmul_ceiling_share"] = why or "on an accelerator: see mfu"
        return
    result.metrics["matmul_ceiling_share"] = achieved / data["flops_per_s"]
    result.metrics["matmul_ceiling_flops_per_s"] = data["flops_per_s"]
    result.notes["matmul_ceiling"] = f"{data['library']}, {data['threads']} thread(s), {data['size']}^2 float32 GEMM"
