"""JAX's ODE library for the solver scenario: diffrax (backends/odesolve.py has the seam).

Explicit Tsit5 and Dopri5, implicit Kvaerno5 (an ESDIRK method; Newton by diffrax's VeryChord
with the controller's tolerances), each under a PID controller, one jax.jit per problem, solver
and dtype with the tolerances as traced arguments (one compile serves the whole sweep).
Gradients: backpropagation through the solver (RecursiveCheckpointAdjoint, diffrax's default)
and the continuous adjoint (BacksolveAdjoint).
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

import jax

# float64 needs x64 before any array exists; every array below names its dtype, so float32 runs
# stay float32.
jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from dlbench.backends.odesolve import Gradient, Solve, Solved, SolverInfo, checked, ops_of  # noqa: E402
from dlbench.workloads import odes  # noqa: E402

_LIB = f"diffrax {importlib.metadata.version('diffrax')}"
SOLVERS = {
    "tsit5": SolverInfo(_LIB, "explicit"),
    "dopri5": SolverInfo(_LIB, "explicit"),
    "kvaerno5": SolverInfo(_LIB, "implicit"),
}
ABSENT: dict[str, str] = {}
GRADIENTS = {"backprop": "tsit5", "adjoint": "tsit5"}

OPS = ops_of(jnp, lambda xs: jnp.stack(xs, axis=-1), jnp.sum)
_CLASSES = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "kvaerno5": diffrax.Kvaerno5}


def _term(problem: odes.Problem) -> diffrax.ODETerm:
    return diffrax.ODETerm(lambda t, y, args: problem.rhs(t, y, args, OPS))


def _params(problem: odes.Problem, dtype: str) -> dict[str, Any]:
    return {k: jnp.asarray(v, dtype=dtype) for k, v in problem.params.items()}


def _diffeqsolve(problem: odes.Problem, solver: str, dtype: str, max_steps: int, y0: Any, params: Any,
                 rtol: Any, atol: Any, adjoint: Any = None) -> Any:
    return diffrax.diffeqsolve(
        _term(problem), _CLASSES[solver](), t0=jnp.asarray(0.0, dtype), t1=jnp.asarray(problem.t1, dtype),
        dt0=None, y0=y0, args=params,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        saveat=diffrax.SaveAt(ts=jnp.asarray(problem.times, dtype=dtype)), max_steps=max_steps, throw=False,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint)


def prepare(problem: odes.Problem, solver: str, dtype: str, max_steps: int) -> Solve:
    y0, params = jnp.asarray(problem.y0, dtype=dtype), _params(problem, dtype)

    @jax.jit
    def run(rtol: Any, atol: Any) -> Any:
        sol = _diffeqsolve(problem, solver, dtype, max_steps, y0, params, rtol, atol)
        return (sol.ys, sol.result == diffrax.RESULTS.successful,
                sol.result == diffrax.RESULTS.max_steps_reached, sol.stats["num_accepted_steps"],
                sol.stats["num_rejected_steps"])

    def solve(rtol: float, atol: float) -> Solved:
        ys, ok, maxed, accepted, rejected = jax.block_until_ready(
            run(jnp.asarray(rtol, dtype=dtype), jnp.asarray(atol, dtype=dtype)))
        counts = {"accepted": int(accepted), "rejected": int(rejected)}
        if not bool(ok):
            status = "max_steps" if bool(maxed) else "failed"
            return Solved(None, status, f"diffrax: {status}", steps=sum(counts.values()), **counts)
        out = checked(np.asarray(ys), problem)
        out.accepted, out.rejected, out.steps = counts["accepted"], counts["rejected"], sum(counts.values())
        return out

    return solve


def prepare_gradient(problem: odes.Problem, solver: str, method: str, dtype: str, rtol: float,
                     atol: float) -> Gradient:
    y0, params = jnp.asarray(problem.y0, dtype=dtype), _params(problem, dtype)
    trained = {k: params[k] for k in odes.NODE_GRAD_PARAMS}
    adjoint = diffrax.BacksolveAdjoint() if method == "adjoint" else diffrax.RecursiveCheckpointAdjoint()
    tol = (jnp.asarray(rtol, dtype=dtype), jnp.asarray(atol, dtype=dtype))

    @jax.jit
    def grad(trained: Any) -> Any:
        def loss(trained: Any) -> Any:
            p = {**params, **trained}
            sol = _diffeqsolve(problem, solver, dtype, 100_000, y0, p, *tol, adjoint=adjoint)
            return odes.node_loss(sol.ys[-1], p, OPS)

        return jax.grad(loss)(trained)

    def run() -> dict[str, np.ndarray]:
        g = jax.block_until_ready(grad(trained))
        return {k: np.asarray(v, dtype=np.float64) for k, v in g.items()}

    return run
