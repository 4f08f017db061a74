"""The workload contract (workloads/base.py: Workload) as checks that return what is wrong, one
line each, NumPy only. Discovery holds every plugin to `interface` and `shapes` before it is
used (workloads/__init__.py); `behaviour` adds what the built-in workloads' own tests assert
(seeded parameters and data, disjoint splits, a finite reference loss, FLOPs), for
`python -m dlbench.testing.contract` and `pytest --pyargs dlbench.testing`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from dlbench.spec import Numerics, SpecError, WorkloadSpec
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, Preset

# Every workload's presets (the CLI's --preset; `tiny` for tests and `dlbench check`).
PRESET_NAMES = ("tiny", "cpu", "gpu")
# name -> (what it must be, the test)
_DATA: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "NAME": ("a str", lambda v: isinstance(v, str) and bool(v)),
    "SCENARIOS": ("a non-empty dict of str -> str", lambda v: _str_dict(v) and bool(v)),
    "QUALITY": ("a str", lambda v: isinstance(v, str) and bool(v)),
    "MODEL_SIZES": ("a non-empty dict", lambda v: isinstance(v, dict) and bool(v)),
    "PRESETS": ("a dict of str -> workloads.base.Preset",
                lambda v: isinstance(v, dict) and all(isinstance(p, Preset) for p in v.values())),
    "NUMERICS": ("a spec.Numerics", lambda v: isinstance(v, Numerics)),
    "NUMERICS_FIELDS": ("a tuple of str", lambda v: isinstance(v, tuple) and all(isinstance(f, str) for f in v)),
}
FUNCTIONS = ("input_spec", "param_shapes", "buffer_shapes", "init_params", "make_dataset", "make_eval_dataset",
             "fixed_batch", "flops_per_sample", "reference_loss", "score")
# What a plugin adds to the built-in interface: its builder modules by backend family.
PLUGIN_DATA: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "BUILDERS": ("a non-empty dict of backend family -> builder module name", lambda v: _str_dict(v) and bool(v)),
}

Problems = list[str]


def _str_dict(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())


def interface(module: ModuleType, name: str, plugin: bool = True) -> Problems:
    """Every name of the interface present with the right kind of value; the numerics fields
    known; the presets' model sizes declared. Imports nothing, calls no function."""
    wanted = {**_DATA, **(PLUGIN_DATA if plugin else {})}
    values = vars(module)
    missing = [k for k in (*wanted, *FUNCTIONS) if k not in values]
    if missing:
        return [f"it lacks {', '.join(missing)}"]
    out = [f"{k} is not {what}" for k, (what, ok) in wanted.items() if not ok(values[k])]
    out += [f"{f} is not callable" for f in FUNCTIONS if not callable(values[f])]
    if out:
        return out
    if module.NAME != name:
        out.append(f"NAME {module.NAME!r} is not its registered name {name!r}")
    absent = [p for p in PRESET_NAMES if p not in module.PRESETS]
    if absent:
        out.append(f"PRESETS lacks {', '.join(absent)} (it needs {', '.join(PRESET_NAMES)})")
    sizes = {p: s.model_size for p, s in module.PRESETS.items() if s.model_size not in module.MODEL_SIZES}
    out += [f"preset {p} names model size {s!r}, not one of MODEL_SIZES" for p, s in sizes.items()]
    return out + numerics_problems(module.NUMERICS, module.NUMERICS_FIELDS)


def numerics_problems(numerics: Numerics, fields: tuple[str, ...]) -> Problems:
    """NUMERICS_FIELDS: the common fields first, each a shared field or an `extra` entry, once."""
    out = []
    lacking = [f for f in COMMON_NUMERICS_FIELDS if f not in fields]
    if lacking:
        out.append(f"NUMERICS_FIELDS lacks the common fields {', '.join(lacking)}")
    unknown = []
    for f in fields:
        try:
            numerics.value(f)
        except KeyError:
            unknown.append(f)
    if unknown:
        out.append(f"NUMERICS_FIELDS names {', '.join(unknown)}, neither a spec.Numerics field nor in NUMERICS.extra")
    if len(set(fields)) != len(fields):
        out.append("NUMERICS_FIELDS names a field twice")
    return out


def preset_spec(module: ModuleType, preset: str = "tiny") -> WorkloadSpec:
    """The workload spec of one of the module's presets, as the CLI makes it."""
    p = module.PRESETS[preset]
    spec = WorkloadSpec(name=module.NAME, model_size=p.model_size, batch_size=p.batch_size,
                        dataset_size=p.dataset_size, eval_size=p.eval_size, numerics=module.NUMERICS)
    if p.num_classes is not None:
        spec = dataclasses.replace(spec, num_classes=p.num_classes)
    fixed = vars(module).get("NUM_CLASSES")
    return spec if fixed is None else dataclasses.replace(spec, num_classes=int(fixed))


def _shape_table(value: Any, what: str) -> Problems:
    if not isinstance(value, dict):
        return [f"{what} returned {type(value).__name__}, not a dict of name -> shape"]
    bad = [k for k, s in value.items()
           if not (isinstance(k, str) and isinstance(s, tuple)
                   and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in s))]
    return [f"{what}: {', '.join(map(repr, bad[:3]))} not a name -> tuple of positive ints"] if bad else []


