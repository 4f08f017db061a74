"""The column registry: one place that says how each metric column of a table is computed and
shown. Headers are the metric registry's labels (analysis/metrics.py) unless a table names the
column otherwise.

The headline layout is that of the well-known published framework comparison (training time,
samples/s, accuracy, initial and max RAM and VRAM), plus mode and time to first step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dlbench.analysis import metrics
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


def _m(key: str, metric: str, fmt: Callable[[float], str], header: str | None = None) -> Column:
    """The column of a metric, under the registry's label unless `header` is given."""
    return Column(key, header or metrics.label(metric), metric, fmt)


def _f(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:.{digits}f}"


def _gib(v: float) -> str:
    return f"{v / GIB:.2f}"


HEADLINE = [
    _m("train_s", "train_s", _f(2)),
    _m("samples_per_s", "samples_per_s", _f(1)),
    _m("accuracy", "accuracy", _f(3)),
    _m("map_voc", "map_voc", _f(3)),  # detect: mAP@0.5 under the VOC devkit's matching; hidden elsewhere
    _m("denoising_mse", "denoising_mse", _f(4)),  # ddpm's held-out quality; hidden where no row has it
    _m("sample_fd", "sample_feature_fd", _f(3)),  # ddpm: trained samples' Fréchet distance (not FID)
    _m("sample_fd_floor", "sample_feature_fd_floor", _f(3)),  # ... what real images score (a perfect sampler)
    _m("sample_fd_noise", "sample_feature_fd_noise", _f(3)),  # ... what noise images score (learnt nothing)
    _m("rss_initial", "rss_initial_bytes", _gib),
    _m("rss_peak", "rss_peak_bytes", _gib),
    _m("vram_initial", "vram_initial_bytes", _gib),
    _m("vram_peak", "vram_peak_bytes", _gib),
    _m("ttfs", "time_to_first_step_s", _f(2)),
]

# Start-up breakdown, shown under the headline table.
STARTUP = [
    _m("import_s", "import_s", _f(2)),
    _m("data_s", "data_s", _f(2)),
    _m("build_s", "build_s", _f(2)),
    _m("compile_s", "compile_s", _f(2)),
    _m("first_step_s", "first_step_s", _f(2)),
    _m("step_ms", "step_s_median", lambda v: f"{v * 1e3:.1f}"),
    _m("gflops", "achieved_flops_per_s", lambda v: f"{v / 1e9:.1f}"),
    _m("mfu", "mfu", lambda v: f"{v:.1%}"),
    _m("ceiling", "matmul_ceiling_share", lambda v: f"{v:.1%}"),
]


# GPU memory, utilisation next to MFU, power and energy (report/gpu.py): one table, so that
# nvidia-smi's utilisation is never read without the share of peak FLOP/s beside it.
GPU = [
    _m("vram_process_peak", "vram_process_peak_bytes", _gib),
    _m("allocated_peak", "allocated_peak_bytes", _gib),
    _m("gpu_util", "gpu_utilization_mean", lambda v: f"{v:.0%}"),
    _m("gpu_mfu", "mfu", lambda v: f"{v:.1%}"),
    _m("power", "gpu_power_mean_w", _f(0)),
    _m("idle_power", "gpu_idle_power_w", _f(0)),
    _m("energy", "energy_j", _f(1)),
    _m("energy_per_sample", "energy_per_sample_j", lambda v: f"{v * 1e3:.3f}"),
    _m("per_watt", "samples_per_s_per_w", _f(2)),
    _m("cpu_energy", "cpu_energy_j", _f(1)),
]


def _ms(v: float) -> str:
    return f"{v * 1e3:.3f}"


# The inference table (report/infer.py): batch-1 latency quantiles (the p99 cell adds its
# confidence interval), requests timed, and throughput at the spec's batch size.
INFER = [
    _m("latency_p50", "latency_p50_s", _ms),
    _m("latency_p90", "latency_p90_s", _ms),
    _m("latency_p99", "latency_p99_s", _ms),  # with its interval beside it (inline_interval)
    _m("infer_requests", "infer_requests", _f(0)),
    _m("infer_batch_size", "infer_batch_size", _f(0)),
    _m("infer_samples_per_s", "infer_samples_per_s", _f(1)),
    _m("infer_samples_per_s_median", "infer_samples_per_s_median", _f(1)),
    _m("first_request_s", "first_request_s", _f(2)),
    _m("infer_ttfr", "time_to_first_request_s", _f(2)),
    # A diffusion workload's sampling (runner/scenarios/sample.py); a table hides columns no row fills.
    _m("sample_steps", "sample_steps", _f(0)),
    _m("sample_batch", "sample_batch_median_s", _f(3)),
    _m("sample_step", "sample_step_s", _ms),
    _m("sample_images_per_s", "sample_images_per_s", _f(1)),
    _m("sample_ttfs", "time_to_first_sample_s", _f(2)),
]


# The generation table (report/generate.py): token latencies, throughput, compile and cache.
GENERATE = [
    _m("gen_ttft_p50", "ttft_p50_s", _ms),
    _m("gen_ttft_p99", "ttft_p99_s", _ms),
    _m("gen_tpot_p50", "tpot_p50_s", _ms),
    _m("gen_tpot_p99", "tpot_p99_s", _ms),
    # the least time a decode step can take (bytes it reads / the memory bandwidth) over the TPOT p50
    _m("gen_bound_share", "tpot_bound_share", lambda v: f"{v:.1%}"),
    _m("gen_tokens_per_s_stream", "output_tokens_per_s_per_stream", _f(1)),
    _m("gen_tokens_per_s", "output_tokens_per_s", _f(1)),
    _m("gen_first", "first_generation_s", _f(2)),
    _m("gen_cache", "kv_cache_bytes", lambda v: f"{v / 2**20:.2f}"),
    _m("gen_recompiles", "recompiles_per_prompt_length", _f(1)),
    # the phase that counts them (minutes for a framework compiling per shape; report/generate.py
    # derives it from the phase events of trials stored before it was a metric)
    _m("gen_other_lengths", "other_prompt_lengths_s", _f(1)),
    # --load server: LoadGen's highest VALID QPS and that test's p99s (hidden where no row has them)
    _m("gen_server_max_qps", "server_max_qps", _f(1)),
    _m("gen_server_ttft_p99", "server_ttft_p99_s", _ms),
    _m("gen_server_tpot_p99", "server_tpot_p99_s", _ms),
]


# The reinforcement-learning table (report/rl.py).
RL = [
    _m("env_steps_per_s", "env_steps_per_s", _f(0)),
    _m("update_samples_per_s", "update_samples_per_s", _f(0)),
    _m("iteration_ms", "iteration_s_median", lambda v: f"{v * 1e3:.1f}"),
    _m("rollout_ms", "rollout_s_median", lambda v: f"{v * 1e3:.1f}"),
    _m("first_step_s", "first_step_s", _f(2)),
    _m("ttfs", "time_to_first_step_s", _f(2)),
]


def compile_value(metrics: Metrics) -> tuple[float | None, bool]:
    """Measured ahead-of-time compile seconds, else the estimate (first step minus a step)."""
    if metrics.get("compile_s") is not None:
        return metrics["compile_s"], False
    return metrics.get("compile_estimate_s"), True
