"""Keras 3 as three frameworks: keras-jax, keras-torch and keras-tensorflow.

One model definition per workload (backends/keras/<workload>.py, keras.layers and keras.ops
only) and one Program (program.py) serve all three; `KERAS_BACKEND`, set by environment()
before the import, picks the framework underneath. Each Backend composes the native
framework's Backend for what belongs to that framework (threads, matmul precision, device sync,
allocator counters, compile caches) and adds Keras's own part; the three share plain functions.

The parent imports this module to list and plan, so Keras (and its framework) is imported only
inside the methods the worker calls.
"""

from __future__ import annotations

import abc
import importlib
import os
import typing
from typing import Any

from dlbench.backends.base import (
    CostGuess,
    Backend,
    Capabilities,
    Option,
    Program,
    SingleDevice,
    Unsupported,
    build_program,
    installed_versions,
    module_installed,
)
from dlbench.backends.jax import JaxBackend
from dlbench.backends.precision import NATIVE, Support
from dlbench.backends.tensorflow import DISTRIBUTIONS as TF_DISTRIBUTIONS
from dlbench.backends.tensorflow import TensorFlowBackend
from dlbench.backends.torch import TorchBackend, cxx_compiler
from dlbench.spec import Policy, TrialSpec

PACKAGE = "dlbench.backends.keras"
# PPO (workloads/ppo.py) is a loop of rollouts and updates written in a framework's own ops.
PPO_REASON = ("Keras has no rollout API and its fit loop cannot express PPO's interleaved rollouts and"
              " updates (a Keras PPO would be the jax, torch or tensorflow loop again)")
CAPABILITIES = Capabilities(frozenset({"train", "infer", "generate"}), declined=(("ppo", PPO_REASON),))
# Keras 3's own data parallelism (keras.distribution.DataParallel) exists for the JAX backend
# only, and a Keras-on-TF MirroredStrategy or Keras-on-torch DDP would be the native backends'
# code again; none is wired up here.
DATA_PARALLEL = SingleDevice("the Keras backends train on one device: data parallelism is measured with the"
                             " native torch, tensorflow and jax backends")


def keras_available(keras_backend: str, modules: tuple[str, ...], distributions: tuple[str, ...]) -> tuple[bool, str]:
    """Keras and the framework underneath (only its modules: keras-jax needs no optax)."""
    missing = [m for m in ("keras", *modules) if not module_installed(m)]
    if missing:
        return False, f"{', '.join(missing)} not installed (pip install 'dlbench[keras-{keras_backend}]')"
    versions = installed_versions(("keras", *distributions))
    return True, ", ".join(f"{k} {v}" for k, v in versions.items())


def keras_environment(keras_backend: str, native_env: dict[str, str], cache_dir: str) -> dict[str, str]:
    return {
        **native_env,
        "KERAS_BACKEND": keras_backend,
        # Keras reads floatx, epsilon and image_data_format from $KERAS_HOME/keras.json: a
        # per-trial directory keeps a user's file (channels_first, float16) out of the trial.
        "KERAS_HOME": os.path.join(cache_dir, "keras"),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # Should Keras load TensorFlow for a utility, it must not map the whole GPU.
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
    }


def keras_import(keras_backend: str) -> None:
    keras = importlib.import_module("keras")
    loaded = keras.backend.backend()
    if loaded != keras_backend:
        raise RuntimeError(f"Keras loaded its {loaded!r} backend, not {keras_backend!r}: "
                           "KERAS_BACKEND must be set before keras is first imported")


def keras_configure(native: Backend, policy: Policy, steps_per_execution: str) -> dict[str, Any]:
    import keras

    return {
        **native.configure(policy),
        "keras_backend": keras.backend.backend(),
        "keras_floatx": keras.config.floatx(),
        "keras_dtype_policy": keras.config.dtype_policy().name,
        "keras_image_data_format": keras.config.image_data_format(),
        "keras_run_eagerly": policy.mode == "eager",
        "keras_jit_compile": policy.mode == "compiled",
        "keras_steps_per_execution": steps_per_execution,
    }


def keras_build(name: str, trial: TrialSpec) -> Program:
    if trial.workload.numerics.dtype != "float32":
        raise Unsupported(f"{name} runs float32 only, not {trial.workload.numerics.dtype!r}"
                          " (the float64 parity reference comes from the native frameworks)")
    return build_program(PACKAGE, trial)


def keras_sync(native: Backend, outputs: tuple[Any, ...]) -> None:
    """The native sync over the model's variable values (and any other outputs)."""
    from dlbench.backends.keras.program import State

    values: list[Any] = []
    for out in outputs:
        if isinstance(out, State):
            values.extend(v.value for v in out.model.variables)
        else:
            values.append(out)
    native.sync(*values)


def keras_info(native: Backend) -> dict[str, Any]:
    import keras

    return {**native.info(), "keras_version": keras.__version__, "keras_backend": keras.backend.backend()}


