"""The headroom tables of `dlbench tune` runs (analysis/tune.py judges, from the run's search
state and its trials): per workload x framework the default's headline, the best candidate's
settings, its speed-up with interval and level, its verdict and parity, and the command that
re-runs it; and every candidate with its own verdict. The headline tables of a tune run show
the defaults only (report/model.py: as commonly written)."""

from __future__ import annotations

from collections.abc import Iterable

from dlbench import workloads
from dlbench.analysis import tune as tuning
from dlbench.analysis.tune import CellResult, Judged, SearchState, TrialOutcome
from dlbench.analysis.metrics import label as metric_label
from dlbench.report.cells import BUSY_NOTE, plain_number
from dlbench.report.model import Report, Trial
from dlbench.report.tabledata import BUSY_MARK, MISSING, Cell, Column, Flag, Table

HEADROOM_TABLE, CANDIDATES_TABLE = "headroom", "candidates"
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


def _median_cell(j: Judged | None) -> Cell:
    """The median over the trials that count, marked `^` where busy ones were left out (or, all
    busy, are what it is over)."""
    if j is None or j.median is None:
        return Cell(MISSING)
    return Cell(plain_number(j.median), flags=frozenset({"busy"}) if j.busy else frozenset())


def verdict_text(j: Judged) -> str:
    """The verdict, and what an undecided one needs: `undecided (busy)` where busy trials left
    it open (a retake on a quiet machine decides it), `undecided (+3 repeats)` otherwise."""
    if j.verdict == tuning.UNDECIDED and j.withheld:
        return f"{j.verdict} (busy)"
    if j.verdict == tuning.UNDECIDED and j.more_repeats:
        return f"{j.verdict} (+{j.more_repeats} repeats)"
    return j.verdict


def _default_of(result: CellResult, phase: int) -> Judged | None:
    return next((j for j in result.judged if j.phase == phase and j.candidate.name == tuning.DEFAULT), None)


def _run_cells(report: Report, run_id: int) -> list[Cell]:
    return [Cell(str(run_id))] if report.multi_run else []


def headroom_table(report: Report) -> Table | None:
    """Per searched cell: the default's headline median (of the phase the best was judged in),
    the best candidate's settings, speed-up, verdict and parity; the re-run commands below."""
    found = searches(report)
    if not found:
        return None
    metrics = {r.cell.metric for _, _, r in found}
    unit = metric_label(next(iter(metrics))) if len(metrics) == 1 else "headline"
    rows, commands = [], []
    for run_id, _, r in found:
        best = r.best
        base = _default_of(r, best.phase if best is not None else 1)
        settings = tuning.NO_BEST if best is None else best.candidate.settings(r.cell.framework, r.cell.mode)
        verdict = verdict_text(best) if best is not None else _tally(r)
        judged = best or base
        parity = judged.parity if judged is not None else "–"
        rows.append((*_run_cells(report, run_id), Cell(r.cell.workload), Cell(r.cell.framework), Cell(r.cell.mode),
                     _median_cell(base), Cell(settings), _speedup_cell(best), Cell(verdict), _parity_cell(parity)))
        command = r.command()
        if command is not None:
            commands.append(f"{r.cell.label}: re-run the best with: {command}")
    columns = (*([Column("run", key=True, lift=True)] if report.multi_run else []),
               Column("workload", key=True, lift=True), Column("framework", key=True), Column("mode", lift=True),
               Column(f"default {unit}", "right"), Column("best variant"),
               Column("speed-up [interval]", "right", inline_interval=True), Column("verdict"), Column("parity"))
    busy = [BUSY_NOTE] if any("busy" in c.flags for row in rows for c in row) else []
    return Table(HEADROOM_TABLE, "Headroom", "headroom: each framework as commonly written (default) and at its best",
                 columns, tuple(tuple(r) for r in rows), (*commands, *_stop_notes(report, found), RULE_NOTE, *busy))


def _tally(r: CellResult) -> str:
    """`3 tried: 2 same, 1 undecided` for a cell where no candidate won."""
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
        out.append(f"{where}tune {why}: {state.spent_s / 60:.1f} of {state.budget_s / 60:g} min spent,"
                   f" {state.repeats} repeats per candidate and phase{retaken}")
    return list(dict.fromkeys(out))


def candidates_table(report: Report) -> Table | None:
    """Every candidate of every searched cell in search order, phase 1 then phase 2."""
    found = searches(report)
    if not found:
        return None
    rows = []
    for run_id, _, r in found:
        for j in r.judged:
            verdict = verdict_text(j) + (" (best)" if r.best is not None and j is r.best else "")
            rows.append((*_run_cells(report, run_id), Cell(r.cell.workload), Cell(r.cell.framework),
                         Cell(j.candidate.settings(r.cell.framework, r.cell.mode)), Cell(str(j.phase)),
                         Cell(j.status), _median_cell(j), _speedup_cell(j), Cell(verdict), _parity_cell(j.parity)))
    columns = (*([Column("run", key=True, lift=True)] if report.multi_run else []),
               Column("workload", key=True, lift=True), Column("framework", key=True), Column("candidate", key=True),
               Column("phase", lift=True), Column("trials"), Column("median", "right"),
               Column("speed-up [interval]", "right", inline_interval=True), Column("verdict"), Column("parity"))
    return Table(CANDIDATES_TABLE, "Candidates", "candidates: every setting the search tried, against the default of"
                 " its phase", columns, tuple(tuple(r) for r in rows),
                 (*_failure_notes(report, found), *_busy_notes(found)))


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
