"""Each native framework against Keras running on it (issue 20): native / Keras samples/s.

Keras adds a layer on top of the same framework, so a native loop slower than Keras on that
framework leaves speed behind. Per workload, every (framework, variant) below runs as a dlbench
trial in a fresh process, in rounds with a shuffled order (interleaved: load that drifts during
the run lands on every variant alike); the ratio is of the medians over the rounds.

Variants: the native framework by its default train loop, `jax@K` / `tensorflow@K` with
`steps_per_call=K` forced (K=1 is the one-step-per-call loop this issue replaced), and
`keras-<framework>`.

    python benchmarks/native_vs_keras.py --workloads mlp,cnn,transformer,node,resnet \
        --variants jax,jax@1,keras-jax,tensorflow,tensorflow@1,keras-tensorflow \
        --repeats 3 --epoch-steps 96 --epochs 1 --json out.json

`--in-process` (for a loaded machine): one process per framework holds the native programs and
Keras's on that framework side by side (compiled and warmed once), and times whole epochs of
`train_chunk` calls in rounds, alternating the order: wall samples/s and samples per CPU-second
of the process (time.process_time; XLA's and TF's pool threads included), the latter less
sensitive to other processes' load. No trial machinery (parity, evaluation, sampling) around it.

Not a test: numbers from it go to docs/benchmarks.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dlbench import workloads
from dlbench.runner import spawn
from dlbench.spec import Policy, TrialSpec
from dlbench.workloads.contract import preset_spec


def trial(workload: str, variant: str, args: argparse.Namespace) -> TrialSpec:
    framework, _, k = variant.partition("@")
    spec = preset_spec(workloads.get(workload), args.preset)
    if args.epoch_steps:  # the same number of steps per epoch for every workload
        spec = dataclasses.replace(spec, dataset_size=args.epoch_steps * spec.batch_size)
    options = {"steps_per_call": k} if k else {}
    policy = Policy(mode="compiled", threads=args.threads, options=options)
    t = TrialSpec(workload=spec, framework=framework, policy=policy, epochs=args.epochs,
                  warmup_epochs=1, chunk_steps=args.chunk_steps, trial_id=0)
    t.validate()
    return t


def in_process(framework: str, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Every variant of `framework` (and keras-<framework>) in this process, interleaved."""
    from dlbench.backends import get_backend, support
    from dlbench.runner.child import setup_environment
    from dlbench.workloads.data import batch_indices, epoch_order

    variants = [v for v in args.variants.split(",") if v.partition("@")[0] in (framework, f"keras-{framework}")]
    out: dict[str, dict[str, list[float]]] = {}
    for w in args.workloads.split(","):
        if framework == "torch":
            # Each workload compiles afresh, as in a trial's own process: dynamo would otherwise
            # recompile the shared train_step with dynamic shapes after the first workload (and
            # Inductor 2.13 fails lowering detect's convolutions that way: ValueRangeError).
            import torch._dynamo

            torch._dynamo.reset()
        trials = {v: trial(w, v, args) for v in variants}
        for v, t in trials.items():
            setup_environment(t, get_backend(t.framework))
        programs = {}
        for v, t in trials.items():
            backend = get_backend(t.framework)
            backend.import_framework()
            backend.configure(t.policy)
            program = support.build(t, backend)
            state = support.init(t, workloads.get(w), program)
            program.load(workloads.get(w).make_dataset(t.workload))
            rows = batch_indices(epoch_order(t.workload.seed, 0, t.workload.dataset_size), t.workload.batch_size)
            program.compile(state, next(iter(program.batches(rows[:1]))))
            programs[v] = [backend, program, state, rows]
            epoch(programs[v], args.chunk_steps)  # warm-up: every compile happens here
        cells: dict[str, list[float]] = {f"{w}/load average": [os.getloadavg()[0]]}
        for r in range(args.repeats):
            for v in variants if r % 2 == 0 else variants[::-1]:
                wall, cpu = epoch(programs[v], args.chunk_steps)
                samples = len(programs[v][3]) * trials[v].workload.batch_size
                cells.setdefault(f"{w}/{v}", []).append(samples / wall)
                cells.setdefault(f"{w}/{v} per cpu-s", []).append(samples / cpu)
        cells[f"{w}/load average"].append(os.getloadavg()[0])
        for key, values in cells.items():
            print(f"{key:40s} median {statistics.median(values):10.0f}  {[round(x) for x in values]}", flush=True)
        out.update(cells)
    return out


