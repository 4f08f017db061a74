"""The canonical fixed batch of the parity check (spec.PARITY_BATCH samples), computed in a child
process and judged by the parent against the float64 reference (runner/verdicts.py).

A child computes, from the canonical initial parameters in a state of its own: the loss and the
gradients in canonical names (training scenarios), or the eval-mode logits (inference). The
arrays cross to the parent as one .npz file beside the trial's result: loss, `grad/<name>` per
gradient, `logits/<path>` per inference path, and any other named arrays a probe adds (the
K-step trajectory).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import workloads
from dlbench.backends import support
from dlbench.backends.base import Learner, Servable
from dlbench.spec import PARITY_BATCH, TrialSpec

GRAD_PREFIX = "grad/"
LOGITS_PREFIX = "logits/"
SAMPLE, SAMPLE_REFERENCE = "sample", "sample_reference"


def grads(trial: TrialSpec, program: Learner) -> tuple[float, dict[str, np.ndarray]]:
    """Loss and gradients on the canonical fixed batch from the canonical initial parameters, in
    a state of their own (a trial's training state is left alone)."""
    state = support.init(trial, program)
    batch = workloads.get(trial.workload.name).fixed_batch(trial.workload, PARITY_BATCH)
    return program.loss_and_grads(state, batch.x, batch.y)


def logits(trial: TrialSpec, program: Learner | Servable) -> np.ndarray:
    """Eval-mode outputs on the canonical fixed batch from the canonical initial parameters."""
    state = support.init(trial, program)
    x = workloads.get(trial.workload.name).fixed_batch(trial.workload, PARITY_BATCH).x
    return np.asarray(program.predict(state, x), np.float64)


def _save(path: Path, arrays: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def save_grads(path: Path, loss: float, grads: dict[str, np.ndarray], **extra: np.ndarray) -> None:
    arrays: dict[str, Any] = {GRAD_PREFIX + k: np.asarray(v) for k, v in grads.items()}
    arrays.update(extra, loss=np.float64(loss))
    _save(path, arrays)


def load_grads(path: Path) -> tuple[float, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(loss, gradients, the other arrays) from a file written by save_grads."""
    with np.load(path) as f:
        grads = {k.removeprefix(GRAD_PREFIX): f[k] for k in f.files if k.startswith(GRAD_PREFIX)}
        extra = {k: f[k] for k in f.files if k != "loss" and not k.startswith(GRAD_PREFIX)}
        return float(f["loss"]), grads, extra


def save_logits(path: Path, outputs: Mapping[str, np.ndarray]) -> None:
    _save(path, {LOGITS_PREFIX + k: np.asarray(v) for k, v in outputs.items()})


def save_samples(path: Path, outputs: Mapping[str, np.ndarray], sample: np.ndarray, reference: np.ndarray) -> None:
    """A sampling trial's arrays: the denoiser's outputs (as save_logits) and the first images of
    its sample with the float64 NumPy sample from the same noise."""
    _save(path, {**{LOGITS_PREFIX + k: np.asarray(v) for k, v in outputs.items()},
                 SAMPLE: np.asarray(sample), SAMPLE_REFERENCE: np.asarray(reference)})


def load_samples(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(sample, float64 reference sample) from a file written by save_samples, else None."""
    with np.load(path) as f:
        return (f[SAMPLE], f[SAMPLE_REFERENCE]) if SAMPLE in f.files else None


def load_logits(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k.removeprefix(LOGITS_PREFIX): f[k] for k in f.files if k.startswith(LOGITS_PREFIX)}