def shapes(module: ModuleType) -> Problems:
    """On the tiny preset: every preset a valid spec; parameter and buffer shapes as tables of
    positive int tuples; init_params exactly those names, shapes and float32, in that order."""
    try:
        for preset in PRESET_NAMES:
            preset_spec(module, preset).validate()
        spec = preset_spec(module)
        params_shapes, buffers = module.param_shapes(spec), module.buffer_shapes(spec)
        out = _shape_table(params_shapes, "param_shapes") + _shape_table(buffers, "buffer_shapes")
        if out:
            return out
        if not params_shapes:
            return ["param_shapes is empty: nothing to train"]
        params = module.init_params(spec)
    except SpecError as e:
        return [f"a preset is not a valid workload spec: {e}"]
    except Exception as e:  # the plugin's own code: one line, not a traceback
        return [f"calling it on the tiny preset raised {type(e).__name__}: {e}"]
    if not isinstance(params, dict) or list(params) != list(params_shapes):
        got = list(params) if isinstance(params, dict) else type(params).__name__
        return [f"init_params gives {got}, not param_shapes' names in their order {list(params_shapes)}"]
    wrong = {k: getattr(v, "shape", None) for k, v in params.items()
             if not isinstance(v, np.ndarray) or v.shape != params_shapes[k] or v.dtype != np.float32}
    if wrong:
        k, shape = next(iter(wrong.items()))
        return [f"init_params {k} is {shape} {getattr(params[k], 'dtype', '')}, param_shapes says"
                f" {params_shapes[k]} float32" + (f" ({len(wrong) - 1} more)" if len(wrong) > 1 else "")]
    return []


def behaviour(module: ModuleType) -> Problems:
    """What the built-in workloads' tests assert of each, on the tiny preset: seeded
    parameters; splits that match input_spec, are seeded and disjoint; labels in range; a finite
    reference loss; FLOPs with training dearer than the forward; for a classifier, labels in
    range and accuracy 1 for logits that put each label first."""
    spec = preset_spec(module)
    checks = (_seeded_params, _splits, _disjoint, _reference_loss, _flops, _score)
    out: Problems = []
    for check in checks:
        try:
            out += check(module, spec)
        except Exception as e:  # the plugin's own code raised: that is the finding
            out.append(f"{check.__name__.strip('_').replace('_', ' ')}: raised {type(e).__name__}: {e}")
    return out


def _seeded_params(module: ModuleType, spec: WorkloadSpec) -> Problems:
    a, b = module.init_params(spec), module.init_params(spec)
    other = module.init_params(dataclasses.replace(spec, seed=spec.seed + 1))
    if any(not np.array_equal(a[k], b[k]) for k in a):
        return ["init_params is not a function of the spec (two calls differ)"]
    if all(np.array_equal(a[k], other[k]) for k in a):
        return ["init_params ignores the seed"]
    return []


def _splits(module: ModuleType, spec: WorkloadSpec) -> Problems:
    shape, dtype = module.input_spec(spec)
    out = []
    copies = vars(module).get("epoch_copies", lambda _: 1)(spec)  # ddpm: per-epoch noised copies
    for what, data, n in (("make_dataset", module.make_dataset(spec), copies * spec.dataset_size),
                          ("make_eval_dataset", module.make_eval_dataset(spec), spec.eval_size),
                          ("fixed_batch", module.fixed_batch(spec, 8), 8)):
        if data.x.shape != (n, *shape) or data.x.dtype != np.dtype(dtype):
            out.append(f"{what} x is {data.x.shape} {data.x.dtype}, input_spec says ({n}, *{shape}) {dtype}")
        if not _classifier(module):
            continue
        if data.y.shape != (n,) or data.y.dtype != np.int32:
            out.append(f"{what} y is {data.y.shape} {data.y.dtype}, not ({n},) int32")
        elif data.y.min() < 0 or data.y.max() >= spec.num_classes:
            out.append(f"{what} labels leave [0, {spec.num_classes})")
    again, other = module.make_dataset(spec), module.make_dataset(dataclasses.replace(spec, seed=spec.seed + 1))
    if not np.array_equal(again.x, module.make_dataset(spec).x):
        out.append("make_dataset is not a function of the spec (two calls differ)")
    if np.array_equal(again.x, other.x):
        out.append("make_dataset ignores the seed")
    return out


def _disjoint(module: ModuleType, spec: WorkloadSpec) -> Problems:
    rows = {r.tobytes() for r in module.make_dataset(spec).x}
    shared = [what for what, data in (("fixed_batch", module.fixed_batch(spec, 8)),
                                      ("make_eval_dataset", module.make_eval_dataset(spec)))
              if rows & {r.tobytes() for r in data.x}]
    return [f"{what} shares samples with the training split" for what in shared]


def _reference_loss(module: ModuleType, spec: WorkloadSpec) -> Problems:
    batch = module.fixed_batch(spec, 8)
    loss = module.reference_loss(spec, module.init_params(spec), batch.x, batch.y)
    return [] if isinstance(loss, float) and math.isfinite(loss) else [f"reference_loss is {loss!r}, not a finite float"]


def _flops(module: ModuleType, spec: WorkloadSpec) -> Problems:
    fwd, train = module.flops_per_sample(spec, train=False), module.flops_per_sample(spec)
    ok = isinstance(fwd, int) and isinstance(train, int) and 0 < fwd < train <= 3 * fwd
    return [] if ok else [f"flops_per_sample: forward {fwd!r}, training {train!r} (wanted ints, 0 < forward < training"
                          " <= 3 x forward)"]


def _classifier(module: ModuleType) -> bool:
    """Labels are class indices and the quality is accuracy (every built-in supervised
    workload); the label and score checks hold only there."""
    return bool(module.QUALITY == "accuracy")


def _score(module: ModuleType, spec: WorkloadSpec) -> Problems:
    if not _classifier(module):
        return []
    data = module.make_eval_dataset(spec)
    perfect = np.eye(spec.num_classes, dtype=np.float32)[data.y]
    score = module.score(spec, perfect, data)
    return [] if score == 1.0 else [f"score of logits that put the label first is {score!r}, not 1.0"]
