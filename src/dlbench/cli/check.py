"""`dlbench check`: do all frameworks compute the same thing? (DESIGN §2.10)

For every workload x framework: loss and gradients on the canonical fixed batch against the
float64 reference, a K-step loss trajectory from the same start (losses, not parameters: Adam
turns rounding noise on tiny gradients into parameter differences of order lr), eval-mode logits
after those steps (BatchNorm running statistics), and every pair of frameworks against each
other. One probe process per framework checks all its workloads. Exit 1 on any failure, else 4
when a cell could not be judged (an `unsupported` the framework does not declare beforehand, such
as a numerics read-back that differs, or no reference), its reason printed under the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table

from dlbench import backends, processes, workloads
from dlbench.analysis import parity
from dlbench.backends import get_backend, registered, support
from dlbench.cli.common import (
    EXIT_NOT_JUDGED,
    EXIT_OK,
    EXIT_PARITY_FAILED,
    UsageError,
    add_store_argument,
    ascii_number,
    comma_list,
    output_path,
    workload_names,
    writing,
)
from dlbench.monitors.nvml import device_kind
from dlbench.report.terminal import make_console
from dlbench.runner import reference, verdicts
from dlbench.runner.protocol import load_grads
from dlbench.runner.plan import workload_spec
from dlbench.runner.probe_client import PROBE_TIMEOUT_S, ProbeLimits, run_probe
from dlbench.spec import MAX_COUNT, MAX_TIMEOUT_S, Policy, TrialSpec, to_dict
from dlbench.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("check", help="parity: same weights and batch -> same loss and gradients?")
    p.add_argument("-w", "--workload", type=comma_list("workload"), default=("all",),
                   help="workloads (default: all)")
    p.add_argument("-f", "--framework", type=comma_list("framework"), default=("all",),
                   help="frameworks (default: all installed)")
    p.add_argument("--mode", default="compiled", help="eager, graph or compiled (default: compiled)")
    p.add_argument("-k", "--steps", type=ascii_number(int), default=10, help="steps of the loss trajectory (default 10)")
    p.add_argument("--preset", default="tiny", help="workload size preset (default: tiny)")
    p.add_argument("--seed", type=ascii_number(int), default=0)
    p.add_argument("--json", metavar="FILE", help="also write every number to this JSON file")
    p.add_argument("--timeout", type=ascii_number(float), default=PROBE_TIMEOUT_S,
                   help=f"seconds each workload's probe may take before it is killed and the workload"
                        f" failed (default {PROBE_TIMEOUT_S:g})")
    add_store_argument(p, unused="check compares frameworks live and stores nothing (--json FILE keeps the numbers)")


@dataclass
class Cell:
    """One workload x framework result."""

    status: str  # ok | unsupported | failed | skipped
    error: str | None = None
    grads: parity.Verdict | None = None
    trajectory: tuple[bool, float] | None = None
    logits: tuple[bool, float] | None = None
    arrays: dict[str, Any] = field(default_factory=dict)
    # With the framework's kernel alternative: (its name and setting, the re-judged cell) where
    # the default kernels failed and the alternative passed (verdict `differs`).
    differs: tuple[str, Cell] | None = None
    # An `unsupported` the framework declares before any probe (`dlbench list` says it: a mode,
    # a capability, a declined or unimplemented workload). Any other unsupported (a numerics
    # read-back that differs, a builder refusing the spec) means the cell was not judged.
    declared: bool = False

    @property
    def judged(self) -> bool:
        """Compared with the reference, or not run for a reason the framework declares."""
        if self.status == "unsupported":
            return self.declared
        return self.status != "ok" or (self.grads is not None and self.grads.verdict != "n/a")

    @property
    def within(self) -> bool:
        """Every quantity within its bound."""
        return (self.status == "ok" and self.grads is not None and self.grads.verdict == "pass"
                and (self.trajectory is None or self.trajectory[0])
                and (self.logits is None or self.logits[0]))

    @property
    def passed(self) -> bool:
        """Within its bounds, or a framework difference on this CPU (runner/verdicts.py)."""
        return self.within or self.differs is not None


def _names(requested: tuple[str, ...], known: list[str], kind: str) -> list[str]:
    if requested == ("all",):
        return known
    for name in requested:
        if name not in known:
            raise UsageError(f"{kind} {name!r} is not one of: all, {', '.join(known)}")
    return list(requested)


def _trial(w: str, f: str, args: argparse.Namespace) -> TrialSpec:
    return TrialSpec(workload=workload_spec(w, args.preset, seed=args.seed), framework=f,
                     policy=Policy(mode=args.mode))


def main(args: argparse.Namespace) -> int:
    if not 0 <= args.steps <= MAX_COUNT:
        raise UsageError(f"steps {args.steps} must be an integer from 0 to {MAX_COUNT:,}")
    if not 0 < args.timeout <= MAX_TIMEOUT_S:  # false for nan and inf
        raise UsageError(f"timeout {args.timeout!r} is not a number of seconds > 0 and at most {MAX_TIMEOUT_S:g}")
    limits = ProbeLimits(timeout_s=args.timeout)
    _names(args.workload, list(workloads.names()), "workload")  # an unknown name: what is allowed
    wls = list(workload_names(args.workload))
    if args.framework != ("all",):
        for f in args.framework:
            backends.check(f)
    fws = _names(args.framework, list(registered()), "framework")
    json_path = output_path(args.json) if args.json is not None else None  # before minutes of probes
    console = make_console()
    trials = {(w, f): _trial(w, f, args) for w in wls for f in fws}
    for t in trials.values():
        support.validate(t)
    cells: dict[tuple[str, str], Cell] = {}
    # SIGTERM (timeout, a CI runner) stops check like Ctrl-C: the running probe's group is killed.
    with processes.stop_signals_interrupt():
        refs = reference.ensure([trials[(w, fws[0])].workload for w in wls], args.steps,
                                lambda m: console.print(m, style="dim"), limits)
        for f in fws:
            cells.update(_probe_framework(f, [(w, trials[(w, f)]) for w in wls], args, console))
        for (w, f), cell in cells.items():
            cell.declared = cell.status == "unsupported" and _declared(trials[(w, f)], cell.error)
            ref = refs.get(reference.key(trials[(w, f)].workload, args.steps))
            _judge(cell, ref, w)
            if cell.status == "ok" and not cell.within and isinstance(ref, reference.Reference):
                cell.differs = _diagnose(trials[(w, f)], ref, args.steps)
    pairs = _pairwise(cells, wls, fws)
    _print(console, cells, wls, fws, refs, trials, args, pairs)
    if json_path is not None:
        with writing(json_path):
            json_path.write_text(json.dumps(_to_json(cells, pairs, args), indent=1))
    failed = [k for k, c in cells.items() if c.status not in ("unsupported", "skipped") and c.judged and not c.passed]
    failed_pairs = [p for p, (ok, _) in pairs.items() if not ok]
    if failed or failed_pairs:
        return EXIT_PARITY_FAILED
    # A check that could not judge a cell is never green (its reason is printed under the table).
    return EXIT_NOT_JUDGED if any(not c.judged for c in cells.values()) else EXIT_OK


def _declared(trial: TrialSpec, error: str | None) -> bool:
    """Whether an `unsupported` cell is one the framework declares before running anything:
    what plan and `dlbench list` say (support.unsupported, no gradients to compare), or no
    implementation of the workload."""
    backend = get_backend(trial.framework)
    if support.unsupported(trial, backend, device_kind()) is not None or not backend.capabilities.grads:
        return True
    return error is not None and f"has no implementation of {trial.workload.name!r}" in error


def _probe_framework(f: str, items: list[tuple[str, TrialSpec]], args: argparse.Namespace,
                     console: Any) -> dict[tuple[str, str], Cell]:
    backend = get_backend(f)
    ok, why = backend.available()
    if not ok:
        return {(w, f): Cell("skipped", why) for w, _ in items}
    reason = backend.modes().get(args.mode)
    if reason is not None:
        return {(w, f): Cell("unsupported", reason) for w, _ in items}
    console.print(f"probing {f} ({args.mode}): {', '.join(w for w, _ in items)}", style="dim")
    out: dict[tuple[str, str], Cell] = {}
    with tempfile.TemporaryDirectory(prefix=f"dlbench-check-{f}-") as tmp:
        req = Path(tmp) / "request.json"
        req.write_text(json.dumps({"trials": [to_dict(t) for _, t in items], "k_steps": args.steps}))
        error = run_probe(req, Path(tmp), ProbeLimits(timeout_s=args.timeout))
        for i, (w, _) in enumerate(items):
            out[(w, f)] = _read_cell(Path(tmp), i, error)
    return out


def _read_cell(tmp: Path, i: int, error: str | None) -> Cell:
    try:
        status = json.loads((tmp / f"{i}.json").read_text())
    except (OSError, ValueError):
        return Cell("failed", error or "the probe wrote no result")
    if status["status"] != "ok":
        return Cell(status["status"], status.get("error"))
    loss, grads, extra = load_grads(tmp / f"{i}.npz")
    return Cell("ok", arrays={"loss": loss, "grads": grads, **extra})


def _judge(cell: Cell, ref: reference.Reference | str | None, workload: str) -> None:
    if cell.status != "ok":
        return
    if not isinstance(ref, reference.Reference):
        cell.grads = parity.not_available(ref or "no reference")
        return
    a = cell.arrays
    cell.grads = parity.compare_grads(a["loss"], a["grads"], ref.loss, ref.grads, "float32", reference=ref.label,
                                      workload=workload, floor=ref.floor)
    if "losses" in a and ref.losses is not None and ref.logits is not None:
        cell.trajectory = parity.compare_losses(a["losses"], ref.losses, "float32", workload, ref.floor)
        cell.logits = parity.compare_logits(a["logits"], ref.logits, "float32", workload, ref.floor)


def _diagnose(trial: TrialSpec, ref: reference.Reference, k_steps: int) -> tuple[str, Cell] | None:
    """A failing cell probed again under each of its framework's kernel alternatives
    (runner/verdicts.py): the first under which every quantity is within its bound."""
    for name, env in get_backend(trial.framework).kernel_alternatives.items():
        arrays = verdicts.alternative_arrays(trial, env, k_steps)
        if isinstance(arrays, str):
            continue
        again = Cell("ok", arrays=arrays)
        _judge(again, ref, trial.workload.name)
        if again.within:
            return f"{name} ({' '.join(f'{k}={v}' for k, v in env.items())})", again
    return None


def _pairwise(cells: dict[tuple[str, str], Cell], wls: list[str], fws: list[str]) -> dict[tuple[str, str, str], tuple[bool, float]]:
    """Worst normwise gradient difference between two frameworks, relative to the second; the
    bound is twice the larger of the two's bounds against the reference. A cell that `differs`
    (its default kernels over the bound, an alternative within it) is compared by the
    alternative's arrays: its default-kernel difference is already stated, once, by its verdict."""
    out = {}
    for w in wls:
        for f1, f2 in itertools.combinations(fws, 2):
            c1, c2 = cells[(w, f1)], cells[(w, f2)]
            if c1.status != "ok" or c2.status != "ok":
                continue
            c1, c2 = (c.differs[1] if c.differs is not None else c for c in (c1, c2))
            own = [b for c in (c1, c2) for b in ((c.grads.bounds or {}).values() if c.grads else ())]
            tol = 2 * max(own, default=parity.tolerance("float32", w).rel_err)
            g1, g2 = c1.arrays["grads"], c2.arrays["grads"]
            if set(g1) != set(g2):
                out[(w, f1, f2)] = (False, float("inf"))
                continue
            worst = parity.pairwise_grad_err(g1, g2)
            out[(w, f1, f2)] = (worst <= tol, worst)
    return out


