"""The float64 parity reference: computed once per workload, model size and seed, then cached.

The reference is the float64 run of one framework's implementation (JAX with x64, else torch in
float64), in a probe process of its own (runner/probe.py); the tests cross-check each workload's
reference loss against its NumPy definition. Cached under DLBENCH_CACHE_DIR (default
~/.cache/dlbench)/reference, keyed by everything that determines the fixed batch, the initial
parameters and the numerics, so batch size and data set size share one entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dlbench import paths
from dlbench.backends import REFERENCE_PREFERENCE, get_backend
from dlbench.runner.fixedbatch import load_grads
from dlbench.runner.probe_client import run_probe
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

    @property
    def label(self) -> str:
        return f"{self.framework} float64"


def cache_root() -> Path:
    return paths.reference_cache()


def float64(spec: WorkloadSpec) -> WorkloadSpec:
    return replace(spec, numerics=replace(spec.numerics, dtype="float64"))


def key(spec: WorkloadSpec, k_steps: int) -> str:
    """Without K steps, batch and data set sizes do not matter (the fixed batch is its own
    stream); with them, they do."""
    d = to_dict(float64(spec))
    if k_steps == 0:
        for field in ("batch_size", "dataset_size", "eval_size"):
            d.pop(field)
    blob = json.dumps({"spec": d, "k": k_steps, "format": REFERENCE_FORMAT}, sort_keys=True)
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


def ensure(specs: list[WorkloadSpec], k_steps: int, on_message: object = None) -> dict[str, Reference | str]:
    """key -> Reference (computed now where missing, in one probe process) or the reason there
    is none. Never raises for a failed reference: parity becomes n/a with that reason."""
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
    if not missing:
        return out
    framework, why = choose_framework()
    if framework is None:
        return {**out, **{k: why for k in missing}}
    if callable(on_message):
        names = ", ".join(sorted({s.name for s in missing.values()}))
        on_message(f"computing the float64 parity reference with {framework} for: {names}")
    out.update(_compute(missing, framework, k_steps))
    return out


def _compute(missing: dict[str, WorkloadSpec], framework: str, k_steps: int) -> dict[str, Reference | str]:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, Reference | str] = {}
    with tempfile.TemporaryDirectory(prefix="dlbench-reference-") as tmp:
        keys = list(missing)
        request = {"trials": [to_dict(reference_trial(missing[k], framework)) for k in keys], "k_steps": k_steps}
        req_path = Path(tmp) / "request.json"
        req_path.write_text(json.dumps(request))
        error = run_probe(req_path, Path(tmp))
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
