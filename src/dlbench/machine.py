"""The CPU this process runs on, from /proc/cpuinfo (ground floor: imports nothing of dlbench).

The instruction-set extensions decide which kernels a framework picks (oneDNN, XLA:CPU, Eigen,
MLAS), whether bfloat16 arithmetic is native or emulated, and so what float32 rounding and a
precision's speed amount to here: recorded with every run, every parity floor and every precision
reason.
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path

# The extensions that matter for numeric kernels: vector width, fused multiply-add, and the
# reduced-precision and matrix extensions (x86 flags; Arm's `Features`).
ISA_PREFIXES = ("avx", "fma", "f16c", "amx", "sse4", "neon", "asimd", "sve", "bf16", "fphp")
NATIVE_BF16 = ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16")
NATIVE_FP16 = ("avx512_fp16", "amx_fp16", "fphp", "asimdhp")


@functools.cache
def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_isa() -> list[str]:
    """The CPU's numeric instruction-set extensions (AVX2, AVX-512 and its BF16/VNNI parts, AMX,
    FMA, ...), sorted; empty where unreadable."""
    for line in _cpuinfo().splitlines():
        if line.startswith(("flags", "Features")):
            flags = line.split(":", 1)[1].split()
            return sorted({f for f in flags if f.startswith(ISA_PREFIXES)})
    return []


def _widest(isa: list[str]) -> str:
    for name, flag in (("AMX", "amx_tile"), ("AVX-512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx")):
        if flag in isa:
            return name
    return "no AVX" if isa else "unknown flags"


def bf16_on_cpu() -> str:
    """Whether bfloat16 arithmetic is native here (the flag that says so) or emulated through
    float32 conversions (good for parity and tiny runs, never a speed claim)."""
    isa = cpu_isa()
    native = [f for f in NATIVE_BF16 if f in isa]
    return f"native ({native[0]})" if native else f"emulated through float32 ({_widest(isa)}: no AVX512_BF16 or AMX)"


def fp16_on_cpu() -> str:
    """Whether this CPU has float16 arithmetic (AVX512_FP16, AMX-FP16) or converts only (F16C)."""
    isa = cpu_isa()
    native = [f for f in NATIVE_FP16 if f in isa]
    return f"native ({native[0]})" if native else f"conversions only ({_widest(isa)}: no AVX512_FP16 or AMX-FP16)"
