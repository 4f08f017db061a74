"""Workload registry: one module per workload, framework-neutral (NumPy only): the built-in
ones below, then those of installed plugins (entry points in the group `dlbench.workloads`,
docs/plugins.md), each held to the same contract (workloads/contract.py) before it is used.

`validate` adds to `WorkloadSpec.validate` what only the workload module knows: its name, its
model sizes, and whether its inputs are images that can be augmented.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from dlbench import plugins, scenarios
from dlbench.plugins import BUILTIN, WORKLOAD_GROUP, Entry, Origin, PluginError
from dlbench.spec import ConvergeOptions, SpecError, TrialSpec, WorkloadSpec
from dlbench.workloads import (
    cnn,
    contract,
    data,
    ddpm,
    detect,
    lm,
    mlp,
    node,
    params,
    ppo,
    resnet,
    transformer,
    vit,
)
from dlbench.workloads.base import Target

# Order: as listed by `dlbench list` and run by `-w all`.
WORKLOADS: dict[str, ModuleType] = {
    "mlp": mlp, "cnn": cnn, "resnet": resnet, "transformer": transformer, "node": node,
    "detect": detect, "ppo": ppo, "ddpm": ddpm, "lm": lm, "vit": vit,
}


def get(name: str) -> ModuleType:
    """The workload module: a built-in one, else the plugin's, imported on first use and held to
    the interface (SpecError for an unknown name, PluginError for a broken plugin)."""
    module = WORKLOADS.get(name)
    return module if module is not None else _load_plugin(name)


def names() -> tuple[str, ...]:
    """Every workload name: the built-in ones in registry order, then the plugins' (sorted),
    broken plugins included (`check` says what is wrong with them)."""
    found = sorted({e.name for e in plugins.entries(WORKLOAD_GROUP)} - set(WORKLOADS))
    return (*WORKLOADS, *found)


def check(name: str) -> ModuleType:
    """`get`, plus for a name a plugin registers: no clash with a built-in or another plugin,
    and the parameter shapes of the contract on the tiny preset (what the CLI asks of a name
    before planning anything). Raises SpecError or PluginError with one line."""
    if name in WORKLOADS and not plugins.named(WORKLOAD_GROUP, name):
        return WORKLOADS[name]
    return _checked_plugin(name)


def origin(name: str) -> Origin:
    """Built into dlbench, or the plugin distribution (and version) that registers `name`."""
    return BUILTIN if name in WORKLOADS else _plugin_entry(name).origin


def builders(name: str) -> dict[str, str] | None:
    """A plugin's builder modules by backend family (its BUILDERS); None for a built-in
    workload, whose builder of a backend package `p` is the module `p.<name>`
    (backends/base.py: build_program)."""
    if name in WORKLOADS:
        return None
    declared: dict[str, str] = get(name).BUILDERS
    return declared


def plugin_status() -> plugins.Status:
    """Every workload entry point installed: (name, origin, None when usable, else the one-line
    reason), for `dlbench list`."""
    return plugins.status(WORKLOAD_GROUP, _checked_plugin)


def usable() -> tuple[str, ...]:
    """What `-w all` means: the built-in workloads and every plugin that passes `check` (a
    plugin clashing with a built-in name leaves the built-in one in)."""
    broken = {name for name, _, reason in plugin_status() if reason is not None and name not in WORKLOADS}
    return tuple(n for n in names() if n not in broken)


def _plugin_entry(name: str) -> Entry:
    """The one entry point that registers `name`, or why there is none."""
    found = plugins.named(WORKLOAD_GROUP, name)
    if not found:
        raise SpecError(f"workload {name!r} is not one of: {', '.join(names())}")
    if name in WORKLOADS:
        raise PluginError(f"{found[0].describe()} clashes with the built-in workload {name!r}: rename its entry point")
    if len(found) > 1:
        raise PluginError(f"workload {name!r} is registered by several plugins ({'; '.join(e.describe() for e in found)}):"
                          " uninstall all but one")
    return found[0]


@plugins.cached
def _load_plugin(name: str) -> ModuleType:
    entry = _plugin_entry(name)
    module = entry.load()
    if not isinstance(module, ModuleType):
        raise PluginError(f"{entry.describe()} breaks the workload contract: the entry point names a"
                          f" {type(module).__name__}, not a module")
    _raise_problems(entry, contract.interface(module, name))
    return module


@plugins.cached
def _checked_plugin(name: str) -> ModuleType:
    module = _load_plugin(name)
    _raise_problems(_plugin_entry(name), contract.shapes(module))
    return module


def _raise_problems(entry: Entry, problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PluginError(f"{entry.describe()} breaks the workload contract: {problems[0]}{more}")


def fixed_classes(name: str) -> int | None:
    """The class count the workload fixes (its optional NUM_CLASSES, workloads/base.py), or None
    where the spec's num_classes sets it."""
    found: int | None = vars(get(name)).get("NUM_CLASSES")
    return found


