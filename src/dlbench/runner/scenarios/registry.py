"""The runner's table of scenario entries, by runner scenario name (dlbench/scenarios.py:
SCENARIOS): `RUNS`, the function that runs a trial of it over a TrialContext in the worker
process. Its first time estimate is the parent's (runner/estimates.py: ESTIMATES); how the parent
judges a trial's parity arrays follows the record's `parity` kind (runner/verdicts.py: JUDGES),
so a new scenario adds a line here and in ESTIMATES, and none in JUDGES.
"""

from __future__ import annotations

from collections.abc import Callable

from dlbench.runner.scenarios import converge, generate, infer, rl, sample, solve, train
from dlbench.runner.context import TrialContext

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