def _cell_text(cell: Cell) -> str:
    if not cell.judged:
        return "NOT JUDGED"
    if cell.status != "ok":
        return cell.status
    g = cell.grads
    assert g is not None
    parts = [f"grad {g.worst_rel_err:.0e}"]
    if cell.trajectory is not None and cell.logits is not None:
        parts.append(f"traj {cell.trajectory[1]:.0e}")
        parts.append(f"eval {cell.logits[1]:.0e}")
    verdict = "pass" if cell.within else "differs*" if cell.differs is not None else "FAIL"
    return f"{verdict} " + " ".join(parts)


def _print(console: Any, cells: dict[tuple[str, str], Cell], wls: list[str], fws: list[str],
           refs: dict[str, reference.Reference | str], trials: dict[tuple[str, str], TrialSpec],
           args: argparse.Namespace, pairs: dict[tuple[str, str, str], tuple[bool, float]]) -> None:
    tol = parity.tolerance("float32")
    table = Table(title=f"parity against the float64 reference ({args.mode} mode, preset {args.preset},"
                        f" {args.steps}-step trajectory)")
    table.add_column("workload")
    for f in fws:
        table.add_column(f)
    for w in wls:
        table.add_row(w, *(_cell_text(cells[(w, f)]) for f in fws))
    console.print(table)
    factor = f"{parity.FLOOR_FACTOR:g}"
    console.print(f"  grad: worst normwise relative error of the loss and every gradient tensor, each within"
                  f" max({factor} x its floor, {tol.rel_err:g}); traj: worst relative loss difference over the"
                  f" steps, within max({factor} x floor, {tol.trajectory_rel_err:g}); eval: eval-mode logits after"
                  f" the steps, within max({factor} x floor, {tol.logits_rel_err:g}). A floor is the reference"
                  " framework's own float32 error on this CPU; the cosine bound follows the error bound."
                  " Reduced-precision math (TF32, bf16 passes) is off.", soft_wrap=True)
    floors = [refs.get(reference.key(trials[(w, fws[0])].workload, args.steps)) for w in wls]
    machines = list(dict.fromkeys(r.floor.machine for r in floors if isinstance(r, reference.Reference) and r.floor))
    if len(machines) == 1:  # the CPU and its 20-odd ISA flags once, not once per workload
        console.print(printable(f"  floors measured on {machines[0]}"), soft_wrap=True)
    for w, ref in zip(wls, floors, strict=True):
        console.print(_floor_line(w, ref, with_machine=len(machines) != 1), soft_wrap=True)
    for (w, f), c in cells.items():
        if c.differs is not None:
            name, again = c.differs
            console.print(printable(
                f"  * {w}/{f} differs: a framework difference on this CPU, not a dlbench failure: with its"
                f" default kernels {f} is over the bound ({c.grads.reason if c.grads and c.grads.reason else _trajectory_reason(c)});"
                f" with {name}: {_cell_text(again)}"), soft_wrap=True)
        elif not c.judged:
            why = c.error or (c.grads.reason if c.grads else None) or "no reason given"
            console.print(printable(f"  NOT JUDGED {w}/{f}: {why}"), soft_wrap=True)
        elif c.status in ("failed", "skipped") or (c.status == "ok" and not c.passed):
            why = c.error or (c.grads.reason if c.grads else None) or _trajectory_reason(c)
            console.print(printable(f"  {w}/{f}: {why}"), soft_wrap=True)  # a probe's error text
    for line in _declared_lines(cells):
        console.print(printable(line), soft_wrap=True)
    for ref in {r for r in refs.values() if isinstance(r, str)}:
        console.print(printable(f"  reference: {ref}"), soft_wrap=True)
    bad = [(k, v) for k, v in pairs.items() if not v[0]]
    worst = max(pairs.items(), key=lambda kv: kv[1][1], default=None)
    if worst is not None:
        (w, f1, f2), (_, err) = worst
        console.print(f"  pairwise: {len(pairs)} framework pairs compared; worst gradient difference"
                      f" {err:.1e} ({w}: {f1} vs {f2}); {len(bad)} over {2 * tol.rel_err:g}", soft_wrap=True)


