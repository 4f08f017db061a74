"""The solver scenario's initial value problems (`--scenario solve`), framework-neutral: the
problem registry's (dlbench/problems/__init__.py) module for that scenario, named for it.

Each problem's vector field is written once, over a small set of array operations (`Ops`) that
NumPy, JAX, torch and TensorFlow all have under these names and signatures; each backend hands
its own `Ops` in, so the field every library integrates is the same expression. The state is one
flat vector. The float64 reference solution at the output times comes from SciPy's `solve_ivp`
at rtol 1e-12, or 100x tighter than the tightest tolerance a sweep asks where that is tighter
(reference_rtol; Radau for the stiff problems, DOP853 for the others), and is cached, keyed by
its tolerance, this module's source and SciPy's version, as the parity references are
(runner/reference.py).

The problems follow SciMLBenchmarks' choices where it has them: Lotka-Volterra with
(1.5, 1, 3, 1) from (1, 1) over [0, 10]; Robertson's chemical kinetics over [0, 1e5]; HIRES over
[0, 321.8122] (Hairer and Wanner's stiff test set; Van der Pol at mu = 1000 was the other
candidate, but SciPy's Radau needs over ten minutes for its rtol 1e-12 reference here); and a neural ODE whose field is the
`node` workload's (tiny size, canonical weights) lifted from that workload's fixed batch.
Definition: docs/workloads.md#ode-problems.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, final

import numpy as np

from dlbench import paths
from dlbench.spec import WorkloadSpec


class Ops(Protocol):
    """The array operations a field may use beyond arithmetic, indexing and `@`."""

    def stack(self, xs: list[Any]) -> Any: ...  # along a new last axis

    def tanh(self, x: Any) -> Any: ...

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any: ...

    def sum(self, x: Any) -> Any: ...  # over every element


@final
class NumpyOps:
    def stack(self, xs: list[Any]) -> Any:
        return np.stack(xs, axis=-1)

    def tanh(self, x: Any) -> Any:
        return np.tanh(x)

    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        return np.reshape(x, shape)

    def sum(self, x: Any) -> Any:
        return np.sum(x)


NUMPY = NumpyOps()

# field(t, y, params, ops) -> dy/dt, for a flat state y; params are the problem's arrays in the
# caller's framework and dtype (empty for the classic problems).
Field = Callable[[Any, Any, dict[str, Any], Ops], Any]


@final
@dataclass(frozen=True)
class Problem:
    name: str
    title: str
    stiff: bool
    rhs: Field
    y0: tuple[float, ...]
    t1: float
    times: tuple[float, ...]  # output times, after t0 = 0; the error is measured at these
    # atol = rtol * atol_ratio in the sweep: the size below which a component is noise (Robertson's
    # y2 peaks at 3.6e-5, so its absolute tolerance must be far below that).
    atol_ratio: float
    params: dict[str, np.ndarray] = field(default_factory=dict, compare=False)
    # Only the neural ODE has a gradient to compare: the loss of its final state (`node_loss`).
    has_gradient: bool = False

    @property
    def dimension(self) -> int:
        return len(self.y0)


def lotka_volterra(t: Any, y: Any, p: dict[str, Any], ops: Ops) -> Any:
    x, z = y[0], y[1]
    return ops.stack([1.5 * x - 1.0 * x * z, -3.0 * z + 1.0 * x * z])


def robertson(t: Any, y: Any, p: dict[str, Any], ops: Ops) -> Any:
    y1, y2, y3 = y[0], y[1], y[2]
    return ops.stack([-0.04 * y1 + 1e4 * y2 * y3, 0.04 * y1 - 1e4 * y2 * y3 - 3e7 * y2 * y2, 3e7 * y2 * y2])


def hires(t: Any, y: Any, p: dict[str, Any], ops: Ops) -> Any:
    """HIRES (Schaefer 1975; Hairer and Wanner's test set): eight reactions of light-induced
    plant growth."""
    y1, y2, y3, y4, y5, y6, y7, y8 = (y[i] for i in range(8))
    r = 280.0 * y6 * y8
    return ops.stack([-1.71 * y1 + 0.43 * y2 + 8.32 * y3 + 0.0007,
                      1.71 * y1 - 8.75 * y2,
                      -10.03 * y3 + 0.43 * y4 + 0.035 * y5,
                      8.32 * y2 + 1.71 * y3 - 1.12 * y4,
                      -1.745 * y5 + 0.43 * y6 + 0.43 * y7,
                      -r + 0.69 * y4 + 1.71 * y5 - 0.43 * y6 + 0.69 * y7,
                      r - 1.81 * y7,
                      -r + 1.81 * y7])


HIRES_T1 = 321.8122


NODE_BATCH = 8


def node_field(t: Any, y: Any, p: dict[str, Any], ops: Ops) -> Any:
    """The `node` workload's autonomous field, tanh(h W1 + b1) W2 + b2, row by row."""
    h = ops.reshape(y, (NODE_BATCH, -1))
    dh = ops.tanh(h @ p["field.dense1.kernel"] + p["field.dense1.bias"]) @ p["field.dense2.kernel"] \
        + p["field.dense2.bias"]
    return ops.reshape(dh, (-1,))


def node_loss(y1: Any, p: dict[str, Any], ops: Ops) -> Any:
    """The neural ODE's scalar loss of its final state: half the mean over the batch of the
    squared distance of the `node` head's logits to the one-hot labels (a squared error, not
    the workload's cross-entropy, so that it needs no operation beyond `Ops`)."""
    h = ops.reshape(y1, (NODE_BATCH, -1))
    r = h @ p["head.kernel"] + p["head.bias"] - p["onehot"]
    return 0.5 * ops.sum(r * r) / NODE_BATCH


# The field's parameters, what the gradient is taken with respect to.
NODE_GRAD_PARAMS = ("field.dense1.kernel", "field.dense1.bias", "field.dense2.kernel", "field.dense2.bias")


def _node_problem() -> Problem:
    # The `node` workload's definition at its tiny size: canonical weights, fixed batch, head.
    import dlbench.workloads.node as node

    spec = WorkloadSpec(name="node", model_size="tiny", num_classes=10)
    params = {k: v.astype(np.float64) for k, v in node.init_params(spec).items()}
    batch = node.fixed_batch(spec, NODE_BATCH)
    h0 = batch.x.astype(np.float64) @ params["inp.kernel"] + params["inp.bias"]
    onehot = np.eye(spec.num_classes)[batch.y]
    kept = {k: params[k] for k in (*NODE_GRAD_PARAMS, "head.kernel", "head.bias")}
    return Problem("node-ode", "neural ODE (node's field, canonical weights)", False, node_field,
                   tuple(float(v) for v in h0.reshape(-1)), 1.0, (0.25, 0.5, 0.75, 1.0), 1e-3,
                   params={**kept, "onehot": onehot}, has_gradient=True)


def _problems() -> dict[str, Problem]:
    rober_times = tuple(float(v) for v in np.logspace(-5, 5, 11))
    return {
        "lotka-volterra": Problem("lotka-volterra", "Lotka-Volterra (non-stiff)", False, lotka_volterra,
                                  (1.0, 1.0), 10.0, tuple(float(v) for v in np.linspace(1, 10, 10)), 1e-3),
        "robertson": Problem("robertson", "Robertson chemical kinetics (stiff)", True, robertson,
                             (1.0, 0.0, 0.0), 1e5, rober_times, 1e-6),
        "hires": Problem("hires", "HIRES plant physiology (stiff)", True, hires,
                         (1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0057), HIRES_T1, (1.0, 10.0, 100.0, HIRES_T1), 1e-4),
        "node-ode": _node_problem(),
    }


PROBLEMS: dict[str, Problem] = _problems()


def numpy_field(problem: Problem) -> Callable[[float, np.ndarray], np.ndarray]:
    """The field as SciPy takes it: f(t, y) on float64 arrays."""
    return lambda t, y: np.asarray(problem.rhs(t, y, problem.params, NUMPY), dtype=np.float64)


# The reference's tolerance: 1e-12, or REFERENCE_MARGIN times tighter than the tightest
# tolerance a sweep asks, so that a solver's error is its own and not the reference's
# (spec.SOLVE_RTOL_RANGE keeps that above SciPy's floor of 100 x machine epsilon).
REFERENCE_RTOL = 1e-12
REFERENCE_MARGIN = 100


def reference_rtol(tightest: float | None = None) -> float:
    """The reference's rtol for a sweep whose tightest tolerance is `tightest` (None: 1e-12)."""
    return REFERENCE_RTOL if tightest is None else min(REFERENCE_RTOL, tightest / REFERENCE_MARGIN)


def solve_reference(problem: Problem, rtol: float = REFERENCE_RTOL) -> np.ndarray:
    """y at `problem.times` (rows) in float64: SciPy at `rtol` (Radau for stiff problems, DOP853
    otherwise) with atol = rtol * atol_ratio. Raises RuntimeError where SciPy fails."""
    from scipy.integrate import solve_ivp

    method = "Radau" if problem.stiff else "DOP853"
    sol = solve_ivp(numpy_field(problem), (0.0, problem.t1), np.array(problem.y0), method=method,
                    t_eval=np.array(problem.times), rtol=rtol, atol=rtol * problem.atol_ratio)
    if sol.status != 0:
        raise RuntimeError(f"the reference solve of {problem.name} failed: {sol.message}")
    out: np.ndarray = sol.y.T
    return out


def definition_digest() -> str:
    """This module's source, node's (the neural ODE's field and weights) and SciPy's version."""
    import scipy

    import dlbench.workloads.data as data
    import dlbench.workloads.node as node
    import dlbench.workloads.params as params

    h = hashlib.sha256(scipy.__version__.encode())
    for module_file in (__file__, node.__file__, data.__file__, params.__file__):
        h.update(Path(str(module_file)).read_bytes())
    return h.hexdigest()[:20]


def _cache_path(name: str, what: str) -> Path:
    return paths.reference_cache() / "ode" / f"{name}-{what}-{definition_digest()}.npy"


def _cached(name: str, what: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
    path = _cache_path(name, what)
    if path.exists():
        return np.asarray(np.load(path))
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{id(value)}.tmp.npy")
    np.save(tmp, value)
    tmp.replace(path)  # atomic: concurrent trials never read half a file
    return value


def reference(problem: Problem, tightest: float | None = None) -> np.ndarray:
    """The cached float64 reference solution at the output times (rows), solved at
    reference_rtol(tightest): its tolerance is part of the cache key."""
    rtol = reference_rtol(tightest)
    return _cached(problem.name, f"solution-rtol{rtol:.3g}", lambda: solve_reference(problem, rtol))


def error(y: np.ndarray, y_ref: np.ndarray) -> float:
    """The error of a solution at the output times: per component, the largest absolute
    deviation over the times divided by that component's largest reference magnitude; then the
    largest over components. Scaling by each component's own peak keeps Robertson's y2 (peak
    3.6e-5) from vanishing beside y1 (about 1). inf when y holds a NaN or inf."""
    y64 = np.asarray(y, dtype=np.float64).reshape(y_ref.shape)
    if not np.all(np.isfinite(y64)):
        return math.inf
    scale = np.max(np.abs(y_ref), axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    return float(np.max(np.max(np.abs(y64 - y_ref), axis=0) / scale))


# ---- the neural ODE's float64 gradient reference: the continuous adjoint, solved backwards
# at rtol 1e-12 (DOP853), from the final state the forward reference solve gives.

def _node_adjoint_rhs(p: dict[str, np.ndarray]) -> Callable[[float, np.ndarray], np.ndarray]:
    w1, b1, w2 = p["field.dense1.kernel"], p["field.dense1.bias"], p["field.dense2.kernel"]
    n = NODE_BATCH * w1.shape[0]

    def rhs(t: float, z: np.ndarray) -> np.ndarray:
        h, a = z[:n].reshape(NODE_BATCH, -1), z[n:2 * n].reshape(NODE_BATCH, -1)
        s = np.tanh(h @ w1 + b1)
        dh = s @ w2 + p["field.dense2.bias"]
        u = (a @ w2.T) * (1.0 - s * s)  # a^T df/dz through tanh
        da = -(u @ w1.T)
        grads = [-(h.T @ u), -u.sum(axis=0), -(s.T @ a), -a.sum(axis=0)]  # W1, b1, W2, b2
        return np.concatenate([dh.reshape(-1), da.reshape(-1), *(g.reshape(-1) for g in grads)])

    return rhs


def node_loss_grad_final(problem: Problem, y1: np.ndarray) -> np.ndarray:
    """dL/dy(t1) of `node_loss`, in closed form."""
    p = problem.params
    h = y1.reshape(NODE_BATCH, -1)
    r = h @ p["head.kernel"] + p["head.bias"] - p["onehot"]
    out: np.ndarray = (r @ p["head.kernel"].T / NODE_BATCH).reshape(-1)
    return out


def solve_gradient_reference(problem: Problem) -> np.ndarray:
    """d node_loss / d field parameters (NODE_GRAD_PARAMS flattened and concatenated), float64."""
    from scipy.integrate import solve_ivp

    y1 = reference(problem)[-1]
    a1 = node_loss_grad_final(problem, y1)
    size = sum(problem.params[k].size for k in NODE_GRAD_PARAMS)
    z1 = np.concatenate([y1, a1, np.zeros(size)])
    sol = solve_ivp(_node_adjoint_rhs(problem.params), (problem.t1, 0.0), z1, method="DOP853",
                    rtol=1e-12, atol=1e-14)
    if sol.status != 0:
        raise RuntimeError(f"the adjoint reference solve of {problem.name} failed: {sol.message}")
    g: np.ndarray = sol.y[2 * len(y1):, -1]
    return g


def gradient_reference(problem: Problem) -> np.ndarray:
    """The cached float64 gradient of the neural ODE's loss with respect to its field's
    parameters (NODE_GRAD_PARAMS order, each flattened row-major)."""
    if not problem.has_gradient:
        raise ValueError(f"{problem.name} has no gradient to compare")
    return _cached(problem.name, "gradient", lambda: solve_gradient_reference(problem))


def flat_gradient(grads: dict[str, np.ndarray]) -> np.ndarray:
    """A backend's gradient by parameter name, in the reference's order and layout."""
    return np.concatenate([np.asarray(grads[k], dtype=np.float64).reshape(-1) for k in NODE_GRAD_PARAMS])


def relative_error(x: np.ndarray, ref: np.ndarray) -> float:
    """Normwise relative error ||x - ref|| / ||ref|| (inf for a non-finite x)."""
    x64 = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x64)):
        return math.inf
    return float(np.linalg.norm(x64 - ref) / np.linalg.norm(ref))
