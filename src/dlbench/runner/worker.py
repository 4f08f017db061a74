"""The child process of one trial: `python -m dlbench.runner.worker SPEC OUT`.

The only place a framework is imported for a trial, and nothing more than the process entry: it
reads the TrialSpec JSON from SPEC, sets the environment and CPU affinity before the import
(runner/child.py), starts the monitors, imports and configures the framework, then hands a
TrialContext to the runner scenario the workload names for the trial's `--scenario` (workloads:
SCENARIOS; its entry in runner/scenarios/registry.py). File names: runner/protocol.py. Events go to OUT.events as JSON lines (phase boundaries,
finished chunks, warnings), the TrialResult JSON to OUT, never to stdout (frameworks print there).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from dlbench import subjects
from dlbench.backends import support
from dlbench.backends.base import Backend, Unsupported
from dlbench.results.records import TrialResult
from dlbench.runner import parallel
from dlbench.runner.scenarios.registry import RUNS
from dlbench.runner.child import setup_environment
from dlbench.runner.context import Monitors, TrialContext, import_and_configure
from dlbench.runner.timing import EventLog, Phases, process_start_monotonic
from dlbench.runner.protocol import events_path, interference_path, parity_path
from dlbench.spec import TrialSpec, trial_from_dict

def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m dlbench.runner.worker SPEC OUT", file=sys.stderr)
        return 2
    spec_path, out_path = Path(args[0]), Path(args[1])
    created = process_start_monotonic()
    log = EventLog(events_path(out_path))
    log.start(os.getpid(), created)
    result = TrialResult(status="failed", pid=os.getpid())
    fresh_cache: Path | None = None
    try:
        trial = trial_from_dict(json.loads(spec_path.read_text()))
        backend = support.validate(trial)
        recorded, fresh_cache = setup_environment(trial, backend)
        result.policy_effective.update(recorded)
        run_trial(trial, backend, log, created, result, out_path)
        result.status = "ok"
    except Unsupported as e:
        result.status, result.error = "unsupported", str(e)
    except Exception as e:  # the trial fails; the parent records it and the sweep goes on
        result.status, result.error = "failed", f"{type(e).__name__}: {e}"
        result.notes["traceback"] = traceback.format_exc()
        log.warning(result.error)
    finally:
        if fresh_cache is not None:
            shutil.rmtree(fresh_cache, ignore_errors=True)
    result.write(out_path)
    log.end(result.status)
    log.close()
    return 0


def scenario_of(trial: TrialSpec) -> Callable[[TrialContext], None]:
    """The runner scenario the trial's subject (workload or problem) runs its --scenario with
    (asked after support.require has said the subject has it)."""
    return RUNS[subjects.record(trial).name]


def run_trial(trial: TrialSpec, backend: Backend, log: EventLog, created: float, result: TrialResult,
              out_path: Path) -> None:
    """Monitors around the whole trial; the import and configuration; the one "can this run?"
    of the child, on the device the framework found (support.require: the workload's scenario,
    the backend's capability, mode, precision, options and devices); then the scenario. Fills
    `result` as it goes, so that a failure keeps every metric measured before it."""
    monitors = Monitors(trial.devices, trial.policy.threads, interference_path(out_path))
    monitors.start()
    ctx = TrialContext(trial, backend, log, Phases(log), monitors.sampler, created, result, parity_path(out_path))
    try:
        import_and_configure(ctx)
        support.require(trial, backend)
        parallel.setup(trial, backend, result)
        result.framework_info = backend.info()
        scenario_of(trial)(ctx)
    finally:
        monitors.close(result)


if __name__ == "__main__":
    sys.exit(main())
