"""The parent's judgement of a finished trial: its parity arrays against the float64 reference,
its achieved FLOP/s against the device's peak (MFU) or the CPU's measured matmul ceiling, and on
CPUs the measured memory bandwidth (a generate trial's decode steps against the bound it implies).
Runs in the one process that writes the store (the local or Ray executor's driver); reads only
files and NumPy arrays, never imports a framework.

Which arrays a trial leaves, and so how they are judged, follows the runner scenario that ran it
(workloads: SCENARIOS): the training scenarios leave the fixed batch's loss and gradients, the
inference scenario its eval-mode logits through the timed paths (runner/fixedbatch.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dlbench import subjects, workloads
from dlbench.analysis import efficiency, generate, parity, roofline
from dlbench.backends import get_backend, precision
from dlbench.results.records import TrialResult
from dlbench.runner import bandwidth, ceiling, protocol, reference
from dlbench.runner.probe_client import ProbeLimits, run_probe
from dlbench.scenarios import Parity
from dlbench.spec import NoOptions, TrialSpec, to_dict

# threads -> (the measurement with that many, or None, and why)
Measured = dict[int, tuple[dict[str, Any] | None, str]]


@dataclass(frozen=True)
class Ceilings:
    """The CPU's measured limits per thread count: the float32 matmul ceiling (runner/ceiling.py)
    and the memory bandwidth (runner/bandwidth.py)."""

    matmul: Measured = field(default_factory=dict)
    bandwidth: Measured = field(default_factory=dict)


Judge = Callable[[TrialSpec, Path, reference.Reference], parity.Verdict]


def grads_verdict(trial: TrialSpec, path: Path, ref: reference.Reference) -> parity.Verdict:
    """A training scenario's fixed-batch loss and gradients, under the dtype of its precision."""
    loss, grads, _ = protocol.load_grads(path)
    return parity.compare_grads(loss, grads, ref.loss, ref.grads,
                                precision.parity_dtype(trial.precision, trial.workload.numerics.dtype),
                                workload=trial.workload.name, reference=ref.label, floor=ref.floor)


def logits_verdict(trial: TrialSpec, path: Path, ref: reference.Reference) -> parity.Verdict:
    """The inference scenario's eval-mode logits of the fixed batch through the timed paths."""
    if ref.init_logits is None:
        return parity.not_available("the float64 reference has no eval-mode logits")
    return parity.compare_infer_logits(protocol.load_logits(path), ref.init_logits,
                                       trial.workload.numerics.dtype, reference=ref.label, floor=ref.floor)


# A float32 DDIM sample against the float64 one from the same noise and parameters, normwise. The
# sampler amplifies the denoiser's rounding (each step divides by sqrt(alpha_bar)): measured
# 1e-6..1e-5 at the tiny and cpu presets in every framework (docs/workloads.md#ddpm), against
# O(1) for a wrong schedule or a swapped coefficient.
SAMPLE_RTOL = 1e-3


def sample_verdict(trial: TrialSpec, path: Path, ref: reference.Reference) -> parity.Verdict:
    """The sampling scenario: the denoiser's outputs on the fixed batch as an inference trial's
    logits, then its sample against the float64 NumPy sample (SAMPLE_RTOL)."""
    verdict = logits_verdict(trial, path, ref)
    found = protocol.load_samples(path)
    if found is None or verdict.verdict != "pass":
        return verdict
    sample, expected = found
    err = parity.rel_err(sample, expected) if np.all(np.isfinite(sample)) else float("inf")
    tolerance = {**(verdict.tolerance or {}), "sample_rel_err": SAMPLE_RTOL}
    per = {**(verdict.per_tensor or {}), "sample": (err, parity.cosine(sample, expected))}
    if err > SAMPLE_RTOL:
        return replace(verdict, verdict="fail", tolerance=tolerance, per_tensor=per, worst_tensor="sample",
                       worst_rel_err=err, reason=f"the DDIM sample errs by {err:.3g} against the float64"
                       f" sample from the same noise (bound {SAMPLE_RTOL:g})")
    if verdict.worst_rel_err is None or err > verdict.worst_rel_err:
        verdict = replace(verdict, worst_rel_err=err, worst_tensor="sample")
    return replace(verdict, tolerance=tolerance, per_tensor=per)


