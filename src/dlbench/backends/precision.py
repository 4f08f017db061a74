"""Precisions as data: what each device can run, and the rules every backend shares. Imports no
framework. Each backend declares its own row (`Backend.precisions`), starting from `NATIVE`;
`backends.support.unsupported` consults it for the planner, the worker and the probe alike, and
`dlbench list` shows it.

Precisions (`--precision`):
- fp32: IEEE float32 everywhere; every reduced-precision switch is set off explicitly (torch's
  cuBLAS/cuDNN TF32 flags and float32 matmul precision "highest", TF's TF32 execution, JAX's
  default matmul precision "highest") and read back into the trial's policy.
- tf32: float32 storage, TF32 tensor-core matmuls and convolutions (NVIDIA Ampere and later).
- bf16: mixed precision: float32 parameters and optimizer state, bfloat16 compute (torch
  autocast, Keras "mixed_bfloat16", JAX/TF casting parameters and inputs in the model's apply).
- fp16: as bf16 with float16 compute and dynamic loss scaling (torch GradScaler, Keras
  LossScaleOptimizer).
- int8: int8 decoding (the generate scenario only): the matmul weights quantised to int8 the way
  each runtime quantises a model for CPU inference (torch's dynamic quantisation of nn.Linear,
  ONNX Runtime's quantize_dynamic, the TFLite converter's dynamic-range quantisation), float
  everything else. Judged by its agreement with the float decoder under a stated bound
  (analysis/generate.py: INT8_LOGITS_RTOL), not by the float32 one.

Devices are "cpu" and "cuda" (an NVIDIA GPU the framework runs on).
"""

from __future__ import annotations

from dlbench import scenarios
from dlbench.machine import bf16_on_cpu, fp16_on_cpu
from dlbench.spec import PRECISIONS, GenerateOptions

DEVICES = ("cpu", "cuda")

_TF32_CPU = "TF32 is an NVIDIA tensor-core format (Ampere and later); a CPU computes float32 matmuls in fp32"
_INT8 = ("no int8 decoding path: int8 (--precision int8, the generate scenario) runs where a runtime"
         " quantises a model's matmuls itself: torch, onnxruntime, litert")
_FP16_CPU = (f"fp16 training on a CPU is not run: it needs dynamic loss scaling, and this CPU's float16"
             f" arithmetic is {fp16_on_cpu()}; use bf16 (on this CPU {bf16_on_cpu()}) or a GPU")
# A framework's row: (device, precision) -> None when supported, else the reason.
Support = dict[tuple[str, str], str | None]

# What the hardware allows, before any framework's own gaps. bf16 on the CPU is supported: native
# with AVX512_BF16 or AMX, else emulated through float32 conversions, good for parity and tiny
# runs, never a speed claim (docs/methodology.md; machine.bf16_on_cpu says which, `dlbench list`
# and every bf16 trial's recorded precision show it).
NATIVE: Support = {
    ("cpu", "fp32"): None, ("cpu", "tf32"): _TF32_CPU, ("cpu", "bf16"): None, ("cpu", "fp16"): _FP16_CPU,
    ("cuda", "fp32"): None, ("cuda", "tf32"): None, ("cuda", "bf16"): None, ("cuda", "fp16"): None,
    ("cpu", "int8"): _INT8, ("cuda", "int8"): _INT8,
}
# int8 applies to generation only (the --scenario whose options are GenerateOptions, and the
# runner scenarios of its record's capability): quantised decoding is an inference runtime's
# setting, never a training precision.
INT8 = "int8"
INT8_SCENARIO = GenerateOptions.SCENARIO


def int8_refused(precision: str, capability: str) -> str | None:
    """Why `precision` cannot run in a runner scenario of `capability`: int8 anywhere but
    generation (one line naming what is allowed), else None."""
    if precision != INT8 or capability == scenarios.get(INT8_SCENARIO).capability:
        return None
    allowed = ", ".join(p for p in PRECISIONS if p != INT8)
    return (f"precision int8 is int8 decoding, for --scenario {INT8_SCENARIO} only (lm); in a {capability}"
            f" scenario the allowed precisions are {allowed}")


def scenario_of(precision: str) -> str:
    """The runner scenario that `dlbench list` asks a precision about: generation for int8,
    training for the others."""
    return INT8_SCENARIO if precision == INT8 else "train"


def fp32_only(reason: str) -> Support:
    """The row of a runtime that runs float32 graphs only."""
    return {**{k: reason for k in NATIVE}, ("cpu", "fp32"): None, ("cuda", "fp32"): None}


def unsupported(row: Support, device: str, precision: str, scenario: str = "train",
                reduced_precision: bool | None = None, capability: str | None = None) -> str | None:
    """None when a backend with precision row `row` runs `precision` on `device` in `scenario`,
    else the reason. Whether a reduced precision applies, and int8 (generation only), are the
    runner scenario's record's (dlbench/scenarios.py): `reduced_precision` and `capability`, or
    where not given those of the record named `scenario`."""
    if precision not in PRECISIONS:
        return f"precision {precision!r} is not one of: {', '.join(PRECISIONS)}"
    if reduced_precision is None or capability is None:
        record = scenarios.get(scenario)
        reduced_precision = record.reduced_precision if reduced_precision is None else reduced_precision
        capability = record.capability if capability is None else capability
    refused = int8_refused(precision, capability)
    if refused is not None:
        return refused
    if precision not in ("fp32", INT8) and not reduced_precision:
        training = ", ".join(n for n, r in scenarios.SCENARIOS.items() if r.reduced_precision)
        return f"the {scenario} scenario runs fp32 only (reduced precision covers training: {training})"
    return row.get((device, precision), f"unknown device {device!r}")


def parity_dtype(precision: str, dtype: str) -> str:
    """The dtype whose parity tolerance applies: the compute dtype of a reduced precision, else
    the workload's storage dtype (float32, or float64 for the reference)."""
    return {"tf32": "tf32", "bf16": "bfloat16", "fp16": "float16"}.get(precision, dtype)
