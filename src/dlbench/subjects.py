"""What a trial runs over: the one lookup from a name (`-w NAME`, `TrialSpec.workload.name`) to
the registry of its kind. A runner scenario's record says what its trials run over
(dlbench/scenarios.py: Scenario.subject): a workload of the workload registry (dlbench/workloads:
a model, its data and presets) or an initial value problem of the problem registry
(dlbench/problems). The registries share no name; a problem's name resolves in the problem
registry first. A trial's spec carries either name in `workload.name` (a WorkloadSpec with the
sizes below for a problem), so stored specs and configuration keys read as they always did.

Above both registries, below backends/support, the runner and the CLI: they ask here what a name
runs and how a trial's spec is made; what only a workload has (its data, FLOPs, targets) they
still ask of dlbench.workloads, for the trials of a workload-subject record.
"""

from __future__ import annotations

from types import ModuleType

from dlbench import problems, scenarios, workloads
from dlbench.plugins import BUILTIN, Origin
from dlbench.problems import Problem
from dlbench.spec import Numerics, SpecError, TrialSpec, WorkloadSpec
from dlbench.workloads.base import Preset

# A problem's trial spec: one state, nothing batched; batch 8 because the spec's parity batch
# must divide the batch size. The same under every device preset (a problem has no sizes), and
# what every stored solve trial carries, so its configuration key stays what it was.
PROBLEM_PRESET = Preset(model_size="default", dataset_size=8, batch_size=8, epochs=1, warmup_epochs=0, eval_size=8)
PROBLEM_PRESETS = {name: PROBLEM_PRESET for name in ("tiny", "cpu", "gpu")}


# What a name resolves to: a workload's module, or a problem.
Subject = ModuleType | Problem


def lookup(name: str) -> Subject:
    """The workload module (workloads.get: a plugin's held to its contract) or the problem."""
    return problems.get(name) if is_problem(name) else workloads.get(name)


def is_problem(name: str) -> bool:
    """Whether `name` is a problem of the problem registry (else it names a workload, or nothing)."""
    return name in problems.PROBLEMS


def kind(name: str) -> scenarios.Subject:
    return "problem" if is_problem(name) else "workload"


def check(name: str) -> None:
    """What the CLI asks of a name given with -w: a problem, or a workload that passes
    workloads.check; raises SpecError or PluginError with one line naming both kinds."""
    if is_problem(name):
        return
    try:
        workloads.check(name)
    except SpecError as e:
        raise SpecError(f"{e} (the solver scenario's: {', '.join(problems.names())})") from None


def runs(name: str) -> dict[str, str]:
    """--scenario -> runner scenario for `name` (a workload's SCENARIOS; a problem's own)."""
    if is_problem(name):
        return problems.scenarios(name)
    found: dict[str, str] = workloads.get(name).SCENARIOS
    return found


def scenario_unsupported(name: str, scenario: str) -> str | None:
    """None when `name` runs `--scenario scenario` with a runner scenario this dlbench has and
    whose subject `name` is, else the reason (one line)."""
    return scenarios.unsupported(name, runs(name), scenario, kind(name))


def scenario(name: str, user_scenario: str) -> scenarios.Scenario:
    """The record of the runner scenario `name` runs `--scenario user_scenario` with (check
    scenario_unsupported first: KeyError where it has none)."""
    return scenarios.get(runs(name)[user_scenario])


def record(trial: TrialSpec) -> scenarios.Scenario:
    """The record of the runner scenario that runs `trial` (a trial the plan found supported)."""
    return scenario(trial.workload.name, trial.scenario)


def presets(name: str) -> dict[str, Preset]:
    """The presets `--preset` picks from: a workload's PRESETS; a problem's, one spec for all."""
    if is_problem(name):
        return PROBLEM_PRESETS
    found: dict[str, Preset] = workloads.get(name).PRESETS
    return found


def preset(name: str, preset_name: str) -> Preset:
    found = presets(name)
    if preset_name not in found:
        raise SpecError(f"preset {preset_name!r} is not one of: {', '.join(found)} (the presets of {name})")
    return found[preset_name]


def numerics(name: str) -> Numerics:
    """The numerics block of its trials' spec (a problem's: the defaults; nothing reads them)."""
    if is_problem(name):
        return Numerics()
    found: Numerics = workloads.get(name).NUMERICS
    return found


def fixed_classes(name: str) -> int | None:
    return None if is_problem(name) else workloads.fixed_classes(name)


def quality(name: str) -> str:
    """What its trials score: a workload's held-out QUALITY, a problem's solve error."""
    return problems.QUALITY if is_problem(name) else str(workloads.get(name).QUALITY)


def origin(name: str) -> Origin:
    """Built in (every problem), or the plugin that registers the workload."""
    return BUILTIN if is_problem(name) else workloads.origin(name)


def validate(spec: WorkloadSpec) -> None:
    """The spec's own checks, then its registry's: workloads.validate, or for a problem its one
    model size and no augmentation (it has no images). Raises SpecError with one line."""
    if not is_problem(spec.name):
        workloads.validate(spec)
        return
    spec.validate()
    if spec.model_size != PROBLEM_PRESET.model_size:
        raise SpecError(f"{spec.name} model size {spec.model_size!r} is not one of: {PROBLEM_PRESET.model_size}")
    if spec.augment != "none":
        raise SpecError(f"augment {spec.augment!r} does not fit {spec.name} (an initial value problem: it has no"
                        " images): allowed is none")
