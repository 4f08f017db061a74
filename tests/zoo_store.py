"""A store shaped like `dlbench run -w all -f all --preset tiny` on a CPU, written in code (no
worker process): 5 workloads x 6 frameworks ok (each workload with its own model size, batch
size and dataset, as the tiny presets have), ONNX Runtime unsupported for training, every trial
with the metrics, notes, raw series and phase events a real trial stores, timed windows too
short (the tiny preset's). Report and terminal-layout tests read it."""

from __future__ import annotations

import math
from pathlib import Path

from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

GIB = 1024**3
# (workload, model size, batch size, dataset size): the tiny presets' shapes
WORKLOADS = (("mlp", "tiny", 32, 256), ("cnn", "default", 32, 256), ("resnet", "tiny", 16, 64),
             ("transformer", "tiny", 16, 128), ("node", "tiny", 32, 128))
FRAMEWORKS = ("torch", "tensorflow", "jax", "keras-jax", "keras-torch", "keras-tensorflow")
UNSUPPORTED = "onnxruntime"
NO_GPU = "no GPU: NVML unavailable: NVMLError_LibraryNotFound: NVML Shared Library Not Found"
NO_RAPL = "RAPL unavailable: /sys/class/powercap does not exist (no powercap driver, or a VM/container without it)"
PHASES = ("import", "build", "data", "compile", "first_step", "warmup", "parity", "timed", "evaluate")
PARITY = {"verdict": "pass", "reference": "float64", "tolerance": {"rel_err": 1e-3, "cosine": 0.99999}}


def _spec(workload: tuple[str, str, int, int], framework: str, repeat: int) -> TrialSpec:
    name, size, batch, dataset = workload
    return TrialSpec(workload=WorkloadSpec(name=name, model_size=size, batch_size=batch, dataset_size=dataset),
                     framework=framework, policy=Policy(mode="compiled"), repeat=repeat)


def _result(w: int, f: int, repeat: int) -> TrialResult:
    """Plausible numbers spread over several orders of magnitude (the widest cells a real run
    prints), the series and events the charts read."""
    _, _, batch, dataset = WORKLOADS[w]
    steps = dataset // batch
    jitter = 1 + 0.03 * repeat  # every metric differs a little between repeats, as measured ones do
    samples_per_s = 123456.7 / (1 + 7 * w) / (1 + f) * jitter
    train_s = steps * batch / samples_per_s
    step_s = train_s / steps
    import_s, build_s, data_s, first_s, warmup_s = [v * jitter for v in (2.5 + f, 0.3 * (w + 1), 0.05, 4.0 + 3 * f, 0.4)]
    ttfs = import_s + build_s + data_s + first_s + 1.2
    metrics: dict[str, float | None] = {
        "samples_per_s": samples_per_s, "train_s": train_s, "accuracy": (0.1 + 0.8 * ((w + f) % 5) / 5) * jitter,
        "rss_initial_bytes": (0.4 + 0.3 * f) * GIB * jitter, "rss_peak_bytes": (0.9 + 0.35 * f + 0.1 * w) * GIB * jitter,
        "time_to_first_step_s": ttfs, "import_s": import_s, "build_s": build_s, "data_s": data_s,
        "first_step_s": first_s, "compile_estimate_s": first_s - step_s, "warmup_s": warmup_s,
        "step_s_median": step_s, "achieved_flops_per_s": 2.5e9 * samples_per_s / 1000,
        "matmul_ceiling_share": 0.012 * (1 + f), "mfu": None, "timed_steps": float(steps),
        "timed_window_short": 1.0, "vram_initial_bytes": None, "vram_peak_bytes": None, "energy_j": None,
        "cpu_energy_j": None, "allocated_peak_bytes": None,
    }
    notes = {"vram_peak_bytes": NO_GPU, "vram_initial_bytes": NO_GPU, "energy_j": NO_GPU, "cpu_energy_j": NO_RAPL,
             "allocated_peak_bytes": "no GPU allocator: on the CPU the frameworks keep no device counters",
             "mfu": "no accelerator: on CPUs see matmul_ceiling_share"}
    t, events, rss = 0.0, [], []
    for phase in PHASES:
        span = {"import": import_s, "build": build_s, "data": data_s, "first_step": first_s, "warmup": warmup_s,
                "timed": train_s}.get(phase, 0.2)
        events.append({"event": "phase", "name": phase, "state": "start", "t": 100.0 + t})
        if phase == "timed":
            events += [{"event": "chunk", "epoch": 1, "steps": 1, "seconds": step_s} for _ in range(steps)]
        t += span
        events.append({"event": "phase", "name": phase, "state": "end", "t": 100.0 + t})
    for i in range(60):
        x = t * i / 59
        rss.append((x, (0.3 + 0.6 * f / 5 + 0.5 * (1 - math.exp(-x))) * GIB))
    series = {"rss_bytes": rss,
              "loss": [(float(i), 2.3 * math.exp(-0.1 * i * (1 + f / 10))) for i in range(steps)],
              # (end of the chunk in seconds since the timed window began, seconds per step)
              "step_s": [((i + 1) * step_s, step_s * (1 + 0.05 * (i % 3))) for i in range(steps)]}
    warning = (f"timed window too short to time: {steps} step(s) in {train_s:.2f} s (needs at least 5 steps"
               " and 1 s); its numbers are indicative only: use a larger preset")
    return TrialResult(status="ok", metrics=metrics, notes=notes, series=series, events=events,
                       warnings=[warning], parity={**PARITY, "worst_rel_err": 1.5e-7 * (1 + f + w)})


def zoo_store(path: Path, repeats: int = 1, workloads: tuple[str, ...] | None = None,
              frameworks: tuple[str, ...] = (*FRAMEWORKS, UNSUPPORTED),
              command: str = "dlbench run -w all -f all --preset tiny --repeats 1",
              foreign_cpu_share: float | None = None) -> Store:
    """One run: every workload x framework (and ONNX Runtime, unsupported) x `repeats`; or only
    the named workloads and frameworks (`dlbench run`'s default suite: cnn x torch, tensorflow, jax);
    with `foreign_cpu_share`, every trial's interference record says other processes took that
    share of the CPU (the store of a run on a busy machine where it is over the threshold)."""
    store = Store(path)
    run = store.create_run(command, {}, False)
    seq = 0
    for repeat in range(repeats):
        for w, workload in enumerate(WORKLOADS):
            if workloads is not None and workload[0] not in workloads:
                continue
            for f, framework in enumerate(frameworks):
                trial = store.add_trial(run, seq, _spec(workload, framework, repeat))
                seq += 1
                if framework == UNSUPPORTED:
                    store.finish_trial(trial, TrialResult(
                        status="unsupported", error=f"{UNSUPPORTED} cannot run the train scenario: it lacks the"
                                                    " train capability (has: infer)"))
                else:
                    result = _result(w, f, repeat)
                    if foreign_cpu_share is not None:
                        result.metrics["foreign_cpu_share"] = foreign_cpu_share
                    store.finish_trial(trial, result)
    return store
