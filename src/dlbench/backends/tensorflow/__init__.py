"""TensorFlow itself (tf.Variable, tf.nn, GradientTape), not Keras: Keras gets its own backends.

The parent imports this module to list and plan, so TensorFlow is imported only inside the
methods the worker calls (import_framework, configure, build, sync, info, allocator_stats).
"""

from __future__ import annotations

import importlib
import os
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
from dlbench.backends.tensorflow import settings
from dlbench.spec import Policy, TrialSpec

# Every distribution that installs the `tensorflow` module.
DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tensorflow-macos")
# Variables that change TensorFlow's speed, memory or numerics (Backend.recorded_environment).
RECORDED_ENVIRONMENT = ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL", "TF_XLA_FLAGS", "XLA_FLAGS",
                        "TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "JAX_PLATFORMS")


@typing.final
class TensorFlowDataParallel:
    """tf.distribute.MirroredStrategy over GPUs or logical CPU devices
    (backends/tensorflow/mirrored.py); the loss is scaled by the global batch."""

    def unsupported(self, trial: TrialSpec) -> str | None:
        return None

    def environment(self, trial: TrialSpec) -> dict[str, str]:
        return {}

    def setup(self, trial: TrialSpec) -> dict[str, Any]:
        from dlbench.backends.tensorflow import mirrored

        return mirrored.setup(trial.devices)

    def comm_s(self) -> float | None:
        return None  # the all-reduce runs inside the step's graph


