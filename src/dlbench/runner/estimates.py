"""The planner's first estimate of a trial's seconds, by runner scenario (dlbench/scenarios.py),
in the parent: `ESTIMATES`, read by runner/plan.py's estimate_s before the store knows better.
Each takes the trial, its cost subject (subjects.lookup: its workload module or problem), its
backend's cost guess and the samples it trains. The parent side of a scenario, as runner/scenarios/
is the child's (the parent imports none of those modules): the counts a child runs that an
estimate needs are in runner/protocol.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType

from dlbench.backends.base import CostGuess, SolveGuess
from dlbench.problems import solve as ivp
from dlbench.runner import protocol
from dlbench.spec import ConvergeOptions, GenerateOptions, InferOptions, SolveOptions, TrialSpec
from dlbench.subjects import Subject

# ---- training: start-up and compiles from the backend's cost guess, compute from FLOPs.
# Compute at this rate in a first estimate (achieved FLOP/s of the zoo on two cores spans 1-40
# GFLOP/s; start-up dominates short trials and comes from each backend's cost_guess).
CPU_FLOPS_GUESS = 20e9
# A cnn-sized graph (8 parameter tensors) compiles in Backend.cost_guess.compile_s; a graph with n
# tensors in about sqrt(n / 8) times that (fitted on the zoo: resnet's 62 tensors compile 2.5-3x
# longer than the cnn in torch and keras-torch).
COMPILE_REFERENCE_TENSORS = 8
# Extra compiles besides the train step's in compiled mode: the parity probe's loss-and-gradients
# function and the evaluation's forward (torch: 6-48 s for the probe, docs/benchmarks.md).
EXTRA_COMPILES = 0.5
# Seconds a graph-mode trace costs against a compile.
TRACE_SHARE = 0.3


def compile_s(trial: TrialSpec, module: ModuleType, guess: CostGuess) -> float:
    """One compile of the trial's step: the backend's guess for a cnn-sized step, scaled by the
    size of the workload `module`, in full for compiled mode and in part for a graph-mode trace."""
    size = math.sqrt(len(module.param_shapes(trial.workload)) / COMPILE_REFERENCE_TENSORS)
    share = {"compiled": 1.0, "graph": TRACE_SHARE}.get(trial.policy.mode, 0.0)
    return guess.compile_s * size * share


def train_s(trial: TrialSpec, subject: Subject, guess: CostGuess, samples: int) -> float:
    """A training trial (train, rl_rollout, rl_train, generate) of the workload module
    `subject`: start-up, the step's compiles and the parity probe's and evaluation's, and
    `samples` trained samples at CPU_FLOPS_GUESS."""
    assert isinstance(subject, ModuleType)  # a workload-subject record's trial
    compute = samples * subject.flops_per_sample(trial.workload) / CPU_FLOPS_GUESS
    return guess.startup_s + compile_s(trial, subject, guess) * (1 + EXTRA_COMPILES) + compute


def converge_s(trial: TrialSpec, subject: Subject, guess: CostGuess, samples: int) -> float:
    """As a training trial's, over the steps the presets take to their targets (a few hundred:
    eight evaluations' worth, at most max_steps) and at most the time budget."""
    assert isinstance(subject, ModuleType)  # a workload-subject record's trial
    spec, options = trial.workload, trial.options_of(ConvergeOptions)
    trained = min(options.max_steps, 8 * options.eval_every) * spec.batch_size
    compute = min(trained * subject.flops_per_sample(spec) / CPU_FLOPS_GUESS, options.max_time_s)
    return guess.startup_s + compile_s(trial, subject, guess) * (1 + EXTRA_COMPILES) + compute


# ---- serving. A Server sweep's tests (the first, 3 probes, 4 bisection steps: runner/scenarios/
# served.py) and a guess of each one's seconds (1,100 queries at a few thousand QPS, slower ones at
# lower rates); a Server test of the generate scenario: its ~1,100 generations of many tokens each.
SERVER_SWEEP_TESTS = 8
SERVER_TEST_GUESS_S = 2.0
GENERATE_SERVER_TEST_GUESS_S = 30.0


