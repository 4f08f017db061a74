"""Run in a fresh process per framework (like a worker): exercise every supported mode of the
backend on a tiny cnn and save what the contract tests assert on.

    python contract_check.py FRAMEWORK OUT_DIR
writes OUT_DIR/FRAMEWORK.json (facts) and OUT_DIR/FRAMEWORK-MODE.npz (gradients, parameters).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend
from dlbench.backends.base import Backend
from dlbench.runner.scenarios import train
from dlbench.runner.child import setup_environment
from dlbench.spec import Policy, TrialSpec, WorkloadSpec
from dlbench.workloads.data import batch_indices, epoch_order

SPEC = WorkloadSpec(batch_size=16, dataset_size=64, eval_size=16, seed=0)
K_STEPS = 4


def batch_digest(x: np.ndarray, y: np.ndarray) -> str:
    h = hashlib.sha256(np.ascontiguousarray(x, dtype=np.float32).tobytes())
    h.update(np.asarray(y, dtype=np.int64).tobytes())
    return h.hexdigest()


def check_mode(backend: Backend, mode: str, out_dir: Path, name: str) -> dict[str, Any]:
    wl = workloads.get(SPEC.name)
    trial = TrialSpec(workload=SPEC, framework=name, policy=Policy(mode=mode))
    program = backend.build(trial)
    params = wl.init_params(SPEC)
    state = program.init(params)
    program.load(wl.make_dataset(SPEC))
    rows = batch_indices(epoch_order(SPEC.seed, 0, SPEC.dataset_size), SPEC.batch_size)
    first = next(iter(program.batches(rows)))
    fx, fy = program.canonical_batch(first)
    fixed = wl.fixed_batch(SPEC)
    loss, grads = program.loss_and_grads(state, fixed.x, fixed.y)
    compile_s = program.compile(state, first)
    # K steps on the first batch repeated: the loss on it must fall, and every framework does
    # exactly the same K updates, so the parameters can be compared across frameworks.
    batches = program.batches(np.tile(rows[:1], (K_STEPS, 1)))
    losses = []
    counts = []
    per_chunk = []
    t0 = time.perf_counter()
    for _ in range(K_STEPS // 2):
        state, chunk_losses = program.train_chunk(state, batches, 2)
        backend.sync(state, chunk_losses)
        per_chunk.append(program.losses_to_numpy(chunk_losses))
        losses.extend(per_chunk[-1].tolist())
        counts.append(program.compilations())
    # The loss series a trial stores from these chunks (the runner's own function), as if each
    # chunk took 1 s: what the report draws.
    by_step, by_time, means = train.loss_points([2] * len(per_chunk), per_chunk,
                                                [(1.0, i + 1.0) for i in range(len(per_chunk))])
    trained = program.params(state)
    logits = program.predict(state, fixed.x)
    reset = program.params(program.init(params))
    np.savez(out_dir / f"{name}-{mode}.npz",
             **{f"grad/{k}": v for k, v in grads.items()},
             **{f"trained/{k}": v for k, v in trained.items()})
    return {
        "numerics": program.numerics(),
        "first_batch_digest": batch_digest(fx, fy),
        "loss": float(loss),
        "reference_loss": wl.reference_loss(SPEC, params, fixed.x, fixed.y),
        "grad_shapes": {k: list(v.shape) for k, v in grads.items()},
        "compile_s": compile_s,
        "losses": losses,
        "loss_series": {"by_step": by_step, "by_time": by_time, "chunk_means": means},
        "compilations": counts,
        "logits_shape": list(np.asarray(logits).shape),
        "reset_max_abs_diff": max(float(np.max(np.abs(reset[k] - params[k]))) for k in params),
        "seconds": time.perf_counter() - t0,
    }


def main() -> int:
    name, out_dir = sys.argv[1], Path(sys.argv[2])
    backend = get_backend(name)
    trial = TrialSpec(workload=SPEC, framework=name)
    setup_environment(trial, backend)
    backend.import_framework()
    facts: dict[str, Any] = {"configure": backend.configure(Policy()), "info": backend.info(),
                             "modes": {}}
    for mode, reason in backend.modes().items():
        if reason is None:
            facts["modes"][mode] = check_mode(backend, mode, out_dir, name)
    (out_dir / f"{name}.json").write_text(json.dumps(facts, default=str))
    return 0


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(main())
