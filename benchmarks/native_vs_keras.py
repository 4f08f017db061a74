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
        --repeats 3 --dataset-size 16384 --epochs 2 --json out.json

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
    if args.dataset_size:
        spec = dataclasses.replace(spec, dataset_size=args.dataset_size)
    options = {"steps_per_call": k} if k else {}
    policy = Policy(mode="compiled", threads=args.threads, options=options)
    t = TrialSpec(workload=spec, framework=framework, policy=policy, epochs=args.epochs,
                  warmup_epochs=1, chunk_steps=args.chunk_steps, trial_id=0)
    t.validate()
    return t


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
    p.add_argument("--dataset-size", type=int, default=0, help="0: the preset's")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--chunk-steps", type=int, default=16)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
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