def infer_s(trial: TrialSpec, subject: Subject, guess: CostGuess, samples: int) -> float:
    """Inference (infer and sample): start-up, two compiles (batch 1 and the spec's batch), two
    timed loops each capped by the budget, and a Server sweep's tests."""
    assert isinstance(subject, ModuleType)  # a workload-subject record's trial
    spec, options = trial.workload, trial.options_of(InferOptions)
    flops = subject.flops_per_sample(spec, train=False)
    requests = options.infer_requests + protocol.INFER_BATCHES * spec.batch_size
    compute = min(requests * flops / CPU_FLOPS_GUESS, 2 * options.infer_budget_s)
    if options.infer_load == "server":  # each Server test: its minimum duration or ~1,100 queries
        compute += options.infer_budget_s if options.server_qps else SERVER_TEST_GUESS_S * SERVER_SWEEP_TESTS
    return guess.startup_s + 2 * compile_s(trial, subject, guess) + compute


def generate_s(trial: TrialSpec, subject: Subject, guess: CostGuess, samples: int) -> float:
    """As a training trial's (its start-up and compiles dominate), plus LoadGen's Server tests
    under --load server (one at a given QPS, else the sweep's)."""
    seconds = train_s(trial, subject, guess, samples)
    options = trial.options_of(GenerateOptions)
    if options.gen_load == "server":
        seconds += GENERATE_SERVER_TEST_GUESS_S * (1 if options.gen_qps else SERVER_SWEEP_TESTS)
    return seconds


# ---- solving: its curves cost what its backend's CostGuess.solve says, fitted on the quiet run of
# docs/benchmarks.md "ODE solvers" (4 problems x 3 frameworks in 9.7 min, which the estimate before
# this one put at 16.6 min; the development run took 33 min at load 13-15, what `busy_machine`'s
# factor is for); SciPy's baseline trial by its own (backends/scipy). A backend without a
# SolveGuess gets GENERIC_SOLVE_GUESS.
SOLVE_CAP_REFERENCE_STEPS = 5000  # the step cap at which capped_curve_s were measured (the default)
GENERIC_SOLVE_GUESS = SolveGuess(explicit_curves=4, implicit_curves=2, point_s=0.5, capped_curve_s=10.0,
                                 compile_s=2.0, gradient_methods=2, gradient_point_s=5.0)


def solve_s(trial: TrialSpec, subject: Subject, guess: CostGuess, samples: int) -> float:
    """Start-up, then the trial's sweep: per solver curve its compiles and its tolerance points,
    except an explicit curve on a stiff problem, which runs to the step cap once and skips the
    rest; then the neural ODE's gradient points."""
    assert isinstance(subject, ivp.Problem)  # a problem-subject record's trial
    options, problem = trial.options_of(SolveOptions), subject
    g = guess.solve or GENERIC_SOLVE_GUESS
    points = len(options.rtols())
    capped_s = g.capped_curve_s * options.solve_max_steps / SOLVE_CAP_REFERENCE_STEPS
    explicit_s = capped_s if problem.stiff else points * g.point_s
    curves_s = g.explicit_curves * (g.compile_s + explicit_s) + g.implicit_curves * (g.compile_s + points * g.point_s)
    gradients = (g.gradient_methods * len(protocol.SOLVE_DTYPES) * len(protocol.SOLVE_GRADIENT_RTOLS)
                 if problem.has_gradient else 0)
    return guess.startup_s + curves_s + gradients * g.gradient_point_s


Estimate = Callable[[TrialSpec, Subject, CostGuess, int], float]
ESTIMATES: dict[str, Estimate] = {
    "train": train_s,
    "infer": infer_s,
    "converge": converge_s,
    "sample": infer_s,  # its timed loops and budget are inference's
    "rl_rollout": train_s,
    "rl_train": train_s,
    "rl_converge": converge_s,
    "generate": generate_s,
    "solve": solve_s,
}
