"""The closing summary that ends the report in a terminal (`dlbench run`, `tune`, `report`), so
that the last screen is the answer (issue 47): per workload the fastest framework with its
median and the marks it has everywhere, how many times faster than the next one and whether
that is decided, whether the whole ranking is; then what would decide what is not: more repeats,
a quiet machine (--quiet-wait), a window long enough to time.

It compares what the overview compares (report/overview.py: each framework's best configuration
of the workload, by the headline metric) with the ranking's statistics (analysis.compare.rank:
Holm over the adjacent pairs, busy trials left out), so that its verdicts are the ranking
table's words ("faster (p = 0.008)", "undecided: the machine was busy: ...")."""

from __future__ import annotations

from dataclasses import dataclass

from dlbench.analysis import compare, metrics, stats
from dlbench.analysis.repeats import QUIET_WAIT_S
from dlbench.report import tune
from dlbench.report.cells import short_window, window_advice
from dlbench.report.model import Config, Report
from dlbench.report.overview import best_by_framework
from dlbench.report.ranking import sample, tested, verdict_text, versus_text
from dlbench.report.tabledata import BUSY_MARK, SHORT_MARK, UNDECIDED_MARK, UNSTABLE_MARK

TITLE = "summary"


@dataclass(frozen=True)
class Answer:
    """One workload's line and what would decide what it leaves open."""

    line: str
    metric: str  # the label of the metric compared
    compared: bool = True  # two frameworks or more had a value
    repeats: int | None = None  # --repeats that would likely decide its ranking
    busy: bool = False  # a verdict withheld because trials ran on a busy machine
    short: bool = False  # a compared value timed over a window too short to time


def _number(x: float) -> str:
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.4g}"


def _marked(config: Config, metric: str, value: float, undecided: bool) -> str:
    """`~688.7!^?`: the median with the marks the tables give it (short window, unstable, busy,
    undecided against the next)."""
    return ((SHORT_MARK if short_window(config) else "") + _number(value)
            + (UNSTABLE_MARK if config.summary(metric).unstable else "")
            + (BUSY_MARK if config.interference.busy else "") + (UNDECIDED_MARK if undecided else ""))


def _repeats_now(configs: list[Config]) -> int:
    return max((len(c.counted) for c in configs), default=0)


def answer(workload: str, configs: list[Config]) -> Answer | None:
    """The workload's line (module docstring); None where no framework has a headline value."""
    metric, best = best_by_framework(configs)
    if not best:
        return None
    ranking = compare.rank([(f, sample(b.config, metric)) for f, b in best.items()], metric)
    top = ranking[0]
    config = best[top.name].config
    short = any(short_window(b.config) for b in best.values())
    label = metrics.label(metric)
    if len(ranking) == 1:
        return Answer(f"{workload}: {top.name} alone, {_marked(config, metric, top.median, False)} {label}"
                      " (nothing compared)", label, compared=False, short=short)
    below = ranking[1]
    decision = top.decision
    assert decision is not None
    open_question = decision.verdict == compare.UNDECIDED
    factor = versus_text(top, metric, None).split(" ")[0]  # `2.00x`: the interval is the ranking table's
    head = (f"{workload}: {top.name} {_marked(config, metric, top.median, open_question)}, {factor} {below.name}:"
            f" {_verdict(top, metric, below)}")
    pairs = [(r, ranking[i + 1]) for i, r in enumerate(ranking[:-1])]
    decided = sum(r.decision is not None and r.decision.verdict != compare.UNDECIDED for r, _ in pairs)
    if len(pairs) > 1:
        head += f"; all {len(pairs)} pairs decided" if decided == len(pairs) else f"; {decided} of {len(pairs)} pairs decided"
    return Answer(head, label, True, _more_repeats(pairs, [b.config for b in best.values()]),
                  any(r.decision is not None and r.decision.busy for r, _ in pairs), short)


def _verdict(top: compare.Ranked, metric: str, below: compare.Ranked) -> str:
    """The ranking table's verdict on the pair, short enough for one line: without the repeats
    it asks for (the advice below says them) and, where busy trials withheld it, without the
    detail (the tables' notes give it): `undecided: the machine was busy`."""
    d = top.decision
    if d is not None and d.busy:
        return "undecided: the machine was busy"
    return verdict_text(top, metric, below).split("; ~")[0]


def _more_repeats(pairs: list[tuple[compare.Ranked, compare.Ranked]], configs: list[Config]) -> int | None:
    """The --repeats that would likely decide the ranking's open pairs: the repeats now plus the
    most any pair asks for; at least the fewest at which a pair can be decided at all where a
    side had one process; None where no open pair asks for repeats (busy ones ask for quiet)."""
    now = _repeats_now(configs)
    wanted = [now + r.decision.more_repeats for r, _ in pairs if r.decision is not None
              and r.decision.verdict == compare.UNDECIDED and not r.decision.busy and r.decision.more_repeats]
    if any(not tested(r, below) for r, below in pairs):  # a side of one process: untested, busy or not
        wanted.append(fewest_repeats(len(pairs)))
    return max(wanted) if wanted else None


def fewest_repeats(pairs: int) -> int:
    """The fewest repeats per framework at which every one of a ranking's `pairs` adjacent pairs
    can be decided at all: the exact Mann-Whitney p's floor, Holm-adjusted over the pairs (5 for
    four frameworks, where 4 + 4 reach 0.029 x 3), below alpha."""
    n = stats.min_repeats_for_p()
    while stats.min_p_value(n, n) * max(pairs, 1) >= stats.ALPHA:
        n += 1
    return n


def advice(answers: list[Answer], report: Report) -> list[str]:
    """What would decide what the answers leave open, one line each: a quiet machine, more
    repeats, a window long enough to time."""
    out = []
    if any(a.busy for a in answers):
        out.append(f"to decide what the busy machine left open: --quiet-wait {QUIET_WAIT_S / 60:.0f}min (waits for"
                   " quiet before each trial)")
    wanted = [a.repeats for a in answers if a.repeats is not None]
    if wanted:
        out.append(f"to decide the rest: --repeats {max(wanted)}, or --repeats auto (rounds until decided)")
    if any(a.short for a in answers):
        out.append(f"to time the windows marked {SHORT_MARK}: {window_advice(report)}")
    return out


def closing_summary(report: Report) -> list[str]:
    """The title line, then a line per workload (where two frameworks or more were compared), a
    line per cell a `dlbench tune` searched, and the advice (indented by the renderer); nothing
    where neither holds (a one-framework run's table says it all)."""
    answers = [a for workload, part in report.by_workload() if (a := answer(workload, list(part.configs)))]
    compared = any(a.compared for a in answers)
    headroom = tune.answer_lines(report)
    if not compared and not headroom:
        return []
    measured = ", ".join(dict.fromkeys(a.metric for a in answers))
    title = (f"the fastest framework per workload by {measured}" if compared else "the headroom search")
    return [f"{TITLE}: {title} (medians; marks as in the tables above)",
            *(a.line for a in answers if compared), *headroom,
            *(advice(answers, report) if compared and not headroom else []),
            *tune.undecided_advice(tune.searches(report))]