def _declared_lines(cells: dict[tuple[str, str], Cell]) -> list[str]:
    """Each declared reason once, with the cells it covers: `unsupported litert: cnn, mlp:
    litert computes no gradients ...`."""
    by_reason: dict[str, dict[str, list[str]]] = {}
    for (w, f), c in cells.items():
        if c.status == "unsupported" and c.declared:
            by_reason.setdefault(c.error or "no reason given", {}).setdefault(f, []).append(w)
    return ["  unsupported " + "; ".join(f"{f}: {', '.join(ws)}" for f, ws in where.items()) + f": {reason}"
            for reason, where in by_reason.items()]


def _floor_line(workload: str, ref: reference.Reference | str | None, with_machine: bool = True) -> str:
    """What float32 rounding amounts to on this CPU for one workload, or why no floor applies."""
    if not isinstance(ref, reference.Reference):
        return f"  {workload}: no reference"
    floor = ref.floor
    if floor is None:
        special = parity.BY_WORKLOAD.get((workload, "float32"), {})
        limits = ", ".join(f"{k} <= {v:g}" for k, v in special.items()) or "the float32 constants"
        return f"  {workload}: no floor ({ref.floor_reason}): {limits}"
    worst = max(floor.grads.values(), default=0.0)
    parts = [f"loss and gradients up to {max(worst, floor.loss):.1e}"]
    parts += [f"{n} {v:.1e}" for n, v in (("trajectory", floor.trajectory), ("eval", floor.logits)) if v is not None]
    where = f" on {floor.machine}" if with_machine else ""
    special = parity.BY_WORKLOAD.get((workload, "float32"), {})
    minimum = ("; bounds at least " + ", ".join(f"{k} {v:g}" for k, v in special.items())) if special else ""
    return f"  {workload}: floor ({floor.label}{where}): {', '.join(parts)}{minimum}"


