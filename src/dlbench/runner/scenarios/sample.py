"""The sampling scenario of a diffusion workload (`--scenario infer` on ddpm; workloads: SCENARIOS
maps it here), run by the worker process (runner/worker.py).

Deterministic DDIM from the spec's initial noise with the canonical parameters: S denoiser calls
per batch. The loop is the framework's whole compiled loop where its Program offers one
(`Sampler.sample_fn(state)`, backends/base.py: lax.fori_loop under jax.jit, a tf.function), recorded as
`sampler_loop = "compiled"`; otherwise a NumPy loop on the host around the trial's own inference
forward (Program.infer_fn: torch.compile, ONNX Runtime's session), `sampler_loop = "host"`, each
step's input put on the device and its output fetched, as a user's loop around a served
denoiser does.

Timed: whole batches of the spec's batch size back to back, each synced, until SAMPLE_BATCHES are
timed or `infer_budget_s` is spent: seconds per batch (median), images per second and seconds per
denoising step (the median batch over S). Parity: the denoiser's outputs on the fixed batch
(judged against the float64 reference's eval-mode outputs by the parent, as an inference trial's
logits), and the first PARITY_BATCH images of a sample against the workload's float64 NumPy
sample from the same noise (runner/verdicts.py: sample_verdict).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from dlbench.backends import support
from dlbench.backends.base import SampleLoop, Sampler
from dlbench.runner import protocol
from dlbench.runner.scenarios import infer, profiled
from dlbench.runner.context import TrialContext, allocator_metrics
from dlbench.spec import PARITY_BATCH, InferOptions, TrialSpec

SAMPLE_BATCHES = 10
WARMUP_BATCHES = 1

def host_sampler(trial: TrialSpec, module: ModuleType, program: Sampler, forward: Callable[[Any], Any]) -> SampleLoop:
    """The workload's NumPy DDIM loop around the inference forward (float32 on the host);
    `module`: the trial's workload module."""

    def denoise(x: np.ndarray) -> np.ndarray:
        return np.asarray(forward(program.infer_input(x)))

    def sample(noise: np.ndarray) -> np.ndarray:
        out: np.ndarray = module.ddim_sample(trial.workload, denoise, noise)
        return out

    return sample


def run(ctx: TrialContext) -> None:
    trial, backend, phases, sampler, result = ctx.trial, ctx.backend, ctx.phases, ctx.sampler, ctx.result
    m, spec, module = ctx.metrics, trial.workload, ctx.workload
    budget_s = trial.options_of(InferOptions).infer_budget_s
    profiled.prepare(ctx)
    program, forward = infer.build_forward(ctx, support.build_sampler)
    result.numerics = program.numerics()
    result.framework_info = backend.info()
    t = phases.start("build_sampler")
    compiled_loop = program.sample_fn(support.init(trial, module, program))
    sample = compiled_loop if compiled_loop is not None else host_sampler(trial, module, program, forward)
    m["build_sampler_s"] = phases.end("build_sampler", t)
    result.notes["sampler_loop"] = "compiled" if compiled_loop is not None else "host"
    steps = len(module.ddim_timesteps(spec))
    m["sample_steps"] = steps
    m["compiled_sampler_loop"] = 1.0 if compiled_loop is not None else 0.0
    t = phases.start("data")
    noise = module.initial_noise(spec, spec.batch_size)
    m["data_s"] = phases.end("data", t)
    m["rss_initial_bytes"], m["vram_initial_bytes"] = sampler.sample()
    t = phases.start("first_batch")
    first = sample(noise)
    first_s = m["first_batch_s"] = phases.end("first_batch", t)
    m["time_to_first_sample_s"] = time.monotonic() - ctx.created
    t = phases.start("warmup")
    for _ in range(WARMUP_BATCHES):
        sample(noise)
    m["warmup_s"] = phases.end("warmup", t)
    _parity(trial, module, forward, program, first, phases, m, ctx)
    # Quality: the Fréchet distance of the first batch's images to the held-out clean images in
    # the workload's fixed feature space (not FID; the canonical parameters are untrained).
    m["frechet_distance"] = module.frechet_distance(module.image_features(first),
                                                    module.image_features(module.held_out_images(spec)))
    compiles = program.compilations()
    sampler.begin_window()
    t = phases.start("sampling")
    with profiled.window(ctx, ctx.parity_file):  # a profiled trial's batches under the profiler
        batch_s = _timed(sample, noise, SAMPLE_BATCHES, budget_s)
        if trial.profile:
            m[profiled.CALLS_METRIC] = float(len(batch_s))  # its categories: per sampled batch
    m["sample_window_s"] = phases.end("sampling", t)
    window = sampler.end_window()
    m["recompiles_in_window"] = program.compilations() - compiles
    m["rss_window_peak_bytes"], m["vram_window_peak_bytes"] = window["rss"], window["vram"]
    median = statistics.median(batch_s)
    m["sample_batches"] = len(batch_s)
    m["sample_batch_size"] = spec.batch_size
    m["sample_batch_median_s"] = median
    m["sample_images_per_s"] = spec.batch_size / median
    m["sample_step_s"] = median / steps
    m["first_sample_compile_estimate_s"] = max(first_s - median, 0.0)
    flops = module.flops_per_sample(spec, train=False) * steps
    m["flops_per_sample"] = flops
    m["achieved_flops_per_s"] = flops * m["sample_images_per_s"]
    result.series["sample_batch_s"] = [(float(i), s) for i, s in enumerate(batch_s)]
    if len(batch_s) < SAMPLE_BATCHES:
        result.warnings.append(f"sampling: the {budget_s:g} s budget ran out after {len(batch_s)} of"
                               f" {SAMPLE_BATCHES} batches")
    if m["recompiles_in_window"]:
        result.warnings.append(f"recompiled {m['recompiles_in_window']:g} time(s) while sampling was timed")
    allocator_metrics(ctx)


def _parity(trial: TrialSpec, module: Any, forward: Callable[[Any], Any], program: Sampler, first: np.ndarray,
            phases: Any, m: dict[str, float | None], ctx: TrialContext) -> None:
    """The denoiser on the fixed batch through the timed forward (the batch cycled to the
    spec's batch size: no new shape), and the first images of the first sample with the
    float64 NumPy sample from the same noise."""
    spec = trial.workload
    t = phases.start("parity")
    x = module.fixed_batch(spec, PARITY_BATCH).x
    rows = np.arange(spec.batch_size) % len(x)
    outputs = np.asarray(forward(program.infer_input(x[rows])))
    n = min(PARITY_BATCH, spec.batch_size)
    params = module.init_params(spec)
    reference = module.ddim_sample(spec, lambda z: module.reference_forward(spec, params, z),
                                   module.initial_noise(spec, spec.batch_size)[:n], dtype=np.float64)
    protocol.save_samples(ctx.parity_file, {f"batch {spec.batch_size}": outputs},
                            np.asarray(first[:n], np.float64), reference)
    m["parity_s"] = phases.end("parity", t)


def _timed(sample: SampleLoop, noise: np.ndarray, count: int, budget_s: float) -> list[float]:
    """Seconds of each whole sampling batch (the result on the host: synced), `count` of them or
    fewer when the budget is spent first (at least one)."""
    out: list[float] = []
    deadline = time.perf_counter() + budget_s
    for _ in range(count):
        t0 = time.perf_counter()
        np.asarray(sample(noise))
        t1 = time.perf_counter()
        out.append(t1 - t0)
        if t1 >= deadline:
            break
    return out
