"""The CPU matmul ceiling: the best float32 GEMM rate NumPy's BLAS reaches here, per thread count.

Measured once per machine, BLAS library and thread count (cached under DLBENCH_CACHE_DIR), in a
child process because BLAS sizes its thread pool from environment variables read at import.
`python -m dlbench.runner.ceiling THREADS OUT` writes the measurement to OUT as JSON.
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

from dlbench.runner import children
from dlbench.runner.reference import cache_root

SIZE = 2048  # large enough to reach the BLAS plateau on CPUs, ~0.3 s per product on 2 cores
REPEATS = 5
TIMEOUT_S = 300.0


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


def ceiling(threads: int, measure_if_missing: bool = True) -> tuple[dict[str, Any] | None, str]:
    """(the cached or newly measured ceiling, '') or (None, why)."""
    path = _cache_file(threads)
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        if data.get("cpu_model") == _cpu_model():
            return data, ""
    if not measure_if_missing:
        return None, "not measured yet on this machine (dlbench env measures it)"
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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return data, ""


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(measure(int(sys.argv[1]))))
