"""The headroom tables of `dlbench tune` runs (analysis/tune.py judges, from the run's search
state and its trials): per workload x framework the default's headline, the best candidate's
settings, its speed-up with interval and level, its verdict and parity, and the command that
re-runs it; and every candidate with its own verdict. The headline tables of a tune run show
the defaults only (report/model.py: as commonly written). The headroom chart: each candidate's
speed-up (headroom)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dlbench import workloads
from dlbench.analysis import tune as tuning
from dlbench.analysis.tune import CellResult, Judged, SearchState, TrialOutcome
from dlbench.analysis.metrics import label as metric_label
from dlbench.analysis.repeats import QUIET_WAIT_S
from dlbench.analysis.window import FLAG_METRIC
from dlbench.report.cells import BUSY_NOTE, plain_number, short_note
from dlbench.report.model import AXES, Report, Trial, one_size
from dlbench.report.tabledata import BUSY_MARK, MISSING, Cell, Column, Flag, Table

if TYPE_CHECKING:  # its chart functions import plotly when called (report/plot.py)
    from dlbench.report.plot import Chart

HEADROOM_TABLE, CANDIDATES_TABLE = "headroom", "candidates"
DROPPED_NOTE = (f"{tuning.DROPPED}: ran in round 1, then left out so that the others get every repeat within the"
                " budget (the round took longer than estimated); its trials are shown, never judged")
RULE_NOTE = ("speed-up: the candidate's median headline over the default's of the same phase (> 1 is faster),"
             " interval from the two medians' order-statistic intervals, its level a lower bound; verdict:"
             " Mann-Whitney or Kolmogorov-Smirnov p < 0.05 (faster / slower), or the 90% shift interval within"
             " ±5% (same), else undecided; a candidate failing parity or with a failed trial never wins; busy"
             " trials are in no median and no verdict (docs/methodology.md, headroom)")


def outcomes(trials: Iterable[Trial]) -> dict[int, TrialOutcome]:
    """Each stored trial's status, headline value and parity verdict, by trial id."""
    return tuning.outcomes(trials, lambda spec: workloads.stored_scenario(spec).headline)


def searches(report: Report) -> list[tuple[int, SearchState, CellResult]]:
    """(run id, state, judged cell) of every tune run's cells among the report's workloads."""
    shown = set(report.workloads)
    out = []
    for run in report.runs:
        stored = run.info.get("tune")
        if not isinstance(stored, dict):
            continue
        state = SearchState.from_dict(stored)
        found = outcomes(run.trials)
        for cell in state.cells:
            if not shown or cell.workload in shown:
                out.append((run.id, state, tuning.cell_result(cell, found, state.stop)))
    return out


def _speedup_cell(j: Judged | None) -> Cell:
    if j is None or j.speedup is None:
        return Cell(MISSING)
    if j.low is None or j.high is None or not j.level:
        return Cell(f"{j.speedup:.2f}x")
    # the compact form (a narrow terminal): how far the interval reaches, relative to the speed-up
    spread = max(j.high / j.speedup - 1, 1 - j.low / j.speedup) if j.speedup else None
    return Cell(f"{j.speedup:.2f}x", interval=f"[{j.low:.2f}, {j.high:.2f}] ≥{j.level:.0%}", spread=spread,
                level=f"≥{j.level:.0%}")


PARITY_FLAGS: dict[str, Flag] = {"pass": "pass", "fail": "fail", "differs": "differs"}


def _parity_cell(verdict: str) -> Cell:
    flag = PARITY_FLAGS.get(verdict)
    return Cell("FAIL" if verdict == "fail" else verdict, flags=frozenset([flag] if flag else []))


def _median_cell(j: Judged | None, short: bool = False) -> Cell:
    """The median over the trials that count, marked `^` where busy ones were left out (or, all
    busy, are what it is over), `~` where a window was too short to time."""
    if j is None or j.median is None:
        return Cell(MISSING)
    flags: set[Flag] = set()
    if j.busy:
        flags.add("busy")
    if short:
        flags.add("short")
    return Cell(plain_number(j.median), flags=frozenset(flags))


def _trials_cell(j: Judged) -> Cell:
    """`4 ok`, `3 ok, 1 crashed`; `–` for a candidate that never ran (its verdict says why)."""
    return Cell(MISSING) if j.verdict in (tuning.NOT_RUN_BUDGET, tuning.UNSUPPORTED) else Cell(j.status)


def short_trials(report: Report) -> set[int]:
    """The ids of the report's trials whose timed window was too short to time (analysis/window.py)."""
    return {t.id for run in report.runs for t in run.trials if t.metrics.get(FLAG_METRIC)}


