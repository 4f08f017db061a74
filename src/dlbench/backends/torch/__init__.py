"""The PyTorch backend. Importing this module is light: torch loads only in the worker, inside
the methods that need it (import_framework, configure, build, sync, info, allocator_stats)."""

from __future__ import annotations

import os
import shlex
import shutil
import typing
from typing import Any

from dlbench.backends.base import (
    CostGuess,
    Capabilities,
    Option,
    Program,
    SolveGuess,
    build_program,
    installed_versions,
    module_installed,
)
from dlbench.backends.precision import NATIVE, Support
from dlbench.backends.torch import settings
from dlbench.spec import Policy, TrialSpec

# torch.compile's options in `compiled` mode, passed explicitly and recorded with every trial.
# Inductor is torch's default backend; "default" is the mode a practitioner starts from (no
# CUDA graphs, no autotuning), and `dynamic=None` only makes a shape dynamic once a second one is
# seen, which never happens in training because ragged last batches are dropped.
COMPILE_OPTIONS: dict[str, Any] = {
    "backend": "inductor",
    "mode": "default",
    "fullgraph": False,
    "dynamic": None,
}

# Inference (Program.infer_fn) compiles one static graph per batch size: the worker warms up
# batch 1 and the large batch, and automatic dynamic shapes would turn the second into a
# dynamic-shape graph, which is not what a server compiled for a fixed batch runs.
INFER_COMPILE_OPTIONS: dict[str, Any] = {**COMPILE_OPTIONS, "dynamic": False}


def compile_options(policy: Policy) -> dict[str, Any]:
    """COMPILE_OPTIONS with the mode the policy's `compile_mode` option asks for."""
    return {**COMPILE_OPTIONS, "mode": settings.value(policy, "compile_mode")}


def infer_compile_options(policy: Policy) -> dict[str, Any]:
    """INFER_COMPILE_OPTIONS with the mode the policy's `compile_mode` option asks for."""
    return {**INFER_COMPILE_OPTIONS, "mode": settings.value(policy, "compile_mode")}


_DISTRIBUTIONS = ("torch", "triton", "numpy")
# Variables that change torch's speed, memory or compiled code (Backend.recorded_environment).
# OMP_WAIT_POLICY and GOMP_SPINCOUNT set how torch's OpenMP runtime (GNU libgomp in the CPU wheels)
# waits at the end of each parallel region: on a machine shared with other processes they change
# CPU step times several-fold (docs/benchmarks.md, "detect": why torch's steps were slow).
RECORDED_ENVIRONMENT = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TORCHINDUCTOR_CACHE_DIR",
                        "TRITON_CACHE_DIR", "TORCHINDUCTOR_FREEZING", "TORCH_COMPILE_DEBUG",
                        "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
# allocator_stats() on a GPU: the caching allocator's counters.
ALLOCATOR_UNITS = {"torch_allocated_peak_bytes": "B", "torch_reserved_peak_bytes": "B",
                   "torch_allocated_bytes": "B", "torch_reserved_bytes": "B", "allocated_peak_bytes": "B"}
# Compilers Inductor tries on CPU when CXX is unset (torch._inductor.config.cpp.cxx).
_CXX_CANDIDATES = ("g++", "c++", "clang++")


def cxx_compiler() -> str | None:
    """The C++ compiler Inductor will use for CPU kernels: $CXX when set, else the first found."""
    cxx = os.environ.get("CXX", "").strip()
    if cxx:
        return shutil.which(shlex.split(cxx)[0])
    for candidate in _CXX_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def _mkldnn_fp32_precision(torch: Any, op: str) -> str | None:
    """oneDNN's internal precision for float32 `op`s ("ieee", "bf16", ...; torch >= 2.9 only),
    which torch.set_float32_matmul_precision may change on a CPU with bf16 support."""
    try:
        return str(getattr(torch.backends.mkldnn, op).fp32_precision)
    except AttributeError:
        return None


