"""The column registry: one place that says how each table column is computed and shown.

The headline layout is that of the well-known published framework comparison (training time,
samples/s, accuracy, initial and max RAM and VRAM), plus mode and time to first step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dlbench.analysis.summary import Summary

GIB = 1024**3

Metrics = dict[str, float | None]


@dataclass(frozen=True)
class Column:
    key: str
    header: str
    metric: str | None  # the metric it shows (None: a spec field)
    fmt: Callable[[float], str]

    def render(self, value: float | None) -> str:
        return "–" if value is None else self.fmt(value)

    def render_ci(self, summary: Summary) -> str | None:
        """`[low, high] 75%`: the median's interval and its true level; None below 2 values."""
        if summary.low is None or summary.high is None or summary.level is None:
            return None
        return f"[{self.fmt(summary.low)}, {self.fmt(summary.high)}] {summary.level:.0%}"


def _f(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:.{digits}f}"


def _gib(v: float) -> str:
    return f"{v / GIB:.2f}"


HEADLINE = [
    Column("train_s", "training time s", "train_s", _f(2)),
    Column("samples_per_s", "samples/s", "samples_per_s", _f(1)),
    Column("accuracy", "accuracy", "accuracy", _f(3)),
    Column("rss_initial", "initial RAM GiB", "rss_initial_bytes", _gib),
    Column("rss_peak", "max RAM GiB", "rss_peak_bytes", _gib),
    Column("vram_initial", "initial VRAM GiB", "vram_initial_bytes", _gib),
    Column("vram_peak", "max VRAM GiB", "vram_peak_bytes", _gib),
    Column("ttfs", "time to first step s", "time_to_first_step_s", _f(2)),
]

# Columns shown as `median [CI, level]` when a configuration has several repeats.
CI_COLUMNS = ("train_s", "samples_per_s")

# Start-up breakdown, shown under the headline table.
STARTUP = [
    Column("import_s", "import s", "import_s", _f(2)),
    Column("data_s", "data s", "data_s", _f(2)),
    Column("build_s", "build s", "build_s", _f(2)),
    Column("compile_s", "compile s", "compile_s", _f(2)),
    Column("first_step_s", "first step s", "first_step_s", _f(2)),
    Column("step_ms", "median step ms", "step_s_median", lambda v: f"{v * 1e3:.1f}"),
    Column("gflops", "achieved GFLOP/s", "achieved_flops_per_s", lambda v: f"{v / 1e9:.1f}"),
    Column("mfu", "MFU", "mfu", lambda v: f"{v:.1%}"),
    Column("ceiling", "of matmul ceiling", "matmul_ceiling_share", lambda v: f"{v:.1%}"),
]


# GPU memory, utilisation next to MFU, power and energy (report/gpu.py): one table, so that
# nvidia-smi's utilisation is never read without the share of peak FLOP/s beside it.
GPU = [
    Column("vram_process_peak", "process VRAM GiB", "vram_process_peak_bytes", _gib),
    Column("allocated_peak", "allocated peak GiB", "allocated_peak_bytes", _gib),
    Column("gpu_util", "GPU util", "gpu_utilization_mean", lambda v: f"{v:.0%}"),
    Column("gpu_mfu", "MFU", "mfu", lambda v: f"{v:.1%}"),
    Column("power", "power W", "gpu_power_mean_w", _f(0)),
    Column("idle_power", "idle W", "gpu_idle_power_w", _f(0)),
    Column("energy", "energy J", "energy_j", _f(1)),
    Column("energy_per_sample", "mJ/sample", "energy_per_sample_j", lambda v: f"{v * 1e3:.3f}"),
    Column("per_watt", "samples/s/W", "samples_per_s_per_w", _f(2)),
    Column("cpu_energy", "CPU energy J", "cpu_energy_j", _f(1)),
]


def _ms(v: float) -> str:
    return f"{v * 1e3:.3f}"


# The inference table (report/inference.py): batch-1 latency quantiles (the p99 cell adds its
# confidence interval), requests timed, and throughput at the spec's batch size.
INFER = [
    Column("latency_p50", "p50 ms", "latency_p50_s", _ms),
    Column("latency_p90", "p90 ms", "latency_p90_s", _ms),
    Column("latency_p99", "p99 ms [CI] level", "latency_p99_s", _ms),
    Column("infer_requests", "requests", "infer_requests", _f(0)),
    Column("infer_batch_size", "batch", "infer_batch_size", _f(0)),
    Column("infer_samples_per_s", "samples/s", "infer_samples_per_s", _f(1)),
    Column("first_request_s", "first request s", "first_request_s", _f(2)),
    Column("infer_ttfr", "time to first request s", "time_to_first_request_s", _f(2)),
]


def compile_value(metrics: Metrics) -> tuple[float | None, bool]:
    """Measured ahead-of-time compile seconds, else the estimate (first step minus a step)."""
    if metrics.get("compile_s") is not None:
        return metrics["compile_s"], False
    return metrics.get("compile_estimate_s"), True
