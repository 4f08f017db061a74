"""Data parallelism around the trial, the worker's half: device setup and gradient
communication time. (The parent's half, scaling efficiency written to the store after a sweep,
is runner/annotate.py: the worker never imports the store.)"""

from __future__ import annotations

from dlbench.analysis import scaling
from dlbench.backends.base import Backend
from dlbench.results.records import TrialResult
from dlbench.spec import TrialSpec


def setup(trial: TrialSpec, backend: Backend, result: TrialResult) -> None:
    """Worker, after configure(): the backend makes its devices; what it made is recorded with
    the trial, and the trial's data says whether its scaling is measured or functional."""
    if trial.devices == 1:  # backends.support.unsupported has said yes to more devices
        return
    info = backend.data_parallel.setup(trial)
    result.policy_effective["data_parallel"] = {
        **info, "devices": trial.devices, "scaling": trial.scaling, "bn_sync": trial.bn_sync,
        "per_device_batch": trial.per_device_batch, "global_batch": trial.workload.batch_size,
    }
    cores = len(result.policy_effective.get("cores") or []) or 1
    result.notes["scaling_kind"] = scaling.scaling_kind(info.get("platform"), trial.devices, cores)


def comm_metrics(trial: TrialSpec, backend: Backend, before_s: float | None, result: TrialResult) -> None:
    """Seconds per step in gradient all-reduce over the timed window (it overlaps the backward
    pass where the framework buckets it, so it is time spent, not time added), and its share of
    the window; null with the reason where the framework does not expose it."""
    if trial.devices == 1:
        return
    after_s = backend.data_parallel.comm_s()
    steps = int(result.metrics.get("timed_steps") or 0)  # not the loss series: Keras stores one mean per chunk
    train_s = result.metrics.get("train_s")
    if before_s is None or after_s is None or not steps or not train_s:
        result.metrics["grad_comm_s_per_step"] = result.metrics["grad_comm_share"] = None
        result.notes["grad_comm_s_per_step"] = (
            f"not measurable: {trial.framework} runs its gradient all-reduce inside the compiled"
            " step, with no hook to time it")
        return
    result.metrics["grad_comm_s_per_step"] = (after_s - before_s) / steps
    result.metrics["grad_comm_share"] = (after_s - before_s) / train_s
