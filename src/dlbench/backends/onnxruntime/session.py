"""ONNX Runtime's session settings from a policy: shared by the backend (configure reads them
back) and the programs (every InferenceSession is opened with them)."""

from __future__ import annotations

import os
from typing import Any

from dlbench.backends.base import Option
from dlbench.backends.onnxruntime.profile import enabled as profiling_prefix
from dlbench.spec import Policy

# GraphOptimizationLevel member per value of the `optimization` option.
OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
# The generate scenario's I/O (generate.py): the KV cache kept in OrtValues between steps (IO
# binding) or passed as NumPy arrays through session.run.
GENERATE_IO = Option(
    allowed=("binding", "run"), default="binding",
    help="generate: binding keeps the KV cache in ONNX Runtime's OrtValues from step to step (IO binding);"
         " run passes NumPy arrays through session.run, copying the cache back to NumPy every step")
OPTIONS = {"optimization": Option(
    allowed=tuple(OPTIMIZATION_LEVELS), default="all",
    help="the session's graph optimisation level (GraphOptimizationLevel; all is ONNX Runtime's default"
         " and what a deployment uses)"),
    "generate_io": GENERATE_IO}

# The backend family whose implementations are exported and served: every workload it implements.
EXPORTS_FROM = "torch"


def optimization(policy: Policy) -> str:
    """The policy's optimisation level, the option's default where unset."""
    return policy.options.get("optimization", OPTIONS["optimization"].default)


def intra_op_threads(policy: Policy) -> int:
    """The policy's threads, else every core of the worker's affinity mask (ONNX Runtime's own
    default counts physical cores, which ignores the mask)."""
    return policy.threads if policy.threads is not None else len(os.sched_getaffinity(0))


def session_options(policy: Policy) -> Any:
    """The session settings of a policy, every one set explicitly."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads(policy)
    # One request at a time through a sequential graph: the inter-op pool would stay idle.
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[optimization(policy)])
    prefix = profiling_prefix()  # a profiled trial (profile.py)
    if prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = prefix
    return options


def providers() -> list[str]:
    """CUDA where this onnxruntime build has it (onnxruntime-gpu), with the CPU as fallback."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
