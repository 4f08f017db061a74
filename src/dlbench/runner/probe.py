"""Numerical probes of Programs, in a child process: `python -m dlbench.runner.probe REQUEST OUT`.

Used two ways, always in a fresh process per framework (the parent never imports one), started
by runner/probe_client.py:
- the float64 parity reference of a workload (runner/reference.py);
- `dlbench check`: one process per framework probes every requested workload.
(A trial's own parity phase runs inside its worker: runner/fixedbatch.py.)

REQUEST is JSON {"trials": [TrialSpec dicts, one framework], "k_steps": K}. For trial i the probe
writes OUT/i.npz (the fixed batch's loss and gradients in canonical names, and the eval-mode
logits on the fixed batch from the canonical parameters (`init_logits`, what inference trials are
judged against); with K > 0 also the K-step loss trajectory from the canonical parameters and the
eval-mode logits on the fixed batch after those steps, and the batch its pipeline fed for the
last step) and OUT/i.json ({"status", "error",
"numerics"}). A failure of one workload is recorded and the probe goes on with the next.
With "indices" in REQUEST, only those trials are probed (the parent restarts a probe that died
on one workload for the ones after it); OUT/i.started marks each trial begun.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend, support
from dlbench.backends.base import Backend, Learner, Unsupported
from dlbench.runner import fixedbatch, protocol
from dlbench.runner.child import setup_environment
from dlbench.spec import PARITY_BATCH, TrialSpec, trial_from_dict


def trajectory_rows(trial: TrialSpec, k_steps: int) -> np.ndarray:
    """The first K steps' index rows of the spec's order, across epochs when K exceeds one."""
    spec = trial.workload
    rows: list[np.ndarray] = []
    epoch = 0
    while sum(len(r) for r in rows) < k_steps:
        rows.append(workloads.epoch_steps(spec, epoch)[0])
        epoch += 1
    return np.concatenate(rows)[:k_steps]


def trajectory(backend: Backend, program: Learner, trial: TrialSpec, wl: ModuleType,
               k_steps: int) -> dict[str, np.ndarray]:
    """K training steps from the canonical parameters, one step per chunk so every framework
    reports per-step losses; then eval-mode logits on the fixed batch. Also the batch the
    pipeline feeds for the last step (canonical layout): bit-identical in every framework.
    `wl`: the trial's workload module."""
    spec = trial.workload
    state = support.init(trial, wl, program)
    program.load(wl.make_dataset(spec))
    rows = trajectory_rows(trial, k_steps)
    last_x, last_y = program.canonical_batch(next(iter(program.batches(rows[-1:]))))
    batches = program.batches(rows)
    losses = []
    for _ in range(k_steps):
        state, chunk = program.train_chunk(state, batches, 1)
        backend.sync(state, chunk)
        losses.append(program.losses_to_numpy(chunk)[-1])
    logits = program.predict(state, wl.fixed_batch(spec, PARITY_BATCH).x)
    return {"losses": np.asarray(losses, np.float64), "logits": np.asarray(logits, np.float64),
            "last_batch_x": np.asarray(last_x), "last_batch_y": np.asarray(last_y)}


def probe_one(backend: Backend, trial: TrialSpec, k_steps: int, out: Path) -> dict[str, Any]:
    if not backend.capabilities.grads:
        raise Unsupported(f"{trial.framework} computes no gradients (capabilities: "
                          f"{', '.join(backend.capabilities.names())})")
    support.require(trial, backend)
    # One process probes every workload: each must compile as it would in its trial's worker.
    backend.forget_compiled()
    program = support.build_learner(trial, backend)
    wl = workloads.get(trial.workload.name)
    loss, grads = fixedbatch.grads(trial, wl, program)
    extra: dict[str, np.ndarray] = {"init_logits": fixedbatch.logits(trial, wl, program)}
    if k_steps > 0:
        extra.update(trajectory(backend, program, trial, wl, k_steps))
    protocol.save_grads(out, loss, grads, **extra)
    return {"status": "ok", "numerics": program.numerics()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m dlbench.runner.probe REQUEST OUT_DIR", file=sys.stderr)
        return 2
    request = json.loads(Path(args[0]).read_text())
    out_dir = Path(args[1])
    trials = [trial_from_dict(d) for d in request["trials"]]
    backend = get_backend(trials[0].framework)
    _, fresh = setup_environment(trials[0], backend)
    if any(t.workload.numerics.dtype == "float64" for t in trials):
        os.environ.update(backend.reference_environment())
    try:
        backend.import_framework()
        backend.configure(trials[0].policy)
        for i in request.get("indices", range(len(trials))):
            # The marker names the workload being probed if this process dies on it (probe_client).
            (out_dir / f"{i}.started").touch()
            result = _probe_safely(backend, trials[i], request, out_dir / f"{i}.npz")
            (out_dir / f"{i}.json.part").write_text(json.dumps(result))
            os.replace(out_dir / f"{i}.json.part", out_dir / f"{i}.json")  # whole, or not there
    finally:
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)
    return 0


def _probe_safely(backend: Backend, trial: TrialSpec, request: dict[str, Any], out: Path) -> dict[str, Any]:
    try:
        support.validate(trial)
        return probe_one(backend, trial, int(request.get("k_steps", 0)), out)
    except Unsupported as e:
        return {"status": "unsupported", "error": str(e)}
    except Exception as e:  # one workload's failure is its own; the probe goes on
        return {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


if __name__ == "__main__":
    sys.exit(main())
