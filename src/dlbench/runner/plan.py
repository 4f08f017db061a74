"""From a sweep (comma lists on every axis) to an ordered list of validated trials.

Repeats are interleaved in rounds; the order within a round is shuffled with a recorded seed,
so slow drift of the machine does not land on one framework.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from dlbench import subjects, workloads
from dlbench.analysis import repeats
from dlbench.backends import DEFAULT_FRAMEWORKS, get_backend, support
from dlbench.monitors.nvml import device_kind
from dlbench.plugins import first_line
from dlbench.runner.estimates import ESTIMATES
from dlbench.spec import (
    GenerateOptions,
    Policy,
    ScenarioOptions,
    SCENARIOS,
    SpecError,
    TrialSpec,
    WorkloadSpec,
    check_unused,
    configuration_key,
    options_type,
    to_dict,
)
from dlbench.backends.base import Backend
from dlbench.workloads.base import Preset

# More fresh processes per configuration than any CI spread needs; a typo such as 1000000 would
# otherwise plan a million trials before anything says no (one limit with --repeats auto's).
MAX_REPEATS = repeats.MAX_REPEATS


@dataclass(frozen=True)
class Sweep:
    workloads: tuple[str, ...] = ("cnn",)
    frameworks: tuple[str, ...] = DEFAULT_FRAMEWORKS
    frameworks_explicit: bool = False
    # Workloads named by the user (not `-w all`): one that runs none of the scenarios is refused.
    workloads_explicit: bool = False
    modes: tuple[str, ...] = ("compiled",)
    batch_sizes: tuple[int, ...] = ()  # empty: the preset's
    seeds: tuple[int, ...] = (0,)
    precisions: tuple[str, ...] = ("fp32",)
    scenarios: tuple[str, ...] = ("train",)
    devices: tuple[int, ...] = (1,)
    # Data parallelism: "weak" multiplies the batch (per device) by the device count, "strong"
    # keeps it as the global batch; the BatchNorm mode is recorded with each trial.
    scaling: str = "weak"
    bn_sync: str = "per-replica"
    repeats: int = 3
    preset: str = "cpu"
    dataset_size: int | None = None
    epochs: int | None = None
    warmup_epochs: int | None = None
    chunk_steps: int = 16
    threads: int | None = None
    compile_cache: str = "cold"
    timeout_s: float = 1800.0
    memory_limit_bytes: int | None = None
    quiet_wait_s: float | None = None  # --quiet-wait: the longest wait for a quiet machine before each trial
    order_seed: int = 0
    # The scenario options (spec.py: InferOptions, ConvergeOptions, each default declared
    # there), at most one of each type, the defaults for a type not given; a trial carries only
    # its own scenario's (options_for).
    scenario_options: tuple[ScenarioOptions, ...] = ()
    # Framework options (`--option FRAMEWORK.NAME=VALUE`): (framework, name, value); each trial's
    # policy carries only its own framework's.
    options: tuple[tuple[str, str, str], ...] = ()
    # Input pipeline: data placements (an axis), loader workers and augmentation (policy).
    data: tuple[str, ...] = ("pipeline",)
    # RL rollout placements (an axis; spec.ROLLOUTS): only RL workloads (a `rollout` scenario)
    # take it, the others run once with the default.
    rollouts: tuple[str, ...] = ("default",)
    loader_workers: int = 0
    augment: str = "none"
    # One extra trial per train or infer configuration under the framework's profiler, after the
    # timed rounds (runner/scenarios/profiled.py); its own configuration, never in their statistics.
    profile: bool = False

    def options_for(self, scenario: str) -> ScenarioOptions:
        """The sweep's options of the type `--scenario scenario` takes (spec.OPTIONS); the
        defaults of none for a scenario without options, so an option never changes another
        scenario's configuration key."""
        wanted = options_type(scenario)
        return next((o for o in self.scenario_options if type(o) is wanted), wanted())


@dataclass
class PlannedTrial:
    spec: TrialSpec
    status: str = "pending"  # or unsupported / skipped, decided without running anything
    reason: str | None = None