def generate_verdict(trial: TrialSpec, path: Path, ref: reference.Reference) -> parity.Verdict:
    """Greedy generation (runner/scenarios/generate.py) against the workload's float64 NumPy decoder with
    its own KV cache (analysis/generate.py states the rule): every step's logits against the
    reference fed the framework's own tokens; the ids against the reference's own greedy ids up
    to the first step whose top-2 margin is within twice the float32 bound. `ref` (the jax or
    torch float64 run) is not needed: the NumPy reference is the definition itself."""
    module = workloads.get(trial.workload.name)
    prompt, ids, logits = protocol.load_generation(path)
    params = module.init_params(trial.workload)
    free_ids, free_logits = module.reference_generate(trial.workload, params, prompt, ids.shape[1])
    forced = module.reference_forced(trial.workload, params, prompt, ids)
    bound = generate.logits_bound(trial.precision)  # int8 decoding has its own (analysis/generate.py)
    v = generate.judge_generation(ids, logits, forced, free_ids, free_logits, bound)
    steps = (f"first ambiguous step {v.ambiguous_step}, first divergence step {v.divergence_step}"
             f" of {ids.shape[1]} (-1: none)")
    return parity.Verdict("pass" if v.ok else "fail", worst_rel_err=v.logits_error, worst_tensor="logits",
                          tolerance={"logits_rel_err": bound},
                          reference="float64 NumPy decoder with its own cache",
                          reason=f"{v.reason}; {steps}" if not v.ok else steps,
                          metrics=generate.agreement(ids, logits, forced, free_ids, free_logits, bound))


# A scenario record's parity kind (dlbench/scenarios.py: Parity) -> how its arrays are judged.
def no_verdict(trial: TrialSpec, path: Path, ref: reference.Reference | None) -> parity.Verdict:
    """Parity kind "none" (the solver scenario): the trial compares every solve with its own
    float64 reference; there is no fixed batch to judge."""
    return parity.not_available("judged per solve against the problem's float64 reference (the work-precision"
                                " table)")


JUDGES: dict[Parity, Judge] = {"grads": grads_verdict, "logits": logits_verdict, "sample": sample_verdict,
                               "generate": generate_verdict, "none": no_verdict}


def judge_parity(trial: TrialSpec, result: TrialResult, path: Path, refs: dict[str, reference.Reference | str]) -> None:
    """The trial's fixed-batch loss and gradients (an inference trial's logits) against the
    float64 reference: the verdict goes into result.parity, the worst numbers into its metrics.
    A trial whose record has no parent reference (Scenario.parent_reference: a problem's)
    judged itself: its verdict says where."""
    record = subjects.record(trial)
    if not record.parent_reference:
        result.parity = no_verdict(trial, path, None).to_dict()
        return
    ref = refs.get(reference.key(trial.workload, 0), "no reference was computed for this workload")
    not_judged = result.notes.get("parity_not_judged")  # a quantised model: its accuracy change judges it
    if not_judged is not None:
        verdict = parity.not_available(not_judged)
    elif isinstance(ref, str):
        verdict = parity.not_available(ref)
    elif not path.exists():
        verdict = parity.not_available("the worker wrote no fixed-batch arrays")
    else:
        verdict = JUDGES[record.parity](trial, path, ref)
        if verdict.verdict == "fail":
            verdict = diagnose(trial, verdict, ref, k_steps=0)
    result.parity = verdict.to_dict()
    result.metrics["parity_rel_err"] = verdict.worst_rel_err
    result.metrics["parity_min_cosine"] = verdict.min_cosine
    result.metrics.update(verdict.metrics or {})
    if verdict.verdict == "fail":
        result.warnings.append(f"parity FAILED: {verdict.reason}")


