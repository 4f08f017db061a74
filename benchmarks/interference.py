"""How much each framework loses beside a CPU hog of known intensity, how much foreign CPU each
trial measured, and the busy threshold that follows (issue 45; docs/benchmarks.md "Interference").

Runs dlbench trials (the real worker: monitors, compiled mode, all cores) of torch, TensorFlow and
JAX on mlp and cnn beside a hog of 0, 0.5, 1 and 2 busy cores: busy-loop processes started just
before the trial and stopped after it, a full core each, the half core busy 5 ms of every 10 ms.
Every configuration x hog level runs once per round, in a shuffled order, so load that drifts
lands on all alike; a first untimed round primes each framework's page cache and compile cache.

Per trial it keeps the throughput (samples/s of the timed window), the foreign CPU share and
the rest of the interference record the trial measured, and the CPU the hog actually got. Then:
- each framework x workload x level: its throughput against its own quiet median;
- the proposed threshold: between the quiet trials' own foreign share (its 95th percentile, so
  that at most 5 % of quiet trials are flagged) and the harm onset (the least foreign share at
  which a hogged trial ran more than 5 % slower than its quiet median and below every quiet
  trial of its configuration): their midpoint where the first lies under the second; the quiet
  floor where it does not (then the harmed trials it misses are counted);
- the detection rates of issue 45's done-means at the proposed and at the current threshold:
  the share of trials beside a 1- or 2-core hog flagged busy (>= 95 % wanted) and of quiet trials
  flagged (<= 5 % wanted), per framework.

    python benchmarks/interference.py --out docs/interference    # the quiet-window run
    python benchmarks/interference.py --quick --frameworks jax   # a minute: does it run?

Writes OUT.json (every trial, the summary) and OUT.md (the tables for docs/benchmarks.md). Not a
test: its numbers mean something only on a machine with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import multiprocessing
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from dlbench.analysis import interference
from dlbench.runner import spawn
from dlbench.runner.executor import warm_import
from dlbench.runner.plan import Sweep, estimates, learn, make_plan
from dlbench.spec import TrialSpec

LEVELS = (0.0, 0.5, 1.0, 2.0)
HOG_PERIOD_S = 0.01
SLOWDOWN = 0.05  # "falls more than 5 %"
QUIET_QUANTILE = 0.95  # at most 5 % of quiet trials flagged

# -- the hog ------------------------------------------------------------------------------------


def hog(duty: float) -> None:
    """Busy `duty` of every HOG_PERIOD_S (1.0: always), until killed."""
    busy = duty * HOG_PERIOD_S
    while True:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < busy:
            pass
        if duty < 1.0:
            time.sleep(HOG_PERIOD_S - busy)


class Hog:
    """`level` busy cores as processes: one per whole core, one more for the fraction. Forked
    from this process: spinning at once, with no interpreter start or import of their own."""

    def __init__(self, level: float) -> None:
        duties = [1.0] * int(level) + ([level - int(level)] if level - int(level) > 1e-9 else [])
        fork = multiprocessing.get_context("fork")
        self.procs = [fork.Process(target=hog, args=(d,), daemon=True) for d in duties]
        for p in self.procs:
            p.start()
        self.t0 = time.monotonic()

    def stop(self) -> float:
        """Stop; the cores the hog actually got while it ran."""
        cpu = 0.0
        for p in self.procs:
            try:
                t = psutil.Process(p.pid).cpu_times()
                cpu += t.user + t.system
            except psutil.Error:
                pass
            p.kill()
            p.join()
        wall = time.monotonic() - self.t0
        return cpu / wall if wall > 0 else 0.0


# -- the trials -----------------------------------------------------------------------------------


@dataclass
class Row:
    framework: str
    workload: str
    level: float
    round: int
    status: str
    samples_per_s: float | None
    foreign_cpu_share: float | None
    steal_share: float | None
    run_queue_mean: float | None
    self_cpu_share: float | None
    train_s: float | None
    hog_cores: float
    error: str | None


def trials(args: argparse.Namespace) -> list[TrialSpec]:
    sweep = Sweep(workloads=tuple(args.workloads.split(",")), frameworks=tuple(args.frameworks.split(",")),
                  frameworks_explicit=True, modes=("compiled",), preset=args.preset, repeats=1,
                  compile_cache="warm", timeout_s=args.timeout)
    plan = make_plan(sweep)
    skipped = [f"{t.spec.workload.name}/{t.spec.framework}: {t.reason}" for t in plan.trials if t.status != "pending"]
    if skipped:
        raise SystemExit("cannot run: " + "; ".join(skipped))
    return [planned.spec for planned in plan.pending]


def run_one(spec: TrialSpec, level: float, rnd: int, workdir: Path) -> Row:
    hogs = Hog(level)
    try:
        result = spawn.run_trial(spec, workdir)
    finally:
        got = hogs.stop()
    m = result.metrics
    return Row(spec.framework, spec.workload.name, level, rnd, result.status, m.get("samples_per_s"),
               m.get(interference.FOREIGN_CPU_SHARE), m.get(interference.STEAL_SHARE), m.get(interference.RUN_QUEUE),
               m.get(interference.SELF_CPU_SHARE), m.get("train_s"), got, result.error)


def run_all(args: argparse.Namespace, specs: list[TrialSpec], levels: tuple[float, ...]) -> list[Row]:
    rows: list[Row] = []
    total = len(specs) * len(levels) * args.repeats
    done = 0
    with tempfile.TemporaryDirectory(prefix="dlbench-interference-") as tmp:
        for name in dict.fromkeys(s.framework for s in specs):
            warm_import(name, print)
        if not args.quick:  # prime the compile cache and the page cache, untimed, unrecorded
            for spec in specs:
                print(f"priming {spec.framework}/{spec.workload.name}", flush=True)
                run_one(spec, 0.0, -1, Path(tmp))
        for rnd in range(args.repeats):
            order = [(s, level) for s in specs for level in levels]
            random.Random(args.seed + rnd).shuffle(order)
            for tid, (spec, level) in enumerate(order):
                row = run_one(replace(spec, trial_id=tid, repeat=rnd), level, rnd, Path(tmp))
                rows.append(row)
                done += 1
                share = "–" if row.foreign_cpu_share is None else f"{row.foreign_cpu_share:.0%}"
                print(f"[{done}/{total}] {row.framework}/{row.workload} hog {level:g}: {row.status}"
                      f" {row.samples_per_s or 0:.1f} samples/s, foreign CPU {share}, hog got {row.hog_cores:.2f}"
                      " cores", flush=True)
    return rows


# -- the analysis -----------------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile: the smallest value with at least q of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(q * len(ordered)) - 1, 0)]


def ceil_to(x: float, step: float = 0.01) -> float:
    return math.ceil(x / step - 1e-9) * step


def flagged(row: Row, threshold: float) -> bool:
    share, steal = row.foreign_cpu_share or 0.0, row.steal_share or 0.0
    return share > threshold or steal > interference.BUSY_STEAL_SHARE


def analyse(rows: list[Row]) -> dict[str, Any]:
    ok = [r for r in rows if r.status == "ok" and r.samples_per_s and r.foreign_cpu_share is not None]
    configs = sorted({(r.framework, r.workload) for r in ok})
    quiet_by = {c: [r for r in ok if (r.framework, r.workload) == c and r.level == 0] for c in configs}
    median = {c: statistics.median(r.samples_per_s for r in q) for c, q in quiet_by.items() if q}  # type: ignore[misc]
    floor = {c: min(r.samples_per_s for r in q) / median[c] for c, q in quiet_by.items() if q}  # type: ignore[type-var]

    def ratio(r: Row) -> float | None:
        c = (r.framework, r.workload)
        return r.samples_per_s / median[c] if c in median and r.samples_per_s else None

    quiet = [r for r in ok if r.level == 0]
    q_floor = quantile([r.foreign_cpu_share for r in quiet], QUIET_QUANTILE) if quiet else None  # type: ignore[misc]
    harmed = [r for r in ok if r.level > 0 and (x := ratio(r)) is not None
              and x < min(1 - SLOWDOWN, floor[(r.framework, r.workload)])]
    onset = min((r.foreign_cpu_share for r in harmed), default=None)  # type: ignore[type-var]
    threshold, why = propose(q_floor, onset)
    return {"threshold": threshold, "why": why, "quiet_floor": q_floor, "harm_onset": onset,
            "harmed": len(harmed), "missed_harmed": sum(not flagged(r, threshold) for r in harmed),
            "table": table_rows(ok, ratio, threshold),
            "detection": {t: detection(ok, t) for t in sorted({threshold, interference.BUSY_FOREIGN_SHARE})}}


def propose(q_floor: float | None, onset: float | None) -> tuple[float, str]:
    if q_floor is None:
        return interference.BUSY_FOREIGN_SHARE, "no quiet trial: the current threshold kept"
    if onset is None:
        return ceil_to(q_floor + 0.02), ("no hogged trial ran more than 5 % slower than its quiet trials: the quiet"
                                         f" trials' {QUIET_QUANTILE:.0%} foreign share plus 2 points")
    if q_floor < onset:
        return ceil_to((q_floor + onset) / 2), (f"midway between the quiet trials' {QUIET_QUANTILE:.0%} foreign share"
                                                f" ({q_floor:.1%}) and the harm onset ({onset:.1%})")
    return ceil_to(q_floor), (f"the quiet trials' own foreign share ({q_floor:.1%}) reaches the harm onset ({onset:.1%}):"
                              " the quiet floor, so that at most 5 % of quiet trials are flagged; harmed trials under it"
                              " go unflagged")


def table_rows(ok: list[Row], ratio: Any, threshold: float) -> list[dict[str, Any]]:
    out = []
    for key in sorted({(r.framework, r.workload, r.level) for r in ok}):
        group = [r for r in ok if (r.framework, r.workload, r.level) == key]
        ratios = [x for r in group if (x := ratio(r)) is not None]
        shares = [r.foreign_cpu_share for r in group]
        out.append({"framework": key[0], "workload": key[1], "hog_cores": key[2], "n": len(group),
                    "throughput_vs_quiet": statistics.median(ratios) if ratios else None,
                    "throughput_min": min(ratios, default=None), "foreign_share_median": statistics.median(shares),
                    "foreign_share_min": min(shares), "foreign_share_max": max(shares),  # type: ignore[type-var]
                    "hog_got_cores": statistics.median(r.hog_cores for r in group),
                    "self_cpu_share": statistics.median(r.self_cpu_share or 0.0 for r in group),
                    "flagged": sum(flagged(r, threshold) for r in group)})
    return out


def detection(ok: list[Row], threshold: float) -> dict[str, dict[str, Any]]:
    out = {}
    for fw in sorted({r.framework for r in ok}):
        hogged = [r for r in ok if r.framework == fw and r.level >= 1]
        quiet = [r for r in ok if r.framework == fw and r.level == 0]
        out[fw] = {"hogged_flagged": sum(flagged(r, threshold) for r in hogged), "hogged": len(hogged),
                   "quiet_flagged": sum(flagged(r, threshold) for r in quiet), "quiet": len(quiet)}
        hit = out[fw]["hogged_flagged"] / len(hogged) if hogged else None
        false = out[fw]["quiet_flagged"] / len(quiet) if quiet else None
        out[fw]["meets"] = hit is not None and false is not None and hit >= 0.95 and false <= 0.05
    return out


def markdown(summary: dict[str, Any], meta: dict[str, Any]) -> str:
    pct = lambda x: "–" if x is None else f"{x:.0%}"  # noqa: E731
    lines = [f"Machine: {meta['cpu']}, {meta['cpus']} CPUs; load before the run {meta['load_before']:.2f};"
             f" {meta['command']}", "",
             "| framework | workload | hog cores | n | throughput vs quiet median (min) | foreign CPU median [min, max]"
             " | hog got cores | flagged |", "|---|---|---|---|---|---|---|---|"]
    for r in summary["table"]:
        lines.append(f"| {r['framework']} | {r['workload']} | {r['hog_cores']:g} | {r['n']} |"
                     f" {pct(r['throughput_vs_quiet'])} ({pct(r['throughput_min'])}) |"
                     f" {pct(r['foreign_share_median'])} [{pct(r['foreign_share_min'])}, {pct(r['foreign_share_max'])}] |"
                     f" {r['hog_got_cores']:.2f} | {r['flagged']}/{r['n']} |")
    lines += ["", f"Proposed busy threshold: **{summary['threshold']:.0%}** foreign CPU ({summary['why']});"
              f" quiet trials' {QUIET_QUANTILE:.0%} share {pct(summary['quiet_floor'])}, harm onset"
              f" {pct(summary['harm_onset'])}, {summary['harmed']} harmed trial(s), {summary['missed_harmed']} of them"
              " unflagged at the proposal.", "",
              "| threshold | framework | beside a 1- or 2-core hog flagged | quiet flagged | done-means met |",
              "|---|---|---|---|---|"]
    for t, by_fw in summary["detection"].items():
        for fw, d in by_fw.items():
            hit = d["hogged_flagged"] / d["hogged"] if d["hogged"] else None
            false = d["quiet_flagged"] / d["quiet"] if d["quiet"] else None
            lines.append(f"| {float(t):.0%} | {fw} | {d['hogged_flagged']}/{d['hogged']} ({pct(hit)}) |"
                         f" {d['quiet_flagged']}/{d['quiet']} ({pct(false)}) | {'yes' if d['meets'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frameworks", default="torch,tensorflow,jax")
    ap.add_argument("--workloads", default="mlp,cnn")
    ap.add_argument("--levels", default=",".join(f"{x:g}" for x in LEVELS), help="hog cores, e.g. 0,0.5,1,2")
    ap.add_argument("--repeats", type=int, default=2,
                    help="rounds, each every configuration at every level (default 2: 52 min on 2 quiet cores,"
                         " 2026-12-07, torch's hogged trials the longest; 3 for firmer rates, about 75)")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per trial")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="does it run: the tiny preset, levels 0 and 2, one round, no priming round")
    ap.add_argument("--out", default="interference", help="writes OUT.json and OUT.md")
    args = ap.parse_args()
    if args.quick:
        args.preset, args.repeats = "tiny", 1
        if args.levels == ",".join(f"{x:g}" for x in LEVELS):
            args.levels = "0,2"
    levels = tuple(float(x) for x in args.levels.split(","))
    specs = trials(args)
    rough = sum(s for s, _ in estimates(specs, learn([]))) * len(levels) * args.repeats
    print(f"{len(specs) * len(levels) * args.repeats} trials; dlbench's rough estimate {rough / 60:.0f} min quiet"
          " (the hogged ones take longer)", flush=True)
    meta = {"command": " ".join(["python", *sys.argv]), "cpu": _cpu_model(), "cpus": os.cpu_count(),
            "load_before": os.getloadavg()[0], "levels": levels, "repeats": args.repeats, "preset": args.preset,
            "threshold_now": interference.BUSY_FOREIGN_SHARE, "started": time.time()}
    rows = run_all(args, specs, levels)
    meta["minutes"] = (time.time() - meta["started"]) / 60
    summary = analyse(rows)
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "summary": summary,
                                                    "trials": [asdict(r) for r in rows]}, indent=1))
    text = markdown(summary, meta)
    out.with_suffix(".md").write_text(text)
    print(text)
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')} ({meta['minutes']:.1f} min)")
    return 0


def _cpu_model() -> str:
    from dlbench.machine import cpu_model

    return cpu_model()


if __name__ == "__main__":
    sys.exit(main())
