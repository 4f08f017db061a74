"""The float64 parity reference: computed once per workload, model size and seed, then cached.

The reference is the float64 run of one framework's implementation (JAX with x64, else torch in
float64), in a probe process of its own (runner/probe.py); the tests cross-check each workload's
reference loss against its NumPy definition. Cached under DLBENCH_CACHE_DIR (default
~/.cache/dlbench)/reference, keyed by everything that determines the fixed batch, the initial
parameters and the numerics (the spec and a hash of the workload's source), so batch size and
data set size share one entry.

Beside it, the *floor* of float32 parity (analysis/parity.py): the same framework's float32 run of
the same workload against its float64 run, per tensor, measured on this machine (a second probe)
and cached per CPU model, instruction set and framework version, since it is what float32
rounding amounts to here. A float32 bound is a stated factor times the floor.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dlbench import paths, workloads
from dlbench.analysis import parity
from dlbench.backends import REFERENCE_PREFERENCE, get_backend
from dlbench.machine import cpu_isa, cpu_model
from dlbench.runner.probe_client import ProbeLimits, run_probe
from dlbench.runner.protocol import load_grads
from dlbench.spec import Policy, TrialSpec, WorkloadSpec, to_dict

# Bump when what a reference file contains changes.
REFERENCE_FORMAT = 2  # 2: adds the eval-mode logits from the canonical parameters


@dataclass(frozen=True)
class Reference:
    loss: float
    grads: dict[str, np.ndarray]
    losses: np.ndarray | None  # K-step trajectory, when asked for
    logits: np.ndarray | None
    framework: str
    # Eval-mode logits on the fixed batch from the canonical parameters (inference parity).
    init_logits: np.ndarray | None = None
    # The float32 floor on this machine, or None with the reason (bounds fall back to constants).
    floor: parity.Floor | None = None
    floor_reason: str | None = None

    @property
    def label(self) -> str:
        return f"{self.framework} float64"


def cache_root() -> Path:
    return paths.reference_cache()


def float64(spec: WorkloadSpec) -> WorkloadSpec:
    return replace(spec, numerics=replace(spec.numerics, dtype="float64"))


def key(spec: WorkloadSpec, k_steps: int) -> str:
    """Without K steps, batch and data set sizes do not matter (the fixed batch is its own
    stream); with them, they do. The workload's definition digest is in it: a changed model or
    data definition computes a new reference instead of meeting a stale one."""
    d = to_dict(float64(spec))
    if k_steps == 0:
        for field in ("batch_size", "dataset_size", "eval_size"):
            d.pop(field)
    blob = json.dumps({"spec": d, "k": k_steps, "format": REFERENCE_FORMAT,
                       "definition": workloads.definition_digest(spec.name)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def choose_framework() -> tuple[str | None, str]:
    """(framework, why): the first reference framework installed here, or the one named by
    DLBENCH_REFERENCE_FRAMEWORK (it must implement float64)."""
    reasons = []
    forced = os.environ.get("DLBENCH_REFERENCE_FRAMEWORK")
    for name in (forced,) if forced else REFERENCE_PREFERENCE:
        ok, reason = get_backend(name).available()
        if ok:
            return name, ""
        reasons.append(f"{name}: {reason}")
    return None, "no framework for the float64 reference is installed (" + "; ".join(reasons) + ")"


def reference_trial(spec: WorkloadSpec, framework: str) -> TrialSpec:
    modes = get_backend(framework).modes()
    # Eager where the framework has it (no compile to wait for); the numbers are float64 anyway.
    mode = "eager" if modes.get("eager", "no") is None else "compiled"
    return TrialSpec(workload=float64(spec), framework=framework, policy=Policy(mode=mode))


def load(spec: WorkloadSpec, k_steps: int) -> Reference | None:
    path = cache_root() / f"{key(spec, k_steps)}.npz"
    meta_path = path.with_suffix(".json")
    if not (path.exists() and meta_path.exists()):
        return None
    loss, grads, extra = load_grads(path)
    meta = json.loads(meta_path.read_text())
    return Reference(loss, grads, extra.get("losses"), extra.get("logits"), meta["framework"],
                     extra.get("init_logits"))


def ensure(specs: list[WorkloadSpec], k_steps: int, on_message: object = None,
           limits: ProbeLimits = ProbeLimits()) -> dict[str, Reference | str]:
    """key -> Reference (computed now where missing, in one probe process, restarted past a
    workload it dies on; `limits` per workload) or the reason there is none. Never raises for a
    failed reference: parity becomes n/a with that reason."""
    out: dict[str, Reference | str] = {}
    missing: dict[str, WorkloadSpec] = {}
    for spec in specs:
        k = key(spec, k_steps)
        if k in out or k in missing:
            continue
        ref = load(spec, k_steps)
        if ref is not None:
            out[k] = ref
        else:
            missing[k] = spec
    framework, why = choose_framework()
    if framework is None:
        return {**out, **{k: why for k in missing}}
    if missing:
        if callable(on_message):
            names = ", ".join(sorted({s.name for s in missing.values()}))
            on_message(f"computing the float64 parity reference with {framework} for: {names}")
        out.update(_compute(missing, framework, k_steps, limits))
    return _with_floors(out, {key(s, k_steps): s for s in specs}, k_steps, on_message, limits)


def _compute(missing: dict[str, WorkloadSpec], framework: str, k_steps: int,
             limits: ProbeLimits) -> dict[str, Reference | str]:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Reference | str] = {}
    with tempfile.TemporaryDirectory(prefix="dlbench-reference-") as tmp:
        keys = list(missing)
        request = {"trials": [to_dict(reference_trial(missing[k], framework)) for k in keys], "k_steps": k_steps}
        req_path = Path(tmp) / "request.json"
        req_path.write_text(json.dumps(request))
        error = run_probe(req_path, Path(tmp), limits)
        for i, k in enumerate(keys):
            status = _status(Path(tmp) / f"{i}.json", error)
            if status.get("status") != "ok":
                out[k] = f"the {framework} float64 reference failed: {status.get('error')}"
                continue
            dest = root / f"{k}.npz"
            os.replace(Path(tmp) / f"{i}.npz", dest)
            meta = {"framework": framework, "spec": to_dict(float64(missing[k])), "k_steps": k_steps}
            dest.with_suffix(".json").write_text(json.dumps(meta))
            ref = load(missing[k], k_steps)
            out[k] = ref if ref is not None else "the reference could not be read back"
    return out


def _status(path: Path, error: str | None) -> dict[str, object]:
    try:
        loaded: dict[str, object] = json.loads(path.read_text())
        return loaded
    except (OSError, ValueError):
        return {"status": "failed", "error": error or "the probe wrote no result"}


# --- the float32 floor --------------------------------------------------------------------------


def machine() -> str:
    """What a floor was measured on: the CPU model and its numeric instruction-set extensions."""
    return f"{cpu_model()} ({' '.join(cpu_isa()) or 'flags unknown'})"


def _floor_path(k: str, framework: str) -> Path:
    fingerprint = json.dumps([machine(), framework, get_backend(framework).distributions()], sort_keys=True)
    return cache_root() / "floors" / f"{k}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:12]}.json"


def _with_floors(refs: dict[str, Reference | str], specs: dict[str, WorkloadSpec], k_steps: int,
                 on_message: object, limits: ProbeLimits) -> dict[str, Reference | str]:
    """Every reference with its float32 floor on this machine: read from the cache, else one
    float32 probe of the reference framework for all that lack one. A floor that cannot be had
    leaves the reference with the reason (its bounds fall back to the dtype's constants)."""
    out = dict(refs)
    missing: dict[str, WorkloadSpec] = {}
    for k, ref in refs.items():
        if not isinstance(ref, Reference):
            continue
        path = _floor_path(k, ref.framework)
        if path.exists():
            out[k] = replace(ref, floor=parity.Floor(**json.loads(path.read_text())))
        else:
            missing[k] = specs[k]
    if not missing:
        return out
    framework = next(r.framework for k, r in refs.items() if k in missing and isinstance(r, Reference))
    if callable(on_message):
        names = ", ".join(sorted({s.name for s in missing.values()}))
        on_message(f"measuring the float32 parity floor with {framework} on this CPU for: {names}")
    for k, floor in _measure_floors(missing, framework, k_steps, refs, limits).items():
        ref = refs[k]
        assert isinstance(ref, Reference)
        if isinstance(floor, str):
            out[k] = replace(ref, floor_reason=floor)
            continue
        path = _floor_path(k, framework)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(floor)))
        out[k] = replace(ref, floor=floor)
    return out