@dataclass
class Plan:
    trials: list[PlannedTrial] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    order_seed: int | None = None  # the shuffle within rounds, recorded with the run

    @property
    def pending(self) -> list[PlannedTrial]:
        return [t for t in self.trials if t.status == "pending"]


def preset(w: str, name: str) -> Preset:
    """The preset `name` of workload or problem `w` (subjects.preset: SpecError naming its presets)."""
    return subjects.preset(w, name)


def workload_spec(w: str, preset_name: str, seed: int = 0, batch_size: int | None = None,
                  dataset_size: int | None = None) -> WorkloadSpec:
    """The workload spec of a preset: its model size, sizes, the workload's numerics block and
    its class count where it fixes one."""
    p = preset(w, preset_name)
    fixed = subjects.fixed_classes(w)
    spec = WorkloadSpec(
        name=w,
        model_size=p.model_size,
        batch_size=batch_size if batch_size is not None else p.batch_size,
        dataset_size=dataset_size if dataset_size is not None else p.dataset_size,
        eval_size=p.eval_size,
        seed=seed,
        numerics=subjects.numerics(w),
    )
    if p.num_classes is not None:
        spec = replace(spec, num_classes=p.num_classes)
    return spec if fixed is None else replace(spec, num_classes=fixed)


def _trial(sweep: Sweep, w: str, f: str, mode: str, bs: int | None, seed: int, prec: str,
           scen: str, dev: int, data: str, rollout: str, repeat: int) -> TrialSpec:
    """The trial of one point of the sweep; a time-to-target trial without a target gets its
    workload's default one where it has one (lm: a perplexity; a problem trains to nothing)."""
    spec = _planned_spec(sweep, w, f, mode, bs, seed, prec, scen, dev, data, rollout, repeat)
    return spec if subjects.is_problem(w) else workloads.with_default_target(spec)


def _planned_spec(sweep: Sweep, w: str, f: str, mode: str, bs: int | None, seed: int, prec: str,
                  scen: str, dev: int, data: str, rollout: str, repeat: int) -> TrialSpec:
    p = preset(w, sweep.preset)
    spec = replace(workload_spec(w, sweep.preset, seed, bs, sweep.dataset_size), augment=sweep.augment)
    if sweep.scaling == "weak" and dev > 1:  # the batch given (or the preset's) is each device's
        spec = replace(spec, batch_size=spec.batch_size * dev)
    return TrialSpec(
        workload=spec,
        framework=f,
        policy=Policy(mode=mode, threads=sweep.threads, compile_cache=sweep.compile_cache,
                      options=_framework_options(sweep, f), loader_workers=sweep.loader_workers,
                      data=data, matmul_precision="tf32" if prec == "tf32" else "highest",
                      rollout=rollout if _is_rl(w) else "default"),
        scenario=scen,
        precision=prec,
        devices=dev,
        scaling=sweep.scaling,
        bn_sync=sweep.bn_sync,
        epochs=sweep.epochs if sweep.epochs is not None else p.epochs,
        warmup_epochs=sweep.warmup_epochs if sweep.warmup_epochs is not None else p.warmup_epochs,
        chunk_steps=sweep.chunk_steps,
        repeat=repeat,
        timeout_s=sweep.timeout_s,
        options=sweep.options_for(scen),
        memory_limit_bytes=sweep.memory_limit_bytes,
        quiet_wait_s=sweep.quiet_wait_s,
    )


def _framework_options(sweep: Sweep, framework: str) -> dict[str, str]:
    """The sweep's --option values for `framework`, less those at the option's declared default:
    an option given at its default is the configuration that no option gives, so it keeps that
    trial's configuration key (an unknown name or value stays, for validation to refuse)."""
    declared = get_backend(framework).options
    return {n: v for fw, n, v in sweep.options
            if fw == framework and not (n in declared and v == declared[n].default)}


