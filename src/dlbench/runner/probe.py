"""Numerical probes of Programs, in a child process: `python -m dlbench.runner.probe REQUEST OUT`.

Used three ways, always in a fresh process per framework (the parent never imports one):
- the float64 parity reference of a workload (runner/reference.py);
- `dlbench check`: one process per framework probes every requested workload;
- the worker's per-trial parity phase calls `fixed_batch_grads` and `save_grads` directly.

REQUEST is JSON {"trials": [TrialSpec dicts, one framework], "k_steps": K}. For trial i the probe
writes OUT/i.npz (the fixed batch's loss and gradients in canonical names, and the eval-mode
logits on the fixed batch from the canonical parameters (`init_logits`, what inference trials are
judged against); with K > 0 also the K-step loss trajectory from the canonical parameters and the
eval-mode logits on the fixed batch after those steps) and OUT/i.json ({"status", "error", "numerics"}). A failure of one workload
is recorded and the probe goes on with the next.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend
from dlbench.backends.base import Backend, Program, Unsupported
from dlbench.spec import TrialSpec, WorkloadSpec, trial_from_dict
from dlbench.workloads.data import batch_indices, epoch_order

FIXED_BATCH_SIZE = 8
GRAD_PREFIX = "grad/"


def fixed_batch_grads(program: Program, spec: WorkloadSpec) -> tuple[float, dict[str, np.ndarray]]:
    """Loss and gradients on the canonical fixed batch from the canonical initial parameters, in
    a state of their own (the trial's training state is left alone)."""
    wl = workloads.get(spec.name)
    state = program.init(wl.init_params(spec))
    batch = wl.fixed_batch(spec, FIXED_BATCH_SIZE)
    return program.loss_and_grads(state, batch.x, batch.y)


def fixed_batch_logits(program: Program, spec: WorkloadSpec) -> np.ndarray:
    """Eval-mode logits on the canonical fixed batch from the canonical initial parameters."""
    wl = workloads.get(spec.name)
    state = program.init(wl.init_params(spec))
    return np.asarray(program.predict(state, wl.fixed_batch(spec, FIXED_BATCH_SIZE).x), np.float64)


def save_grads(path: Path, loss: float, grads: dict[str, np.ndarray], **extra: np.ndarray) -> None:
    arrays: dict[str, Any] = {GRAD_PREFIX + k: np.asarray(v) for k, v in grads.items()}
    arrays.update(extra, loss=np.float64(loss))
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def load_grads(path: Path) -> tuple[float, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(loss, gradients, the other arrays) from a file written by save_grads."""
    with np.load(path) as f:
        grads = {k.removeprefix(GRAD_PREFIX): f[k] for k in f.files if k.startswith(GRAD_PREFIX)}
        extra = {k: f[k] for k in f.files if k != "loss" and not k.startswith(GRAD_PREFIX)}
        return float(f["loss"]), grads, extra


def trajectory_rows(spec: WorkloadSpec, k_steps: int) -> np.ndarray:
    """The first K steps' index rows of the spec's order, across epochs when K exceeds one."""
    rows: list[np.ndarray] = []
    epoch = 0
    while sum(len(r) for r in rows) < k_steps:
        rows.append(batch_indices(epoch_order(spec.seed, epoch, spec.dataset_size), spec.batch_size))
        epoch += 1
    return np.concatenate(rows)[:k_steps]


def trajectory(backend: Backend, program: Program, spec: WorkloadSpec, k_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """K training steps from the canonical parameters, one step per chunk so every framework
    reports per-step losses; then eval-mode logits on the fixed batch."""
    wl = workloads.get(spec.name)
    state = program.init(wl.init_params(spec))
    program.load(wl.make_dataset(spec))
    batches = program.batches(trajectory_rows(spec, k_steps))
    losses = []
    for _ in range(k_steps):
        state, chunk = program.train_chunk(state, batches, 1)
        backend.sync(state, chunk)
        losses.append(program.losses_to_numpy(chunk)[-1])
    logits = program.predict(state, wl.fixed_batch(spec, FIXED_BATCH_SIZE).x)
    return np.asarray(losses, np.float64), np.asarray(logits, np.float64)


def probe_one(backend: Backend, trial: TrialSpec, k_steps: int, out: Path) -> dict[str, Any]:
    if not backend.capabilities.grads:
        raise Unsupported(f"{trial.framework} computes no gradients (capabilities: "
                          f"{', '.join(backend.capabilities.names())})")
    # One process probes every workload: each must compile as it would in its trial's worker.
    backend.forget_compiled()
    program = backend.build(trial)
    loss, grads = fixed_batch_grads(program, trial.workload)
    extra: dict[str, np.ndarray] = {"init_logits": fixed_batch_logits(program, trial.workload)}
    if k_steps > 0:
        extra["losses"], extra["logits"] = trajectory(backend, program, trial.workload, k_steps)
    save_grads(out, loss, grads, **extra)
    return {"status": "ok", "numerics": program.numerics()}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m dlbench.runner.probe REQUEST OUT_DIR", file=sys.stderr)
        return 2
    from dlbench.runner.worker import setup_environment

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
        for i, trial in enumerate(trials):
            (out_dir / f"{i}.json").write_text(json.dumps(_probe_safely(backend, trial, request, out_dir / f"{i}.npz")))
    finally:
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)
    return 0


def _probe_safely(backend: Backend, trial: TrialSpec, request: dict[str, Any], out: Path) -> dict[str, Any]:
    try:
        trial.validate()
        return probe_one(backend, trial, int(request.get("k_steps", 0)), out)
    except Unsupported as e:
        return {"status": "unsupported", "error": str(e)}
    except Exception as e:  # one workload's failure is its own; the probe goes on
        return {"status": "failed", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}


if __name__ == "__main__":
    sys.exit(main())
