"""The trial result: what the worker writes to OUT and the parent stores. Versioned JSON.

Raw samples are kept (every chunk time, every loss, every monitor sample); summaries are
computed from them, never stored alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RESULT_SCHEMA_VERSION = 1

STATUSES = ("ok", "failed", "crashed", "timeout", "oom", "interrupted", "unsupported", "skipped")
# Statuses that mean "something went wrong" (exit code 3); unsupported/skipped are data.
FAILURE_STATUSES = ("failed", "crashed", "timeout", "oom", "interrupted")

# Units of every metric the worker reports; the name carries the unit too.
UNITS = {
    "import_s": "s",
    "data_s": "s",
    "build_s": "s",
    "compile_s": "s",
    "compile_estimate_s": "s",
    "first_step_s": "s",
    "time_to_first_step_s": "s",
    "warmup_s": "s",
    "train_s": "s",
    "samples_per_s": "1/s",
    "step_s_median": "s",
    "epoch_s_median": "s",
    "final_loss": "1",
    "accuracy": "1",
    "eval_s": "s",
    "recompiles_in_window": "1",
    "rss_start_bytes": "B",
    "rss_after_import_bytes": "B",
    "rss_initial_bytes": "B",
    "rss_peak_bytes": "B",
    "rss_window_peak_bytes": "B",
    "vram_initial_bytes": "B",
    "vram_peak_bytes": "B",
    "vram_window_peak_bytes": "B",
    "parity_s": "s",
    "parity_rel_err": "1",
    "parity_min_cosine": "1",
    "flops_per_sample": "FLOP",
    "achieved_flops_per_s": "FLOP/s",
    "mfu": "1",
    # GPU and energy (monitors/power.py, monitors/rapl.py) and allocator peaks (Backend)
    "vram_process_peak_bytes": "B",
    "vram_process_window_peak_bytes": "B",
    "allocated_peak_bytes": "B",
    "torch_allocated_peak_bytes": "B",
    "torch_reserved_peak_bytes": "B",
    "torch_allocated_bytes": "B",
    "torch_reserved_bytes": "B",
    "jax_peak_bytes_in_use": "B",
    "jax_bytes_in_use": "B",
    "jax_bytes_limit": "B",
    "jax_pool_bytes": "B",
    "jax_peak_pool_bytes": "B",
    "tf_gpu_current_bytes": "B",
    "tf_gpu_peak_bytes": "B",
    "gpu_utilization_mean": "1",
    "gpu_power_mean_w": "W",
    "gpu_power_peak_w": "W",
    "gpu_idle_power_w": "W",
    "cpu_idle_power_w": "W",
    "energy_j": "J",
    "cpu_energy_j": "J",
    "energy_per_sample_j": "J",
    "samples_per_s_per_w": "1/(s W)",
    "energy_window_s": "s",
    "idle_baseline_s": "s",
    "gpu_sample_period_s": "s",
    "matmul_ceiling_share": "1",
    "matmul_ceiling_flops_per_s": "FLOP/s",
    # inference (runner/inference.py); the latency_*_s and first_*_s ones are seconds by name
    "infer_samples_per_s": "1/s",
    "infer_requests": "1",
    "infer_batches": "1",
    "infer_batch_size": "1",
    "latency_p99_ci_level": "1",
    # data parallelism (runner/parallel.py)
    "grad_comm_s_per_step": "s",
    "grad_comm_share": "1",
    "scaling_efficiency": "1",
    "scaling_baseline_samples_per_s": "1/s",
}


@dataclass
class TrialResult:
    status: str
    error: str | None = None
    # name -> value (None with a reason in `notes` when it cannot be measured here)
    metrics: dict[str, float | None] = field(default_factory=dict)
    # Units of metrics whose producer declares them (a backend's allocator counters); the
    # neutral metrics' units come from the metric registry.
    units: dict[str, str] = field(default_factory=dict)
    # series name -> list of (t, value); t is a step index or seconds, per series
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    policy_effective: dict[str, Any] = field(default_factory=dict)
    framework_info: dict[str, Any] = field(default_factory=dict)
    numerics: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    # The parity verdict against the float64 reference, filled by the parent (analysis/parity)
    parity: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    schema_version: int = RESULT_SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=_json_default)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrialResult:
        d = dict(d)
        d["series"] = {k: [tuple(p) for p in v] for k, v in d.get("series", {}).items()}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def write(self, path: Path) -> None:
        """Atomically: a reader never sees half a result."""
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):  # NumPy scalars from metric arithmetic
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete JSON lines of an events file; a torn last line (a killed worker) is ignored."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events
