"""The matrix of the per-framework zoo tests (tests/test_backend_*_zoo.py), from the registries:
every usable workload, built-in or a plugin's, that the framework runs (the answer `dlbench list`
gives: backends.support.workload_unsupported), each with the check its scenarios need:

- `supervised`: the workloads whose train scenario is the supervised runner's (classifiers,
  detect, ddpm, the lstm plugin): loss against the NumPy reference, gradients, data order,
  training steps, numerics read back;
- `rollouts`: the workloads with a rollout scenario (ppo): tests/ppo_check.py's environment
  steps, rollouts and updates against the NumPy definition.

A workload that fits neither is left in `unchecked`, and each zoo test fails on it: a new kind
of workload needs its check here, never a silent skip.
"""

from __future__ import annotations

import pytest

from dlbench import workloads
from dlbench.backends import get_backend, support

# The zoo tests' matrices: "ci" (a few workloads in every mode) and "full" (the rest, under the slow
# marker: every workload compiled, one framework process or one per Keras backend). The full
# matrix's processes ran past pytest's 600 s default at load 4 (issue 44's slow-tier run), where
# each test's timeout covers the module fixture that runs them: its tests get FULL_TIMEOUT_S and a
# minute more, the processes FULL_TIMEOUT_S, so that a slow process fails with its own stderr.
CI_TIMEOUT_S = 900
FULL_TIMEOUT_S = 2400
MATRICES = ["ci", pytest.param("full", marks=(pytest.mark.slow, pytest.mark.timeout(FULL_TIMEOUT_S + 60)))]


# XLA (TensorFlow's jit_compile, TensorFlow and Keras on TensorFlow) expands FusedBatchNorm with the
# one-pass variance E[x^2] - E[x]^2, whose float32 error depends on the order of the additions
# XLA's code generator picks per CPU: on an AVX-512 EPYC the tiny resnet's float32 gradients err by
# up to 5.3e-3 (BatchNorm scales; the stem kernel 1.6e-3, cosine 0.99999), by 7e-6 with XLA's code
# capped at SSE4.2 (docs/workloads.md, "Bounds that transfer"; dlbench's parity verdict there is
# `differs`). The zoo tests bound those gradients by that fact, twice the worst measured; a wrong
# gradient is off by far more. Every other framework, mode and workload keeps its own bound.
XLA_BATCHNORM_WORKLOADS = ("resnet",)
XLA_BATCHNORM_RTOL = 1e-2


def xla_batchnorm(framework: str, mode: str, workload: str) -> bool:
    """Whether a run's float32 gradients carry XLA's one-pass BatchNorm error (above)."""
    return framework in ("tensorflow", "keras-tensorflow") and mode == "compiled" and workload in XLA_BATCHNORM_WORKLOADS


def gradient_bounds(framework: str, mode: str, workload: str, rtol: float, cosine_min: float) -> tuple[float, float]:
    """(normwise relative error, cosine) bounds of a run's float32 gradients: the test's own, or
    XLA's BatchNorm fact's, whose cosine follows from its error (cos >= 1 - err^2 / 2)."""
    if xla_batchnorm(framework, mode, workload):
        return XLA_BATCHNORM_RTOL, 1 - XLA_BATCHNORM_RTOL**2 / 2
    return rtol, cosine_min


def process_timeout(matrix: str) -> int:
    """Seconds a zoo's framework process may take for `matrix` ("ci" or "full")."""
    return FULL_TIMEOUT_S if matrix == "full" else CI_TIMEOUT_S


def runnable(framework: str) -> list[str]:
    """Every usable workload the framework runs, in registry order."""
    backend = get_backend(framework)
    return [w for w in workloads.usable() if support.workload_unsupported(framework, backend, w) is None]


def _is_supervised(workload: str) -> bool:
    return workloads.get(workload).SCENARIOS.get("train") == "train"


def _has_rollout(workload: str) -> bool:
    return "rollout" in workloads.get(workload).SCENARIOS


def supervised(framework: str) -> list[str]:
    return [w for w in runnable(framework) if _is_supervised(w)]


def rollouts(framework: str) -> list[str]:
    return [w for w in runnable(framework) if _has_rollout(w) and not _is_supervised(w)]


def unchecked(framework: str) -> list[str]:
    """Runnable workloads that no check of the zoo tests covers (should be empty)."""
    covered = {*supervised(framework), *rollouts(framework)}
    return [w for w in runnable(framework) if w not in covered]
