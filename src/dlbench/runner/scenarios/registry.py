"""The runner's tables of scenario entries, by runner scenario name (dlbench/scenarios.py:
SCENARIOS): `RUNS`, the function that runs a trial of it over a TrialContext in the worker
process; `ESTIMATES`, the planner's first estimate of a trial's seconds in the parent
(runner/plan.py: estimate_s, before the store knows better), from the trial, its backend's cost
subject (subjects.lookup: its workload module or problem), its backend's cost guess and the samples it trains. How the parent judges a trial's parity arrays follows the
record's `parity` kind (runner/verdicts.py: JUDGES), so a new scenario adds a line to each table
here and none there.
"""

from __future__ import annotations

from collections.abc import Callable

from dlbench.runner.scenarios import converge, generate, infer, rl, sample, solve, train
from dlbench.backends.base import CostGuess
from dlbench.runner.context import TrialContext
from dlbench.spec import TrialSpec
from dlbench.subjects import Subject

RUNS: dict[str, Callable[[TrialContext], None]] = {
    "train": train.run,
    "infer": infer.run,
    "converge": converge.run,
    "sample": sample.run,
    "rl_rollout": rl.run_rollout,
    "rl_train": rl.run_train,
    "rl_converge": rl.run_converge,
    "generate": generate.run,
    "solve": solve.run,
}

Estimate = Callable[[TrialSpec, Subject, CostGuess, int], float]
ESTIMATES: dict[str, Estimate] = {
    "train": train.estimate_s,
    "infer": infer.estimate_s,
    "converge": converge.estimate_s,
    "sample": infer.estimate_s,  # its timed loops and budget are inference's
    "rl_rollout": train.estimate_s,
    "rl_train": train.estimate_s,
    "rl_converge": converge.estimate_s,
    "generate": generate.estimate_s,
    "solve": solve.estimate_s,
}