class _Keras(abc.ABC):
    """What the three Keras frameworks share: Keras's own part around the native Backend
    (`_native`); each subclass says which framework, what it can run and its environment."""

    name: str
    capabilities = CAPABILITIES
    data_parallel = DATA_PARALLEL
    precisions: Support = {**NATIVE, **dict.fromkeys((("cpu", "int8"), ("cuda", "int8")), (
        "not wired here: Keras 3's Model.quantize('int8') (int8 Dense kernels, inputs quantised per call)"
        " would be its path, and dlbench's Keras decoder does not call it yet"))}
    options: dict[str, Option] = {}
    cost_guess: CostGuess
    _native: Backend
    _keras_backend: str
    # Keras's torch trainer refuses steps_per_execution > 1; the others run a whole chunk.
    _steps_per_execution = "chunk steps"

    @abc.abstractmethod
    def modes(self) -> dict[str, str | None]:
        """Each mode of this Keras backend: None where it runs, else why not."""

    @property
    def recorded_environment(self) -> tuple[str, ...]:
        return (*self._native.recorded_environment, "KERAS_BACKEND", "KERAS_HOME")

    @property
    def allocator_units(self) -> dict[str, str]:
        return self._native.allocator_units

    @property
    def kernel_alternatives(self) -> dict[str, dict[str, str]]:
        return self._native.kernel_alternatives

    def distributions(self) -> dict[str, str]:
        return {**installed_versions(("keras",)), **self._native.distributions()}

    def reference_environment(self) -> dict[str, str]:
        return {}  # float32 only: build refuses float64

    def import_framework(self) -> None:
        keras_import(self._keras_backend)

    def configure(self, policy: Policy) -> dict[str, Any]:
        return keras_configure(self._native, policy, self._steps_per_execution)

    def device_kind(self) -> str:
        return self._native.device_kind()

    def build(self, trial: TrialSpec) -> Program:
        return keras_build(self.name, trial)

    def forget_compiled(self) -> None:
        # Keras compiles through the native framework (its train step is one code object for
        # every model on torch, as the torch backend's is).
        self._native.forget_compiled()

    def sync(self, *outputs: Any) -> None:
        keras_sync(self._native, outputs)

    def info(self) -> dict[str, Any]:
        return keras_info(self._native)

    def allocator_stats(self) -> dict[str, float]:
        return self._native.allocator_stats()


@typing.final
class KerasJax(_Keras):
    name = "keras-jax"
    _keras_backend = "jax"
    # fitted to a quiet whole-zoo tiny run, AMD EPYC 2 cores (docs/benchmarks.md)
    cost_guess = CostGuess(startup_s=3.5, compile_s=2.5)

    def __init__(self) -> None:
        self._native = JaxBackend()

    def available(self) -> tuple[bool, str]:
        return keras_available("jax", ("jax", "jaxlib"), ("jax", "jaxlib"))

    def modes(self) -> dict[str, str | None]:
        return {
            "eager": None,  # run_eagerly=True: the train step op by op
            "graph": "Keras on JAX has no graph mode: without jit_compile it runs op by op (eager)",
            "compiled": None,  # jit_compile=True: the train step under jax.jit
        }

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        # Keras on JAX imports neither TensorFlow nor torch (checked in sys.modules), so nothing
        # else can take the device.
        return keras_environment("jax", self._native.environment(policy, cache_dir), cache_dir)


@typing.final
class KerasTorch(_Keras):
    name = "keras-torch"
    _keras_backend = "torch"
    _steps_per_execution = "1"
    # fitted to a quiet whole-zoo tiny run, AMD EPYC 2 cores (docs/benchmarks.md)
    cost_guess = CostGuess(startup_s=30.0, compile_s=30.0)

    def __init__(self) -> None:
        self._native = TorchBackend()

    def available(self) -> tuple[bool, str]:
        return keras_available("torch", ("torch",), ("torch",))

    def modes(self) -> dict[str, str | None]:
        compiled = None if cxx_compiler() else "needs a C++ compiler for torch.compile's Inductor on CPU"
        return {
            "eager": None,  # run_eagerly=True (without jit_compile, torch runs eagerly anyway)
            "graph": "torch has no graph mode; Keras on torch without jit_compile is eager",
            # jit_compile=True: Keras wraps its train step in torch.compile (defaults: Inductor).
            # Dynamo breaks the graph at backward() and recompiles once at the second step (the
            # parameters' .grad go from None to tensors), inside the worker's warm-up.
            "compiled": compiled,
        }

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        # Keras imports JAX whenever it is installed: keep it off any GPU.
        env = keras_environment("torch", self._native.environment(policy, cache_dir), cache_dir)
        return {**env, "JAX_PLATFORMS": "cpu"}


@typing.final
class KerasTensorFlow(_Keras):
    name = "keras-tensorflow"
    _keras_backend = "tensorflow"
    # fitted to a quiet whole-zoo tiny run, AMD EPYC 2 cores (docs/benchmarks.md)
    cost_guess = CostGuess(startup_s=6.0, compile_s=4.0)

    def __init__(self) -> None:
        self._native = TensorFlowBackend()

    def available(self) -> tuple[bool, str]:
        return keras_available("tensorflow", ("tensorflow",), TF_DISTRIBUTIONS)

    def modes(self) -> dict[str, str | None]:
        # run_eagerly=True / jit_compile=False (tf.function) / jit_compile=True (XLA).
        return {"eager": None, "graph": None, "compiled": None}

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        # TensorFlow's own environment already keeps JAX (which it imports) off any GPU.
        return keras_environment("tensorflow", self._native.environment(policy, cache_dir), cache_dir)