def _short(r: CellResult, j: Judged, short: set[int]) -> bool:
    """Whether the candidate's trials or its phase's default's were timed over a window too short:
    its median and speed-up are then marked `~` (a 29.56x from a sub-second window is no finding)."""
    ids = [t for e in r.cell.entries if e.phase == j.phase and e.candidate in (j.candidate, _default(r, j.phase))
           for t in e.trial_ids]
    return any(t in short for t in ids)


def _default(r: CellResult, phase: int) -> tuning.Candidate:
    return tuning.Candidate(tuning.DEFAULT, r.cell.mode)


def verdict_text(j: Judged) -> str:
    """The verdict, and what an undecided one needs: `undecided (busy)` where busy trials left
    it open (a retake on a quiet machine decides it), `undecided (+3 repeats)` otherwise; an
    unsupported candidate's reason is a note."""
    if j.verdict == tuning.UNSUPPORTED:
        return tuning.UNSUPPORTED
    if j.verdict == tuning.UNDECIDED and j.withheld:
        return f"{j.verdict} (busy)"
    if j.verdict == tuning.UNDECIDED and j.more_repeats:
        return f"{j.verdict} (+{j.more_repeats} repeats)"
    return j.verdict


def _default_of(result: CellResult, phase: int) -> Judged | None:
    return next((j for j in result.judged if j.phase == phase and j.candidate.name == tuning.DEFAULT), None)


def _run_cells(report: Report, run_id: int) -> list[Cell]:
    return [Cell(str(run_id))] if report.multi_run else []


# What a searched cell measured besides its workload and framework: named in the title where one
# value holds (a tune of -w mlp -f torch said neither size nor batch).
SHAPE = ("size", "batch")


def _shape_cells(report: Report, r: CellResult) -> list[Cell]:
    """The model size (`–` where the workload has one) and batch of the cell's default trial."""
    trials = {t.id: t for run in report.runs for t in run.trials}
    spec = next((trials[t].spec for e in r.cell.entries if e.candidate.name == tuning.DEFAULT
                 for t in e.trial_ids if t in trials), None)
    if spec is None:
        return [Cell(MISSING) for _ in SHAPE]
    return [Cell(MISSING if a == "size" and one_size(spec) else str(AXES[a](spec))) for a in SHAPE]


def answer_lines(report: Report) -> list[str]:
    """One line per searched cell for the closing summary (report/closing.py): its best setting
    with the speed-up and verdict, or that no variant won and the tally of what ran."""
    out = []
    short = short_trials(report)
    for run_id, _, r in searches(report):
        where = f"run {run_id} " if report.multi_run else ""
        best = r.best
        if best is None:
            out.append(f"headroom {where}{r.cell.label} {r.cell.mode}: {tuning.NO_BEST} ({tally(r)})")
            continue
        speedup = _speedup_cell(best)
        shown = speedup.with_flags("short").shown() if _short(r, best, short) else speedup.shown()
        out.append(f"headroom {where}{r.cell.label} {r.cell.mode}: {best.candidate.settings(r.cell.framework, r.cell.mode)}"
                   f" {shown} {speedup.interval or ''}".rstrip() + f", {verdict_text(best)}")
    return out


def headroom_table(report: Report) -> Table | None:
    """Per searched cell: the default's headline median (of the phase the best was judged in),
    the best candidate's settings, speed-up, verdict and parity; the re-run commands below."""
    found = searches(report)
    if not found:
        return None
    metrics = {r.cell.metric for _, _, r in found}
    unit = metric_label(next(iter(metrics))) if len(metrics) == 1 else "headline"
    short = short_trials(report)
    rows, commands = [], []
    for run_id, _, r in found:
        best = r.best
        base = _default_of(r, best.phase if best is not None else 1)
        settings = tuning.NO_BEST if best is None else best.candidate.settings(r.cell.framework, r.cell.mode)
        verdict = verdict_text(best) if best is not None else tally(r)
        judged = best or base
        parity = judged.parity if judged is not None else "–"
        speedup = _speedup_cell(best)
        if best is not None and _short(r, best, short):
            speedup = speedup.with_flags("short")
        rows.append((*_run_cells(report, run_id), Cell(r.cell.workload), *_shape_cells(report, r),
                     Cell(r.cell.framework), Cell(r.cell.mode),
                     _median_cell(base, base is not None and _short(r, base, short)), Cell(settings), speedup,
                     Cell(verdict), _parity_cell(parity)))
        command = r.command()
        if command is not None:
            commands.append(f"{r.cell.label}: re-run the best with: {command}")
    columns = (*([Column("run", key=True, lift=True)] if report.multi_run else []),
               Column("workload", key=True, lift=True), *(Column(a, key=True, lift=True) for a in SHAPE),
               Column("framework", key=True, lift=True), Column("mode", lift=True), Column(f"default {unit}", "right"),
               Column("best variant"),
               # empty where no variant won: "default: no variant decided faster" says so
               Column("speed-up [interval]", "right", inline_interval=True, quiet=True), Column("verdict"),
               Column("parity"))
    flags = {f for row in rows for c in row for f in c.flags}
    marks = [*([BUSY_NOTE] if "busy" in flags else []), *([short_note(report)] if "short" in flags else [])]
    return Table(HEADROOM_TABLE, "Headroom", "headroom: each framework as commonly written (default) and at its best",
                 columns, tuple(tuple(r) for r in rows),
                 (*commands, *_stop_notes(report, found), *undecided_advice(found), RULE_NOTE, *marks))