def _framework_status(name: str, explicit: bool, notes: list[str]) -> str | None:
    """None when usable; 'skipped' for a missing framework in the default suite; raises for a
    missing framework the user asked for."""
    ok, reason = get_backend(name).available()
    if ok:
        return None
    # Each backend's reason names what is missing and the extra that installs it.
    if explicit:
        raise SpecError(f"framework {name!r} cannot run here: {reason}")
    notes.append(f"skipped {name}: {reason}")
    return "skipped"


# The most trials one run plans (make_plan refuses more, before planning them).
MAX_TRIALS = 10_000


def make_plan(sweep: Sweep) -> Plan:
    """Every trial validated before anything runs; a bad value raises SpecError."""
    plan = Plan(order_seed=sweep.order_seed)
    if sweep.repeats < 1:
        raise SpecError(f"repeats must be an integer >= 1, got {sweep.repeats!r}")
    if sweep.repeats > MAX_REPEATS:
        raise SpecError(f"repeats {sweep.repeats!r} is over the maximum of {MAX_REPEATS}")
    _check_options(sweep)
    generate = sweep.options_for(GenerateOptions.SCENARIO)
    if isinstance(generate, GenerateOptions):  # a bound no trial of the sweep would take
        generate.check_unused(sweep.scenarios)
    check_unused(sweep.scenario_options, sweep.scenarios)
    _check_subjects(sweep)
    _check_size(sweep)
    missing = {f: _framework_status(f, sweep.frameworks_explicit, plan.notes) for f in sweep.frameworks}
    batch_sizes: tuple[int | None, ...] = sweep.batch_sizes or (None,)
    axes = list(itertools.product(sweep.workloads, sweep.frameworks, sweep.modes, batch_sizes,
                                  sweep.seeds, sweep.precisions, sweep.scenarios, sweep.devices,
                                  sweep.data, sweep.rollouts))
    # A workload without rollouts runs once, not once per rollout placement.
    axes = [a for a in axes if _is_rl(a[0]) or a[-1] == sweep.rollouts[0]]
    rng = random.Random(sweep.order_seed)
    for repeat in range(sweep.repeats):
        round_ = [_planned(spec, support.validate(spec), missing[spec.framework])
                  for spec in (_trial(sweep, *a, repeat=repeat) for a in axes)]
        round_ += _baselines(round_, missing, plan.notes)
        if sweep.repeats > 1:
            rng.shuffle(round_)
        plan.trials += round_
    if sweep.profile:
        for spec in (_trial(sweep, *a, repeat=0) for a in axes):
            if _profiled(spec):
                profiled = replace(spec, profile=True)
                plan.trials.append(_planned(profiled, support.validate(profiled), missing[spec.framework]))
    return plan


def _baselines(round_: list[PlannedTrial], missing: dict[str, str | None], notes: list[str]) -> list[PlannedTrial]:
    """The round's baseline trials: where a pending trial's record names a framework-neutral
    baseline (Scenario.baseline: the solver scenario's SciPy), one trial of it per subject (and
    any other setting but the framework and its options), with the first such trial's mode, so
    the report shows it beside them. Planned like the others, as trials of their own; none
    where no framework's trial of the subject is pending."""
    found: dict[str, PlannedTrial] = {}
    for planned in round_:
        record = subjects.record(planned.spec) if planned.status == "pending" else None
        if record is None or record.baseline is None:
            continue
        spec = replace(planned.spec, framework=record.baseline, policy=replace(planned.spec.policy, options={}))
        key = configuration_key(to_dict(spec), drop_policy=("mode",))
        if key not in found:
            if record.baseline not in missing:
                missing[record.baseline] = _framework_status(record.baseline, False, notes)
            found[key] = _planned(spec, support.validate(spec), missing[record.baseline])
    return list(found.values())


def _profiled(spec: TrialSpec) -> bool:
    """Whether `run --profile` adds a profiled trial of this configuration (its record's)."""
    name, scenario = spec.workload.name, spec.scenario
    return subjects.scenario_unsupported(name, scenario) is None and subjects.scenario(name, scenario).profiled


