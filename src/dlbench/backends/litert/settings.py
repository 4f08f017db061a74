"""LiteRT's settings from a policy: shared by the backend (configure reads them back) and the
programs (every Interpreter is opened with them)."""

from __future__ import annotations

import os

from dlbench.backends.base import Option
from dlbench.spec import Policy

# The converter's dynamic-range quantisation: int8 weights, activations quantised on the fly.
QUANTIZATIONS = ("none", "dynamic-int8")
OPTIONS = {"quantization": Option(
    allowed=QUANTIZATIONS, default="none",
    help="none (float32) or dynamic-int8 (the TFLite converter's dynamic-range quantisation, judged by"
         " held-out accuracy against the float32 model, not by the float32 parity tolerance)")}

# The backend family whose implementations are converted and served: every workload it implements.
EXPORTS_FROM = "tensorflow"


def quantization(policy: Policy) -> str:
    return policy.options.get("quantization", OPTIONS["quantization"].default)


def threads(policy: Policy) -> int:
    """The policy's threads, else every core of the worker's affinity mask."""
    return policy.threads if policy.threads is not None else len(os.sched_getaffinity(0))
