"""torch's CPU step time under load against its OpenMP wait policy (issue 16, docs/benchmarks.md
"detect"): per variant, one fresh process builds dlbench's Program for a workload at a preset,
warms it up with 4 steps and times 16 (wall ms and process CPU ms per step, the load average
beside them); the variants run in rounds, interleaved, so load that drifts lands on each alike.

Variants: `FRAMEWORK:MODE[:threads=N][:ENV=VALUE...]`, e.g. torch's default (libgomp spins at the
end of every parallel region before it sleeps), `OMP_WAIT_POLICY=PASSIVE` (it sleeps at once), one
thread (no barrier), and JAX for scale:

    python benchmarks/omp_wait_policy.py --rounds 3 torch:eager torch:eager:OMP_WAIT_POLICY=PASSIVE \
        torch:eager:threads=1 jax:compiled torch:compiled torch:compiled:OMP_WAIT_POLICY=PASSIVE

Not a test: numbers from it go to docs/benchmarks.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def child(framework: str, mode: str, threads: int | None, workload: str, preset: str) -> None:
    import numpy as np

    from dlbench import workloads
    from dlbench.backends import get_backend, support
    from dlbench.runner.child import setup_environment
    from dlbench.runner.plan import workload_spec
    from dlbench.spec import Policy, TrialSpec
    from dlbench.workloads.data import batch_indices, epoch_order

    spec = workload_spec(workload, preset)
    policy = Policy(mode=mode, threads=threads)
    trial = TrialSpec(workload=spec, framework=framework, policy=policy)
    backend = get_backend(framework)
    setup_environment(trial, backend)
    backend.import_framework()
    backend.configure(policy)
    program = support.build(trial, backend)
    state = support.init(trial, workloads.get(trial.workload.name), program)
    program.load(workloads.get(workload).make_dataset(spec))
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    batches = program.batches(np.concatenate([rows] * (1 + 20 // len(rows))))
    state, losses = program.train_chunk(state, batches, 4)
    backend.sync(state, losses)
    steps = 16
    wall, cpu = time.perf_counter(), time.process_time()
    state, losses = program.train_chunk(state, batches, steps)
    backend.sync(state, losses)
    print(json.dumps({"wall_ms": (time.perf_counter() - wall) / steps * 1e3,
                      "cpu_ms": (time.process_time() - cpu) / steps * 1e3, "load1": os.getloadavg()[0]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workload", default="detect")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        framework, mode, threads = args.variants
        child(framework, mode, int(threads) or None, args.workload, args.preset)
        return
    found: dict[str, list[dict[str, float]]] = {v: [] for v in args.variants}
    for _ in range(args.rounds):
        for variant in args.variants:
            framework, mode, *rest = variant.split(":")
            threads = next((int(r.split("=")[1]) for r in rest if r.startswith("threads=")), 0)
            env = {**os.environ, **dict(r.split("=", 1) for r in rest if not r.startswith("threads="))}
            out = subprocess.run([sys.executable, __file__, "--child", "--workload", args.workload, "--preset",
                                  args.preset, framework, mode, str(threads)],
                                 env=env, capture_output=True, text=True, check=True)
            found[variant].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(variant, found[variant][-1], flush=True)
    for variant, runs in found.items():
        print(f"{variant:45s} wall ms/step median {statistics.median(r['wall_ms'] for r in runs):7.1f}"
              f"  CPU ms/step median {statistics.median(r['cpu_ms'] for r in runs):6.1f}"
              f"  load {min(r['load1'] for r in runs):.1f}-{max(r['load1'] for r in runs):.1f}")


if __name__ == "__main__":
    main()