def tally(r: CellResult) -> str:
    """`3 tried: 2 same, 1 undecided` for a cell where no candidate won (a candidate dropped
    after its first trial counts as tried, its verdict `dropped: budget (not judged)`)."""
    tried = [j for j in r.judged if j.candidate.name != tuning.DEFAULT and j.n]
    counts: dict[str, int] = {}
    for j in tried:
        counts[j.verdict] = counts.get(j.verdict, 0) + 1
    return f"{len(tried)} tried: " + ", ".join(f"{n} {v}" for v, n in counts.items()) if tried else "none tried"


# Why a search stopped, in words; None: no reason recorded (still running, or its process killed).
STOP_WORDS: dict[str | None, str] = {
    "done": "finished", "budget": "stopped by its budget", "interrupted": "interrupted",
    "busy": "stopped: the machine stayed busy", None: "not finished (still running, or its process was killed)"}


def _stop_notes(report: Report, found: list[tuple[int, SearchState, CellResult]]) -> list[str]:
    out = []
    for run_id, state, _ in found:
        where = f"run {run_id}: " if report.multi_run else ""
        why = STOP_WORDS.get(state.stop, f"stopped: {state.stop}")
        if state.resumable:
            why += f" (finish it with: dlbench tune --resume {run_id})"
        retaken = (f"; {state.retakes} trial{'s' if state.retakes != 1 else ''} retaken after busy ones (waited"
                   f" {state.waited_s:.0f} s for a quiet machine)") if state.retakes else ""
        out.append(f"{where}tune {why}: {state.spent_s / 60:.1f} of {state.budget_s / 60:g} min spent;"
                   f" {_ran_text(state)} ({state.repeats} planned per candidate and phase){retaken}")
    return list(dict.fromkeys(out))


def _ran_text(state: SearchState) -> str:
    """What ran, not what was planned: `9 trials: the default 5, 1 candidate 4` (`2 candidates
    4 and 1`)."""
    defaults = [len(e.trial_ids) for c in state.cells for e in c.entries if e.candidate.name == tuning.DEFAULT]
    others = [len(e.trial_ids) for c in state.cells for e in c.entries if e.candidate.name != tuning.DEFAULT
              and e.trial_ids]
    total = sum(defaults) + sum(others)
    counts = sorted(set(others), reverse=True)
    each = " and ".join(map(str, counts)) if len(counts) <= 2 else f"{min(counts)} to {max(counts)}"
    ran = f", {len(others)} candidate{'s' if len(others) != 1 else ''} {each}" if others else ", no candidate"
    default = " and ".join(map(str, sorted(set(defaults), reverse=True))) or "0"
    return f"{total} trial{'s' if total != 1 else ''} ran: the default {default}{ran}"


