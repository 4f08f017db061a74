"""The worker protocol, the one module both sides of the process boundary import: the parent
(spawn, executors, verdicts, reference, `dlbench check`) and the child (worker, probe, the
scenario modules under runner/scenarios/). What crosses is files beside the worker's OUT path
(the TrialResult JSON at OUT, the events at OUT.events, the fixed-batch arrays at
OUT.parity.npz, the interference record so far at OUT.interference.json, a profiled trial's
trace directory) and the names inside them that the parent
reads (event kinds and keys, note keys, batch counts it plans with). Imports no framework and no scenario.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.results.records import (  # noqa: F401 (the events file's vocabulary, for both sides)
    CHUNK,
    END,
    EPOCH,
    EVAL,
    EVENT_KEY,
    EVENTS,
    PHASE,
    PHASE_END,
    PHASE_NAME,
    PHASE_START,
    PHASE_STATE,
    SECONDS,
    START,
    STEPS,
    TIME_KEY,
    VERSION_KEY,
    WARNING,
    event_kind,
)

# -- files beside the worker's OUT path ----------------------------------------------------------


def events_path(out: Path) -> Path:
    """The events file (JSON lines: runner/timing.py EventLog) beside a worker's OUT path."""
    return out.with_name(out.name + ".events")


def parity_path(out: Path) -> Path:
    """The fixed-batch loss and gradients (NumPy .npz) beside a worker's OUT path."""
    return out.with_name(out.name + ".parity.npz")


def interference_path(out: Path) -> Path:
    """The worker's interference record so far (JSON, replaced every few seconds inside the
    timed window: monitors/interference.py), beside a worker's OUT path: the parent keeps it
    for a worker it had to kill."""
    return out.with_name(out.name + ".interference.json")


def trace_dir_for(result_path: Path) -> Path:
    """Where a profiled worker whose result goes to `result_path` writes its trace."""
    return result_path.with_name(result_path.name.split(".", 1)[0] + ".profile")


# -- names the parent reads in a result -----------------------------------------------------------

# A profiled trial's trace directory (notes), which the parent moves beside the store.
TRACE_NOTE = "profile_trace"
# The inference scenario times this many large batches (or its budget, whichever ends first):
# the planner's time estimate counts them too.
INFER_BATCHES = 100
# The solver scenario solves in these dtypes, and takes the neural ODE's gradients at these
# tolerances (rtol; atol = rtol x the problem's scale): the planner's estimate counts them too.
SOLVE_DTYPES = ("float64", "float32")
SOLVE_GRADIENT_RTOLS = (1e-4, 1e-6, 1e-8)

# -- the fixed-batch arrays (runner/fixedbatch.py computes them, runner/verdicts.py judges) --------
# One .npz file: `loss`, `grad/<name>` per gradient, `logits/<path>` per inference path, `sample`
# and `sample_reference` for a sampling trial, and any other named arrays a probe adds (the K-step
# trajectory).

GRAD_PREFIX = "grad/"
LOGITS_PREFIX = "logits/"
SAMPLE, SAMPLE_REFERENCE = "sample", "sample_reference"


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


def load_logits(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k.removeprefix(LOGITS_PREFIX): f[k] for k in f.files if k.startswith(LOGITS_PREFIX)}


def save_samples(path: Path, outputs: Mapping[str, np.ndarray], sample: np.ndarray, reference: np.ndarray) -> None:
    """A sampling trial's arrays: the denoiser's outputs (as save_logits) and the first images of
    its sample with the float64 NumPy sample from the same noise."""
    _save(path, {**{LOGITS_PREFIX + k: np.asarray(v) for k, v in outputs.items()},
                 SAMPLE: np.asarray(sample), SAMPLE_REFERENCE: np.asarray(reference)})


def load_samples(path: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(sample, float64 reference sample) from a file written by save_samples, else None."""
    with np.load(path) as f:
        return (f[SAMPLE], f[SAMPLE_REFERENCE]) if SAMPLE in f.files else None


def save_generation(path: Path, prompt: np.ndarray, ids: np.ndarray, logits: np.ndarray) -> None:
    """A generation trial's arrays: the prompts (B, P), the greedy ids (B, G) and every step's
    logits (G, B, V), for the parent's float64 decoder to recompute."""
    _save(path, {"gen/prompt": np.asarray(prompt), "gen/ids": np.asarray(ids), "gen/logits": np.asarray(logits)})


def load_generation(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt, ids, logits) from a file written by save_generation."""
    with np.load(path) as f:
        return f["gen/prompt"], f["gen/ids"], f["gen/logits"]
