"""diffrax's counted field evaluations (backends/jax/ode.py: counted_term, prepare_count) beside
diffrax's own step statistics, for tests/test_ode_solvers.py, in a process of its own (JAX's
module turns on x64 for the whole process):

    python ode_count_check.py OUT.json

Writes: Tsit5 over a fixed number of constant steps on Lotka-Volterra (its count is known: six
evaluations a step and the first stage of the first step); Tsit5 under the scenario's PID
controller at rtol 1e-6 (the timed solve's steps and rejections, the counting solve's counts and
steps, twice: a count is of one solve, never of a trace); Kvaerno5 on Robertson at rtol 1e-4 (the
counting solve's steps, evaluations and linearisations; one compile, to keep the CI tier short).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import diffrax
import jax
import jax.numpy as jnp

from dlbench.backends.jax import ode
from dlbench.problems import solve as ivp


def fixed_steps(problem: ivp.Problem, steps: int) -> dict[str, int]:
    calls = ode.Calls()
    term = ode.counted_term(problem, calls)

    @jax.jit
    def run() -> Any:
        return diffrax.diffeqsolve(term, diffrax.Tsit5(), t0=0.0, t1=problem.t1, dt0=problem.t1 / steps,
                                   y0=jnp.asarray(problem.y0, dtype="float64"), args={},
                                   stepsize_controller=diffrax.ConstantStepSize(), max_steps=10 * steps).stats

    stats = jax.block_until_ready(run())
    jax.effects_barrier()
    return {"nfe": calls.field, "njev": calls.jacobians, "steps": int(stats["num_steps"])}


def counted(problem: ivp.Problem, solver: str, rtol: float) -> dict[str, Any]:
    """The counting solve, twice."""
    count = ode.prepare_count(problem, solver, "float64", 10_000)
    first, second = count(rtol, rtol * problem.atol_ratio), count(rtol, rtol * problem.atol_ratio)
    return {"nfe": [first.nfe, second.nfe], "njev": [first.njev, second.njev], "steps": [first.steps, second.steps]}


def timed_and_counted(problem: ivp.Problem, solver: str, rtol: float) -> dict[str, Any]:
    """The timed solve's statistics beside the counting solve's counts."""
    solved = ode.prepare(problem, solver, "float64", 10_000)(rtol, rtol * problem.atol_ratio)
    return {"status": solved.status, "timed_steps": solved.steps, "rejected": solved.rejected,
            **counted(problem, solver, rtol)}


def main(out: str) -> None:
    lv, rober = ivp.PROBLEMS["lotka-volterra"], ivp.PROBLEMS["robertson"]
    result = {"fixed": fixed_steps(lv, 50), "tsit5": timed_and_counted(lv, "tsit5", 1e-6),
              "kvaerno5": counted(rober, "kvaerno5", 1e-4)}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