def _measure_floors(missing: dict[str, WorkloadSpec], framework: str, k_steps: int,
                    refs: dict[str, Reference | str], limits: ProbeLimits) -> dict[str, parity.Floor | str]:
    """The reference framework's float32 run of each workload, in one probe process, against its
    float64 reference."""
    out: dict[str, parity.Floor | str] = {}
    with tempfile.TemporaryDirectory(prefix="dlbench-floor-") as tmp:
        keys = list(missing)
        trials = [replace(reference_trial(missing[k], framework), workload=missing[k]) for k in keys]
        req_path = Path(tmp) / "request.json"
        req_path.write_text(json.dumps({"trials": [to_dict(t) for t in trials], "k_steps": k_steps}))
        error = run_probe(req_path, Path(tmp), limits)
        for i, k in enumerate(keys):
            status = _status(Path(tmp) / f"{i}.json", error)
            if status.get("status") != "ok":
                out[k] = f"the {framework} float32 floor failed: {status.get('error')}"
                continue
            ref = refs[k]
            assert isinstance(ref, Reference)
            out[k] = floor_of(Path(tmp) / f"{i}.npz", ref)
    return out


def floor_of(path: Path, ref: Reference) -> parity.Floor:
    """The float32 probe's errors against the float64 reference, quantity by quantity."""
    loss, grads, extra = load_grads(path)
    trajectory = logits = None
    if ref.losses is not None and "losses" in extra:
        trajectory = parity.compare_losses(extra["losses"], ref.losses, "float64")[1]
    if ref.logits is not None and "logits" in extra:
        logits = parity.rel_err(extra["logits"], ref.logits)
    init_logits = (parity.rel_err(extra["init_logits"], ref.init_logits)
                   if ref.init_logits is not None and "init_logits" in extra else None)
    return parity.Floor(
        loss=abs(loss - ref.loss) / abs(ref.loss) if ref.loss else abs(loss),
        grads=parity.tensor_errors(grads, ref.grads), trajectory=trajectory, logits=logits,
        init_logits=init_logits, label=f"{ref.framework} float32", machine=machine())
