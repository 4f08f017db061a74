"""torch's ODE libraries for the solver scenario: torchdiffeq and torchode
(backends/solve.py has the seam).

Both are explicit only: torchdiffeq 0.2.5's adaptive solvers are Runge-Kutta (dopri5, dopri8,
bosh3, adaptive_heun, fehlberg2; its implicit_adams is fixed-step), torchode 1.0.1 has Dopri5,
Tsit5, Heun and Bosh3. That torch has no adaptive implicit (stiff) solver is reported (ABSENT).
Both run eagerly: a Python loop of steps, with each step's control flow on the host.
Gradients: backpropagation through torchdiffeq's dopri5 and its adjoint (odeint_adjoint), and
backpropagation through torchode (AutoDiffAdjoint).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dlbench.backends.base import Unsupported
from dlbench.backends.solve import Count, Gradient, OdeModule, Solve, Solved, SolverInfo, built, checked, classify, ops_of
from dlbench.problems import solve as ivp
from dlbench.spec import TrialSpec

try:
    import torchdiffeq
    import torchode
except ImportError as e:  # a solve trial is unsupported without them
    raise Unsupported(f"torch has no ODE solvers here: {type(e).__name__}: {e} (pip install 'dlbench[ode-torch]')") from e

_DIFFEQ = f"torchdiffeq {torchdiffeq.__version__}"
_ODE = f"torchode {torchode.__version__}"
SOLVERS = {
    "torchdiffeq-dopri5": SolverInfo(_DIFFEQ, "explicit"),
    "torchode-tsit5": SolverInfo(_ODE, "explicit"),
    "torchode-dopri5": SolverInfo(_ODE, "explicit"),
}
ABSENT = {
    "implicit": "no adaptive implicit (stiff) solver in torchdiffeq 0.2.5 or torchode 1.0.1",
}
GRADIENTS = {"backprop": "torchdiffeq-dopri5", "adjoint": "torchdiffeq-dopri5",
             "torchode-backprop": "torchode-tsit5"}



def build(trial: TrialSpec) -> OdeModule:
    """A solve trial's program: this module (backends/solve.py)."""
    return built(__name__)


OPS = ops_of(torch, lambda xs: torch.stack(xs, dim=-1), torch.sum)
_DTYPES = {"float64": torch.float64, "float32": torch.float32}


class _Field(torch.nn.Module):
    """The problem's field as a Module (odeint_adjoint needs the parameters as its own), counting
    its evaluations."""

    def __init__(self, problem: ivp.Problem, dtype: torch.dtype, trained: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.problem, self.calls = problem, 0
        self.trained = torch.nn.ParameterDict(
            {k.replace(".", "_"): torch.nn.Parameter(torch.as_tensor(problem.params[k], dtype=dtype))
             for k in trained})
        self.fixed = {k: torch.as_tensor(v, dtype=dtype) for k, v in problem.params.items() if k not in trained}

    def params(self) -> dict[str, Any]:
        return {**self.fixed, **{k: self.trained[k.replace(".", "_")] for k in ivp.NODE_GRAD_PARAMS
                                 if k.replace(".", "_") in self.trained}}

    def forward(self, t: Any, y: Any) -> Any:
        self.calls += 1
        return self.problem.rhs(t, y, self.params(), OPS)


def _times(problem: ivp.Problem, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor((0.0, *problem.times), dtype=dtype)


def _torchode_solve(f: _Field, problem: ivp.Problem, solver: str, dtype: torch.dtype, rtol: float, atol: float,
                    max_steps: int) -> Any:
    term = torchode.ODETerm(lambda t, y: f(t, y[0])[None])  # torchode batches; one problem here
    step = torchode.Tsit5(term=term) if solver.endswith("tsit5") else torchode.Dopri5(term=term)
    controller = torchode.IntegralController(atol=atol, rtol=rtol, term=term)
    adjoint = torchode.AutoDiffAdjoint(step, controller, max_steps=max_steps)
    y0 = torch.tensor(problem.y0, dtype=dtype)[None]
    return adjoint.solve(torchode.InitialValueProblem(y0=y0, t_eval=_times(problem, dtype)[None]))


def prepare(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Solve:
    tdtype = _DTYPES[dtype]
    f = _Field(problem, tdtype)

    def solve_torchdiffeq(rtol: float, atol: float) -> Solved:
        f.calls = 0
        try:
            with torch.no_grad():
                ys = torchdiffeq.odeint(f, torch.tensor(problem.y0, dtype=tdtype), _times(problem, tdtype),
                                        rtol=rtol, atol=atol, method="dopri5",
                                        options={"max_num_steps": max_steps})
        except AssertionError as e:  # torchdiffeq signals max steps and dt underflow by assert
            return Solved(None, classify(str(e)), f"torchdiffeq: {e}", nfe=f.calls)
        out = checked(ys[1:].numpy(), problem)
        out.nfe = f.calls
        return out

    def solve_torchode(rtol: float, atol: float) -> Solved:
        f.calls = 0
        with torch.no_grad():
            sol = _torchode_solve(f, problem, solver, tdtype, rtol, atol, max_steps)
        stats = {k: int(v[0]) if v.ndim else int(v) for k, v in sol.stats.items() if k.startswith("n_")}
        # nfe: the field's own count, as for torchdiffeq (torchode's n_f_evals counts the same calls:
        # every term.vf, its initial step size's included)
        counts = {"nfe": f.calls, "steps": stats.get("n_steps"),
                  "accepted": stats.get("n_accepted")}
        status = int(sol.status[0])
        if status != 0:
            name = torchode.Status(status).name
            return Solved(None, classify(name.replace("_", " ")), f"torchode: {name}", **counts)
        out = checked(sol.ys[0, 1:].numpy(), problem)
        out.nfe, out.steps, out.accepted = counts["nfe"], counts["steps"], counts["accepted"]
        if out.steps is not None and out.accepted is not None:
            out.rejected = out.steps - out.accepted
        return out

    return solve_torchdiffeq if solver.startswith("torchdiffeq") else solve_torchode


def prepare_count(problem: ivp.Problem, solver: str, dtype: str, max_steps: int) -> Count | None:
    return None  # the eager solve counts its field's calls (a Python increment beside each evaluation)


def prepare_gradient(problem: ivp.Problem, solver: str, method: str, dtype: str, rtol: float,
                     atol: float) -> Gradient:
    tdtype = _DTYPES[dtype]
    f = _Field(problem, tdtype, trained=ivp.NODE_GRAD_PARAMS)
    y0, ts = torch.tensor(problem.y0, dtype=tdtype), _times(problem, tdtype)

    def final_state() -> Any:
        if solver.startswith("torchode"):
            return _torchode_solve(f, problem, solver, tdtype, rtol, atol, 100_000).ys[0, -1]
        odeint = torchdiffeq.odeint_adjoint if method == "adjoint" else torchdiffeq.odeint
        return odeint(f, y0, ts, rtol=rtol, atol=atol, method="dopri5")[-1]

    def run() -> dict[str, np.ndarray]:
        f.zero_grad()
        ivp.node_loss(final_state(), f.params(), OPS).backward()
        return {k: f.trained[k.replace(".", "_")].grad.numpy().astype(np.float64) for k in ivp.NODE_GRAD_PARAMS}

    return run
