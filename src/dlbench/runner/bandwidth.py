"""The machine's memory bandwidth, per thread count: STREAM-style kernels in NumPy, measured the
way the matmul ceiling is (runner/ceiling.py): in a child process pinned like a trial with that
many threads, once per machine and thread count, cached under DLBENCH_CACHE_DIR.
`python -m dlbench.runner.bandwidth THREADS OUT [ARRAY_BYTES]` writes the measurement to OUT.

Two kernels over float64 arrays of ARRAY_BYTES each (LLC_FACTOR x the last-level cache, as STREAM
asks, at least MIN_ARRAY_BYTES), each thread on its own contiguous slice (NumPy releases the GIL
inside large elementwise operations and reductions, so T threads stream T slices at once):

- `read`: a sum over one array (np.add.reduce per slice): every byte read once, nothing written.
  A decode step is this pattern: it streams every weight (and the KV cache) once and writes little.
- `triad`: a = b + s x c (STREAM's triad), blocked so that the two NumPy operations of a block
  meet in the cache and memory sees each array once. Counted as STREAM counts it: 3 x 8 bytes an
  element, the write-allocate read of `a` NOT counted (the real traffic is 4/3 of that).

Each kernel's rate is the best of REPEATS passes (STREAM reports the best too). The bandwidth a
bound divides by (`bytes_per_s`) is the higher of the two: a floor of the time a step takes must
use the fastest rate the machine has shown, or the floor is not one.

A bandwidth is a best case: other work on the machine only lowers it. The child measures the
share of the machine other processes took while it ran (monitors/interference.py); above
BUSY_FOREIGN_SHARE (or where /proc cannot tell) the measurement is `busy`: kept, but not final:
the next call on a quiet machine measures again, and the cache keeps the higher of the two.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import paths
from dlbench.analysis.interference import BUSY_FOREIGN_SHARE
from dlbench.machine import cpu_model
from dlbench.monitors import interference
from dlbench.runner import best_cache, children

LLC_FACTOR = 4  # STREAM's rule: each array at least 4 x the sum of the last-level caches
MIN_ARRAY_BYTES = 64 * 2**20
MAX_ARRAY_BYTES = 2**30
REPEATS = 10
# Elements of one triad block: 128 KiB of each array, so a block's b, c and a stay in L2
# between its multiply and its add.
BLOCK = 16384
TRIAD_SCALAR = 3.0
TIMEOUT_S = 300.0
# How long the parent watches the machine before it measures again over a busy cached value.
QUIET_SAMPLE_S = 1.0
METHOD = ("STREAM-style NumPy kernels on float64 arrays, one contiguous slice per thread, best of"
          f" {REPEATS} passes: read = a sum over one array (8 B an element), triad = a = b + s c (24 B an"
          " element: the write-allocate read of a is not counted, as STREAM does); bytes_per_s = the higher")


def last_level_cache_bytes(root: Path = Path("/sys/devices/system/cpu")) -> int | None:
    """The sum of the last-level caches' sizes over their distinct instances (sysfs), or None."""
    found: dict[tuple[int, str], int] = {}
    for index in root.glob("cpu[0-9]*/cache/index[0-9]*"):
        try:
            level = int((index / "level").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
            size = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        found[(level, shared)] = int(size.rstrip("KMG")) * units.get(size[-1:], 1)
    if not found:
        return None
    top = max(level for level, _ in found)
    return sum(size for (level, _), size in found.items() if level == top)


def default_array_bytes() -> int:
    """Each kernel array's size: LLC_FACTOR x the last-level cache, within [MIN, MAX]."""
    llc = last_level_cache_bytes() or 0
    return min(MAX_ARRAY_BYTES, max(MIN_ARRAY_BYTES, LLC_FACTOR * llc))


def _slices(n: int, parts: int) -> list[slice]:
    return [slice(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def read(pool: ThreadPoolExecutor, x: np.ndarray, slices: list[slice]) -> float:
    """Every element of `x` read once (a sum per slice, each slice on a thread); their total."""
    return float(sum(pool.map(lambda s: np.add.reduce(x[s]), slices)))


def triad(pool: ThreadPoolExecutor, a: np.ndarray, b: np.ndarray, c: np.ndarray, scalar: float,
          slices: list[slice]) -> None:
    """a = b + scalar c, each slice on a thread, in blocks of BLOCK elements."""

    def one(s: slice) -> None:
        for i in range(s.start, s.stop, BLOCK):
            j = min(i + BLOCK, s.stop)
            np.multiply(c[i:j], scalar, out=a[i:j])
            np.add(a[i:j], b[i:j], out=a[i:j])

    list(pool.map(one, slices))


def _best_s(run: Callable[[], object], repeats: int) -> float:
    run()  # warm: the threads start, the pages are touched
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(threads: int, array_bytes: int | None = None, repeats: int = REPEATS) -> dict[str, Any]:
    """Both kernels with `threads` threads on arrays of `array_bytes` (default_array_bytes), and
    the share of the machine other processes took meanwhile."""
    size = array_bytes or default_array_bytes()
    n = max(size // 8, threads)
    a, b, c = np.zeros(n), np.full(n, 1.0), np.full(n, 2.0)  # written: every page is mapped
    slices = _slices(n, threads)
    before, own_before = interference.cpu_times(), interference.process_cpu_s([os.getpid()])
    with ThreadPoolExecutor(threads) as pool:
        read_s = _best_s(lambda: read(pool, b, slices), repeats)
        triad_s = _best_s(lambda: triad(pool, a, b, c, TRIAD_SCALAR, slices), repeats)
    after, own_after = interference.cpu_times(), interference.process_cpu_s([os.getpid()])
    foreign = (None if before is None or after is None
               else interference.foreign_share(before, after, own_after - own_before))
    rates = {"read": 8 * n / read_s, "triad": 24 * n / triad_s}
    kernel = max(rates, key=lambda k: rates[k])
    return {
        "bytes_per_s": rates[kernel], "kernel": kernel, "read_bytes_per_s": rates["read"],
        "triad_bytes_per_s": rates["triad"], "write_allocate_counted": False, "threads": threads,
        "array_bytes": 8 * n, "llc_bytes": last_level_cache_bytes(), "repeats": repeats, "method": METHOD,
        "numpy": np.__version__, "cpu_model": cpu_model(), "measured_at": time.time(),
        "foreign_cpu_share": foreign, "busy": foreign is None or foreign > BUSY_FOREIGN_SHARE,
    }


def describe(data: dict[str, Any]) -> str:
    """How a bandwidth was measured, for a trial's notes and `dlbench env`."""
    text = (f"{data['bytes_per_s'] / 1e9:.1f} GB/s ({data['kernel']}; read {data['read_bytes_per_s'] / 1e9:.1f},"
            f" triad {data['triad_bytes_per_s'] / 1e9:.1f} GB/s without write-allocate), {data['threads']}"
            f" thread(s), {data['array_bytes'] / 2**20:.0f} MiB float64 arrays")
    if data.get("busy"):
        share = data.get("foreign_cpu_share")
        taken = "at an unknown load" if share is None else f"while other processes took {share:.0%} of the CPUs"
        text += f", measured {taken} (a busy machine: the true bandwidth is higher)"
    return text


def _cache_file(threads: int) -> Path:
    return paths.cache_base() / "memory-bandwidth" / f"{platform.node()}-{threads}.json"


def _cached(threads: int) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(_cache_file(threads).read_text())
    except (OSError, ValueError):
        return None
    return data if data.get("cpu_model") == cpu_model() else None


def quiet_now() -> bool:
    """Whether other processes use at most BUSY_FOREIGN_SHARE of the machine now (one
    QUIET_SAMPLE_S reading); False where /proc cannot tell."""
    share = interference.busy_share_now(QUIET_SAMPLE_S, [os.getpid()])
    return share is not None and share <= BUSY_FOREIGN_SHARE


def needs_measuring(threads: int) -> bool:
    """Whether bandwidth(threads) would measure: none cached for this CPU, or the cached one was
    taken on a busy machine and this one is quiet now."""
    cached = _cached(threads)
    return cached is None or (bool(cached.get("busy")) and quiet_now())


def bandwidth(threads: int, measure_if_missing: bool = True) -> tuple[dict[str, Any] | None, str]:
    """(the cached or newly measured bandwidth, '') or (None, why). A cached one taken on a busy
    machine is measured again once the machine is quiet (module docstring)."""
    return best_cache.refresh(_cache_file(threads), _cached(threads), lambda c: not c.get("busy") or not quiet_now(),
                              lambda: _measure_in_child(threads), _merge, measure_if_missing)


def _merge(cached: dict[str, Any], fresh: dict[str, Any]) -> dict[str, Any]:
    """The higher of the two, final once either was taken on a quiet machine (a busy machine
    only lowers a bandwidth)."""
    best = fresh if fresh["bytes_per_s"] >= cached["bytes_per_s"] else cached
    return {**best, "busy": bool(fresh["busy"]) and bool(cached.get("busy"))}


def _measure_in_child(threads: int, array_bytes: int | None = None) -> tuple[dict[str, Any] | None, str]:
    """A new measurement with `threads` threads, pinned like a trial; (None, why) when the child
    failed."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    with tempfile.TemporaryDirectory(prefix="dlbench-bandwidth-") as tmp:
        out = Path(tmp) / "bandwidth.json"
        args = [str(threads), str(out), *([str(array_bytes)] if array_bytes else [])]
        child, watched = children.run_child("dlbench.runner.bandwidth", args, Path(tmp) / "bandwidth.log",
                                            TIMEOUT_S, cpus=cores)
        why = children.why_not_ok(child, watched, TIMEOUT_S)
        try:
            data: dict[str, Any] = json.loads(out.read_text())
        except (OSError, ValueError) as e:
            return None, f"memory bandwidth measurement failed: the child {why or e}"
    return data, ""


if __name__ == "__main__":
    size = int(sys.argv[3]) if len(sys.argv) > 3 else None
    Path(sys.argv[2]).write_text(json.dumps(measure(int(sys.argv[1]), size)))
