"""The CPU matmul ceiling: the best float32 GEMM rate NumPy's BLAS reaches here, per thread count.

Measured once per machine, BLAS library and thread count (cached under DLBENCH_CACHE_DIR), in a
child process because BLAS sizes its thread pool from environment variables read at import.
`python -m dlbench.runner.ceiling THREADS OUT` writes the measurement to OUT as JSON.

A ceiling is a best case: other work on the machine only lowers it, never raises it. One measured
while the machine was busy (the 1-minute load average above QUIET_LOAD_PER_CPU per CPU; found on
2026-11-28: a ceiling cached at load 10-16 read 44.5 GFLOP/s where the quiet machine gives
320-347, so the lm's torch trials showed 456 % "of the ceiling") is kept but not final: the first
call on a quiet machine measures again, and the cache keeps the higher of the two. Each measurement records the load it was taken at (`load_1min`, `busy`).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dlbench.runner import best_cache, children
from dlbench.runner.reference import cache_root

SIZE = 2048  # large enough to reach the BLAS plateau on CPUs, ~0.3 s per product on 2 cores
REPEATS = 5
TIMEOUT_S = 300.0
# A measurement taken at a 1-minute load average above this per CPU of the machine is `busy`.
QUIET_LOAD_PER_CPU = 0.5


def measure(threads: int) -> dict[str, Any]:
    """Best of REPEATS products of two SIZE x SIZE float32 matrices (2 n^3 FLOPs each)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    b = rng.standard_normal((SIZE, SIZE), dtype=np.float32)
    a @ b  # warm: thread pool start, page faults
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return {
        "flops_per_s": 2 * SIZE**3 / best, "threads": threads, "size": SIZE, "dtype": "float32",
        "library": _blas_name(np), "numpy": np.__version__, "cpu_model": _cpu_model(),
        "measured_at": time.time(),
    }


def _blas_name(np: Any) -> str:
    try:
        info = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{info.get('name')} {info.get('version')}"
    except Exception:  # numpy < 1.26 has no dict form; the name is then unknown
        return "unknown"


def _cpu_model() -> str:
    from dlbench.results.environment import cpu_model

    return cpu_model()


def _cache_file(threads: int) -> Path:
    import numpy as np

    return cache_root().parent / "matmul-ceiling" / f"{platform.node()}-{np.__version__}-{threads}.json"


def load_1min() -> float:
    return os.getloadavg()[0]


def busy(load: float, cpus: int | None = None) -> bool:
    """Whether a 1-minute load average of `load` makes a ceiling measurement not final."""
    return load > QUIET_LOAD_PER_CPU * (cpus or os.cpu_count() or 1)


def _final(data: dict[str, Any], load_now: float) -> bool:
    """A cached measurement stands unless it was taken on a busy machine (or at an unknown
    load, as caches before this rule were) and the machine is quiet now (a busy machine that is
    merely less busy would measure again at every run)."""
    return data.get("load_1min") is not None and (not data.get("busy") or busy(load_now))


def needs_measuring(threads: int) -> bool:
    """Whether ceiling(threads) would measure: none cached for this CPU, or the cached one was
    taken on a busy machine and this one is quiet now."""
    cached, _ = ceiling(threads, measure_if_missing=False)
    return cached is None or not _final(cached, load_1min())


def describe(data: dict[str, Any]) -> str:
    """How a ceiling was measured, for a trial's notes."""
    text = f"{data['library']}, {data['threads']} thread(s), {data['size']}^2 float32 GEMM"
    if data.get("busy"):
        text += f", measured at load {data['load_1min']:.1f} (a busy machine: the true ceiling is higher)"
    return text


def ceiling(threads: int, measure_if_missing: bool = True) -> tuple[dict[str, Any] | None, str]:
    """(the cached or newly measured ceiling, '') or (None, why). A cached one taken on a busy
    machine is measured again once the machine is quiet (module docstring)."""
    path = _cache_file(threads)
    cached: dict[str, Any] | None = None
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        if data.get("cpu_model") == _cpu_model():
            cached = data
    return best_cache.refresh(path, cached, lambda c: _final(c, load_1min()), lambda: _measure_in_child(threads),
                              _merge, measure_if_missing)


def _merge(cached: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """The higher ceiling; a lower fresh one leaves the cached, with the quieter load and final
    once either was taken on a quiet machine."""
    if fresh["flops_per_s"] >= cached["flops_per_s"]:
        return fresh
    return {**cached, "load_1min": min(fresh["load_1min"], cached.get("load_1min", fresh["load_1min"])),
            "busy": fresh["busy"] and bool(cached.get("busy", True))}


def _measure_in_child(threads: int) -> tuple[dict[str, Any] | None, str]:
    """A new measurement with `threads` threads (pinned like a trial), with the load it was
    taken at; (None, why) when the child failed."""
    load_before = load_1min()
    env = {v: str(threads) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    cores = sorted(os.sched_getaffinity(0))[:threads]
    with tempfile.TemporaryDirectory(prefix="dlbench-ceiling-") as tmp:
        out = Path(tmp) / "ceiling.json"
        # Pinned like a trial with this many threads, before BLAS starts its pool.
        child, watched = children.run_child("dlbench.runner.ceiling", [str(threads), str(out)],
                                            Path(tmp) / "ceiling.log", TIMEOUT_S, env=env, cpus=cores)
        why = children.why_not_ok(child, watched, TIMEOUT_S)
        try:
            data = json.loads(out.read_text())
        except (OSError, ValueError) as e:
            return None, f"matmul ceiling measurement failed: the child {why or e}"
    # The busier of before and after (the measurement's own threads raise the after value only
    # a little: the 1-minute average moves slowly over ~2 s of GEMMs).
    data["load_1min"] = max(load_before, load_1min())
    data["busy"] = busy(load_before)
    return data, ""


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(measure(int(sys.argv[1]))))
