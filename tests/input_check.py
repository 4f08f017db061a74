"""Run in a fresh process per framework: a converge trial through the worker, then every input
pipeline of the backend against the spec's definition; one framework import for both.

    python input_check.py FRAMEWORK OUT_DIR
writes OUT_DIR/FRAMEWORK-converge.json (the worker's TrialResult: tiny mlp to a modest target)
and OUT_DIR/FRAMEWORK.json: per data placement and loader workers, whether each batch equals the
spec's (rows gathered; crop_flip in NumPy for the augmented ones) bit for bit, and the losses of
two training steps on device-resident augmented batches behind a TimedBatches wrapper.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend
from dlbench.backends.base import Backend, TimedBatches
from dlbench.runner import worker
from dlbench.runner.plan import workload_spec
from dlbench.spec import ConvergeOptions, Policy, TrialSpec, WorkloadSpec, to_dict
from dlbench.workloads.data import crop_flip, epoch_steps

SPEC = WorkloadSpec(batch_size=8, dataset_size=32, eval_size=8, augment="crop_flip", seed=3)
CONFIGS = [("pipeline", 0), ("pipeline", 1), ("device", 0)]
# tiny mlp: every framework reached 0.5 held-out accuracy at step 72 (K = 8, seed 0).
TARGET = 0.5
EVAL_EVERY = 8


def mode_of(backend: Backend) -> str:
    """The cheapest supported mode: eager where there is one (no compile)."""
    modes = backend.modes()
    return next(m for m in ("eager", "graph", "compiled") if modes.get(m) is None)


def converge_spec(name: str, mode: str) -> TrialSpec:
    return TrialSpec(workload=workload_spec("mlp", "tiny"), framework=name, policy=Policy(mode=mode),
                     scenario="converge", options=ConvergeOptions(target_accuracy=TARGET, eval_every=EVAL_EVERY, max_steps=400),
                     trial_id=1)


def check(backend: Backend, name: str, mode: str, data: str, workers: int) -> dict[str, Any]:
    """One program per placement: its batches with and without crop_flip; on the device, two
    training steps on augmented batches too."""
    wl = workloads.get(SPEC.name)
    program = backend.build(TrialSpec(workload=SPEC, framework=name,
                                      policy=Policy(mode=mode, data=data, loader_workers=workers)))
    dataset = wl.make_dataset(SPEC)
    program.load(dataset)
    rows, augment = epoch_steps(SPEC, 1)
    assert augment is not None
    out: dict[str, Any] = {}
    for aug in (None, augment):
        equal = []
        for i, batch in enumerate(program.batches(rows, aug)):
            x, y = program.canonical_batch(batch)
            want = dataset.x[rows[i]] if aug is None else crop_flip(dataset.x[rows[i]], aug.offsets[i], aug.flips[i])
            equal.append(bool(np.array_equal(x, want) and np.array_equal(y, dataset.y[rows[i]])))
        out["augmented" if aug else "plain"] = equal
    if data == "device":
        state = program.init(wl.init_params(SPEC))
        state, losses = program.train_chunk(state, TimedBatches(program.batches(rows, augment)), 2)
        backend.sync(state, losses)
        out["losses"] = program.losses_to_numpy(losses).tolist()
    return out


def main() -> int:
    name, out_dir = sys.argv[1], Path(sys.argv[2])
    backend = get_backend(name)
    mode = mode_of(backend)
    spec_path = out_dir / f"{name}-converge-spec.json"
    spec_path.write_text(json.dumps(to_dict(converge_spec(name, mode))))
    # The worker imports the framework (environment first), as in a trial of its own.
    worker.main([str(spec_path), str(out_dir / f"{name}-converge.json")])
    results = {f"{data}/{workers}": check(backend, name, mode, data, workers) for data, workers in CONFIGS}
    (out_dir / f"{name}.json").write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
