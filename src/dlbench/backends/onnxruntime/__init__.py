"""ONNX Runtime: an inference backend for the torch implementation of each workload, exported to
ONNX with the canonical weights (so it computes the same model as every other framework). It
exports from torch (Capabilities.exports_from): it serves every workload torch implements, a
plugin's included, through the one OrtProgram (program.py), with no module per workload.

It cannot train: capabilities are infer only, and a train trial is `unsupported` with that
reason. Importing this module is light: onnxruntime loads in the worker only (import_framework),
and torch only inside build on an export-cache miss (program.py).
"""

from __future__ import annotations

import typing
from typing import Any

from dlbench.backends.base import (
    CostGuess,
    Capabilities,
    Sampler,
    SingleDevice,
    Unsupported,
    installed_versions,
    module_installed,
)
from dlbench.backends.onnxruntime.session import EXPORTS_FROM, OPTIONS, providers, session_options
from dlbench.backends.precision import Support, fp32_only
from dlbench.spec import Policy, TrialSpec

# The exporter needs onnx and onnxscript (torch.onnx.export(dynamo=True)) and torch itself.
_NEEDED = ("onnxruntime", "onnx", "onnxscript", "torch")
_DISTRIBUTIONS = ("onnxruntime", "onnxruntime-gpu", "onnx", "onnxscript", "onnx-ir", "torch")
_MODES: dict[str, str | None] = {
    "compiled": None,  # an exported graph, optimised by the session at its optimization option
    "eager": "ONNX Runtime runs an exported graph; it has no eager mode",
    "graph": "ONNX Runtime's one mode is its optimised graph: use compiled (and --option onnxruntime.optimization)",
}
# Variables that change ONNX Runtime's threads or providers (Backend.recorded_environment).
RECORDED_ENVIRONMENT = ("ORT_DISABLE_ALL_OPTIMIZATION", "CUDA_MODULE_LOADING")




@typing.final
class OnnxRuntimeBackend:
    name = "onnxruntime"
    capabilities = Capabilities(frozenset({"infer", "generate"}), grads=False, exports_from=EXPORTS_FROM)
    data_parallel = SingleDevice("onnxruntime runs inference only: no data-parallel training")
    # int8: the exported graph quantised by quantize_dynamic (generate.py), CPU kernels.
    precisions: Support = {**fp32_only("ONNX Runtime runs the exported float32 graph only"), ("cpu", "int8"): None,
                           ("cuda", "int8"): "ONNX Runtime's dynamically quantised MatMul (MatMulInteger,"
                           " DynamicQuantizeMatMul) runs on its CPU provider only"}
    options = OPTIONS
    recorded_environment: tuple[str, ...] = RECORDED_ENVIRONMENT
    # docs/benchmarks.md, whole zoo at the cpu presets (time to first step, parity compile)
    cost_guess = CostGuess(startup_s=10.0, compile_s=5.0)
    kernel_alternatives: dict[str, dict[str, str]] = {}
    allocator_units: dict[str, str] = {}

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

    def device_kind(self) -> str:
        return "cuda" if providers()[0] == "CUDAExecutionProvider" else "cpu"

    def build(self, trial: TrialSpec) -> Sampler:
        if trial.workload.numerics.dtype != "float32":
            raise Unsupported(f"onnxruntime runs float32 only, not {trial.workload.numerics.dtype!r}"
                              " (the float64 parity reference comes from the native frameworks)")
        from dlbench.backends.onnxruntime import program

        return program.build(trial)

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