def validate(spec: WorkloadSpec) -> None:
    """The spec's own checks, then the workload's: a known name and model size, the class
    count where the workload fixes it, augmentation only where the inputs are NHWC images.
    Raises SpecError with one line."""
    spec.validate()
    module = get(spec.name)
    if spec.model_size not in module.MODEL_SIZES:
        raise SpecError(f"{spec.name} model size {spec.model_size!r} is not one of:"
                        f" {', '.join(module.MODEL_SIZES)}")
    fixed = fixed_classes(spec.name)
    if fixed is not None and spec.num_classes != fixed:
        raise SpecError(f"{spec.name} num_classes {spec.num_classes} is not one of: {fixed}"
                        f" ({spec.name} fixes its class count)")
    if spec.augment != "none":
        why = vars(module).get("NO_AUGMENT")  # optional: why the workload takes no augmentation
        if why is not None:
            raise SpecError(f"augment {spec.augment!r} does not fit {spec.name} ({why}): allowed is none")
        shape, dtype = module.input_spec(spec)
        if len(shape) != 3 or dtype != "float32":
            raise SpecError(f"augment {spec.augment!r} needs NHWC images; {spec.name} takes {shape} {dtype}:"
                            " allowed is none")


def definition_digest(name: str) -> str:
    """A hash of the source that defines the workload: its module, the built-in workload
    modules it takes definitions from (vit: transformer's blocks and cnn's images; resnet: cnn's
    images) and the shared modules its data and initial parameters come from (data.py,
    params.py). Caches of what a definition produces (the ONNX export, the float64 parity
    reference) put it in their key, so a fix to a model or its data never meets a stale entry."""
    module = get(name)
    borrowed = [m for m in vars(module).values()
                if isinstance(m, ModuleType) and m is not module and any(m is w for w in WORKLOADS.values())]
    h = hashlib.sha256()
    for source in (module, *borrowed, data, params):
        h.update(Path(str(source.__file__)).read_bytes())
    return h.hexdigest()[:20]


def epoch_copies(spec: WorkloadSpec) -> int:
    """How many per-epoch copies of its samples the workload's training split holds (its
    optional `epoch_copies(spec)`; ddpm redraws timesteps and noise per epoch); 1 for most."""
    found: Callable[[WorkloadSpec], int] | None = vars(get(spec.name)).get("epoch_copies")
    return 1 if found is None else int(found(spec))


def epoch_steps(spec: WorkloadSpec, epoch: int) -> tuple[np.ndarray, data.Augment | None]:
    """One epoch's index rows into the training split and its augmentation parameters, what every
    Program.batches consumes (data.epoch_steps with the workload's epoch_copies)."""
    return data.epoch_steps(spec, epoch, epoch_copies(spec))