def _check_size(sweep: Sweep) -> None:
    """A sweep over MAX_TRIALS trials is refused before it is planned: planning validates each
    trial (10,000 took 52 s here, a million about a minute and 1 GB, silently), and no machine
    runs that many in a sitting. The count is an upper bound (before RL-only axes are folded)."""
    axes = (sweep.workloads, sweep.frameworks, sweep.modes, sweep.batch_sizes or (None,), sweep.seeds,
            sweep.precisions, sweep.scenarios, sweep.devices, sweep.data)
    rollouts = len(sweep.rollouts) if any(_is_rl(w) for w in sweep.workloads) else 1
    total = math.prod(len(a) for a in axes) * rollouts * sweep.repeats
    if total > MAX_TRIALS:
        raise SpecError(f"the sweep has {total:,} trials, over the limit of {MAX_TRIALS:,} per run: split it"
                        " into several runs (fewer values per axis, or fewer repeats)")


def _is_rl(workload: str) -> bool:
    """A reinforcement-learning workload: one with a `rollout` scenario."""
    return "rollout" in subjects.runs(workload)


def _check_subjects(sweep: Sweep) -> None:
    """A workload or problem the user named that runs none of the sweep's scenarios (`-w hires`,
    an ODE problem, without `--scenario solve`) would plan only unsupported trials and wait for
    the machine lock to store them: refused, naming the scenarios it runs. `-w all` names none
    (its workloads without the scenario are planned unsupported, as `list` shows them)."""
    if not sweep.workloads_explicit or not set(sweep.scenarios) <= set(SCENARIOS):
        return  # an unknown scenario: the trials' own validation names it
    for name in sweep.workloads:
        reasons = [subjects.scenario_unsupported(name, s) for s in sweep.scenarios]
        if all(reasons):
            runs = list(subjects.runs(name))
            which = runs[0] if len(runs) == 1 else "one of " + ", ".join(runs)
            why = reasons[0] if len(reasons) == 1 else (f"{name} runs none of --scenario {','.join(sweep.scenarios)}"
                                                        f" (it runs: {', '.join(runs)})")
            raise SpecError(f"-w {name}: {why}: give --scenario {which}")


def _check_options(sweep: Sweep) -> None:
    """Every --option names a framework of the sweep (a typo must not pass silently), and each
    option one value (the last of two would win without a word)."""
    given: dict[tuple[str, str], str] = {}
    for framework, name, value in sweep.options:
        if framework not in sweep.frameworks:
            raise SpecError(f"option {framework}.{name}={value} names a framework not in this sweep"
                            f" (frameworks: {', '.join(sweep.frameworks)})")
        earlier = given.setdefault((framework, name), value)
        if earlier != value:
            raise SpecError(f"option {framework}.{name} is given twice, as {earlier} and as {value}: give one value")


def _planned(spec: TrialSpec, backend: Backend, missing: str | None) -> PlannedTrial:
    if missing is not None:
        return PlannedTrial(spec, "skipped", "framework not installed (see the note above)")
    # The parent's device class (NVML sees a GPU or not); the worker asks again after the import.
    reason = support.unsupported(spec, backend, device_kind())
    return PlannedTrial(spec) if reason is None else PlannedTrial(spec, "unsupported", reason)


Kind = tuple[str, str, str, str, str]  # framework, workload, model size, mode, scenario


@dataclass(frozen=True)
class Costs:
    """What the store's finished trials say about run time: the median wall time per
    configuration, and per kind of trial (framework, workload, model size, mode, scenario) the
    median overhead (wall time less the compute) and compute seconds per sample, which carry
    over to other batch sizes, data sets and epochs."""

    by_config: dict[str, float] = field(default_factory=dict)
    by_kind: dict[Kind, tuple[float, float | None]] = field(default_factory=dict)


def _kind(spec: dict[str, Any] | TrialSpec) -> Kind:
    d = spec if isinstance(spec, dict) else to_dict(spec)
    w = d["workload"]
    return (d["framework"], w["name"], w.get("model_size", "default"), d["policy"]["mode"], d.get("scenario", "train"))


