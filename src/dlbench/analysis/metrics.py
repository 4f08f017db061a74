"""The metric registry: one place that says, per neutral metric, its unit, which way is better
and the name a table shows for it. The store writes units from here (results/store.py), compare
reads directions from here (analysis/compare.py), the report's columns read names from here
(report/columns.py).

Metrics that only one framework produces (its allocator's counters) are not listed: a backend
declares their units itself (`TrialResult.units`). A name found nowhere still stores, with the
unit its suffix says (`_bytes`, `_s`, `_per_s`, `_w`, `_j`) or none: `unit` never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower", "none"]


@dataclass(frozen=True)
class Metric:
    unit: str  # SI, as stored: "s", "B", "1/s", "W", "J", "FLOP", "1" for a ratio or a count
    better: Direction = "none"  # "none": a count, a setting or a diagnostic, never a regression
    label: str = ""  # the column header a report table shows (in the units it displays)


def _s(label: str = "") -> Metric:
    return Metric("s", "lower", label)


def _b(label: str = "") -> Metric:
    return Metric("B", "lower", label)


def _ratio(better: Direction = "none", label: str = "") -> Metric:
    return Metric("1", better, label)


METRICS: dict[str, Metric] = {
    # phases (DESIGN §4)
    "import_s": _s("import s"),
    "data_s": _s("data s"),
    "build_s": _s("build s"),
    "compile_s": _s("compile s"),
    "compile_estimate_s": _s(),
    "first_step_s": _s("first step s"),
    "time_to_first_step_s": _s("time to first step s"),
    "warmup_s": _s(),
    # training
    "train_s": _s("training time s"),
    "samples_per_s": Metric("1/s", "higher", "samples/s"),
    "step_s_median": _s("median step ms"),
    "epoch_s_median": _s(),
    "final_loss": _ratio(),
    "accuracy": _ratio("higher", "accuracy"),
    # ddpm's held-out quality (workloads/ddpm.py: score): the denoising loss, lower is better
    "denoising_mse": _ratio("lower", "denoising MSE"),
    # ddpm after training (workloads/ddpm.py: generated_quality; not FID): the Fréchet distance
    # of DDIM samples to held-out images in the fixed feature network's space, with what real
    # images (floor) and N(0, 1) noise images of the same count score; and in 4x4-block means
    "sample_feature_fd": _ratio("lower", "sample FD"),
    "sample_feature_fd_floor": _ratio("lower", "sample FD floor"),
    "sample_feature_fd_noise": _ratio("lower", "sample FD of noise"),
    "sample_blockmean_fd": _ratio("lower", "sample block-mean FD"),
    "sample_blockmean_fd_floor": _ratio("lower"),
    # detect's held-out quality (workloads/boxes.py): mAP@0.5, all-point, COCO-style matching
    # (highest-IoU unmatched box); map_voc: the same outputs under the VOC devkit's matching
    "map": _ratio("higher", "mAP@0.5"),
    "map_voc": _ratio("higher", "mAP@0.5 VOC rule"),
    # lm: the share of positions whose top logit is the Markov chain's most likely next token
    "next_token_accuracy": _ratio("higher", "next-token accuracy"),
    # lm's extra held-out scores: perplexity, and its ratio to exp(the chain's entropy rate)
    "eval_perplexity": _ratio("lower", "held-out perplexity"),
    "perplexity_ratio": _ratio("lower", "perplexity / best possible"),
    "eval_s": _s("eval s"),
    "recompiles_in_window": _ratio("lower"),
    "timed_steps": _ratio(),
    "timed_window_short": _ratio(),  # 1.0: too short to time (analysis/window.py)
    # reinforcement learning (runner/scenarios/rl.py)
    "env_steps_per_s": Metric("1/s", "higher", "env steps/s"),
    "update_samples_per_s": Metric("1/s", "higher", "update samples/s"),
    "iteration_s_median": _s("median iteration ms"),
    "rollout_s_median": _s("median rollout ms"),
    "final_return": _ratio("higher", "mean return"),
    "episodes": _ratio(),
    # memory
    "rss_start_bytes": _b(),
    "rss_after_import_bytes": _b(),
    "rss_initial_bytes": _b("initial RAM GiB"),
    "rss_peak_bytes": _b("max RAM GiB"),
    "rss_window_peak_bytes": _b(),
    "vram_initial_bytes": _b("initial VRAM GiB"),
    "vram_peak_bytes": _b("max VRAM GiB"),
    "vram_window_peak_bytes": _b(),
    "vram_process_peak_bytes": _b("process VRAM GiB"),
    "vram_process_window_peak_bytes": _b(),
    "allocated_peak_bytes": _b("allocated peak GiB"),
    # parity against the float64 reference
    "parity_s": _s(),
    "parity_rel_err": _ratio("lower"),
    "parity_min_cosine": _ratio("higher"),
    # FLOPs and efficiency
    "flops_per_sample": Metric("FLOP"),
    "achieved_flops_per_s": Metric("FLOP/s", "higher", "achieved GFLOP/s"),
    "mfu": _ratio("higher", "MFU"),
    "matmul_ceiling_share": _ratio("higher", "of matmul ceiling"),
    "matmul_ceiling_flops_per_s": Metric("FLOP/s"),
    # the measured memory bandwidth for the trial's threads (runner/bandwidth.py) and the bytes a
    # training step must move at least (analysis/roofline.py): the roofline's other ceiling and x axis
    "memory_bandwidth_bytes_per_s": Metric("B/s", "none", "memory GB/s"),
    "min_step_bytes": Metric("B", "none", "min MiB/step"),
    # GPU and energy (monitors/power.py, monitors/rapl.py)
    "gpu_utilization_mean": _ratio("none", "GPU util"),
    "gpu_power_mean_w": Metric("W", "lower", "power W"),
    "gpu_power_peak_w": Metric("W", "lower"),
    "gpu_idle_power_w": Metric("W", "none", "idle W"),
    "cpu_idle_power_w": Metric("W"),
    "energy_j": Metric("J", "lower", "energy J"),
    "cpu_energy_j": Metric("J", "lower", "CPU energy J"),
    "energy_per_sample_j": Metric("J", "lower", "mJ/sample"),
    "samples_per_s_per_w": Metric("1/(s W)", "higher", "samples/s/W"),
    "energy_window_s": Metric("s"),
    "idle_baseline_s": Metric("s"),
    "gpu_sample_period_s": Metric("s"),
    # inference (runner/scenarios/infer.py); the latency_*_s quantiles are seconds by their suffix
    "infer_samples_per_s": Metric("1/s", "higher", "samples/s"),
    "infer_samples_per_s_median": Metric("1/s", "higher", "samples/s (median call)"),
    "infer_requests": _ratio("none", "requests"),
    "infer_batches": _ratio(),
    "infer_batch_size": _ratio("none", "batch"),
    "latency_p50_s": _s("p50 ms"),
    "latency_p90_s": _s("p90 ms"),
    "latency_p99_s": _s("p99 ms"),
    "latency_p99_ci_level": _ratio(),
    "first_request_s": _s("first request s"),
    # a workload's post-processing (detect: decode + NMS, NumPy), timed apart from the network
    "postprocess_p50_s": _s("postprocess p50 ms"),
    "postprocess_batch_median_s": _s("postprocess batch ms"),
    "time_to_first_request_s": _s("time to first request s"),
    # under MLPerf LoadGen (runner/scenarios/served.py)
    "latency_p90_early_stopping_s": _s("p90 early-stop ms"),
    "latency_p99_early_stopping_s": _s("p99 early-stop ms"),
    "loadgen_offline_samples_per_s": Metric("1/s", "higher", "Offline samples/s"),
    "server_max_qps": Metric("1/s", "higher", "max QPS within p99 bound"),
    "server_target_qps": Metric("1/s", "none", "target QPS"),
    "server_achieved_qps": Metric("1/s", "higher", "achieved QPS"),
    "server_latency_p50_s": _s("server p50 ms"),
    "server_latency_p99_s": _s("server p99 ms"),
    "server_p99_bound_s": _s("p99 bound ms"),
    "infer_accuracy": _ratio("higher", "held-out accuracy"),
    # a non-classifier's served quality, infer_<QUALITY> (runner/scenarios/served.py): detect's mAP@0.5
    "infer_map": _ratio("higher", "held-out mAP@0.5"),
    "infer_accuracy_fp32": _ratio("none", "fp32 accuracy"),
    "infer_accuracy_change": _ratio("higher", "accuracy change vs fp32"),
    "infer_top1_agreement_fp32": _ratio("higher", "top-1 agreement with fp32"),
    # diffusion sampling (runner/scenarios/sample.py: --scenario infer on ddpm)
    "sample_images_per_s": Metric("1/s", "higher", "images/s"),
    "sample_batch_median_s": _s("s/batch"),
    "sample_step_s": _s("ms/step"),
    "sample_steps": _ratio("none", "steps"),
    "time_to_first_sample_s": _s("time to first sample s"),
    # what a generation keeps of the float64 decoder's greedy tokens (analysis/generate.py:
    # agreement; int8 decoding's accuracy cost, shown beside float32's)
    "gen_token_agreement": _ratio("higher", "token agreement"),
    "gen_forced_agreement": _ratio("higher", "forced agreement"),
    "gen_ambiguous_share": _ratio("none", "ambiguous steps"),
    # generation with a KV cache (runner/scenarios/generate.py: --scenario generate on lm)
    "ttft_p50_s": _s("TTFT p50 ms"),
    "ttft_p99_s": _s("TTFT p99 ms"),
    "tpot_p50_s": _s("TPOT p50 ms"),
    "tpot_p99_s": _s("TPOT p99 ms"),
    "output_tokens_per_s_per_stream": Metric("1/s", "higher", "tokens/s per stream"),
    "output_tokens_per_s": Metric("1/s", "higher", "tokens/s total"),
    "first_generation_s": _s("first generation s (compiles)"),
    "first_generation_compile_estimate_s": _s("compile estimate s"),
    "kv_cache_bytes": Metric("B", "lower", "KV cache MiB"),
    "recompiles_per_prompt_length": _ratio("lower", "compiles per new prompt length"),
    # the untimed generations at P - 1 and P + 1 that count those compilations (compiles included)
    "other_prompt_lengths_s": _s("other prompt lengths s"),
    # the memory-bandwidth bound of a decode step (analysis/roofline.py, workloads/lm.py: decode_step):
    # the bytes one step must read and its FLOPs at the generation's mean position, the FLOP/s the
    # median TPOT achieved; bytes / the measured bandwidth, and that bound over the median TPOT
    "decode_bytes_per_step": Metric("B", "none", "decode MiB/step"),
    "decode_flops_per_step": Metric("FLOP", "none", "decode MFLOP/step"),
    "decode_flops_per_s": Metric("FLOP/s", "higher", "decode GFLOP/s"),
    "tpot_bound_s": Metric("s", "none", "TPOT bound ms"),
    "tpot_bound_share": _ratio("higher", "of bandwidth bound"),
    # generate under LoadGen's Server with token latencies (`--load server`: runner/scenarios/generate.py);
    # LoadGen's own percentiles of the test shown (the highest VALID), its bounds, completed tokens/s;
    # server_max_qps, server_target_qps, server_achieved_qps and server_valid as for inference
    "server_ttft_p50_s": _s("server TTFT p50 ms"),
    "server_ttft_p99_s": _s("server TTFT p99 ms"),
    "server_tpot_p50_s": _s("server TPOT p50 ms"),
    "server_tpot_p99_s": _s("server TPOT p99 ms"),
    "server_ttft_bound_s": Metric("s", "none", "TTFT p99 bound ms"),
    "server_tpot_bound_s": Metric("s", "none", "TPOT p99 bound ms"),
    "server_output_tokens_per_s": Metric("1/s", "higher", "server tokens/s"),
    "generate_server_window_s": _s(),
    # the solver scenario (runner/scenarios/solve.py): the fastest float64 solve reaching rtol 1e-6
    "solve_1e-6_s": _s("fastest solve s at rtol 1e-6"),
    "solve_1e-6_error": _ratio("lower", "its error at rtol 1e-6"),
    # data parallelism (runner/parallel.py)
    "grad_comm_s_per_step": _s("grad comm ms/step"),
    "grad_comm_share": _ratio("lower"),
    "scaling_efficiency": _ratio("higher", "scaling efficiency"),
    "scaling_baseline_samples_per_s": Metric("1/s"),
    # interference during the timed window (monitors/interference.py; analysis/interference.py
    # judges them): diagnostics of the machine, never a regression of a framework
    "foreign_cpu_share": _ratio("none", "foreign CPU"),
    "run_queue_mean": _ratio("none", "run queue"),
    "steal_share": _ratio("none", "steal"),
    "cpu_freq_mhz_mean": Metric("MHz", "none", "clock MHz"),
    "cpu_freq_mhz_min": Metric("MHz", "none", "lowest clock MHz"),
    "self_cpu_share": _ratio("none", "own CPU of given threads"),
    # the wait for a quiet machine before the trial (--quiet-wait)
    "quiet_wait_s": Metric("s", "none", "quiet wait s"),
    "quiet_wait_gave_up": _ratio("none", "quiet wait gave up"),
}

# The held-out quality metrics a trial can carry (a workload's QUALITY): the headline's quality
# column shows the first one a trial has (accuracy for a classifier, map for detect), headed by
# its label (report/model.py: quality_header).
QUALITY_METRICS = ("accuracy", "map", "next_token_accuracy")

# Units by name suffix, for names the registry does not list (longest suffix first).
SUFFIX_UNITS = (("_per_s", "1/s"), ("_bytes", "B"), ("_s", "s"), ("_w", "W"), ("_j", "J"))


def unit(name: str, declared: str | None = None) -> str:
    """The unit a metric is stored with: what its producer declared, else the registry's, else
    its suffix's, else "1" (a ratio or a count). Never raises: a new metric needs no entry."""
    if declared is not None:
        return declared
    if name in METRICS:
        return METRICS[name].unit
    return next((u for suffix, u in SUFFIX_UNITS if name.endswith(suffix)), "1")


def higher_is_better(name: str) -> bool:
    """Whether an increase is an improvement; a metric the registry does not list counts as
    lower-is-better (times, bytes and energies are the common case of a new metric)."""
    metric = METRICS.get(name)
    return metric is not None and metric.better == "higher"


def label(name: str) -> str:
    """The header a table shows for the metric: the registry's, else the name itself."""
    metric = METRICS.get(name)
    return metric.label if metric is not None and metric.label else name