def generated_quality(name: str) -> Callable[[WorkloadSpec, Callable[[np.ndarray], np.ndarray]], dict[str, float]] | None:
    """The workload's quality of generated samples after training, `generated_quality(spec,
    denoise)` (ddpm: DDIM samples from the trained parameters, their Fréchet distance to held-out
    images), which the train scenario reports beside the held-out score; None for a workload
    without one (optional member)."""
    found: Callable[[WorkloadSpec, Callable[[np.ndarray], np.ndarray]], dict[str, float]] | None = \
        vars(get(name)).get("generated_quality")
    return found


def extra_scores(name: str) -> Callable[[WorkloadSpec, np.ndarray, data.Dataset], dict[str, float]] | None:
    """The workload's further held-out scores of the same outputs as its `score`,
    `extra_scores(spec, outputs, data) -> {metric: value}` (detect: `map_voc`, mAP@0.5 under the
    VOC devkit's matching rule beside `map`'s COCO rule); None for a workload without any (an
    optional member of the interface)."""
    found: Callable[[WorkloadSpec, np.ndarray, data.Dataset], dict[str, float]] | None = \
        vars(get(name)).get("extra_scores")
    return found


def postprocess(name: str) -> Callable[[WorkloadSpec, np.ndarray], Any] | None:
    """The workload's post-processing of its outputs (detect: decoding, score threshold and
    class-wise NMS), which the infer scenario times apart; None for a workload without one
    (an optional member of the interface, workloads/base.py)."""
    found: Callable[[WorkloadSpec, np.ndarray], Any] | None = vars(get(name)).get("postprocess")
    return found


def published(name: str, model_size: str) -> str | None:
    """What a published architecture's model size is ("ResNet-50 v1.5 at 224x224, ..."), from the
    workload's optional PUBLISHED member ({model size: description}); None for any other size, a
    workload without published shapes, or one not known here."""
    try:
        found: dict[str, str] = vars(get(name)).get("PUBLISHED") or {}
    except (SpecError, PluginError):
        return None
    return found.get(model_size)


def published_preset_size(name: str, model_size: str, full: bool = False) -> bool:
    """Whether a `published*` preset of the workload runs this model size (vit's published-tiny
    runs its tiny size): a larger preset would leave the architecture such a run asked for. With
    `full`, a published shape itself (not `published-tiny`'s): one that tables quote numbers of."""
    try:
        presets = get(name).PRESETS
    except (SpecError, PluginError):
        return False
    return any(p.model_size == model_size for n, p in presets.items()
               if n.startswith("published") and not (full and n.endswith("-tiny")))


def scenario_unsupported(name: str, scenario: str) -> str | None:
    """None when the workload runs `scenario` with a runner scenario this dlbench has, else the
    reason (one line)."""
    return scenarios.unsupported(name, get(name).SCENARIOS, scenario, "workload")


def scenario(name: str, user_scenario: str) -> scenarios.Scenario:
    """The record of the runner scenario workload `name` runs `--scenario user_scenario` with
    (check scenario_unsupported first: KeyError where it has none)."""
    return scenarios.get(get(name).SCENARIOS[user_scenario])


def stored_scenario(spec: dict[str, Any]) -> scenarios.Scenario:
    """The runner scenario record of a stored trial's spec, for the parent's judges and the
    report: through its workload where this dlbench knows it, else (a plugin not installed here)
    the record named like its --scenario, else train's."""
    user = str(spec.get("scenario", "train"))
    name = str((spec.get("workload") or {}).get("name", ""))
    try:
        runs: dict[str, str] = get(name).SCENARIOS
    except (SpecError, PluginError):
        runs = {}
    return scenarios.SCENARIOS.get(runs.get(user, user)) or scenarios.SCENARIOS["train"]


# The held-out metric the options' target_perplexity bounds (a workload lists it in its
# TARGET_METRICS when its extra_scores report it).
PERPLEXITY = "eval_perplexity"


