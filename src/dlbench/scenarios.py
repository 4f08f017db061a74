"""One record per runner scenario, on the spec floor: what each layer needs to know about a
scenario, said once. Imports only the spec.

A user asks for a `--scenario` (spec.SCENARIOS: train, infer, converge, rollout, generate,
solve); the trial's subject (a workload, or a problem of the problem registry) maps it to the
runner scenario that runs it (workloads: SCENARIOS, e.g. ddpm's infer is `sample`, ppo's train
is `rl_train`; a problem runs `solve` as `solve`), and `subjects.scenario(name, scenario)` returns
that runner scenario's record. Each layer then registers its behaviour for a record once:
- runner: its entry (runner/scenarios/__init__.py: RUNS); its parity arrays are judged by the
  record's `parity` kind (runner/verdicts.py: JUDGES);
- report: its table and its progress line (report/scenarios.py);
- backends: nothing by name: `support.unsupported` reads the record's `capability` and
  `reduced_precision`.
A test (tests/test_scenarios.py) checks that every registry holds exactly these names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dlbench.spec import ConvergeOptions, GenerateOptions, InferOptions, NoOptions, ScenarioOptions, SolveOptions

# What a scenario needs a Program to do (backends/base.py: Trainable, Servable, Rollout, Sampler,
# Generator); "solve": the backend's ODE solver module (backends/<framework>/ode.py: base.OdeModule).
# A backend declares which of them it provides (base.Capabilities, base.PROVIDED_FOR).
Capability = Literal["train", "infer", "rollout", "sample", "generate", "solve"]
CAPABILITIES: tuple[Capability, ...] = ("train", "infer", "rollout", "sample", "generate", "solve")
# How the parent judges the fixed-batch arrays a trial leaves (runner/verdicts.py: JUDGES):
# "grads" loss and gradients, "logits" eval-mode logits, "sample" logits then a DDIM sample,
# "generate" greedy ids and per-step logits against a float64 decoder with its own cache;
# "none": the trial judges its own numbers against its float64 reference (the solver scenario's
# error per point), the parent has nothing to judge.
Parity = Literal["grads", "logits", "sample", "generate", "none"]
# What a scenario's trials run over (TrialSpec.workload.name names it), and so where their float64
# reference comes from: "workload", a model of the workload registry (dlbench/workloads), whose
# fixed-batch reference the parent computes before the trials (runner/reference.py) for the
# record's judge; "problem", an initial value problem of the problem registry (dlbench/problems),
# whose reference solution each trial reads from that registry's cache and measures every solve
# against. dlbench/subjects.py resolves a name in the registry of its kind.
Subject = Literal["workload", "problem"]
# The headline of the scenarios that time training steps (the report compares them by it).
TRAIN_THROUGHPUT = "samples_per_s"


@dataclass(frozen=True)
class Scenario:
    """One runner scenario. `headline` is the metric `--repeats auto` narrows and the report's
    ranking orders by; `reduced_precision` says whether bf16/fp16/tf32 apply (inference runs
    every framework's float32 graph); `options` is the options dataclass its trials carry;
    `profiled`: `run --profile` adds a trial of it whose timed window runs under the framework's
    profiler (runner/scenarios/profiled.py); `data_parallel`: `--devices N` shards its training
    step (a workload's own loop to a target or a rollout does not shard); `subject`: what its
    trials run over (Subject above); `baseline`: the framework of a framework-neutral
    implementation that the plan runs as a trial of its own, once per subject and repeat, beside
    the frameworks' trials (solve: "scipy", SciPy's solve_ivp, backends/scipy/): the report shows
    its rows as the reference and never ranks it against the frameworks."""

    name: str
    capability: Capability
    parity: Parity
    headline: str
    reduced_precision: bool
    options: type[ScenarioOptions]
    profiled: bool
    data_parallel: bool
    subject: Subject = "workload"
    baseline: str | None = None

    @property
    def parent_reference(self) -> bool:
        """Whether the parent computes the float64 fixed-batch reference its trials are judged
        against before they run (runner/reference.py): a workload's trials; a problem's trials
        measure each solve against the problem's own reference solution."""
        return self.subject == "workload"


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("train", "train", "grads", TRAIN_THROUGHPUT, True, NoOptions, profiled=True, data_parallel=True),
    Scenario("infer", "infer", "logits", "infer_samples_per_s", False, InferOptions, profiled=True,
             data_parallel=False),
    Scenario("converge", "train", "grads", "time_to_target_s", True, ConvergeOptions, profiled=False,
             data_parallel=False),
    Scenario("sample", "sample", "sample", "sample_images_per_s", False, InferOptions, profiled=True,
             data_parallel=False),
    Scenario("rl_rollout", "rollout", "grads", "env_steps_per_s", False, NoOptions, profiled=False,
             data_parallel=False),
    Scenario("rl_train", "rollout", "grads", TRAIN_THROUGHPUT, True, NoOptions, profiled=True, data_parallel=True),
    Scenario("rl_converge", "rollout", "grads", "time_to_target_s", True, ConvergeOptions, profiled=False,
             data_parallel=False),
    Scenario("generate", "generate", "generate", "output_tokens_per_s", False, GenerateOptions, profiled=False,
             data_parallel=False),
    Scenario("solve", "solve", "none", "solve_1e-6_s", False, SolveOptions, profiled=False, data_parallel=False,
             subject="problem", baseline="scipy"),
)}


def unsupported(name: str, runs: dict[str, str], scenario: str, subject: Subject) -> str | None:
    """None when `name`, a `subject` that maps each --scenario it runs to a runner scenario
    (`runs`: a workload's SCENARIOS, a problem's), runs `scenario` with a runner scenario this
    dlbench has and whose trials run over that kind of subject; else the reason (one line)."""
    if scenario not in runs:
        return f"{name} has no {scenario} scenario (it runs: {', '.join(runs)})"
    record = SCENARIOS.get(runs[scenario])
    if record is None:
        return (f"{name} runs {scenario} with the runner scenario {runs[scenario]!r}, which this dlbench does"
                f" not have (it has: {', '.join(SCENARIOS)})")
    if record.subject != subject:
        return (f"{name} is a {subject}, and the runner scenario {record.name!r} runs over a {record.subject}"
                f" (runner scenarios over a {subject}: {', '.join(n for n, r in SCENARIOS.items() if r.subject == subject)})")
    return None


def get(name: str) -> Scenario:
    """The record of runner scenario `name` (KeyError names the known ones)."""
    found = SCENARIOS.get(name)
    if found is None:
        raise KeyError(f"no runner scenario {name!r} (known: {', '.join(SCENARIOS)})")
    return found