def epoch(cell: list[Any], chunk: int) -> tuple[float, float]:
    """One epoch of train_chunk calls synced at each chunk's end: (wall s, process CPU s)."""
    from dlbench.runner.timing import split_steps

    backend, program, state, rows = cell
    batches = program.batches(rows)
    wall, cpu = time.perf_counter(), time.process_time()
    for n in split_steps(len(rows), chunk):
        state, losses = program.train_chunk(state, batches, n)
        backend.sync(state, losses)
    cell[2] = state
    return time.perf_counter() - wall, time.process_time() - cpu


def run_one(t: TrialSpec, workdir: Path) -> dict[str, Any]:
    start = time.perf_counter()
    result = spawn.run_trial(t, workdir)
    return {"status": result.status, "error": result.error,
            "samples_per_s": result.metrics.get("samples_per_s"),
            "train_loop": result.policy_effective.get("train_loop"),
            "wall_s": time.perf_counter() - start, "load": os.getloadavg()[0]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="mlp,cnn,resnet,transformer,node")
    p.add_argument("--variants", default="jax,keras-jax,tensorflow,keras-tensorflow,torch,keras-torch")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--epoch-steps", type=int, default=0, help="steps per epoch (0: the preset's dataset size)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--chunk-steps", type=int, default=16)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--in-process", default=None, help="a native framework: its variants and Keras's on it in one process")
    args = p.parse_args()
    if args.in_process:
        result = in_process(args.in_process, args)
        if args.json:
            args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "epochs": result}, indent=1))
        for key in result:
            w, v = key.split(" ")[0].split("/")
            if key.endswith(("cpu-s", "load average")) or v.startswith("keras"):
                continue
            for suffix in ("", " per cpu-s"):
                keras = result.get(f"{w}/keras-{v.partition('@')[0]}{suffix}")
                if keras:
                    ratio = statistics.median(result[key + suffix]) / statistics.median(keras)
                    print(f"{w:12s} {v:14s} / keras{suffix or ' wall'}: {ratio:.2f}")
        return 0
    rng = random.Random(args.seed)
    cells = [(w, v) for w in args.workloads.split(",") for v in args.variants.split(",")]
    runs: dict[str, list[dict[str, Any]]] = {f"{w}/{v}": [] for w, v in cells}
    with tempfile.TemporaryDirectory(prefix="dlbench-native-vs-keras-") as tmp:
        for r in range(args.repeats):
            order = cells[:]
            rng.shuffle(order)
            for w, v in order:
                out = run_one(trial(w, v, args), Path(tmp))
                runs[f"{w}/{v}"].append(out)
                print(f"round {r + 1} {w:12s} {v:18s} {out['status']:8s} "
                      f"{out['samples_per_s'] or 0:10.1f} samples/s  load {out['load']:.1f}"
                      + (f"  {out['error']}" if out["status"] != "ok" else ""), flush=True)
                if args.json:
                    args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "runs": runs}, indent=1))
    print(table(runs, args))
    return 0


def median(values: list[dict[str, Any]]) -> float | None:
    ok = [x["samples_per_s"] for x in values if x["status"] == "ok" and x["samples_per_s"]]
    return statistics.median(ok) if ok else None


def table(runs: dict[str, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    """Median samples/s per cell and native / Keras for every native variant with a Keras
    counterpart in the run."""
    lines = ["| workload | variant | samples/s (median) | range | native / Keras |", "|---|---|---:|---|---:|"]
    for key, values in runs.items():
        w, v = key.split("/")
        framework = v.partition("@")[0]
        m = median(values)
        ok = [x["samples_per_s"] for x in values if x["status"] == "ok" and x["samples_per_s"]]
        keras = median(runs.get(f"{w}/keras-{framework}", [])) if not framework.startswith("keras") else None
        ratio = f"{m / keras:.2f}" if m and keras else ""
        span = f"{min(ok):,.0f}-{max(ok):,.0f}" if ok else "failed"
        lines.append(f"| {w} | {v} | {m or 0:,.0f} | {span} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