def _trajectory_reason(c: Cell) -> str:
    t = c.trajectory[1] if c.trajectory else float("nan")
    e = c.logits[1] if c.logits else float("nan")
    return f"trajectory difference {t:.2e}, eval logits difference {e:.2e}"


def _to_json(cells: dict[tuple[str, str], Cell], pairs: dict[tuple[str, str, str], tuple[bool, float]],
             args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": args.mode, "preset": args.preset, "steps": args.steps, "cells": [], "pairs": []}
    for (w, f), c in cells.items():
        out["cells"].append({
            "workload": w, "framework": f, "status": c.status, "error": c.error, "passed": c.passed,
            "judged": c.judged,
            "grads": c.grads.to_dict() if c.grads else None,
            "trajectory_rel_err": c.trajectory[1] if c.trajectory else None,
            "logits_rel_err": c.logits[1] if c.logits else None,
            "losses": np.asarray(c.arrays["losses"]).tolist() if "losses" in c.arrays else None,
            "differs": None if c.differs is None else {"with": c.differs[0], "grads": c.differs[1].grads.to_dict()
                                                       if c.differs[1].grads else None},
        })
    for (w, f1, f2), (ok, err) in pairs.items():
        out["pairs"].append({"workload": w, "a": f1, "b": f2, "passed": ok, "rel_err": err})
    return out

