"""Planted numerics defects against the float64 reference under the floor rule (docs/workloads.md,
"Bounds that transfer"): torch eager probes of planted specs on the tiny presets, K = 10, judged
against the unplanted reference and its float32 floor. Prints one JSON line per case.

    python benchmarks/parity_planted.py
"""
import json, tempfile, dataclasses
from pathlib import Path
import numpy as np
from dlbench.analysis import parity
from dlbench.runner import reference
from dlbench.runner.protocol import load_grads
from dlbench.runner.plan import workload_spec
from dlbench.runner.probe_client import run_probe
from dlbench.spec import Policy, TrialSpec, to_dict

K = 10
cases = [("resnet", {"bn_momentum": 0.9}), ("mlp", {"eps": 1e-7}), ("cnn", {"eps": 1e-7}), ("mlp", {"eps": 1e-4}),
         ("resnet", {"eps": 1e-7}), ("mlp", {}), ("resnet", {})]
specs = {w: workload_spec(w, "tiny") for w in {c[0] for c in cases}}
refs = reference.ensure(list(specs.values()), K, print)
for w, change in cases:
    spec = specs[w]
    planted = dataclasses.replace(spec, numerics=dataclasses.replace(spec.numerics, **change))
    trial = TrialSpec(workload=planted, framework="torch", policy=Policy(mode="eager"))
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "r.json"; req.write_text(json.dumps({"trials": [to_dict(trial)], "k_steps": K}))
        err = run_probe(req, Path(tmp))
        loss, grads, extra = load_grads(Path(tmp) / "0.npz")
    ref = refs[reference.key(spec, K)]
    g = parity.compare_grads(loss, grads, ref.loss, ref.grads, "float32", workload=w, floor=ref.floor)
    t = parity.compare_losses(extra["losses"], ref.losses, "float32", w, ref.floor)
    l = parity.compare_logits(extra["logits"], ref.logits, "float32", w, ref.floor)
    f = ref.floor
    print(json.dumps({"workload": w, "planted": change, "grads": [g.verdict, g.worst_rel_err],
                      "trajectory": t, "trajectory_bound": parity.bound(f.trajectory, 1e-3),
                      "eval_logits": l, "eval_bound": parity.bound(f.logits, 1e-2),
                      "floor": [max(f.grads.values()), f.trajectory, f.logits]}))