def diagnose(trial: TrialSpec, verdict: parity.Verdict, ref: reference.Reference, k_steps: int) -> parity.Verdict:
    """A failed verdict, probed again under each of the framework's kernel alternatives
    (Backend.kernel_alternatives: TensorFlow with oneDNN off). Where one passes, the failure is
    the framework's own kernels on this CPU: the verdict becomes `differs`, its numbers kept, the
    reason naming both runs. Otherwise the verdict stands."""
    for name, env in get_backend(trial.framework).kernel_alternatives.items():
        again = alternative_verdict(trial, ref, env, k_steps)
        if isinstance(again, parity.Verdict) and again.verdict == "pass":
            setting = " ".join(f"{k}={v}" for k, v in env.items())
            where = ref.floor.machine if ref.floor is not None else "this CPU"
            return replace(verdict, verdict="differs", reason=(
                f"a framework difference on this CPU ({where}), not a dlbench failure: with its default"
                f" kernels {trial.framework} errs by {verdict.worst_rel_err:.2g} ({verdict.worst_tensor});"
                f" with {name} ({setting}) it is within the bound (worst {again.worst_rel_err:.2g}). Its"
                f" numbers are {trial.framework}'s as it runs by default here. Default-kernel verdict:"
                f" {verdict.reason}"))
    return verdict


def _judged_by_grads(trial: TrialSpec) -> bool:
    """Whether the trial's parity is its loss and gradients (else eval-mode logits, probed
    through a train-scenario probe)."""
    return subjects.record(trial).parity == "grads"


def alternative_arrays(trial: TrialSpec, env: dict[str, str], k_steps: int) -> dict[str, Any] | str:
    """The trial's fixed batch (and K-step trajectory) probed in a process of its own with `env`
    set: {"loss", "grads", and the probe's other arrays}, or the reason it failed."""
    probed = _yielding(trial if _judged_by_grads(trial) else replace(trial, scenario="train", options=NoOptions()), env)
    with tempfile.TemporaryDirectory(prefix="dlbench-diagnose-") as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({"trials": [to_dict(probed)], "k_steps": k_steps}))
        error = run_probe(request, Path(tmp), ProbeLimits(trial.timeout_s, trial.memory_limit_bytes), env=env)
        out = Path(tmp) / "0.npz"
        if not out.exists():
            return error or "the probe wrote no result"
        loss, grads, extra = protocol.load_grads(out)
    return {"loss": loss, "grads": grads, **extra}


def _yielding(trial: TrialSpec, env: dict[str, str]) -> TrialSpec:
    """The trial without the framework options whose values set a variable of `env`
    (Option.environment, applied in the probe after the parent's): the alternative's setting
    must hold in its probe (a `tensorflow.onednn=on` trial probed with oneDNN off)."""
    declared = get_backend(trial.framework).options
    kept = {n: v for n, v in trial.policy.options.items()
            if n not in declared or not set(declared[n].environment.get(v, {})) & set(env)}
    return trial if kept == trial.policy.options else replace(trial, policy=replace(trial.policy, options=kept))


def alternative_verdict(trial: TrialSpec, ref: reference.Reference, env: dict[str, str],
                        k_steps: int) -> parity.Verdict | str:
    """The trial's fixed batch probed with `env` set, judged like the trial (gradients, or the
    eval-mode logits of an inference trial); the reason where the probe failed."""
    arrays = alternative_arrays(trial, env, k_steps)
    if isinstance(arrays, str):
        return arrays
    loss, grads, extra = arrays["loss"], arrays["grads"], arrays
    if not _judged_by_grads(trial):
        if ref.init_logits is None or "init_logits" not in extra:
            return "no eval-mode logits to compare"
        return parity.compare_infer_logits({"predict": extra["init_logits"]}, ref.init_logits,
                                           trial.workload.numerics.dtype, reference=ref.label, floor=ref.floor)
    return parity.compare_grads(loss, grads, ref.loss, ref.grads,
                                precision.parity_dtype(trial.precision, trial.workload.numerics.dtype),
                                workload=trial.workload.name, reference=ref.label, floor=ref.floor)


