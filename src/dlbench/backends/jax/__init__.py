"""JAX backend: plain JAX + Optax, the whole train step under jax.jit.

Importing this module is light: jax is imported only inside the methods the worker calls."""

from __future__ import annotations

import os
import typing
from typing import Any

from dlbench.backends import base
from dlbench.backends.base import CostGuess, SolveGuess
from dlbench.backends.jax import settings
from dlbench.backends.precision import NATIVE, Support
from dlbench.spec import Policy, TrialSpec

_DISTRIBUTIONS = ("jax", "jaxlib", "optax", "jax-cuda12-plugin", "jax-cuda12-pjrt")
_MODES: dict[str, str | None] = {
    "compiled": None,
    "eager": "JAX trains through jax.jit; op-by-op dispatch is not how anyone trains with JAX",
    "graph": "JAX has no separate graph mode",
}


# Variables that change XLA's speed, memory or numerics (Backend.recorded_environment).
RECORDED_ENVIRONMENT = ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_ENABLE_X64", "XLA_PYTHON_CLIENT_PREALLOCATE",
                        "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR",
                        "JAX_ENABLE_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR")
# The BFC allocator's counters of a GPU device (Device.memory_stats), recorded as jax_<key>.
_ALLOCATOR_KEYS = ("peak_bytes_in_use", "bytes_in_use", "bytes_limit", "pool_bytes", "peak_pool_bytes")


@typing.final
class JaxDataParallel:
    """The batch sharded over a one-axis Mesh of local devices, parameters replicated; jit
    inserts the gradient all-reduce (backends/jax/program.py)."""

    def unsupported(self, trial: TrialSpec) -> str | None:
        return None

    def environment(self, trial: TrialSpec) -> dict[str, str]:
        if trial.devices == 1:
            return {}
        # Only the host platform reads the device count: on a GPU machine the mesh takes the
        # GPUs. The whole XLA_FLAGS (the option's flag too): this dict replaces the backend's.
        flags = settings.xla_flags(trial.policy, trial.devices)
        return {"XLA_FLAGS": flags} if flags else {}

    def setup(self, trial: TrialSpec) -> dict[str, Any]:
        import jax

        devices = jax.local_devices()
        if len(devices) < trial.devices:
            raise base.Unsupported(f"devices {trial.devices}: JAX sees only {len(devices)} local device(s)")
        return {"mechanism": "jax.jit over a Mesh, batch sharded with NamedSharding, parameters replicated",
                "mesh_devices": [str(d) for d in devices[: trial.devices]],
                "platform": "cpu" if devices[0].platform == "cpu" else "gpu",
                "xla_flags": os.environ.get("XLA_FLAGS", "")}

    def comm_s(self) -> float | None:
        return None  # the all-reduce is inside the compiled step


