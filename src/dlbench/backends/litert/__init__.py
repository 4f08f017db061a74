"""LiteRT (TensorFlow Lite, the `ai-edge-litert` package): an inference backend for the
TensorFlow implementation of each workload, converted with the TFLite converter from the
canonical weights (so it computes the same model as every other framework) and run by LiteRT's
Interpreter on the CPU (its default XNNPACK delegate), threads from the policy. It converts from
TensorFlow (Capabilities.exports_from): every workload TensorFlow implements, a plugin's included,
through the one LiteRTProgram (program.py), with no module per workload; a model the converter
cannot express in builtin ops is unsupported with the converter's reason.

It cannot train: capabilities are infer only. Precision is float32; the option
`quantization=dynamic-int8` serves the converter's dynamic-range quantisation instead (int8
weights, float activations), judged by its held-out accuracy against the float32 conversion
rather than by the float32 parity tolerance (program.py). Importing this module is light:
tensorflow and ai_edge_litert load in the worker only.
"""

from __future__ import annotations

import typing
from typing import Any

from dlbench.backends.base import (
    Capabilities,
    CostGuess,
    Sampler,
    SingleDevice,
    Unsupported,
    installed_versions,
    module_installed,
)
from dlbench.backends.litert.settings import EXPORTS_FROM, OPTIONS, quantization, threads
from dlbench.backends.precision import Support, fp32_only
from dlbench.spec import Policy, TrialSpec

_NEEDED = ("ai_edge_litert", "tensorflow")
_DISTRIBUTIONS = ("ai-edge-litert", "tensorflow", "tensorflow-cpu")
_MODES: dict[str, str | None] = {
    "compiled": None,  # a converted flatbuffer, run by the Interpreter with its XNNPACK delegate
    "eager": "LiteRT runs a converted model; it has no eager mode",
    "graph": "LiteRT's one mode is its converted model: use compiled",
}
RECORDED_ENVIRONMENT = ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL")


@typing.final
class LiteRTBackend:
    name = "litert"
    capabilities = Capabilities(frozenset({"infer", "generate"}), grads=False, exports_from=EXPORTS_FROM)
    data_parallel = SingleDevice("litert runs inference only: no data-parallel training")
    # int8 decoding (the generate scenario): the converter's dynamic-range quantisation (generate.py);
    # the infer scenario's int8 is the quantization option, judged by held-out accuracy.
    precisions: Support = {**fp32_only("LiteRT runs the converted float32 model (infer's int8: --option"
                                       " litert.quantization=dynamic-int8)"), ("cpu", "int8"): None}
    options = OPTIONS
    recorded_environment: tuple[str, ...] = RECORDED_ENVIRONMENT
    # TensorFlow's import and the conversion (docs/benchmarks.md, tiny zoo under LoadGen)
    cost_guess = CostGuess(startup_s=8.0, compile_s=1.0)
    kernel_alternatives: dict[str, dict[str, str]] = {}
    allocator_units: dict[str, str] = {}

    def available(self) -> tuple[bool, str]:
        missing = [m for m in _NEEDED if not module_installed(m)]
        if missing:
            return False, f"{', '.join(missing)} not installed (pip install 'dlbench[litert]')"
        return True, ", ".join(f"{k} {v}" for k, v in installed_versions(_DISTRIBUTIONS).items())

    def modes(self) -> dict[str, str | None]:
        return dict(_MODES)

    def distributions(self) -> dict[str, str]:
        return installed_versions(_DISTRIBUTIONS)

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        return {}  # converted in every trial: nothing cached

    def reference_environment(self) -> dict[str, str]:
        return {}  # float32 only: build refuses float64

    def import_framework(self) -> None:
        import tensorflow  # noqa: F401  (the converter)
        from ai_edge_litert import interpreter  # noqa: F401

    def configure(self, policy: Policy) -> dict[str, Any]:
        return {
            "litert_num_threads": threads(policy),
            "litert_quantization": quantization(policy),
            # The Interpreter's default on the CPU: XNNPACK for the float32 and dynamic-range ops.
            "litert_delegate": "XNNPACK (default)",
            "converter": "tf.lite.TFLiteConverter.from_concrete_functions, builtin ops only",
        }

    def device_kind(self) -> str:
        return "cpu"

    def build(self, trial: TrialSpec) -> Sampler:
        if trial.workload.numerics.dtype != "float32":
            raise Unsupported(f"litert runs float32 only, not {trial.workload.numerics.dtype!r}"
                              " (the float64 parity reference comes from the native frameworks)")
        from dlbench.backends.litert import program

        return program.build(trial)

    def forget_compiled(self) -> None:
        return None  # each Program converts and opens interpreters of its own

    def sync(self, *outputs: Any) -> None:
        # Interpreter.invoke runs to the end and get_tensor copies the logits to NumPy.
        return None

    def info(self) -> dict[str, Any]:
        from dlbench.backends.litert import program

        return {
            "versions": installed_versions(_DISTRIBUTIONS),
            # What the last build did: bytes of each model, conversion seconds, the check of its
            # float32 logits against TensorFlow's.
            "conversions": list(program.CONVERSIONS),
        }

    def allocator_stats(self) -> dict[str, float]:
        return {}