def learn(rows: list[tuple[dict[str, Any], float, float | None]]) -> Costs:
    """Costs from the store's (spec, wall seconds, train_s) of ok trials (Store.trial_costs)."""
    by_config: dict[str, list[float]] = {}
    by_kind: dict[Kind, list[tuple[float, float | None]]] = {}
    for spec, wall, train in rows:
        by_config.setdefault(configuration_key(spec), []).append(wall)
        by_kind.setdefault(_kind(spec), []).append(_split(spec, wall, train))
    return Costs({k: statistics.median(v) for k, v in by_config.items()},
                 {k: _median_split(v) for k, v in by_kind.items()})


def _split(spec: dict[str, Any], wall: float, train: float | None) -> tuple[float, float | None]:
    """(overhead, compute seconds per sample) of a stored trial; a train trial's compute is its
    timed epochs and its warm-up epochs at the timed rate, other scenarios' all overhead."""
    if spec.get("scenario", "train") != "train" or not train:
        return wall, None
    w = spec["workload"]
    epochs, warmup = int(spec.get("epochs", 1)), int(spec.get("warmup_epochs", 0))
    samples = epochs * (w["dataset_size"] // w["batch_size"]) * w["batch_size"]
    compute = train * (epochs + warmup) / max(epochs, 1)
    return max(wall - compute, 0.0), train / max(samples, 1)


def _median_split(values: list[tuple[float, float | None]]) -> tuple[float, float | None]:
    rates = [r for _, r in values if r is not None]
    return statistics.median(o for o, _ in values), statistics.median(rates) if rates else None


def estimate_s(trial: TrialSpec, costs: Costs) -> tuple[float, str]:
    """(seconds, where from) for one trial: "store" (this configuration ran before), "similar"
    (the same kind of trial ran with other sizes), else "rough" (the backend's cost guess and
    FLOPs)."""
    if trial.config_key() in costs.by_config:
        return costs.by_config[trial.config_key()], "store"
    spec = trial.workload
    samples = (trial.epochs + trial.warmup_epochs) * spec.steps_per_epoch * spec.batch_size
    known = costs.by_kind.get(_kind(trial))
    if known is not None and (known[1] is not None or trial.scenario != "train"):
        overhead, per_sample = known
        return overhead + (per_sample or 0.0) * samples, "similar"
    try:
        return _rough_s(trial, samples), "rough"
    except Exception as e:  # a plugin's param_shapes or FLOPs at a preset its contract check never ran
        origin = subjects.origin(spec.name).text()
        raise SpecError(f"workload {spec.name} ({origin}) fails at batch size {spec.batch_size}, data set size"
                        f" {spec.dataset_size}: {type(e).__name__}: {first_line(e)}") from None


def _rough_s(trial: TrialSpec, samples: int) -> float:
    """The first estimate its runner scenario registers (runner/estimates.py:
    ESTIMATES), from the backend's cost guess."""
    subject = subjects.lookup(trial.workload.name)
    return ESTIMATES[subjects.record(trial).name](trial, subject, get_backend(trial.framework).cost_guess, samples)


def at_load(seconds: float, source: str, load: float) -> float:
    """An estimate at the present load: a first guess ("rough") assumes a quiet machine and
    stretches by `load` (the load average over the cores, where above 1: cli/run.py
    busy_machine); one learnt from the store ("store", "similar") already holds the load its
    trials ran under and is not stretched again (a second run estimated 11.7 min, then "128.7 min
    at the present load", and took 10.6)."""
    return seconds * load if source == "rough" else seconds


def estimates(trials: list[TrialSpec], costs: Costs) -> list[tuple[float, str]]:
    """estimate_s of each trial (a baseline trial's too: it is planned as one)."""
    return [estimate_s(trial, costs) for trial in trials]


def with_ids(trial: TrialSpec, run_id: int, trial_id: int) -> TrialSpec:
    return replace(trial, run_id=run_id, trial_id=trial_id)
