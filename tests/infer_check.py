"""Run in a fresh process per framework (like a worker): the inference scenario of each tiny
workload through the worker's own code (runner/scenarios/infer.py), in one process.

    python infer_check.py FRAMEWORK OUT_DIR WORKLOAD=MODE[,WORKLOAD=MODE...]
writes OUT_DIR/FRAMEWORK-WORKLOAD.json (the TrialResult) and FRAMEWORK-WORKLOAD.parity.npz (the
fixed-batch logits the parent judges); for onnxruntime also OUT_DIR/onnxruntime-exports.json,
what a second build of each workload found in the export cache; for litert also
OUT_DIR/litert-mlp-int8.json, the mlp served with the dynamic-int8 option; for an exporting
backend (onnxruntime, litert) also OUT_DIR/FRAMEWORK-protocols.json, what support.build_as says of
its mlp program for each capability protocol.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from dlbench import workloads
from dlbench.backends import get_backend, support
from dlbench.backends.base import Backend, Generator, Learner, Rollout, Sampler, Servable, Trainable, Unsupported
from dlbench.monitors.memory import MemorySampler
from dlbench.results.records import TrialResult
from dlbench.runner.scenarios import infer
from dlbench.runner.context import TrialContext
from dlbench.runner.plan import workload_spec
from dlbench.runner.timing import EventLog, Phases
from dlbench.runner.child import setup_environment
from dlbench.spec import InferOptions, Policy, TrialSpec

# Kept short for CI: the budget rule itself is tested with the fake backend.
REQUESTS = 200
BUDGET_S = 0.5


def trial_for(framework: str, mode: str, workload: str) -> TrialSpec:
    return TrialSpec(workload=workload_spec(workload, "tiny"), framework=framework, policy=Policy(mode=mode),
                     scenario="infer",
                     options=InferOptions(infer_requests=REQUESTS, infer_budget_s=BUDGET_S))


def main() -> int:
    name, out_dir = sys.argv[1], Path(sys.argv[2])
    plan = dict(item.split("=") for item in sys.argv[3].split(","))
    backend = get_backend(name)
    first = next(iter(plan.items()))
    _, fresh_cache = setup_environment(trial_for(name, first[1], first[0]), backend)
    backend.import_framework()
    backend.configure(Policy(mode=first[1]))
    for w, mode in plan.items():
        run_one(trial_for(name, mode, w), backend, out_dir, f"{name}-{w}")
    if name == "litert":  # the int8 option: judged by its accuracy change, its parity not judged
        trial = trial_for(name, "compiled", "mlp")
        int8 = replace(trial, policy=replace(trial.policy, options={"quantization": "dynamic-int8"}))
        run_one(int8, backend, out_dir, "litert-mlp-int8")
    if name == "onnxruntime":  # a second build of each: the export must come from the cache
        for w, mode in plan.items():
            trial = trial_for(name, mode, w)
            backend.build(trial).init(workloads.get(w).init_params(trial.workload))
        (out_dir / "onnxruntime-exports.json").write_text(json.dumps(backend.info()["onnx_exports"]))
    if backend.capabilities.exports_from is not None:
        facts = protocols(backend, trial_for(name, "compiled", "mlp"))
        (out_dir / f"{name}-protocols.json").write_text(json.dumps(facts))
    if fresh_cache is not None:
        shutil.rmtree(fresh_cache, ignore_errors=True)
    return 0


def protocols(backend: Backend, trial: TrialSpec) -> dict[str, str | None]:
    """For each capability protocol: None where support.build_as returns the program as it,
    else the Unsupported reason it gives (the program lacks the protocol's members)."""
    out: dict[str, str | None] = {}
    for protocol in (Servable, Sampler, Learner, Trainable, Rollout, Generator):
        try:
            support.build_as(trial, backend, protocol)
            out[protocol.__name__] = None
        except Unsupported as e:
            out[protocol.__name__] = str(e)
    return out


def run_one(trial: TrialSpec, backend: Backend, out_dir: Path, stem: str) -> None:
    result = TrialResult(status="failed")
    log = EventLog(out_dir / f"{stem}.events")
    sampler = MemorySampler(None)
    sampler.start()
    try:
        infer.run(TrialContext(trial, backend, log, Phases(log), sampler, time.monotonic(), result,
                                   out_dir / f"{stem}.parity.npz"))
        result.status = "ok"
    finally:
        sampler.stop()
        log.close()
    result.write(out_dir / f"{stem}.json")


if __name__ == "__main__":
    sys.exit(main())