def undecided_advice(found: list[tuple[int, SearchState, CellResult]]) -> list[str]:
    """Where no candidate won: what would decide (a quiet machine, the budget that runs every
    candidate at the pace measured, the repeats the undecided ones ask for, the tiny preset to
    try the mechanics first); a search's budget line once, naming its cells."""
    busy, tiny = False, False
    budget: dict[int, tuple[SearchState, list[str]]] = {}  # by search: the cells not run in full
    more: list[str] = []
    for _, state, r in found:
        if r.best is not None:
            continue
        judged = [j for j in r.judged if j.candidate.name != tuning.DEFAULT]
        busy = busy or any(j.withheld for j in judged) or state.stop == "busy"
        short = sum(j.verdict in (tuning.NOT_RUN_BUDGET, tuning.DROPPED) for j in judged)
        if short:
            budget.setdefault(id(state), (state, []))[1].append(f"{r.cell.label} {short}")
        wanted = [j.more_repeats for j in judged if j.verdict == tuning.UNDECIDED and j.more_repeats]
        if wanted:
            more.append(f"{r.cell.label}: the undecided candidates ask for about {max(wanted)} more repeats each:"
                        f" --repeats {state.repeats + max(wanted)} (and the budget for them)")
        tiny = tiny or "tiny" not in r.cell.run_args
    out = [f"{BUSY_MARK} to decide what the busy machine left open: --quiet-wait {QUIET_WAIT_S / 60:.0f}min (tune"
           " waits for quiet before each trial)"] if busy else []
    out += [f"candidates not run in full within the budget ({', '.join(cells)}): {_budget_for_all(state)}"
            for state, cells in budget.values()]
    out += more
    if tiny:
        out.append("--preset tiny tries the search's mechanics in minutes (its windows too short to time: no finding)")
    return out


def _budget_for_all(state: SearchState) -> str:
    """`--budget 14min` would run every candidate its repeats at the pace measured (the seconds
    spent over the trials run), or how to find the pace where nothing ran."""
    ran = sum(len(e.trial_ids) for c in state.cells for e in c.entries)
    planned = sum(state.repeats for c in state.cells for e in c.entries if e.phase == 1
                  and e.status != tuning.UNSUPPORTED)
    if not ran or state.spent_s <= 0:
        return "a larger --budget"
    minutes = math.ceil(state.spent_s / ran * planned / 60)
    return f"--budget {minutes}min would run all {planned} phase-1 trials at the pace measured"


def candidates_table(report: Report) -> Table | None:
    """Every candidate of every searched cell in search order, phase 1 then phase 2."""
    found = searches(report)
    if not found:
        return None
    short = short_trials(report)
    # beside a framework column of several frameworks, `optimizer=foreach` (the re-run command
    # and a one-framework table keep `torch.optimizer=foreach`, --option's own form)
    several = len({r.cell.framework for _, _, r in found}) > 1
    rows = []
    for run_id, _, r in found:
        shape = _shape_cells(report, r)
        for j in r.judged:
            verdict = verdict_text(j) + (" (best)" if r.best is not None and j is r.best else "")
            marked = _short(r, j, short)
            speedup = _speedup_cell(j)
            settings = j.candidate.settings(r.cell.framework, r.cell.mode)
            if several:
                settings = settings.replace(f"{r.cell.framework}.", "")
            rows.append((*_run_cells(report, run_id), Cell(r.cell.workload), *shape, Cell(r.cell.framework),
                         Cell(settings), Cell(str(j.phase)),
                         _trials_cell(j), _median_cell(j, marked), speedup.with_flags("short") if marked and
                         speedup.text != MISSING else speedup, Cell(verdict), _parity_cell(j.parity)))
    columns = (*([Column("run", key=True, lift=True)] if report.multi_run else []),
               Column("workload", key=True, lift=True), *(Column(a, key=True, lift=True) for a in SHAPE),
               Column("framework", key=True, lift=True), Column("candidate", key=True), Column("phase", lift=True), Column("trials"), Column("median", "right"),
               Column("speed-up [interval]", "right", inline_interval=True), Column("verdict"), Column("parity"))
    short_rows = any("short" in c.flags for row in rows for c in row)
    dropped = [DROPPED_NOTE] if any(j.verdict == tuning.DROPPED for _, _, r in found for j in r.judged) else []
    return Table(CANDIDATES_TABLE, "Candidates", "candidates: every setting the search tried, against the default of"
                 " its phase", columns, tuple(tuple(r) for r in rows),
                 (*dropped, *_failure_notes(report, found), *_unsupported_notes(found), *_busy_notes(found),
                  *([short_note(report)] if short_rows else [])))


def _unsupported_notes(found: list[tuple[int, SearchState, CellResult]]) -> list[str]:
    """Why a candidate could not run here (its trials column is `–`)."""
    return list(dict.fromkeys(f"{r.cell.label} {j.candidate.settings(r.cell.framework, r.cell.mode)}: unsupported:"
                              f" {j.reason}" for _, _, r in found for j in r.judged
                              if j.verdict == tuning.UNSUPPORTED and j.reason))


