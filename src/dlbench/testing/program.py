"""The Program contract of one workload in one framework, in a fresh process (a framework is
never imported by the process that judges): `python -m dlbench.testing.program FRAMEWORK
WORKLOAD MODES OUT` writes OUT (JSON facts per mode); `problems` starts it and judges them.

Per mode, on the tiny preset: the build and the numerics read back from the framework objects
(backends.support); the first batch of the pipeline bit-identical to the spec's rows; gradients
in the canonical names and shapes; the fixed batch's float32 loss against the workload's own
float64 NumPy `reference_loss` (which `dlbench check` does not see: it compares frameworks with
one framework's float64 run); K steps on one batch with finite, falling losses and no compile
after the first chunk; init() resetting the state; predict's rows.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend, support
from dlbench.backends.base import Backend, Trainable, Unsupported
from dlbench.runner import children
from dlbench.runner.child import setup_environment
from dlbench.spec import PARITY_BATCH, Policy, TrialSpec
from dlbench.workloads.contract import preset_spec
from dlbench.workloads.data import batch_indices, epoch_order

K_STEPS = 4
# float32 against the float64 definition: the built-in workloads agree to ~1e-6 relative.
LOSS_RTOL = 1e-5
TIMEOUT_S = 1800.0


def train_k(backend: Any, program: Any, spec: Any, state: Any) -> tuple[Any, list[float], list[int]]:
    """K steps on the first batch of the spec's order, repeated, in chunks of 2: (state, the
    losses, the compile count after each chunk). Every framework does exactly these K updates."""
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    batches = program.batches(np.tile(rows[:1], (K_STEPS, 1)))
    losses: list[float] = []
    counts = []
    for _ in range(K_STEPS // 2):
        state, chunk = program.train_chunk(state, batches, 2)
        backend.sync(state, chunk)
        losses.extend(program.losses_to_numpy(chunk).tolist())
        counts.append(program.compilations())
    return state, losses, counts


def _mode_facts(backend: Backend, trial: TrialSpec) -> dict[str, Any]:
    """Everything judged of one mode, as plain JSON values."""
    spec = trial.workload
    wl = workloads.get(spec.name)
    support.require(trial, backend)
    program = support.build_learner(trial, backend)
    params = wl.init_params(spec)
    try:
        state = support.init(trial, wl, program)
    except Unsupported as e:  # built, but computing other numerics than the spec's: a failure here
        return {"status": "failed", "error": f"numerics read back: {e}"}
    program.load(wl.make_dataset(spec))
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    fx, fy = program.canonical_batch(next(iter(program.batches(rows[:1]))))
    data = wl.make_dataset(spec)
    fixed = wl.fixed_batch(spec, PARITY_BATCH)
    loss, grads = program.loss_and_grads(state, fixed.x, fixed.y)
    if isinstance(program, Trainable):  # the contract of each capability the program declares
        program.compile(state, next(iter(program.batches(rows[:1]))))
    state, losses, counts = train_k(backend, program, spec, state)
    trained = program.params(state)
    reset = program.params(program.init(params))
    return {
        "status": "ok",
        "first_batch_equal": bool(np.array_equal(fx, data.x[rows[0]]) and np.array_equal(fy, data.y[rows[0]])),
        "grad_shapes": {k: list(v.shape) for k, v in grads.items()},
        "loss": float(loss),
        "reference_loss": float(wl.reference_loss(spec, params, fixed.x, fixed.y)),
        "losses": losses,
        "compilations": counts,
        "trained_moved": any(not np.array_equal(trained[k], params[k]) for k in params),
        "reset_max_abs_diff": max(float(np.max(np.abs(reset[k] - params[k]))) for k in params),
        "predict_rows": int(np.asarray(program.predict(state, fixed.x)).shape[0]),
    }


def child(framework: str, workload: str, modes: list[str], out: Path) -> int:
    """The child: import the framework once, then every mode (those the backend lacks are
    recorded as unsupported)."""
    backend = get_backend(framework)
    spec = preset_spec(workloads.get(workload))
    base = TrialSpec(workload=spec, framework=framework)
    setup_environment(base, backend)
    backend.import_framework()
    backend.configure(Policy())
    facts: dict[str, Any] = {}
    for mode in modes:
        trial = TrialSpec(workload=spec, framework=framework, policy=Policy(mode=mode))
        backend.forget_compiled()
        t0 = time.perf_counter()
        try:
            facts[mode] = _mode_facts(backend, trial)
        except Unsupported as e:
            facts[mode] = {"status": "unsupported", "error": str(e)}
        except Exception as e:  # the finding itself: one line per mode
            facts[mode] = {"status": "failed", "error": f"{type(e).__name__}: {e}"}
        facts[mode]["seconds"] = time.perf_counter() - t0
    out.write_text(json.dumps(facts))
    return 0


def judge(workload: str, mode: str, f: dict[str, Any]) -> list[str]:
    """What is wrong with one mode's facts, one line each (empty: the contract holds)."""
    if f["status"] != "ok":
        return [] if f["status"] == "unsupported" else [f"{mode}: {f['error']}"]
    spec = preset_spec(workloads.get(workload))
    shapes = {k: list(v) for k, v in workloads.get(workload).param_shapes(spec).items()}
    out = []
    if not f["first_batch_equal"]:
        out.append("the pipeline's first batch is not the spec's first rows")
    if f["grad_shapes"] != shapes:
        out.append(f"gradients {f['grad_shapes']} are not the canonical shapes {shapes}")
    if not math.isclose(f["loss"], f["reference_loss"], rel_tol=LOSS_RTOL):
        out.append(f"fixed-batch loss {f['loss']:.9g} is not the float64 reference_loss {f['reference_loss']:.9g}"
                   f" (rel. {LOSS_RTOL:g})")
    losses = f["losses"]
    if not all(map(math.isfinite, losses)) or not all(b < a for a, b in zip(losses, losses[1:])):
        out.append(f"{K_STEPS} steps on one batch: losses {losses} are not finite and falling")
    if f["compilations"][-1] != f["compilations"][0]:
        out.append(f"recompiled after the first chunk ({f['compilations']})")
    if not f["trained_moved"]:
        out.append("training left the parameters where they started")
    if f["reset_max_abs_diff"] != 0.0:
        out.append("init() does not reset the parameters to the canonical ones")
    if f["predict_rows"] != PARITY_BATCH:
        out.append(f"predict gave {f['predict_rows']} rows for {PARITY_BATCH} samples")
    return [f"{mode}: {p}" for p in out]


def problems(framework: str, workload: str, modes: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Run the child for `framework` and judge it: (problems, the facts per mode)."""
    with tempfile.TemporaryDirectory(prefix="dlbench-contract-") as tmp:
        out = Path(tmp) / "facts.json"
        child, watched = children.run_child("dlbench.testing.program", [framework, workload, ",".join(modes), str(out)],
                                            Path(tmp) / "program.log", TIMEOUT_S)
        why = children.why_not_ok(child, watched, TIMEOUT_S)
        if why is not None or not out.exists():
            return [f"the {framework} process {why or 'wrote no facts'}"], {}
        facts: dict[str, Any] = json.loads(out.read_text())
    return [p for mode, f in facts.items() for p in judge(workload, mode, f)], facts


if __name__ == "__main__":
    tempfile.tempdir = None
    sys.exit(child(sys.argv[1], sys.argv[2], sys.argv[3].split(","), Path(sys.argv[4])))