@typing.final
class TensorFlowBackend:
    name = "tensorflow"
    capabilities = Capabilities(frozenset({"train", "infer", "generate", "solve"}))
    data_parallel = TensorFlowDataParallel()
    precisions: Support = {**NATIVE, ("cuda", "fp16"): (
        "TensorFlow's loss scaler is Keras's LossScaleOptimizer; the raw-TF backend has none (run"
        " keras-tensorflow for fp16)"),
        **dict.fromkeys((("cpu", "int8"), ("cuda", "int8")), (
            "TensorFlow's own int8 is the TFLite converter's dynamic-range quantisation: --framework litert"
            " --precision int8"))}
    # Steps per tf.function call (backends/multistep.py), oneDNN, the inter-op pool: variants
    # (settings.py; docs/variants.md).
    options: dict[str, Option] = settings.OPTIONS
    recorded_environment: tuple[str, ...] = RECORDED_ENVIRONMENT
    # Settings that swap TF's CPU-specific code for plainer code, probed when a trial fails
    # parity (runner/verdicts.py: a pass there makes the verdict `differs`):
    # - oneDNN (on by default for x86 builds) picks kernels by the CPU's instruction set (AVX2,
    #   AVX-512, AVX512_BF16/AMX); TF_ENABLE_ONEDNN_OPTS=0 switches it off.
    # - XLA (compiled mode, jit_compile=True) expands FusedBatchNorm with XLA's BatchNormExpander,
    #   whose training variance is the one-pass E[x^2] - E[x]^2: its float32 error grows with a
    #   channel's (mean/std)^2 and with the order of the reduction's additions, which XLA's CPU code
    #   generator picks per CPU. On an AVX-512 EPYC the tiny resnet's first-block BatchNorm
    #   gradients err by 2-5e-3 (bound 1e-3); capped at SSE4.2 they err by 7e-6, as TF's own
    #   two-pass kernel (eager, graph) does (docs/workloads.md, "Bounds that transfer").
    # docs/benchmarks.md, whole zoo at the cpu presets (time to first step, parity compile)
    # fitted to a quiet whole-zoo tiny run, AMD EPYC 2 cores (docs/benchmarks.md)
    # solve: TFP's DormandPrince and BDF in two dtypes, each traced twice (the timed and the counting
    # solve, about 1 s each); its adjoint's gradient retraces per tolerance (5 s)
    cost_guess = CostGuess(startup_s=6.0, compile_s=3.0, solve=SolveGuess(
        explicit_curves=2, implicit_curves=2, point_s=0.7, capped_curve_s=1.5, compile_s=2.0, gradient_methods=1,
        gradient_point_s=5.0))
    kernel_alternatives: dict[str, dict[str, str]] = {
        "oneDNN off": {"TF_ENABLE_ONEDNN_OPTS": "0"},
        "XLA's CPU code at SSE4.2": {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"},
    }
    allocator_units = {"tf_gpu_current_bytes": "B", "tf_gpu_peak_bytes": "B", "allocated_peak_bytes": "B"}

    def __init__(self) -> None:
        self._first_elements: Any = None  # sync's traced fetch, made once TF is imported

    def available(self) -> tuple[bool, str]:
        if not module_installed("tensorflow"):
            return False, "tensorflow is not installed (pip install 'dlbench[tensorflow]')"
        versions = self.distributions()
        if not versions:
            return True, "tensorflow (no distribution metadata, version unknown)"
        return True, ", ".join(f"{dist} {version}" for dist, version in versions.items())

    def modes(self) -> dict[str, str | None]:
        # eager: plain Python; graph: tf.function; compiled: tf.function(jit_compile=True).
        return {"eager": None, "graph": None, "compiled": None}

    def distributions(self) -> dict[str, str]:
        return installed_versions(DISTRIBUTIONS)

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        env = {
            "TF_CPP_MIN_LOG_LEVEL": "2",  # TF logs on stderr, which the parent keeps as a tail
            # `import tensorflow` imports JAX too (through tf.lite): keep it off any GPU.
            "JAX_PLATFORMS": "cpu",
            # TF maps nearly all of every visible GPU's memory at start-up unless memory growth
            # is on: with growth, NVML's numbers follow what TF actually uses.
            "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        }
        if policy.compile_cache == "warm":
            # XLA executables of jit_compile functions persist here across trials. A cold
            # trial keeps TF's default: an in-memory cache only, nothing read from disk.
            flags = os.environ.get("TF_XLA_FLAGS", "")
            env["TF_XLA_FLAGS"] = f"{flags} --tf_xla_persistent_cache_directory={cache_dir}".strip()
        return env

    def reference_environment(self) -> dict[str, str]:
        return {}  # float64 needs no switch

    def import_framework(self) -> None:
        importlib.import_module("tensorflow")

    def configure(self, policy: Policy) -> dict[str, Any]:
        import tensorflow as tf

        if policy.threads is not None:
            # Both pools sized to the pinned cores: what TF picks by itself for N schedulable
            # cores, set explicitly so that it is recorded. Must run before the first op.
            tf.config.threading.set_intra_op_parallelism_threads(policy.threads)
        asked = settings.value(policy, "inter_op_threads")  # the option wins over --threads
        inter_op = policy.threads if asked == "auto" else int(asked)
        if inter_op is not None:
            tf.config.threading.set_inter_op_parallelism_threads(inter_op)
        # "highest" means IEEE fp32: TF enables TF32 matmuls and convolutions on Ampere+ by
        # default, so it is switched off explicitly.
        tf.config.experimental.enable_tensor_float_32_execution(policy.matmul_precision == "tf32")
        gpus = tf.config.list_physical_devices("GPU")
        return {
            # 0 means "TF's own default" (one thread per schedulable core).
            "tf_intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "tf_inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "tf_tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
            "tf_visible_devices": [d.name for d in tf.config.get_visible_devices()],
            "tf_gpu_memory_growth": [tf.config.experimental.get_memory_growth(g) for g in gpus],
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
            "tf_onednn_enabled": _onednn_enabled(),
        }

    def device_kind(self) -> str:
        import tensorflow as tf

        # Physical, not logical: listing logical devices initialises them, and MirroredStrategy
        # must still be able to split the CPU into virtual devices afterwards.
        return "cuda" if tf.config.list_physical_devices("GPU") else "cpu"

    def build(self, trial: TrialSpec) -> Program:
        return build_program("dlbench.backends.tensorflow", trial)

    def forget_compiled(self) -> None:
        # Each Program traces tf.functions of its own: nothing compiled carries over to the next.
        return None

    def sync(self, *outputs: Any) -> None:
        import tensorflow as tf

        # TF has no public "wait for this tensor": fetching a value to the host is the sync
        # point that holds on every device (GPU kernels run asynchronously on ordered streams).
        # One element per tensor or variable is enough (its producer has finished) and keeps
        # the copy tiny; reading a variable waits for every update already queued on it.
        leaves = [x for x in tf.nest.flatten(outputs) if isinstance(x, (tf.Tensor, tf.Variable))]
        if not leaves:
            return
        if self._first_elements is None:
            # One traced call instead of ~3 eager ops per leaf: 0.7 ms instead of 12 ms for
            # the cnn's 26 state variables and losses. reduce_retracing: a shorter last chunk
            # generalises the losses' shape once instead of tracing per length.
            self._first_elements = tf.function(_first_elements, reduce_retracing=True)
        self._first_elements(leaves).numpy()

    def info(self) -> dict[str, Any]:
        import tensorflow as tf

        return {
            "version": tf.__version__,
            "devices": [d.name for d in tf.config.list_physical_devices()],
            "built_with_cuda": tf.test.is_built_with_cuda(),
            "build_info": dict(tf.sysconfig.get_build_info()),
            "onednn_enabled": _onednn_enabled(),
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        }

    def allocator_stats(self) -> dict[str, float]:
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU"):
            return {}
        memory = tf.config.experimental.get_memory_info("GPU:0")
        return {
            "tf_gpu_current_bytes": float(memory["current"]),
            "tf_gpu_peak_bytes": float(memory["peak"]),
            "allocated_peak_bytes": float(memory["peak"]),  # TF's "peak": live tensors' bytes
        }


def _first_elements(leaves: list[Any]) -> Any:
    """The first element of each tensor or variable (none of an empty one), as one vector."""
    import tensorflow as tf

    firsts = [tf.cast(tf.reshape(x, [-1])[:1], tf.float32) for x in leaves]
    return tf.concat(firsts, axis=0)


def _onednn_enabled() -> bool | None:
    """Whether oneDNN ops are on, as TF decided (CPU features and TF_ENABLE_ONEDNN_OPTS); only a
    private binding reports it, so None where that binding is gone."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())
