"""`dlbench run --resume`: finish a run whose parent died (SIGKILL, a closed terminal, a reboot)
or was interrupted, running each unfinished trial exactly once, in the run's original order.

Every stored trial spec is validated before anything changes; then the run is claimed (refused
while the process that runs it is alive), whatever is left of a dead worker's process group is
killed, and the trials go back to `pending`, their earlier attempt kept in `attempts`.

Trials of the Ray executor stay `pending` in the store until their task returns, and never
record a pid (a node's pid is no process here: it goes into the notes with the node), so a
dead driver's Ray trials are simply run again, and nothing is killed on their account; the
Ray worker that ran one died with its driver (Ray's owner fate-sharing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlbench.results.store import RESUMABLE_STATUSES, RETRYABLE_STATUSES, Store, StoreError
from dlbench import processes
from dlbench.runner import rounds
from dlbench.runner.plan import PlannedTrial
from dlbench.spec import SpecError, TrialSpec, trial_from_dict


@dataclass
class Resumption:
    run_id: int
    trials: list[tuple[int, PlannedTrial]] = field(default_factory=list)
    previous: dict[str, int] = field(default_factory=dict)  # re-run trials by earlier status
    killed: list[int] = field(default_factory=list)  # pids of survivors killed


def statuses(retry_failed: bool) -> tuple[str, ...]:
    return RESUMABLE_STATUSES + (RETRYABLE_STATUSES if retry_failed else ())


def select_run(store: Store, selector: str, retry_failed: bool) -> int | None:
    """A run id, or "" for the newest run with something to re-run (None when there is none):
    a trial to run again, or an auto rule that has not stopped (runner/rounds.py)."""
    if selector:
        run_ids = store.resolve_runs(selector)
        if len(run_ids) != 1:
            raise StoreError(f"run {selector!r}: --resume takes one run id or 'latest'")
        return run_ids[0]
    with_trials = store.latest_resumable_run(statuses(retry_failed))
    newer = [r for r in _run_ids(store) if with_trials is None or r > with_trials]
    return next((r for r in reversed(newer) if rounds.unfinished(store, r)), with_trials)


def _run_ids(store: Store) -> list[int]:
    try:
        return store.resolve_runs("all")
    except StoreError:
        return []


def prepare(store: Store, run_id: int, retry_failed: bool, search: bool = False) -> Resumption:
    """Claim the run and reset its unfinished trials to `pending`; raises (changing nothing)
    when a stored spec is no longer valid or another live process runs the run. `search`: a
    tune search that did not end (runner/tune.py), claimed even where no trial is unfinished."""
    rows = store.resumable_trials(run_id, statuses(retry_failed))
    out = Resumption(run_id)
    if not rows and not rounds.unfinished(store, run_id) and not search:
        return out
    specs = [_valid_spec(run_id, r.id, r.spec) for r in rows]
    owner = store.claim_run(run_id, processes.is_alive)
    if owner is not None:
        raise StoreError(f"run {run_id} is still being run by process {owner}; wait for it, or stop"
                         " it (Ctrl-C) and resume again")
    for row, spec in zip(rows, specs, strict=True):
        if row.status == "running" and row.pid is not None:
            out.killed += processes.kill_survivors(row.pid, row.process_created_at)
        store.reset_trial(row.id)
        out.trials.append((row.id, PlannedTrial(spec)))
        out.previous[row.status] = out.previous.get(row.status, 0) + 1
    return out


def _valid_spec(run_id: int, trial_id: int, spec: dict[str, object]) -> TrialSpec:
    try:
        trial = trial_from_dict(spec)
        trial.validate()
    except SpecError as e:
        raise SpecError(f"run {run_id}, trial {trial_id} cannot be resumed: {e}") from None
    except (TypeError, KeyError) as e:
        raise SpecError(f"run {run_id}, trial {trial_id} cannot be resumed: its stored spec is"
                        f" not one this dlbench reads ({e})") from None
    return trial
