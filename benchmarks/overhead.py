"""dlbench's own yardstick: is a dlbench trial as fast as a hand-written training loop?

Runs the minimal reference loops in benchmarks/reference/ interleaved with dlbench trials of the
same spec (same data, order, epochs, threads), in rounds with a shuffled order, each in a fresh
process, and prints the throughput ratio dlbench / hand-written per framework and mode.

    python benchmarks/overhead.py --frameworks torch,tensorflow,jax --modes compiled,eager \
        --repeats 3 --epochs 3 --threads 2 --json docs/overhead.json

`--plain` adds each framework's plainest tutorial loop (reference/*_cnn.py --plain; issue 50,
point 4) and prints dlbench / plain beside dlbench / hand-written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from dlbench.backends import get_backend
from dlbench.runner import spawn
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

HERE = Path(__file__).resolve().parent
NO_DONATE = "reference-no-donate"  # the JAX loop sharing dlbench's choices, its state not donated


def reference(framework: str, mode: str, args: argparse.Namespace, plain: bool = False,
              extra: tuple[str, ...] = ()) -> float:
    """The hand-written loop's samples/s: sharing dlbench's choices, or (`plain`) the plainest
    idiom a tutorial writes, its own data loading included; `extra` are the loop's own flags."""
    cmd = [sys.executable, str(HERE / "reference" / f"{framework}_cnn.py"), "--mode", mode, *(["--plain"] if plain else []),
           *extra,
           "--batch-size", str(args.batch_size), "--dataset-size", str(args.dataset_size),
           "--epochs", str(args.epochs), "--warmup-epochs", str(args.warmup_epochs),
           "--threads", str(args.threads), "--seed", "0"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("{")][-1]
    return float(json.loads(line)["samples_per_s"])


def dlbench_trial(framework: str, mode: str, args: argparse.Namespace, workdir: Path, data: str = "pipeline") -> float:
    trial = TrialSpec(
        workload=WorkloadSpec(batch_size=args.batch_size, dataset_size=args.dataset_size),
        framework=framework, policy=Policy(mode=mode, threads=args.threads, data=data),
        epochs=args.epochs, warmup_epochs=args.warmup_epochs, trial_id=0)
    trial.validate()
    result = spawn.run_trial(trial, workdir)
    if result.status != "ok":
        raise RuntimeError(f"{framework}/{mode}: {result.status}: {result.error}")
    value = result.metrics["samples_per_s"]
    assert value is not None
    return value


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frameworks", default="torch,tensorflow,jax")
    p.add_argument("--modes", default="compiled,eager")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--dataset-size", type=int, default=8192)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup-epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", default="pipeline",
                   help="dlbench's data placements to run (pipeline, device or both, comma-separated): "
                        "the hand-written loops index a tensor in memory, like --data device")
    p.add_argument("--plain", action="store_true",
                   help="also run each framework's plainest tutorial loop (reference/*_cnn.py --plain: a"
                        " DataLoader over a TensorDataset, tf.data from tensor slices, a NumPy loop for JAX) and"
                        " print dlbench / plain")
    p.add_argument("--jax-no-donate", action="store_true",
                   help="JAX: also the loop sharing dlbench's choices with its state not donated"
                        " (reference/jax_cnn.py --donate no): it separates donation, the one choice the plain loop"
                        " makes differently besides its own shuffle, and prints dlbench / that loop")
    p.add_argument("--seed", type=int, default=0, help="seed of the interleaving order")
    p.add_argument("--json", help="also write the raw numbers here")
    args = p.parse_args()
    pairs = [(f, m) for f in args.frameworks.split(",") for m in args.modes.split(",")
             if get_backend(f).modes().get(m) is None]
    rng = random.Random(args.seed)
    # "dlbench" is the default pipeline (the key older JSON files have), "dlbench-device" --data device
    kinds = ["reference", *("dlbench" if d == "pipeline" else f"dlbench-{d}" for d in args.data.split(",")),
             *(["plain"] if args.plain else []), *([NO_DONATE] if args.jax_no_donate else [])]

    def applies(framework: str, kind: str) -> bool:
        return kind != NO_DONATE or framework == "jax"

    raw: dict[str, dict[str, list[float]]] = {f"{f}/{m}": {k: [] for k in kinds if applies(f, k)} for f, m in pairs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            jobs = [(f, m, kind) for f, m in pairs for kind in kinds if applies(f, kind)]
            rng.shuffle(jobs)
            for f, m, kind in jobs:
                value = (reference(f, m, args, plain=kind == "plain") if kind in ("reference", "plain")
                         else reference(f, m, args, extra=("--donate", "no")) if kind == NO_DONATE
                         else dlbench_trial(f, m, args, Path(tmp), kind.partition("-")[2] or "pipeline"))
                raw[f"{f}/{m}"][kind].append(value)
                print(f"round {r + 1}/{args.repeats} {f}/{m} {kind}: {value:.1f} samples/s", flush=True)
    summary: dict[str, Any] = {"load_1m_end": os.getloadavg()[0]}
    print(f"\n{'framework/mode':24} {'dlbench kind':16} {'hand-written':>14} {'dlbench':>10} {'ratio':>7}  (median samples/s)")
    for key, v in raw.items():
        ref = statistics.median(v["reference"])
        summary[key] = dict(v)
        for kind in (k for k in kinds[1:] if k not in ("plain", NO_DONATE)):
            dlb = statistics.median(v[kind])
            summary[key]["ratio" if kind == "dlbench" else f"ratio-{kind}"] = dlb / ref
            print(f"{key:24} {kind:16} {ref:14.1f} {dlb:10.1f} {dlb / ref:7.3f}")
        if args.plain:  # dlbench's default trial against the tutorial's loop
            plain, dlb = statistics.median(v["plain"]), statistics.median(v["dlbench"])
            summary[key]["ratio-to-plain"] = dlb / plain
            print(f"{key:24} {'vs plain loop':16} {plain:14.1f} {dlb:10.1f} {dlb / plain:7.3f}")
        if NO_DONATE in v:  # dlbench (which donates) against the same loop not donating
            kept, dlb = statistics.median(v[NO_DONATE]), statistics.median(v["dlbench"])
            summary[key]["ratio-to-no-donate"] = dlb / kept
            summary[key]["donated-over-not"] = ref / kept
            print(f"{key:24} {'vs not donating':16} {kept:14.1f} {dlb:10.1f} {dlb / kept:7.3f}")
            print(f"{key:24} {'loop: donated / not':16} {kept:14.1f} {ref:10.1f} {ref / kept:7.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