def target_metrics(name: str) -> dict[str, bool]:
    """The extra scores a time-to-target trial of workload `name` may stop on besides its
    QUALITY, each with whether lower is better (the optional TARGET_METRICS; none without)."""
    found: dict[str, bool] = vars(get(name)).get("TARGET_METRICS") or {}
    return found


def default_target(spec: WorkloadSpec) -> Target | None:
    """The workload's target when the user gives none (its optional `default_target(spec)`:
    lm's perplexity within 10 % of the best possible), None where it has none."""
    found: Callable[[WorkloadSpec], Target] | None = vars(get(spec.name)).get("default_target")
    return None if found is None else found(spec)


def with_default_target(trial: TrialSpec) -> TrialSpec:
    """The trial with its workload's default target where it is a time-to-target trial without
    a target and the workload has one (the plan stores it in the spec, so the stop rule is
    part of the configuration); unchanged otherwise."""
    options = trial.options
    if not isinstance(options, ConvergeOptions) or options.target_accuracy is not None \
            or options.target_perplexity is not None or scenario_unsupported(trial.workload.name, trial.scenario):
        return trial
    default = default_target(trial.workload)
    if default is None:
        return trial
    if default.metric == PERPLEXITY:
        return trial.with_options(target_perplexity=default.value)
    if default.metric == get(trial.workload.name).QUALITY:
        return trial.with_options(target_accuracy=default.value)
    raise SpecError(f"{trial.workload.name}'s default target bounds {default.metric!r}, which no target option"
                    f" holds: allowed are {get(trial.workload.name).QUALITY!r} and {PERPLEXITY!r}")


def target(trial: TrialSpec) -> Target:
    """The stop rule of a time-to-target trial (validated: one target given): its accuracy
    target on the workload's QUALITY, or its perplexity target where the workload reports
    perplexity (SpecError, one line, where it does not); the rule of the workload's default
    where the value is that default's."""
    name, options = trial.workload.name, trial.options_of(ConvergeOptions)
    if options.target_perplexity is not None:
        lower = target_metrics(name).get(PERPLEXITY)
        if lower is None:
            which = [n for n in names() if PERPLEXITY in target_metrics(n)]
            raise SpecError(f"target perplexity {options.target_perplexity!r} does not fit {name}: it reports no"
                            f" perplexity (workloads that do: {', '.join(which)}); allowed for {name} is"
                            " --target-accuracy")
        found = Target(PERPLEXITY, float(options.target_perplexity), lower=lower)
    elif options.target_accuracy is not None:
        found = Target(str(get(name).QUALITY), float(options.target_accuracy))
    else:
        raise SpecError(f"{name} --scenario {trial.scenario} needs a target: --target-accuracy")
    default = default_target(trial.workload)
    if default is not None and (default.metric, default.value) == (found.metric, found.value):
        return default
    return found


def stored_target(spec: dict[str, Any]) -> Target | None:
    """The stop rule of a stored time-to-target trial's spec, for the report, without the
    workload's default rule (which would need its data); None without a target. The quality
    name is the workload's where this dlbench knows it, else "accuracy" (a plugin not
    installed here)."""
    perplexity, accuracy = spec.get("target_perplexity"), spec.get("target_accuracy")
    if perplexity is not None:
        return Target(PERPLEXITY, float(perplexity), lower=True)
    if accuracy is None:
        return None
    try:
        quality = str(get(str((spec.get("workload") or {}).get("name", ""))).QUALITY)
    except (SpecError, PluginError):
        quality = "accuracy"
    return Target(quality, float(accuracy))


def target_rule(name: str) -> str | None:
    """How workload `name`'s default target is set (lm's TARGET_RULE), for the report's note;
    None without a default or for a workload not known here."""
    try:
        rule: str | None = vars(get(name)).get("TARGET_RULE") if "default_target" in vars(get(name)) else None
    except (SpecError, PluginError):
        return None
    return rule
