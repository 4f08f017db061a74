"""Terminal tables for time to accuracy (scenario converge: steps and time to the target per
workload x seed x framework, the curves, seed pairs compared across frameworks) and for the
input pipeline (stall share of paired pipeline/device trials)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from rich.table import Table

from dlbench.analysis.convergence import SeedPair, input_stalls, placement_key, seed_pairs
from dlbench.results.store import Store, TrialRow

# Points of a curve shown in a cell (evenly spaced, the last always).
CURVE_POINTS = 8
# One row of the converge table: workload, seed, framework, mode and the ok trials (repeats).
Row = tuple[str, int, str, str, list[TrialRow]]


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def curve_text(points: list[tuple[float, float]], x_fmt: str) -> str:
    """`x:accuracy` pairs, at most CURVE_POINTS of them (evenly spaced, the last kept)."""
    if len(points) > CURVE_POINTS:
        step = len(points) / CURVE_POINTS
        points = [points[round(i * step)] for i in range(CURVE_POINTS - 1)] + [points[-1]]
    return " ".join(f"{format(x, x_fmt)}:{a:.2f}" for x, a in points)


def _converge_groups(trials: list[TrialRow]) -> dict[tuple[Any, ...], list[TrialRow]]:
    groups: dict[tuple[Any, ...], list[TrialRow]] = defaultdict(list)
    for t in trials:
        s = t.spec
        if s.get("scenario") == "converge":
            w = s["workload"]
            groups[(w["name"], w["seed"], s["framework"], s["policy"]["mode"], w["batch_size"])].append(t)
    return groups


def converge_table(store: Store, run_ids: list[int]) -> tuple[Table | None, list[str]]:
    """Steps and time to the target per workload x seed x framework (medians over repeats),
    with the accuracy curves of the first ok repeat, and the seed-pair notes; `!` marks the
    steps of a framework in a pair more than K apart. Frameworks that cannot run the scenario
    get one note, not a row per seed."""
    trials = [t for rid in run_ids for t in store.trials(rid)]
    notes: list[str] = []
    rows: list[Row] = []
    for (w, seed, f, mode, _), group in sorted(_converge_groups(trials).items()):
        ok = [t for t in group if t.status == "ok"]
        notes.extend(_failure_note(w, seed, f, t) for t in group if t.status != "ok" and t.error)
        if ok:
            rows.append((w, seed, f, mode, ok))
    if not rows:
        return None, list(dict.fromkeys(notes))
    pairs = seed_pairs([(t.spec, t.metrics.get("steps_to_target")) for *_, ok in rows for t in ok])
    flagged = {(p.workload, p.seed, f) for p in pairs if p.flagged for f in (p.framework_a, p.framework_b)}
    with_mode = len({mode for _, _, _, mode, _ in rows}) > 1
    table = _converge_columns(rows, with_mode)
    for w, seed, f, mode, ok in rows:
        m = [t.metrics for t in ok]
        reached = sum(int(x.get("reached_target") or 0) for x in m)
        series = store.series(ok[0].id)
        flag = " !" if (w, seed, f) in flagged else ""
        table.add_row(
            w, str(seed), f, *([mode] if with_mode else []), f"{reached}/{len(ok)}",
            _fmt(_median([x.get("steps_to_target") for x in m]), ".0f") + flag,
            _fmt(_median([x.get("time_to_target_s") for x in m]), ".2f"),
            _fmt(_median([x.get("eval_s") for x in m]), ".2f"),
            _fmt(_median([x.get("accuracy") for x in m]), ".3f"),
            curve_text(series.get("accuracy", []), ".0f"),
            curve_text(series.get("accuracy_by_time", []), ".1f"),
        )
        notes.extend(f"{w}/{f} seed {seed}: {reason}" for t in ok
                     if (reason := (t.data.get("notes") or {}).get("steps_to_target")))
    return table, list(dict.fromkeys(notes)) + describe_pairs(pairs)


def _failure_note(workload: str, seed: int, framework: str, t: TrialRow) -> str:
    """A failed trial's cause with its workload and seed; an unsupported or skipped one's reason
    names the framework only (the reason itself names a workload where it is about one), so a
    framework that cannot run the scenario is one note however many workloads and seeds."""
    if t.status in ("unsupported", "skipped"):
        return f"{framework}: {t.status}: {t.error}"
    return f"{workload}/{framework} seed {seed}: {t.status}: {t.error}"


def _converge_columns(rows: list[Row], with_mode: bool) -> Table:
    """The empty table, its title naming the target(s); a mode column only when modes differ."""
    targets = sorted({f"{t.spec['target_accuracy']:g}" for *_, ok in rows for t in ok})
    table = Table(title=f"time to accuracy {', '.join(targets)} (converge; training time only, evaluation"
                        " apart; medians over repeats)")
    for h in ("workload", "seed", "framework", *(["mode"] if with_mode else []), "reached",
              "steps to target", "time to target s", "eval s", "accuracy", "accuracy by step",
              "accuracy by time s"):
        table.add_column(h, justify="left" if h in ("workload", "framework", "mode") else "right")
    return table


def pair_notes(trials: list[TrialRow]) -> list[str]:
    """Seed pairs across frameworks whose steps to the target differ by more than K."""
    converge = [(t.spec, t.metrics.get("steps_to_target")) for t in trials
                if t.status == "ok" and t.spec.get("scenario") == "converge"]
    return describe_pairs(seed_pairs(converge))


def describe_pairs(pairs: list[SeedPair]) -> list[str]:
    """The count of pairs compared, then one `!` line per pair more than K apart, saying what
    that points to."""
    if not pairs:
        return []
    flagged = [p for p in pairs if p.flagged]
    out = [f"seed pairs: {len(pairs)} compared (same weights, data and order; steps are seen every K"
           f" steps, so a difference up to K is one evaluation); {len(flagged)} differ by more than K"
           + (" (marked ! in steps to target)" if flagged else "")]
    out += [f"! {p.describe()}: more than K apart, which points to a numerical difference between the"
            " two frameworks (dlbench check compares their loss trajectories)" for p in flagged]
    return out


def stall_table(store: Store, run_ids: list[int]) -> tuple[Table | None, list[str]]:
    """Input stall share per configuration run with both data placements."""
    trials = [t for rid in run_ids for t in store.trials(rid)]
    ok = [t for t in trials if t.status == "ok" and t.spec.get("scenario", "train") == "train"
          and t.metrics.get("samples_per_s") is not None]
    stalls = input_stalls([(t.spec, float(t.metrics["samples_per_s"] or 0.0)) for t in ok])
    if not stalls:
        return None, []
    waits: dict[str, list[float | None]] = defaultdict(list)
    for t in ok:
        if t.spec["policy"].get("data", "pipeline") == "pipeline":
            waits[placement_key(t.spec)].append(t.metrics.get("input_wait_per_step_s"))
    table = Table(title="input pipeline: idiomatic loader vs the whole dataset on the device (medians)")
    for h in ("workload", "framework", "mode", "batch", "workers", "augment", "pipeline samples/s",
              "device samples/s", "stall share", "stall ms/step", "wait ms/step"):
        table.add_column(h, justify="left" if h in ("workload", "framework", "mode", "augment") else "right")
    for s in stalls:
        spec = s.spec
        wait = _median(waits[placement_key(spec)])
        table.add_row(spec["workload"]["name"], spec["framework"], spec["policy"]["mode"],
                      str(spec["workload"]["batch_size"]), str(spec["policy"].get("loader_workers", 0)),
                      spec["workload"].get("augment", "none"), f"{s.pipeline_samples_per_s:.1f}",
                      f"{s.device_samples_per_s:.1f}", f"{s.share:+.1%}", f"{s.per_step_s * 1e3:+.2f}",
                      _fmt(None if wait is None else wait * 1e3, ".2f"))
    notes = ["stall share = 1 - samples/s(pipeline) / samples/s(device), same spec otherwise; negative:"
             " the loader overlaps work that device-resident data does in the training thread",
             "wait ms/step: time the training loop spent in next() on the pipeline (– where the framework"
             " pulls batches inside its own loop, Keras's fit); on JAX part of it overlaps the device",
             "on a 2-core CPU, loader threads and processes compete with the step's own threads"]
    return table, notes