def _busy_notes(found: list[tuple[int, SearchState, CellResult]]) -> list[str]:
    """Each candidate with busy trials: how many were left out, and a verdict they held back."""
    out = []
    for _, _, r in found:
        for j in r.judged:
            if j.busy:
                name = f"{r.cell.label} {j.candidate.settings(r.cell.framework, r.cell.mode)} (phase {j.phase})"
                held = f"; undecided: {j.withheld}" if j.withheld else ""
                out.append(f"{BUSY_MARK} {name}: {j.busy} trial{'s' if j.busy != 1 else ''} on a busy machine, left"
                           f" out of its median and verdict{held}")
    return out


def _failure_notes(report: Report, found: list[tuple[int, SearchState, CellResult]]) -> list[str]:
    """Why a candidate's trial did not end ok, and a parity failure's worst tensor, once each."""
    trials = {t.id: t for run in report.runs for t in run.trials}
    out = []
    for _, _, r in found:
        for e in r.cell.entries:
            for tid in e.trial_ids:
                t = trials.get(tid)
                if t is None:
                    continue
                name = f"{r.cell.label} {e.candidate.settings(r.cell.framework, r.cell.mode)} #{t.repeat}"
                parity = t.data.get("parity") or {}
                if t.status not in ("ok", "pending", "running"):
                    out.append(f"{name}: {t.status}: {t.error or 'no error recorded'}")
                elif parity.get("verdict") == "fail":
                    worst, err = parity.get("worst_tensor"), parity.get("worst_rel_err")
                    detail = ""
                    if worst:
                        size = f", relative error {err:.1e}" if isinstance(err, int | float) else ""
                        detail = f" (worst tensor {worst}{size})"
                    out.append(f"{name}: parity fails{detail}")
    return out


def headroom(report: Report) -> Chart | None:
    """`dlbench tune` runs: each candidate's speed-up over the default of its phase, with its
    interval (whiskers), one colour per framework; the best of each cell a star; candidates
    without a speed-up (not run, failed, parity failures) are in the candidates table only."""
    import plotly.graph_objects as go

    from dlbench.report import plot

    found = searches(report)
    points = [(run_id, r, j) for run_id, _, r in found for j in r.judged
              if j.speedup is not None and j.candidate.name != "default"]
    if not points:
        return None
    fig = go.Figure()
    names = [plot.escape(f"{'run ' + str(run_id) + ' · ' if report.multi_run else ''}{r.cell.label}"
                         f" {j.candidate.settings(r.cell.framework, r.cell.mode)} (phase {j.phase})") for run_id, r, j in points]
    for framework in dict.fromkeys(r.cell.framework for _, r, _ in points):
        mine = [i for i, (_, r, _) in enumerate(points) if r.cell.framework == framework]
        js = [points[i][2] for i in mine]
        fig.add_trace(go.Scatter(
            x=[j.speedup for j in js], y=[names[i] for i in mine], mode="markers", name=plot.escape(framework),
            marker={"color": plot.color(report, framework), "size": 9},
            error_x={"type": "data", "symmetric": False, "array": [(j.high or j.speedup or 0) - (j.speedup or 0) for j in js],
                     "arrayminus": [(j.speedup or 0) - (j.low or j.speedup or 0) for j in js]},
            hovertext=[plot.escape(f"{j.speedup:.3f}x" + (f", [{j.low:.3f}, {j.high:.3f}] at >= {j.level:.0%}"
                                                          if j.low is not None and j.high is not None and j.level else "")
                                   + f"; {j.verdict}; parity {j.parity}") for j in js],
            hoverinfo="text+y"))
    best = [i for i, (_, r, j) in enumerate(points) if r.best is j]
    if best:
        fig.add_trace(go.Scatter(x=[points[i][2].speedup for i in best], y=[names[i] for i in best], mode="markers",
                                 name="best", marker={"symbol": "star", "size": 16, "color": "#222222",
                                                      "line": {"width": 1, "color": "#ffffff"}}, hoverinfo="skip"))
    fig.add_vline(x=1.0, line={"color": "#888888", "dash": "dash", "width": 1})
    fig.update_xaxes(title_text="speed-up over the default (x, > 1 is faster)")
    fig.update_yaxes(autorange="reversed", automargin=True)
    return plot.Chart("headroom", "Headroom", plot.layout(fig, height=max(320, 140 + 28 * len(points))),
                      "Each candidate `dlbench tune` ran: its median headline over the default's of the same phase (whiskers:"
                      " the ratio's interval, its level a lower bound); dashed: the default; star: the best of its"
                      " workload and framework (decided faster, parity passing). Every candidate with its verdict:"
                      " the candidates table.")
