"""The cache of a machine's best-case measurements, per machine and thread count: the float32
matmul ceiling (runner/ceiling.py) and the memory bandwidth (runner/bandwidth.py). Other work on
the machine only lowers a best case, so a cached value stands unless it was taken on a busy
machine and the machine is quiet now (each module says how it judges both); a new measurement
is merged with the cached one (the higher kept) and written back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Measurement = dict[str, Any]


def refresh(path: Path, cached: Measurement | None, final: Callable[[Measurement], bool],
            measure: Callable[[], tuple[Measurement | None, str]],
            merge: Callable[[Measurement, Measurement], Measurement],
            measure_if_missing: bool = True) -> tuple[Measurement | None, str]:
    """(the cached measurement where it is final, else a new one merged with it and written to
    `path`, '') or (None, why): nothing cached and `measure_if_missing` False, or the
    measurement failed with nothing cached."""
    if cached is not None and (not measure_if_missing or final(cached)):
        return cached, ""
    if not measure_if_missing:
        return None, "not measured yet on this machine (dlbench env measures it)"
    fresh, why = measure()
    if fresh is None:
        return (cached, "") if cached is not None else (None, why)
    best = fresh if cached is None else merge(cached, fresh)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(best))
    return best, ""
