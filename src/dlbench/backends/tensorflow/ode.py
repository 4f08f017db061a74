"""TensorFlow's ODE library for the solver scenario: TensorFlow Probability's tfp.math.ode
(backends/solve.py has the seam).

DormandPrince (explicit) and BDF (implicit, variable order 1-5, its Jacobian by automatic
differentiation), each solve inside one tf.function per problem, solver and dtype with the
tolerances as tensor arguments (one trace serves the sweep). TFP differentiates a solve with the
adjoint sensitivity method only (its solvers carry a custom gradient), so backpropagation
through the solver is absent and reported. Counters: `prepare_count` traces the same solve again
with a field that counts its evaluations in a variable (TFP's own count leaves some out), run
untimed after each point's timed solves; njev is TFP's own.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import tensorflow as tf

from dlbench.backends.base import Unsupported
from dlbench.backends.solve import (Count, Counts, Gradient, OdeModule, Solve, Solved, SolverInfo, built, checked,
                                    classify, ops_of)
from dlbench.problems import solve as ivp
from dlbench.spec import TrialSpec

try:
    import tensorflow_probability as tfp
except ImportError as e:  # a solve trial is unsupported without it
    raise Unsupported(f"tensorflow has no ODE solvers here: {type(e).__name__}: {e}"
                      " (pip install 'dlbench[ode-tensorflow]')") from e

_LIB = f"tensorflow-probability {tfp.__version__}"
SOLVERS = {
    "dormand-prince": SolverInfo(_LIB, "explicit"),
    "bdf": SolverInfo(_LIB, "implicit"),
}
ABSENT = {
    "backprop": "tfp.math.ode differentiates a solve by its adjoint only (a custom gradient on every"
                " solver); no backpropagation through the solver's steps",
}
GRADIENTS = {"adjoint": "dormand-prince"}



def build(trial: TrialSpec) -> OdeModule:
    """A solve trial's program: this module (backends/solve.py)."""
    return built(__name__)


OPS = ops_of(tf, lambda xs: tf.stack(xs, axis=-1), tf.reduce_sum)
_DTYPES = {"float64": tf.float64, "float32": tf.float32}
# tfp's max_num_steps caps field evaluations (its assertion compares them with 6 x the cap for
# Dormand-Prince), and over it the solve raises an assertion; any other failure is a nonzero
# diagnostics status.


def _solver(name: str, rtol: Any, atol: Any, max_steps: int) -> Any:
    cls = tfp.math.ode.BDF if name == "bdf" else tfp.math.ode.DormandPrince
    return cls(rtol=rtol, atol=atol, max_num_steps=max_steps)


def prepare(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Solve:
    tdtype = _DTYPES[dtype]
    params = {k: tf.constant(v, dtype=tdtype) for k, v in problem.params.items()}
    y0 = tf.constant(problem.y0, dtype=tdtype)
    times = tf.constant(problem.times, dtype=tdtype)

    @tf.function(input_signature=[tf.TensorSpec([], tdtype), tf.TensorSpec([], tdtype)])
    def run(rtol: Any, atol: Any) -> Any:
        res = _solver(solver, rtol, atol, max_steps).solve(
            lambda t, y: problem.rhs(t, y, params, OPS), tf.constant(0.0, tdtype), y0, solution_times=times)
        d = res.diagnostics
        return (res.states, d.status, d.num_ode_fn_evaluations, d.num_jacobian_evaluations,
                d.num_matrix_factorizations)

    def solve(rtol: float, atol: float) -> Solved:
        try:
            states, status, nfe, njev, nlu = run(tf.constant(rtol, tdtype), tf.constant(atol, tdtype))
        except tf.errors.InvalidArgumentError as e:  # tfp asserts on a step count over max_num_steps
            text = str(e.message)
            said = re.search(r"assertion failed: \[([^\]]*)\]", text)
            message = said.group(1) if said else text.strip().splitlines()[0][:200]
            return Solved(None, "max_steps" if "max_num_steps" in text else classify(message), f"tfp: {message}")
        counts = {"nfe": int(nfe), "njev": int(njev)}
        if int(status) != 0:
            return Solved(None, "failed", f"tfp: status {int(status)}", **counts)
        out = checked(states.numpy(), problem)
        out.nfe, out.njev = counts["nfe"], counts["njev"]
        out.extra["lu_decompositions"] = float(nlu)
        return out

    return solve


def prepare_count(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Count:
    """The same solve traced again with a field that counts its evaluations in a variable, run
    untimed. TFP's own num_ode_fn_evaluations leaves out evaluations that BDF makes outside its
    Newton iterations (the initial state's, each Jacobian's point) and is kept for nothing
    here; its num_jacobian_evaluations is what njev reports."""
    tdtype = _DTYPES[dtype]
    params = {k: tf.constant(v, dtype=tdtype) for k, v in problem.params.items()}
    y0, times = tf.constant(problem.y0, dtype=tdtype), tf.constant(problem.times, dtype=tdtype)
    evaluations = tf.Variable(0, dtype=tf.int64, trainable=False)

    def field(t: Any, y: Any) -> Any:
        evaluations.assign_add(1)
        return problem.rhs(t, y, params, OPS)

    @tf.function(input_signature=[tf.TensorSpec([], tdtype), tf.TensorSpec([], tdtype)])
    def run(rtol: Any, atol: Any) -> Any:
        res = _solver(solver, rtol, atol, max_steps).solve(field, tf.constant(0.0, tdtype), y0, solution_times=times)
        return res.diagnostics.num_jacobian_evaluations

    def count(rtol: float, atol: float) -> Counts:
        evaluations.assign(0)
        njev = run(tf.constant(rtol, tdtype), tf.constant(atol, tdtype))
        return Counts(nfe=int(evaluations.numpy()), njev=int(njev))

    return count


def prepare_gradient(problem: ivp.Problem, solver: str, method: str, dtype: str, rtol: float,
                     atol: float) -> Gradient:
    tdtype = _DTYPES[dtype]
    fixed = {k: tf.constant(v, dtype=tdtype) for k, v in problem.params.items() if k not in ivp.NODE_GRAD_PARAMS}
    trained = {k: tf.Variable(problem.params[k], dtype=tdtype) for k in ivp.NODE_GRAD_PARAMS}
    y0, times = tf.constant(problem.y0, dtype=tdtype), tf.constant(problem.times, dtype=tdtype)

    @tf.function
    def grad() -> Any:
        with tf.GradientTape() as tape:
            values = {k: tf.identity(v) for k, v in trained.items()}
            tape.watch(list(values.values()))
            # The trained parameters go in as `constants`: what tfp's adjoint differentiates.
            res = _solver(solver, rtol, atol, 100_000).solve(
                lambda t, y, **c: problem.rhs(t, y, {**fixed, **{k.replace("_", "."): v for k, v in c.items()}},
                                                OPS),
                tf.constant(0.0, tdtype), y0, solution_times=times,
                constants={k.replace(".", "_"): v for k, v in values.items()})
            loss = ivp.node_loss(res.states[-1], {**fixed, **values}, OPS)
        return tape.gradient(loss, values)

    def run() -> dict[str, np.ndarray]:
        return {k: v.numpy().astype(np.float64) for k, v in grad().items()}

    return run
