"""The problem registry: what the runner scenarios whose record's subject is "problem" run over
(dlbench/scenarios.py: Scenario.subject), as the workload registry (dlbench/workloads) holds
what the others run over. One module per such scenario, named for it: problems/solve.py, the
solver scenario's initial value problems (`-w hires --scenario solve`).

Why a registry of its own, beside workloads/ and on its floor: a problem is not a workload. It
has no model to train, no data set or order, no FLOPs and no held-out score; it has a field, an
initial state, output times and a float64 reference solution that each solve's error is measured
against (QUALITY below). Dressed as a workload it needed placeholder members (FLOPs 0, a NaN
score) that every seam reading workloads had to step round. Here a name resolves to a `Problem`
and nothing else; dlbench/subjects.py is the one lookup that sends a `-w` name to this registry
or to the workload registry.

Imports the spec floor only (spec, paths), except that problems/solve.py's neural ODE is the
`node` workload's field with its canonical weights, which it takes from workloads/node.py.
Problem names are built in (no plugins) and are not in `-w all` (the training suite); a trial
carries its problem's name in `TrialSpec.workload.name`, as stored keys always had it.
"""

from __future__ import annotations

from dlbench.problems import solve
from dlbench.problems.solve import Problem
from dlbench.spec import SpecError

# Runner scenario -> its problems, by name (the module named for the scenario defines them).
BY_SCENARIO: dict[str, dict[str, Problem]] = {"solve": solve.PROBLEMS}
PROBLEMS: dict[str, Problem] = {name: p for problems in BY_SCENARIO.values() for name, p in problems.items()}
# Runner scenario -> the module of each backend package that builds its trials
# (backends/<framework>/ode.py; backends/base.py: builder_module).
BUILDERS: dict[str, str] = {"solve": "ode"}
# What a problem's trial measures per solve: its error against the reference solution (the
# column `dlbench list` shows beside a workload's held-out quality).
QUALITY = "error"


def names() -> tuple[str, ...]:
    """Every problem, in registry order (the order `dlbench list` shows them in)."""
    return tuple(PROBLEMS)


def get(name: str) -> Problem:
    """The problem `name` (SpecError, one line, naming the problems for an unknown one)."""
    found = PROBLEMS.get(name)
    if found is None:
        raise SpecError(f"problem {name!r} is not one of: {', '.join(PROBLEMS)}")
    return found


def builder(name: str) -> str:
    """The backend packages' module that builds problem `name`'s trials (BUILDERS)."""
    return next(BUILDERS[scenario] for scenario in scenarios(name))


def scenarios(name: str) -> dict[str, str]:
    """The --scenario names problem `name` runs, each mapped to the runner scenario of the same
    name (a problem has no scenario of its own to map: it is one scenario's input)."""
    return {scenario: scenario for scenario, problems in BY_SCENARIO.items() if name in problems}
