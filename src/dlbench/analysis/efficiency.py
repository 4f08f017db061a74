"""Achieved FLOP/s against what the machine can do (DESIGN §4).

- `mfu`: achieved / dense peak of the exact accelerator model for the trial's precision, from
  PEAKS (vendor datasheets, cited). Unknown devices get null with the reason: a guessed peak
  would make the share meaningless.
- CPUs have no trustworthy datasheet peak (turbo, AVX frequency offsets), so
  `matmul_ceiling_share` divides by a *measured* ceiling: the best float32 GEMM rate of NumPy's
  BLAS on this machine with the trial's thread count (runner/ceiling.py measures it once and
  caches it, recording library and threads).
"""

from __future__ import annotations

from dataclasses import dataclass

TFLOPS = 1e12


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    source: str


_H100_SXM = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet (H100 SXM5, dense)"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM, dense = half the sparse figures)"
_A100 = "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf (A100 SXM, dense)"
_L4 = "https://www.nvidia.com/en-us/data-center/l4/ (L4, dense = half the sparse figures)"

# Exact NVML device names -> precision -> dense peak. fp32 is the CUDA-core rate (no TF32).
PEAKS: dict[str, dict[str, Peak]] = {
    "NVIDIA H100 80GB HBM3": {
        "fp32": Peak(67 * TFLOPS, _H100_SXM), "tf32": Peak(494.7 * TFLOPS, _H100_SXM),
        "bf16": Peak(989.4 * TFLOPS, _H100_SXM), "fp16": Peak(989.4 * TFLOPS, _H100_SXM),
    },
    "NVIDIA H200": {
        "fp32": Peak(67 * TFLOPS, _H200), "tf32": Peak(494.7 * TFLOPS, _H200),
        "bf16": Peak(989.4 * TFLOPS, _H200), "fp16": Peak(989.4 * TFLOPS, _H200),
    },
    "NVIDIA A100-SXM4-80GB": {
        "fp32": Peak(19.5 * TFLOPS, _A100), "tf32": Peak(156 * TFLOPS, _A100),
        "bf16": Peak(312 * TFLOPS, _A100), "fp16": Peak(312 * TFLOPS, _A100),
    },
    "NVIDIA A100-SXM4-40GB": {
        "fp32": Peak(19.5 * TFLOPS, _A100), "tf32": Peak(156 * TFLOPS, _A100),
        "bf16": Peak(312 * TFLOPS, _A100), "fp16": Peak(312 * TFLOPS, _A100),
    },
    "NVIDIA L4": {
        "fp32": Peak(30.3 * TFLOPS, _L4), "tf32": Peak(60 * TFLOPS, _L4),
        "bf16": Peak(121 * TFLOPS, _L4), "fp16": Peak(121 * TFLOPS, _L4),
    },
}


def peak(device_name: str, precision: str) -> tuple[Peak | None, str]:
    """(peak, '') or (None, why not)."""
    table = PEAKS.get(device_name)
    if table is None:
        return None, f"no dense peak on record for {device_name!r} (analysis/efficiency.py PEAKS)"
    p = table.get(precision)
    if p is None:
        return None, f"no {precision} peak on record for {device_name!r}"
    return p, ""


# nvidia-smi's utilisation is the share of time some kernel ran, not how busy the SMs were: a
# GPU reads 100 % while one small kernel at a time keeps 5 % of it busy. A trial above this
# utilisation and below this MFU gets a warning.
BUSY_UTILIZATION = 0.8
LOW_MFU = 0.3


def busy_but_idle(utilization: float | None, mfu_value: float | None) -> str | None:
    """The warning for a GPU that NVML calls busy while the model uses little of it; None when
    either is unknown or the pair is not suspicious."""
    if utilization is None or mfu_value is None or utilization <= BUSY_UTILIZATION or mfu_value >= LOW_MFU:
        return None
    return (f"GPU utilisation {utilization:.0%} but MFU {mfu_value:.1%}: NVML counts time with any kernel"
            f" running (> {BUSY_UTILIZATION:.0%}), MFU the share of peak FLOP/s used (< {LOW_MFU:.0%}):"
            " the GPU is mostly waiting on launches, memory or small kernels")


def mfu(achieved_flops_per_s: float, devices: list[str], precision: str) -> tuple[float | None, str]:
    """Model FLOP utilisation over the trial's accelerators; (None, reason) on CPUs and unknown
    devices."""
    if not devices:
        return None, "no accelerator: on CPUs see matmul_ceiling_share"
    total = 0.0
    for name in devices:
        p, why = peak(name, precision)
        if p is None:
            return None, why
        total += p.flops_per_s
    return achieved_flops_per_s / total, ""
