"""Child process of tests/test_published_shapes.py: one framework builds the published
architectures at their tiny sizes (ResNet-50 v1.5, BERT-base's post-LN encoder, ViT) in float64
and in float32, and writes what the test judges: losses against the NumPy float64
`reference_loss`, gradient names, and float32 against float64 gradients, normwise per tensor.

    python tests/published_check.py FRAMEWORK MODE OUT_JSON
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend
from dlbench.runner.plan import workload_spec
from dlbench.spec import Policy, TrialSpec

# (workload, preset): the published architectures at the sizes CI can afford.
CASES = (("resnet", "published-tiny"), ("transformer", "published-tiny"), ("vit", "published-tiny"))


def check(backend: Any, framework: str, mode: str, name: str, preset: str) -> dict[str, Any]:
    spec = workload_spec(name, preset)
    wl = workloads.get(name)
    params, batch = wl.init_params(spec), wl.fixed_batch(spec)
    out: dict[str, Any] = {"reference_loss": wl.reference_loss(spec, params, batch.x, batch.y),
                           "param_names": sorted(params)}
    grads: dict[str, dict[str, np.ndarray]] = {}
    for dtype in ("float64", "float32"):
        s = dataclasses.replace(spec, numerics=dataclasses.replace(spec.numerics, dtype=dtype))
        program = backend.build(TrialSpec(workload=s, framework=framework, policy=Policy(mode=mode)))
        loss, g = program.loss_and_grads(program.init(params), batch.x, batch.y)
        out[f"loss_{dtype}"] = float(loss)
        out[f"grad_names_{dtype}"] = sorted(g)
        grads[dtype] = g
    out["grad_rel_errors"] = {
        k: float(np.linalg.norm(grads["float32"][k].astype(np.float64) - grads["float64"][k])
                 / max(float(np.linalg.norm(grads["float64"][k])), 1e-300))
        for k in grads["float64"] if float(np.linalg.norm(grads["float64"][k])) > 1e-12}
    return out


def main() -> int:
    from dlbench.runner.child import setup_environment

    framework, mode, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    backend = get_backend(framework)
    setup_environment(TrialSpec(workload=workload_spec("vit", "tiny"), framework=framework), backend)
    # float64 programs need the switches of the reference process (JAX: JAX_ENABLE_X64) before
    # the import, as runner/probe.py sets them
    os.environ.update(backend.reference_environment())
    backend.import_framework()
    backend.configure(Policy())
    facts = {f"{name}/{preset}": check(backend, framework, mode, name, preset) for name, preset in CASES}
    out.write_text(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