def ceilings(specs: list[TrialSpec], on_message: Callable[[str], None]) -> Ceilings:
    """The CPU matmul ceiling and memory bandwidth for every thread count in the sweep (cached
    per machine)."""
    out = Ceilings()
    for threads in sorted({t.policy.threads or len(os.sched_getaffinity(0)) for t in specs}):
        if ceiling.needs_measuring(threads):
            on_message(f"measuring this machine's float32 matmul ceiling with {threads} thread(s)")
        out.matmul[threads] = ceiling.ceiling(threads)
        if bandwidth.needs_measuring(threads):
            on_message(f"measuring this machine's memory bandwidth with {threads} thread(s)")
        out.bandwidth[threads] = bandwidth.bandwidth(threads)
    return out


def judge_efficiency(trial: TrialSpec, result: TrialResult, ceilings: Ceilings) -> None:
    """mfu on accelerators in the peak table; matmul_ceiling_share against the measured CPU
    ceiling for the trial's thread count; each null with its reason otherwise. The FLOP/s are
    the trial's achieved ones, or a generate trial's decode steps' (decode_flops_per_s). Then the
    memory bandwidth (judge_bandwidth)."""
    judge_bandwidth(trial, result, ceilings)
    achieved = result.metrics.get("achieved_flops_per_s")
    if achieved is None:
        achieved = result.metrics.get("decode_flops_per_s")
    if achieved is None:
        return
    gpus = [g["name"] for g in result.framework_info.get("gpus", [])]
    value, why = efficiency.mfu(achieved, gpus, trial.precision)
    result.metrics["mfu"] = value
    if value is None:
        result.notes["mfu"] = why
    warning = efficiency.busy_but_idle(result.metrics.get("gpu_utilization_mean"), value)
    if warning is not None:
        result.warnings.append(warning)
    threads = _threads(trial, result)
    data, why = ceilings.matmul.get(threads) or ceiling.ceiling(threads)
    if data is None or gpus:
        result.metrics["matmul_ceiling_share"] = None
        result.notes["matmul_ceiling_share"] = why or "on an accelerator: see mfu"
        return
    result.metrics["matmul_ceiling_share"] = achieved / data["flops_per_s"]
    result.metrics["matmul_ceiling_flops_per_s"] = data["flops_per_s"]
    result.notes["matmul_ceiling"] = ceiling.describe(data)


def _threads(trial: TrialSpec, result: TrialResult) -> int:
    return len(result.policy_effective.get("cores") or []) or trial.policy.threads or len(os.sched_getaffinity(0))


def judge_bandwidth(trial: TrialSpec, result: TrialResult, ceilings: Ceilings) -> None:
    """On CPUs, for a trial with FLOP/s or decode steps: the measured memory bandwidth for its
    thread count (`memory_bandwidth_bytes_per_s`, the roofline's other ceiling) and, for decode
    steps, the least time one can take (`tpot_bound_s` = bytes / bandwidth) and the median
    TPOT's share of it (`tpot_bound_share`); nulls with the reason otherwise."""
    m = result.metrics
    decode_bytes = m.get("decode_bytes_per_step")
    if m.get("achieved_flops_per_s") is None and decode_bytes is None:
        return
    threads = _threads(trial, result)
    data, why = ceilings.bandwidth.get(threads) or bandwidth.bandwidth(threads)
    if result.framework_info.get("gpus"):
        data, why = None, "on an accelerator: the host's memory bandwidth does not bound it"
    if data is None:
        m["memory_bandwidth_bytes_per_s"] = None
        result.notes["memory_bandwidth"] = why
        if decode_bytes is not None:
            m["tpot_bound_s"] = m["tpot_bound_share"] = None
        return
    m["memory_bandwidth_bytes_per_s"] = data["bytes_per_s"]
    result.notes["memory_bandwidth"] = bandwidth.describe(data)
    if decode_bytes is not None:
        bound = roofline.memory_bound_s(decode_bytes, data["bytes_per_s"])
        m["tpot_bound_s"] = bound
        m["tpot_bound_share"] = roofline.bound_share(bound, m.get("tpot_p50_s"))