def device() -> Any:
    """The device every torch Program runs on: the first GPU when torch sees one, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@typing.final
class TorchDataParallel:
    """DistributedDataParallel over rank processes (backends/torch/ddp.py)."""

    def unsupported(self, trial: TrialSpec) -> str | None:
        return None

    def environment(self, trial: TrialSpec) -> dict[str, str]:
        return {}

    def setup(self, trial: TrialSpec) -> dict[str, Any]:
        from dlbench.backends.torch import ddp

        return ddp.launch(trial)

    def comm_s(self) -> float | None:
        from dlbench.backends.torch import ddp

        return ddp.COMM.seconds


@typing.final
class TorchBackend:
    name = "torch"
    capabilities = Capabilities(frozenset({"train", "infer", "generate", "solve"}))
    data_parallel = TorchDataParallel()
    # int8: torch.ao's dynamic quantisation of every nn.Linear, eager mode on the CPU (lm.py).
    precisions: Support = {**NATIVE, ("cpu", "int8"): None, ("cuda", "int8"): (
        "torch's dynamically quantised Linear (torch.ao quantize_dynamic) has CPU kernels only (fbgemm, x86,"
        " onednn)")}
    # Variants of memory format, compile mode and scope, optimizer, loader, oneDNN, matmul
    # precision and OpenMP's wait policy (settings.py; docs/variants.md).
    options: dict[str, Option] = settings.OPTIONS
    recorded_environment: tuple[str, ...] = RECORDED_ENVIRONMENT
    # docs/benchmarks.md, whole zoo at the cpu presets (time to first step, parity compile)
    # fitted to a quiet whole-zoo tiny run, AMD EPYC 2 cores (docs/benchmarks.md)
    # solve: torchdiffeq's and torchode's explicit solvers in two dtypes, eager (about 1 ms a step: a point
    # 0.75 s, a curve to the 5000-step cap 10-15 s), three gradient methods
    cost_guess = CostGuess(startup_s=10.0, compile_s=14.0, solve=SolveGuess(
        explicit_curves=6, implicit_curves=0, point_s=0.75, capped_curve_s=12.0, compile_s=0.0, gradient_methods=3,
        gradient_point_s=0.7))
    kernel_alternatives: dict[str, dict[str, str]] = {}
    allocator_units = ALLOCATOR_UNITS

    def available(self) -> tuple[bool, str]:
        if not module_installed("torch"):
            return False, "torch is not installed (pip install 'dlbench[torch]')"
        return True, installed_versions(("torch",)).get("torch", "unknown version")

    def modes(self) -> dict[str, str | None]:
        # Inductor compiles C++ for CPU kernels; on a GPU machine the CPU-side parts of a graph
        # still become C++ kernels, so compiled mode needs a compiler everywhere.
        compiled = None if cxx_compiler() else (
            "needs a C++ compiler for torch.compile's Inductor on CPU"
        )
        return {
            "eager": None,
            "graph": "torch has no separate graph mode (TorchScript is deprecated); use compiled",
            "compiled": compiled,
        }

    def distributions(self) -> dict[str, str]:
        return installed_versions(_DISTRIBUTIONS)

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        # Inductor's FX-graph and AOTAutograd caches and Triton's kernels all live under these:
        # a fresh directory per trial is the cold cache, a shared one the warm cache.
        return {
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir, "inductor"),
            "TRITON_CACHE_DIR": os.path.join(cache_dir, "triton"),
        }

    def reference_environment(self) -> dict[str, str]:
        return {}  # float64 needs no switch

    def import_framework(self) -> None:
        import torch  # noqa: F401

    def configure(self, policy: Policy) -> dict[str, Any]:
        import torch

        if policy.threads is not None:
            torch.set_num_threads(policy.threads)
            try:
                torch.set_num_interop_threads(policy.threads)
            except RuntimeError:
                pass  # allowed only once, before any inter-op work; the read-back shows the value
        # Every switch set explicitly, both ways: fp32 (and the float32 parts of bf16/fp16) is
        # IEEE fp32, with no TF32 in cuBLAS or cuDNN and "highest" for float32 matmuls; tf32
        # turns all three on ("high" is torch's name for TF32 matmuls).
        # The matmul_precision option, where given, sets the float32 matmul precision alone.
        tf32 = policy.matmul_precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.set_float32_matmul_precision(settings.float32_matmul_precision(policy))
        torch.backends.mkldnn.enabled = settings.value(policy, "mkldnn") == "on"
        applied: dict[str, Any] = {
            "num_threads": torch.get_num_threads(),
            "num_interop_threads": torch.get_num_interop_threads(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_enabled": torch.backends.cudnn.enabled,
            "mkldnn_available": torch.backends.mkldnn.is_available(),
            "mkldnn_enabled": torch.backends.mkldnn.enabled,
            "mkldnn_matmul_fp32_precision": _mkldnn_fp32_precision(torch, "matmul"),
            "mkldnn_conv_fp32_precision": _mkldnn_fp32_precision(torch, "conv"),
            # As libgomp sees it: the worker sets it before the import (omp_wait_policy option).
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
        }
        if policy.mode == "compiled":
            applied.update({f"compile_{k}": v for k, v in compile_options(policy).items()})
            applied.update({f"compile_infer_{k}": v for k, v in infer_compile_options(policy).items()})
            applied["compile_cxx"] = cxx_compiler()
        return applied

    def device_kind(self) -> str:
        return str(device().type)

    def build(self, trial: TrialSpec) -> Program:
        return build_program("dlbench.backends.torch", trial)

    def forget_compiled(self) -> None:
        # The train step is one code object for every workload: the second workload's shapes
        # would fail the first one's guards, and automatic dynamic shapes would compile it as a
        # dynamic-shape graph, which no trial runs. Costs nothing on an empty cache.
        import torch

        torch.compiler.reset()

    def sync(self, *outputs: Any) -> None:
        import torch

        # CPU kernels run synchronously in the calling thread: once an op has returned, its
        # output is computed, so there is nothing to wait for. CUDA kernels are queued.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def info(self) -> dict[str, Any]:
        import torch

        cuda = torch.cuda.is_available()
        return {
            "version": torch.__version__,
            "git_version": torch.version.git_version,
            "cuda_available": cuda,
            "cuda_version": torch.version.cuda,
            "cudnn_version": torch.backends.cudnn.version() if cuda else None,
            "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            if cuda
            else ["cpu"],
            "mkldnn_available": torch.backends.mkldnn.is_available(),
            "compile_options": dict(COMPILE_OPTIONS),
            "cxx": cxx_compiler(),
        }

    def allocator_stats(self) -> dict[str, float]:
        import torch

        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return {}  # the CPU allocator keeps no counters; RSS covers it
        return {
            "torch_allocated_peak_bytes": float(torch.cuda.max_memory_allocated()),
            "torch_reserved_peak_bytes": float(torch.cuda.max_memory_reserved()),
            "torch_allocated_bytes": float(torch.cuda.memory_allocated()),
            "torch_reserved_bytes": float(torch.cuda.memory_reserved()),
            # Bytes held by live tensors at the peak: what allocated_peak_bytes means everywhere.
            "allocated_peak_bytes": float(torch.cuda.max_memory_allocated()),
        }
