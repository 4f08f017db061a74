"""ONNX Runtime: an inference backend for the torch implementation of each workload, exported to
ONNX with the canonical weights (so it computes the same model as every other framework).

It cannot train: capabilities are infer only, and a train trial is `unsupported` with that
reason. Importing this module is light: onnxruntime loads in the worker only (import_framework),
and torch only inside build on an export-cache miss (program.py).
"""

from __future__ import annotations

import os
import typing
from typing import Any

from dlbench.backends.base import (
    Capabilities,
    Program,
    SingleDevice,
    Unsupported,
    build_program,
    installed_versions,
    module_installed,
)
from dlbench.spec import Policy, TrialSpec

PACKAGE = "dlbench.backends.onnxruntime"
# The exporter needs onnx and onnxscript (torch.onnx.export(dynamo=True)) and torch itself.
_NEEDED = ("onnxruntime", "onnx", "onnxscript", "torch")
_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnx", "onnxscript", "onnx-ir", "torch")
_MODES: dict[str, str | None] = {
    "compiled": None,  # an exported graph, optimised by the session at --ort-optimization
    "eager": "ONNX Runtime runs an exported graph; it has no eager mode",
    "graph": "ONNX Runtime's one mode is its optimised graph: use compiled (and --ort-optimization)",
}
# GraphOptimizationLevel member per Policy.ort_optimization.
OPTIMIZATION_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


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
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[policy.ort_optimization])
    return options


def providers() -> list[str]:
    """CUDA where this onnxruntime build has it (onnxruntime-gpu), with the CPU as fallback."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


@typing.final
class OnnxRuntimeBackend:
    name = "onnxruntime"
    capabilities = Capabilities(train=False, infer=True, grads=False)
    data_parallel = SingleDevice("onnxruntime runs inference only: no data-parallel training")

    def available(self) -> tuple[bool, str]:
        missing = [m for m in _NEEDED if not module_installed(m)]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install 'dlbench[onnxruntime]')"
        versions = installed_versions(("onnxruntime", "onnxruntime-gpu", "onnx", "onnxscript"))
        return True, ", ".join(f"{k} {v}" for k, v in versions.items())

    def modes(self) -> dict[str, str | None]:
        return dict(_MODES)

    def distributions(self) -> dict[str, str]:
        return installed_versions(_DISTRIBUTIONS)

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        # The export cache (program.py) lives under DLBENCH_CACHE_DIR whatever the compile
        # cache policy: an export is not a compile, the session optimises the graph each time.
        return {}

    def reference_environment(self) -> dict[str, str]:
        return {}  # float32 only: build refuses float64

    def import_framework(self) -> None:
        import onnxruntime  # noqa: F401

    def configure(self, policy: Policy) -> dict[str, Any]:
        """The session options the programs will use, read back from an ort.SessionOptions."""
        options = session_options(policy)
        return {
            "ort_intra_op_num_threads": options.intra_op_num_threads,
            "ort_inter_op_num_threads": options.inter_op_num_threads,
            "ort_execution_mode": str(options.execution_mode),
            "ort_graph_optimization_level": str(options.graph_optimization_level),
            "ort_providers": providers(),
        }

    def build(self, trial: TrialSpec) -> Program:
        reason = _MODES.get(trial.policy.mode, f"unknown mode {trial.policy.mode!r}")
        if reason is not None:
            raise Unsupported(f"onnxruntime mode {trial.policy.mode!r}: {reason}")
        if trial.workload.numerics.dtype != "float32":
            raise Unsupported(f"onnxruntime runs float32 only, not {trial.workload.numerics.dtype!r}"
                              " (the float64 parity reference comes from the native frameworks)")
        return build_program(PACKAGE, trial)

    def forget_compiled(self) -> None:
        # Each Program loads an InferenceSession of its own from a model exported with its batch
        # axis declared dynamic: no implicit compile state carries over.
        return None

    def sync(self, *outputs: Any) -> None:
        # InferenceSession.run returns host NumPy arrays once the graph has run (the CUDA
        # provider copies its outputs back inside run): nothing is left to wait for.
        return None

    def info(self) -> dict[str, Any]:
        import onnxruntime as ort

        from dlbench.backends.onnxruntime import program

        return {
            "version": ort.__version__,
            "device": ort.get_device(),
            "providers": ort.get_available_providers(),
            "versions": installed_versions(_DISTRIBUTIONS),
            # What the last build did: cache key, hit or miss, export seconds, opset, the
            # check of its logits against torch's.
            "onnx_exports": list(program.EXPORTS),
        }

    def allocator_stats(self) -> dict[str, float]:
        return {}  # ONNX Runtime's arenas report no counters; RSS covers them on the CPU
