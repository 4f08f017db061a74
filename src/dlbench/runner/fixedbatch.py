"""The canonical fixed batch of the parity check (spec.PARITY_BATCH samples), computed in a child
process and judged by the parent against the float64 reference (runner/verdicts.py).

A child computes, from the canonical initial parameters in a state of its own: the loss and the
gradients in canonical names (training scenarios), or the eval-mode logits (inference). The
arrays cross to the parent as one .npz file beside the trial's result, in the format of
runner/protocol.py (save_grads, save_logits, save_samples; the parent's load_*).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from dlbench.backends import support
from dlbench.backends.base import Learner, Servable
from dlbench.spec import PARITY_BATCH, TrialSpec


def grads(trial: TrialSpec, workload: ModuleType, program: Learner) -> tuple[float, dict[str, np.ndarray]]:
    """Loss and gradients on the canonical fixed batch from the canonical initial parameters, in
    a state of their own (a trial's training state is left alone). `workload`: the trial's
    workload module, looked up once by the caller."""
    state = support.init(trial, workload, program)
    batch = workload.fixed_batch(trial.workload, PARITY_BATCH)
    return program.loss_and_grads(state, batch.x, batch.y)


def logits(trial: TrialSpec, workload: ModuleType, program: Learner | Servable) -> np.ndarray:
    """Eval-mode outputs on the canonical fixed batch from the canonical initial parameters."""
    state = support.init(trial, workload, program)
    x = workload.fixed_batch(trial.workload, PARITY_BATCH).x
    return np.asarray(program.predict(state, x), np.float64)
