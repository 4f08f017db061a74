"""Which precision each framework runs on which device, as data (the one table; `dlbench list`
shows it, the planner and every Program consult it). Imports no framework.

Precisions (`--precision`):
- fp32: IEEE float32 everywhere; every reduced-precision switch is set off explicitly (torch's
  cuBLAS/cuDNN TF32 flags and float32 matmul precision "highest", TF's TF32 execution, JAX's
  default matmul precision "highest") and read back into the trial's policy.
- tf32: float32 storage, TF32 tensor-core matmuls and convolutions (NVIDIA Ampere and later).
- bf16: mixed precision: float32 parameters and optimizer state, bfloat16 compute (torch
  autocast, Keras "mixed_bfloat16", JAX/TF casting parameters and inputs in the model's apply).
- fp16: as bf16 with float16 compute and dynamic loss scaling (torch GradScaler, Keras
  LossScaleOptimizer).

Devices are "cpu" and "cuda" (an NVIDIA GPU the framework runs on).
"""

from __future__ import annotations

from dlbench.spec import PRECISIONS_SUPPORTED as PRECISIONS
DEVICES = ("cpu", "cuda")

_TF32_CPU = "TF32 is an NVIDIA tensor-core format (Ampere and later); a CPU computes float32 matmuls in fp32"
_FP16_CPU = ("fp16 training needs dynamic loss scaling and fp16 kernels that this CPU lacks"
             " (AVX2: emulated, no speed to measure); use bf16 or a GPU")
# A framework's row: (device, precision) -> None when supported, else the reason.
Support = dict[tuple[str, str], str | None]

# bf16 on the CPU is supported: on an AVX2 CPU (no AVX512_BF16/AMX) it is emulated through float32
# conversions, good for parity and tiny runs, never a speed claim (docs/methodology.md).
_NATIVE: Support = {
    ("cpu", "fp32"): None, ("cpu", "tf32"): _TF32_CPU, ("cpu", "bf16"): None, ("cpu", "fp16"): _FP16_CPU,
    ("cuda", "fp32"): None, ("cuda", "tf32"): None, ("cuda", "bf16"): None, ("cuda", "fp16"): None,
}

# framework -> (device, precision) -> None or the reason it is not run.
TABLE: dict[str, Support] = {
    "torch": dict(_NATIVE),
    "jax": {**_NATIVE, ("cuda", "fp16"): (
        "JAX has no built-in dynamic loss scaling (it lives in the separate jmp library) and fp16"
        " without it underflows gradients; use bf16")},
    "tensorflow": {**_NATIVE, ("cuda", "fp16"): (
        "TensorFlow's loss scaler is Keras's LossScaleOptimizer; the raw-TF backend has none (run"
        " keras-tensorflow for fp16)")},
    "keras-jax": dict(_NATIVE),
    "keras-torch": dict(_NATIVE),
    "keras-tensorflow": dict(_NATIVE),
    "onnxruntime": {**{k: "ONNX Runtime runs the exported float32 graph only" for k in _NATIVE},
                    ("cpu", "fp32"): None, ("cuda", "fp32"): None},
}

# Scenarios that honour a reduced precision: inference runs the float32 graph of every framework.
REDUCED_PRECISION_SCENARIOS = ("train", "converge")


def unsupported(framework: str, device: str, precision: str, scenario: str = "train") -> str | None:
    """None when `framework` runs `precision` on `device` in `scenario`, else the reason."""
    if precision not in PRECISIONS:
        return f"precision {precision!r} is not one of: {', '.join(PRECISIONS)}"
    if precision != "fp32" and scenario not in REDUCED_PRECISION_SCENARIOS:
        return f"the {scenario} scenario runs fp32 only (reduced precision covers training: train, converge)"
    row = TABLE.get(framework)
    if row is None:
        return None if precision == "fp32" else f"no precision policy on record for {framework!r} (precision.py)"
    return row.get((device, precision), f"unknown device {device!r}")


def parity_dtype(precision: str, dtype: str) -> str:
    """The dtype whose parity tolerance applies: the compute dtype of a reduced precision, else
    the workload's storage dtype (float32, or float64 for the reference)."""
    return {"tf32": "tf32", "bf16": "bfloat16", "fp16": "float16"}.get(precision, dtype)
