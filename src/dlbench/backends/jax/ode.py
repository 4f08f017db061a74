"""JAX's ODE library for the solver scenario: diffrax (backends/solve.py has the seam).

Explicit Tsit5 and Dopri5, implicit Kvaerno5 (an ESDIRK method; Newton by diffrax's VeryChord
with the controller's tolerances), each under a PID controller, one jax.jit per problem, solver
and dtype with the tolerances as traced arguments (one compile serves the whole sweep).
Gradients: backpropagation through the solver (RecursiveCheckpointAdjoint, diffrax's default)
and the continuous adjoint (BacksolveAdjoint).
Counters: diffrax reports steps, not evaluations; `prepare_count` compiles the same solve again
with a field that counts its evaluations and linearisations by jax.debug.callback (`counted_term`),
run untimed after each point's timed solves.
"""

from __future__ import annotations

import importlib.metadata
import threading
from typing import Any

import jax

# float64 needs x64 before any array exists; every array below names its dtype, so float32 runs
# stay float32.
jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from dlbench.backends.base import Unsupported  # noqa: E402
from dlbench.backends.solve import (  # noqa: E402
    Count,
    Counts,
    Gradient,
    OdeModule,
    Solve,
    Solved,
    SolverInfo,
    built,
    checked,
    ops_of,
)
from dlbench.spec import TrialSpec  # noqa: E402

try:
    import diffrax
except ImportError as e:  # a solve trial is unsupported without it
    raise Unsupported(f"jax has no ODE solvers here: {type(e).__name__}: {e} (pip install 'dlbench[ode-jax]')") from e
from dlbench.problems import solve as ivp  # noqa: E402

_LIB = f"diffrax {importlib.metadata.version('diffrax')}"
SOLVERS = {
    "tsit5": SolverInfo(_LIB, "explicit"),
    "dopri5": SolverInfo(_LIB, "explicit"),
    "kvaerno5": SolverInfo(_LIB, "implicit"),
}
ABSENT: dict[str, str] = {}
GRADIENTS = {"backprop": "tsit5", "adjoint": "tsit5"}



def build(trial: TrialSpec) -> OdeModule:
    """A solve trial's program: this module (backends/solve.py)."""
    return built(__name__)


OPS = ops_of(jnp, lambda xs: jnp.stack(xs, axis=-1), jnp.sum)
_CLASSES = {"tsit5": diffrax.Tsit5, "dopri5": diffrax.Dopri5, "kvaerno5": diffrax.Kvaerno5}


def _term(problem: ivp.Problem) -> diffrax.ODETerm:
    return diffrax.ODETerm(lambda t, y, args: problem.rhs(t, y, args, OPS))


class Calls:
    """Host-side counts of a counted field's evaluations and linearisations. The compiled solve
    bumps them through jax.debug.callback (a Python counter in a traced function counts traces,
    not evaluations); XLA may run independent callbacks on several threads, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.field = 0
        self.jacobians = 0

    def reset(self) -> None:
        with self._lock:
            self.field = self.jacobians = 0

    def bump_field(self) -> None:
        with self._lock:
            self.field += 1

    def bump_jacobian(self) -> None:
        with self._lock:
            self.jacobians += 1


def counted_term(problem: ivp.Problem, calls: Calls) -> diffrax.ODETerm:
    """The problem's field, counting each evaluation of it (its primal) and each linearisation
    (a JVP of it: how Kvaerno5's Newton iteration takes its Jacobian, lineax linearising the
    field once and pushing one tangent per state component through the linear map, which is
    not an evaluation). The callbacks take no operand, so they stay on the primal side of a
    linearisation and run once per Jacobian, however many tangents it pushes."""

    def plain(t: Any, y: Any, args: Any) -> Any:
        return problem.rhs(t, y, args, OPS)

    @jax.custom_jvp
    def field(t: Any, y: Any, args: Any) -> Any:
        jax.debug.callback(calls.bump_field)
        return plain(t, y, args)

    @field.defjvp
    def field_jvp(primals: Any, tangents: Any) -> Any:
        jax.debug.callback(calls.bump_field)
        jax.debug.callback(calls.bump_jacobian)
        return jax.jvp(plain, primals, tangents)

    return diffrax.ODETerm(field)


def _params(problem: ivp.Problem, dtype: str) -> dict[str, Any]:
    return {k: jnp.asarray(v, dtype=dtype) for k, v in problem.params.items()}


def _diffeqsolve(problem: ivp.Problem, solver: str, dtype: str, max_steps: int, y0: Any, params: Any,
                 rtol: Any, atol: Any, adjoint: Any = None, term: diffrax.ODETerm | None = None) -> Any:
    return diffrax.diffeqsolve(
        _term(problem) if term is None else term, _CLASSES[solver](), t0=jnp.asarray(0.0, dtype),
        t1=jnp.asarray(problem.t1, dtype), dt0=None, y0=y0, args=params,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        saveat=diffrax.SaveAt(ts=jnp.asarray(problem.times, dtype=dtype)), max_steps=max_steps, throw=False,
        adjoint=diffrax.RecursiveCheckpointAdjoint() if adjoint is None else adjoint)


def prepare(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Solve:
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


def prepare_count(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Count:
    """The same solve compiled again with a counting field (`counted_term`), run untimed: diffrax
    counts steps, not evaluations, and a callback in the timed solve would cost a host round trip
    per evaluation. One compile serves the sweep, as for the timed solve."""
    y0, params = jnp.asarray(problem.y0, dtype=dtype), _params(problem, dtype)
    calls = Calls()
    term = counted_term(problem, calls)

    @jax.jit
    def run(rtol: Any, atol: Any) -> Any:
        sol = _diffeqsolve(problem, solver, dtype, max_steps, y0, params, rtol, atol, term=term)
        return sol.stats["num_steps"]

    def count(rtol: float, atol: float) -> Counts:
        calls.reset()
        steps = jax.block_until_ready(run(jnp.asarray(rtol, dtype=dtype), jnp.asarray(atol, dtype=dtype)))
        jax.effects_barrier()  # every callback has run
        return Counts(nfe=calls.field, njev=calls.jacobians, steps=int(steps))

    return count


def prepare_gradient(problem: ivp.Problem, solver: str, method: str, dtype: str, rtol: float,
                     atol: float) -> Gradient:
    y0, params = jnp.asarray(problem.y0, dtype=dtype), _params(problem, dtype)
    trained = {k: params[k] for k in ivp.NODE_GRAD_PARAMS}
    adjoint = diffrax.BacksolveAdjoint() if method == "adjoint" else diffrax.RecursiveCheckpointAdjoint()
    tol = (jnp.asarray(rtol, dtype=dtype), jnp.asarray(atol, dtype=dtype))

    @jax.jit
    def grad(trained: Any) -> Any:
        def loss(trained: Any) -> Any:
            p = {**params, **trained}
            sol = _diffeqsolve(problem, solver, dtype, 100_000, y0, p, *tol, adjoint=adjoint)
            return ivp.node_loss(sol.ys[-1], p, OPS)

        return jax.grad(loss)(trained)

    def run() -> dict[str, np.ndarray]:
        g = jax.block_until_ready(grad(trained))
        return {k: np.asarray(v, dtype=np.float64) for k, v in g.items()}

    return run