@typing.final
class JaxBackend:
    name = "jax"
    capabilities = base.Capabilities(frozenset({"train", "infer", "generate", "solve"}))
    data_parallel = JaxDataParallel()
    precisions: Support = {**NATIVE, ("cuda", "fp16"): (
        "JAX has no built-in dynamic loss scaling (it lives in the separate jmp library) and fp16"
        " without it underflows gradients; use bf16"),
        **dict.fromkeys((("cpu", "int8"), ("cuda", "int8")), (
            "JAX has no int8 quantisation of its own: it lives in separate libraries (AQT, qwix) that dlbench"
            " does not depend on"))}
    # Steps per jitted call and their loop (backends/multistep.py), the cnn's max-pool, the matmul
    # precision: variants (settings.py; docs/variants.md).
    options: dict[str, base.Option] = settings.OPTIONS
    recorded_environment: tuple[str, ...] = RECORDED_ENVIRONMENT
    # docs/benchmarks.md, whole zoo at the cpu presets (time to first step, parity compile)
    # fitted to a quiet whole-zoo tiny run, AMD EPYC 2 cores (docs/benchmarks.md)
    # solve: diffrax's Tsit5, Dopri5 and Kvaerno5 in two dtypes; a point is the 0.2 s floor (solves take
    # 0.2-20 ms), a curve compiles twice (about 1 s each, Kvaerno5 2 s), each gradient tolerance 5 s
    cost_guess = CostGuess(startup_s=2.5, compile_s=2.0, solve=SolveGuess(
        explicit_curves=4, implicit_curves=2, point_s=0.2, capped_curve_s=0.8, compile_s=2.0, gradient_methods=2,
        gradient_point_s=5.0))
    kernel_alternatives: dict[str, dict[str, str]] = {}
    allocator_units = {f"jax_{k}": "B" for k in _ALLOCATOR_KEYS} | {"allocated_peak_bytes": "B"}

    def available(self) -> tuple[bool, str]:
        missing = [m for m in ("jax", "jaxlib", "optax") if not base.module_installed(m)]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install 'dlbench[jax]')"
        versions = base.installed_versions(("jax", "jaxlib", "optax"))
        return True, ", ".join(f"{k} {v}" for k, v in versions.items())

    def modes(self) -> dict[str, str | None]:
        return dict(_MODES)

    def distributions(self) -> dict[str, str]:
        return base.installed_versions(_DISTRIBUTIONS)

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        # JAX preallocates 75 % of a GPU's memory at its first use, which makes nvidia-smi and
        # NVML read the same for every model: off, so device memory grows as needed, as torch's
        # and TF's (with memory growth) do. The persistent compilation cache is switched on only
        # for the warm policy (configure); its directory must be known before the first compile.
        env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
        if flags := settings.xla_flags(policy):  # the multi_output_fusion option's flag
            env["XLA_FLAGS"] = flags
        if policy.compile_cache == "warm":
            env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
        return env

    def reference_environment(self) -> dict[str, str]:
        # float64 arrays exist only with x64 enabled before any array is created; without it
        # JAX silently makes float32 ones (build refuses a float64 spec then).
        return {"JAX_ENABLE_X64": "1"}

    def import_framework(self) -> None:
        import jax  # noqa: F401
        import optax  # noqa: F401

    def configure(self, policy: Policy) -> dict[str, Any]:
        import jax

        # "highest" is full fp32 in every matmul and convolution (no TF32 or bf16 passes on GPU);
        # tf32 is "tensorfloat32"; the matmul_precision option, where given, wins. Set explicitly
        # and read back below.
        jax.config.update("jax_default_matmul_precision", settings.matmul_precision(policy))
        # cold: compile from scratch in every trial; warm: use the persistent cache that the
        # worker points JAX_COMPILATION_CACHE_DIR at.
        jax.config.update("jax_enable_compilation_cache", policy.compile_cache == "warm")
        # XLA:CPU sizes its thread pool from the affinity mask that the worker already set,
        # so there is no thread setting to apply: record what it sees and the pool it made.
        return {
            "matmul_precision": jax.config.values["jax_default_matmul_precision"],
            "compilation_cache": jax.config.values["jax_enable_compilation_cache"],
            "compilation_cache_dir": jax.config.values["jax_compilation_cache_dir"],
            "default_backend": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "local_device_count": jax.local_device_count(),
            "affinity_cpus": len(os.sched_getaffinity(0)),
            "xla_cpu_pool_threads": _count_threads("tf_XLAEigen"),
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
        }

    def device_kind(self) -> str:
        import jax

        return "cuda" if jax.default_backend() == "gpu" else "cpu"

    def build(self, trial: TrialSpec) -> base.Program:
        return base.build_program("dlbench.backends.jax", trial)

    def forget_compiled(self) -> None:
        # jax.jit caches by function and argument shapes, and never turns a shape dynamic: a new
        # workload compiles as it would in a fresh process.
        return None

    def sync(self, *outputs: Any) -> None:
        import jax

        # Dispatch is asynchronous even on CPU: wait on the outputs themselves.
        jax.block_until_ready(outputs)

    def info(self) -> dict[str, Any]:
        import jax

        return {
            "versions": base.installed_versions(_DISTRIBUTIONS),
            "default_backend": jax.default_backend(),
            "devices": [{"kind": d.device_kind, "platform": d.platform, "id": d.id} for d in jax.devices()],
        }

    def allocator_stats(self) -> dict[str, float]:
        import jax

        # CPU devices return None; GPU's BFC allocator returns a dict of counters.
        stats = jax.devices()[0].memory_stats()
        if not isinstance(stats, dict):
            return {}
        out = {f"jax_{k}": float(stats[k]) for k in _ALLOCATOR_KEYS if k in stats}
        if "peak_bytes_in_use" in stats:  # live buffers at the peak, as allocated_peak_bytes means
            out["allocated_peak_bytes"] = float(stats["peak_bytes_in_use"])
        return out


def _count_threads(name: str) -> int | None:
    """Threads of this process with the given name (Linux), e.g. XLA:CPU's Eigen pool, which
    exists once the CPU client is created (jax.devices() does that)."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    count = 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                count += f.read().strip() == name
        except OSError:  # the thread ended while we looked
            continue
    return count
