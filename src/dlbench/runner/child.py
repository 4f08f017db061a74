"""What every child process dlbench starts does before it imports a framework: the worker of a
trial (runner/worker.py) and the numerical probe (runner/probe.py) alike.

Affinity and the BLAS/OpenMP thread variables first (XLA:CPU sizes its pools from the affinity
mask), then the backend's environment (compile cache locations, log levels, devices hidden from
frameworks that are loaded but not under test), then the variables the trial's framework options
set (Option.environment: TF_ENABLE_ONEDNN_OPTS, OMP_WAIT_POLICY), then what was set is recorded.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from dlbench import paths
from dlbench.backends.base import COMMON_RECORDED_VARS, THREAD_VARS, Backend, option_environment
from dlbench.spec import TrialSpec


def pin_threads(threads: int | None) -> list[int]:
    """Pin to the first N cores of the current mask and set the BLAS/OpenMP thread variables.
    XLA:CPU sizes its pools from the affinity mask; torch and TF get their own settings in
    Backend.configure."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads is not None:
        if threads > len(allowed):
            raise ValueError(f"threads {threads} exceeds the {len(allowed)} cores available")
        allowed = allowed[:threads]
        os.sched_setaffinity(0, allowed)
    for var in THREAD_VARS:
        os.environ[var] = str(len(allowed))
    return allowed


def recorded_variables(backend: Backend) -> tuple[str, ...]:
    """The environment variables recorded with a trial of `backend`: the ones every framework
    reads, then the backend's own."""
    return tuple(dict.fromkeys((*COMMON_RECORDED_VARS, *backend.recorded_environment)))


def setup_environment(trial: TrialSpec, backend: Backend) -> tuple[dict[str, Any], Path | None]:
    """Everything that must happen before the framework is imported. Returns the recorded
    settings and a per-trial cache directory to delete afterwards (cold cache)."""
    cores = pin_threads(trial.policy.threads)
    fresh: Path | None = None
    if trial.policy.compile_cache == "cold":
        fresh = Path(tempfile.mkdtemp(prefix="dlbench-cache-"))
        cache_dir = fresh
    else:
        cache_dir = paths.warm_compile_cache(trial.framework)
        cache_dir.mkdir(parents=True, exist_ok=True)
    # The options' variables last: a trial that asks for oneDNN off gets it whatever else says.
    from_options = option_environment(backend.options, trial.policy)
    env = {**backend.environment(trial.policy, str(cache_dir)), **backend.data_parallel.environment(trial),
           **from_options}
    for key, value in env.items():
        os.environ[key] = value
    recorded: dict[str, Any] = {
        "cores": cores,
        "compile_cache_dir": str(cache_dir),
        "env": {k: os.environ.get(k) for k in recorded_variables(backend)},
    }
    if from_options:
        recorded["option_env"] = from_options
    return recorded, fresh
