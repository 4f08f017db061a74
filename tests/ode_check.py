"""One framework's ODE solvers (backends/<framework>/ode.py), for tests/test_ode_solvers.py, in a
process of its own as a trial runs them (JAX's module turns on x64 for the whole process):

    python ode_check.py FRAMEWORK OUT.json

Writes per solver the error on Lotka-Volterra at rtol 1e-6 in float64 and float32, the counting
solve's counts beside the timed solve's (explicit solvers on Lotka-Volterra, implicit ones on
Robertson, rtol 1e-5), the outcome of an explicit solver on Robertson under a 200-step cap, and per gradient method the neural
ODE's float64 gradient error against the adjoint reference.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys

from dlbench.backends.solve import OdeModule
from dlbench.problems import solve as ivp


def main(framework: str, out: str) -> None:
    ode: OdeModule = importlib.import_module(f"dlbench.backends.{framework}.ode")  # type: ignore[assignment]
    lv, rober, node = ivp.PROBLEMS["lotka-volterra"], ivp.PROBLEMS["robertson"], ivp.PROBLEMS["node-ode"]
    result: dict[str, object] = {"absent": ode.ABSENT, "kinds": {s: i.kind for s, i in ode.SOLVERS.items()}}
    errors = {}
    for solver in ode.SOLVERS:
        for dtype in ("float64", "float32"):
            solved = ode.prepare(lv, solver, dtype, 10_000)(1e-6, 1e-9)
            errors[f"{solver}/{dtype}"] = (solved.status, None if solved.y is None else ivp.error(solved.y, ivp.reference(lv)),
                                           solved.nfe, solved.steps)
    result["lotka"] = errors
    # the counting solve (where the module counts apart) beside the timed solve's own counters
    counts = {}
    for solver, info in ode.SOLVERS.items():
        problem = rober if info.kind == "implicit" else lv
        count = ode.prepare_count(problem, solver, "float64", 10_000)
        if count is not None:
            solved = ode.prepare(problem, solver, "float64", 10_000)(1e-5, 1e-5 * problem.atol_ratio)
            found = count(1e-5, 1e-5 * problem.atol_ratio)
            counts[solver] = {"nfe": found.nfe, "njev": found.njev, "library_nfe": solved.nfe,
                              "library_njev": solved.njev, "steps": solved.steps}
    result["counts"] = counts
    explicit = next(s for s, i in ode.SOLVERS.items() if i.kind == "explicit")
    capped = ode.prepare(rober, explicit, "float64", 200)(1e-6, 1e-12)
    result["robertson_capped"] = {k: v for k, v in dataclasses.asdict(capped).items() if k != "y"}
    result["robertson_capped"]["y_is_none"] = capped.y is None  # type: ignore[index]
    ref = ivp.gradient_reference(node)
    result["gradients"] = {
        m: ivp.relative_error(ivp.flat_gradient(ode.prepare_gradient(node, s, m, "float64", 1e-9, 1e-12)()), ref)
        for m, s in ode.GRADIENTS.items()}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
