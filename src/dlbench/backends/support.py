"""Can this trial run, and is what was built what the spec asks? One answer for the planner (in
the parent, before anything starts), the worker and the probe (in the child, after the import,
on the device the framework actually found). Imports no framework.

`validate` checks a trial against the registries (a known workload and framework, the
framework's options); `unsupported` says why a valid trial cannot run here (the workload's
scenarios, the backend's capabilities, modes, precisions and data parallelism): the parent's
plan asks it before a process starts, a child once (`require`) after the import; `build` and
`init` are then the one way a child builds a Program and its first state: the build, then the
numerics read-back compared with the spec (after init: a runtime that runs an exported model
knows its numerics once it has found the export).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

from dlbench import scenarios, subjects, workloads
from dlbench.backends import get_backend
from dlbench.backends import precision as precisions
from dlbench.backends.solve import OdeModule
from dlbench.backends.base import (
    Backend,
    Built,
    Capabilities,
    DataParallel,
    Generator,
    Learner,
    Rollout,
    Sampler,
    Servable,
    Trainable,
    Unsupported,
    builder_module,
    builder_package,
    module_installed,
    option_unsupported,
)
from dlbench.spec import ConvergeOptions, SpecError, TrialSpec
from dlbench.workloads.base import numerics_readback


def validate(trial: TrialSpec) -> Backend:
    """The trial's own checks, its subject's (workload or problem), then its framework's (known,
    options valid). Returns the backend; raises SpecError with one line."""
    subjects.validate(trial.workload)
    trial.validate()
    record = _record(trial)
    if trial.profile and record is not None and not record.profiled:
        profiled = ", ".join(n for n, r in scenarios.SCENARIOS.items() if r.profiled)
        raise SpecError(f"profile applies to the runner scenarios {profiled} only, not {record.name!r}"
                        f" ({trial.workload.name} --scenario {trial.scenario})")
    refused = None if record is None else precisions.int8_refused(trial.precision, record.capability)
    if refused is not None:  # int8 decoding asked of training or serving: the user's mistake
        raise SpecError(f"{trial.workload.name} --scenario {trial.scenario}: {refused}")
    if record is not None and record.options is ConvergeOptions:
        workloads.target(trial)  # a target the workload cannot score (a perplexity for cnn): one line
    backend = get_backend(trial.framework)
    for name, value in trial.policy.options.items():
        option = backend.options.get(name)
        if option is None:
            known = ", ".join(backend.options) or "none"
            raise SpecError(f"{trial.framework} has no option {name!r} (its options: {known})")
        if value not in option.allowed:
            raise SpecError(f"{trial.framework} option {name} {value!r} is not one of: {', '.join(option.allowed)}")
    return backend


def _record(trial: TrialSpec) -> scenarios.Scenario | None:
    """The record of the runner scenario that runs `trial`, None where its subject has none
    (unsupported says why)."""
    if subjects.scenario_unsupported(trial.workload.name, trial.scenario) is not None:
        return None
    return subjects.record(trial)


def scenario_unsupported(framework: str, capabilities: Capabilities, scenario: str,
                         record: scenarios.Scenario | None = None) -> str | None:
    """None when the capabilities cover what `--scenario scenario` needs (the capability of
    its runner scenario's `record`; without one, the runner scenario of the same name, as a
    supervised workload runs it), else the reason (one line)."""
    needed = capabilities.covers((record or scenarios.get(scenario)).capability)
    if needed is None:
        return None
    has = ", ".join(capabilities.names()) or "none"
    return f"{framework} cannot run the {scenario} scenario: it lacks the {needed} capability (has: {has})"


def implementation_unsupported(framework: str, backend: Backend, workload: str) -> str | None:
    """None when `backend` has an implementation of `workload`, else why not (one line): the
    reason it declines the workload (Capabilities.declined), else that no builder module makes
    it (its own package's, or for an exporting backend its source family's: builder_package).
    The parent's answer, for `dlbench list` and the contract test; in a child the build says
    the same (base.build_program)."""
    declined = backend.capabilities.declines(workload)
    if declined is not None:
        return declined  # shown beside the framework and workload it concerns
    package = builder_package(type(backend).__module__, backend.capabilities)
    builder = builder_module(package, workload)
    if builder is not None and module_installed(builder):
        return None
    source = backend.capabilities.exports_from
    if source is None:
        return f"{framework} has no implementation of {workload!r}"
    return f"{framework} serves {source}'s implementations, and {source} has no implementation of {workload!r}"


def workload_unsupported(framework: str, backend: Backend, workload: str) -> str | None:
    """implementation_unsupported, then whether any of the workload's scenarios is one the
    backend's capabilities run (an inference-only backend serves nothing of a workload without
    an infer scenario): what `dlbench list` shows in a framework x workload cell."""
    reason = implementation_unsupported(framework, backend, workload)
    if reason is not None:
        return reason
    names = list(workloads.get(workload).SCENARIOS)
    capabilities = backend.capabilities
    if any(scenario_unsupported(framework, capabilities, s, workloads.scenario(workload, s)) is None for s in names):
        return None
    has = ", ".join(capabilities.names()) or "none"
    # Without the framework's name: `dlbench list` shows it beside, and frameworks share the note.
    return f"none of {workload}'s scenarios ({', '.join(names)}) runs with {has} only"


def data_parallel_unsupported(dp: DataParallel, trial: TrialSpec) -> str | None:
    """Why `trial` cannot run on trial.devices devices here, or None. What no framework runs is
    decided here, once: scenarios whose record does not say `data_parallel`, and workloads with
    BatchNorm (per-replica statistics would need a per-replica float64 reference; not
    implemented)."""
    if trial.devices == 1:
        return None
    record = _record(trial)
    if record is None or not record.data_parallel:
        sharded = ", ".join(n for n, r in scenarios.SCENARIOS.items() if r.data_parallel)
        return (f"devices {trial.devices}: data parallelism runs the runner scenarios {sharded} only, not"
                f" {trial.workload.name} --scenario {trial.scenario}")
    if workloads.get(trial.workload.name).buffer_shapes(trial.workload):
        return (f"devices {trial.devices}: {trial.workload.name} has BatchNorm, and {trial.bn_sync} BatchNorm"
                " under data parallelism (with its matching parity reference) is not implemented")
    return dp.unsupported(trial)


def unsupported(trial: TrialSpec, backend: Backend, device: str) -> str | None:
    """None when `backend` runs the (valid) `trial` on `device` ("cpu" or "cuda"), else the
    reason, one line: the first of the workload's scenarios, the backend's capability, its
    modes, its precisions on that device, an option value that needs a GPU, and data
    parallelism that says no. (A missing
    builder is the build's Unsupported: a plugin or test backend builds as it likes.)"""
    declined = backend.capabilities.declines(trial.workload.name)
    if declined is not None:
        return f"{trial.framework} does not run {trial.workload.name}: {declined}"
    reason = subjects.scenario_unsupported(trial.workload.name, trial.scenario)
    if reason is not None:
        return reason
    record = subjects.record(trial)
    reason = scenario_unsupported(trial.framework, backend.capabilities, trial.scenario, record)
    if reason is None:
        reason = backend.modes().get(trial.policy.mode, f"unknown mode {trial.policy.mode!r}")
    if reason is None:
        why = precisions.unsupported(backend.precisions, device, trial.precision, trial.scenario,
                                     record.reduced_precision, record.capability)
        reason = None if why is None else f"{trial.framework} {trial.precision} on {device}: {why}"
    if reason is None:
        reason = option_unsupported(trial.framework, backend.options, trial.policy, device)
    if reason is None:
        reason = data_parallel_unsupported(backend.data_parallel, trial)
    return reason


def require(trial: TrialSpec, backend: Backend) -> None:
    """The child's one "can this run?", after the import, on the device the framework found
    (the parent's plan asked it before the process started, on the device it saw): Unsupported
    with the reason. The worker, the probe and the contract check ask it once per trial, before
    anything is built."""
    reason = unsupported(trial, backend, backend.device_kind())
    if reason is not None:
        raise Unsupported(reason)


def build(trial: TrialSpec, backend: Backend) -> Built:
    """In a child after the import, once `require` has said yes: the trial's program. The
    scenario asks for the capability it needs with one of the functions below."""
    return backend.build(trial)


def _lacks(trial: TrialSpec, protocol: str) -> Unsupported:
    return Unsupported(f"the {trial.framework} {trial.workload.name} program does not implement {protocol}"
                       f" (backends/base.py), which the {trial.scenario} scenario needs")


def build_as(trial: TrialSpec, backend: Backend, protocol: type[Any]) -> Any:
    """The trial's program as the capability protocol its scenario names (backends/base.py: a
    runtime-checkable protocol): its members are checked here once, never probed one by one
    where used. Typed `Any`: mypy takes no protocol class for `type[P]`; each caller below names
    the protocol it returns."""
    program = build(trial, backend)
    if not isinstance(program, protocol):
        raise _lacks(trial, protocol.__name__)
    return program


def build_learner(trial: TrialSpec, backend: Backend) -> Learner:
    return build_as(trial, backend, Learner)


def build_trainable(trial: TrialSpec, backend: Backend) -> Trainable:
    return build_as(trial, backend, Trainable)


def build_servable(trial: TrialSpec, backend: Backend) -> Servable:
    return build_as(trial, backend, Servable)


def build_sampler(trial: TrialSpec, backend: Backend) -> Sampler:
    return build_as(trial, backend, Sampler)


def build_generator(trial: TrialSpec, backend: Backend) -> Generator:
    return build_as(trial, backend, Generator)


def build_rollout(trial: TrialSpec, backend: Backend) -> Rollout:
    return build_as(trial, backend, Rollout)


def build_solvers(trial: TrialSpec, backend: Backend) -> OdeModule:
    """Capability "solve": the backend's ODE solver module (backends/<framework>/ode.py, the
    problem's builder module, which builds itself), imported in the child after the framework;
    Unsupported with the reason where its library is not installed."""
    return build_as(trial, backend, OdeModule)


def init(trial: TrialSpec, workload: ModuleType, program: Built) -> Any:
    """The Program's state from the canonical parameters of `workload` (the trial's workload
    module, looked up once by the caller); the Program must then read back every numerics field
    its workload uses as the spec asks (refused, never ignored)."""
    state = program.init(workload.init_params(trial.workload))
    check_numerics(trial, workload, program.numerics())
    return state


def same_value(got: Any, wanted: Any) -> bool:
    """The one equality of a numerics read-back: floats to 1e-6 relative (a framework may hold
    an eps as float32), everything else exactly."""
    if isinstance(wanted, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, wanted, rel_tol=1e-6)
    return bool(got == wanted)


def check_numerics(trial: TrialSpec, workload: ModuleType, got: dict[str, Any]) -> None:
    """Every numerics field the workload uses (`workload`: its module), as read back from the
    framework objects, must be the spec's; raises Unsupported naming each difference."""
    spec = trial.workload
    wanted = numerics_readback(spec.numerics, workload.NUMERICS_FIELDS)
    differ = [f"{k} {got.get(k)!r} (spec: {v!r})" for k, v in wanted.items() if not same_value(got.get(k), v)]
    if differ:
        raise Unsupported(f"the {trial.framework} {spec.name} computes {', '.join(differ)}")
