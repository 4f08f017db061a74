"""What every chart of the report is drawn with: the chart record, the frameworks' colours, the
layout, bars with the median's interval, a trial's name. The charts of every trial's
measurements are in report/figures.py; a scenario's own charts are in its report module beside
its tables (report/converge.py, infer.py, generate.py, rl.py, solve.py, tune.py), registered in
report/scenarios.py.

Imports plotly, an optional dependency: a chart function imports this module when it is called,
so the table modules that hold charts load without plotly.

Every text that reaches a figure passes through `escape` (html.escape): Plotly renders a subset of
HTML tags in labels and decodes entities, so an escaped label shows as written and never as markup.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dlbench.analysis.summary import Summary
from dlbench.report import cells
from dlbench.report.model import Config, Report, Trial

# Colours of frameworks (in the order they first appear in the report, so one framework has one
# colour in every chart of a report) and of runs compared side by side.
PALETTE = ("#ee4c2c", "#ff8f00", "#1a73e8", "#2a9d8f", "#8e44ad", "#d00000", "#6c757d", "#b5838d",
           "#264653", "#e9c46a")


@dataclass(frozen=True)
class Chart:
    id: str  # the DOM id stem: chart-<id>; tests look for these
    title: str
    figure: go.Figure
    note: str  # one sentence under the chart: what each mark is, how it is summarised
    # The workload whose section shows the chart, in a report of several (charts()); None: the
    # report has one workload and no sections.
    section: str | None = None


def escape(text: object) -> str:
    return html.escape(str(text))


def color(report: Report, framework: object) -> str:
    """The framework's colour: by its place among the report's frameworks, the same in every
    chart of the report (no framework is named here: report/ knows none)."""
    frameworks = report.frameworks
    name = str(framework)
    return PALETTE[frameworks.index(name) % len(PALETTE)] if name in frameworks else PALETTE[-1]


def layout(fig: go.Figure, height: int = 420, **kwargs: Any) -> go.Figure:
    """White template; the legend in a row above the plot, a fixed 36 px over the subplot
    titles whatever the figure's height (legend positions are fractions of the plot height)."""
    fig.update_layout(template="plotly_white", height=height, margin={"l": 60, "r": 20, "t": 90, "b": 50},
                      legend={"orientation": "h", "x": 0, "xanchor": "left", "yanchor": "bottom",
                              "y": 1 + 36 / max(height - 140, 1)}, **kwargs)
    return fig


def _panels(configs: list[Config]) -> list[tuple[str, list[Config]]]:
    """Configurations split by workload: one panel each (throughputs of different workloads
    do not share a scale)."""
    by: dict[str, list[Config]] = {}
    for c in configs:
        by.setdefault(str(c.axes["workload"]), []).append(c)
    return list(by.items())


def error_bars(summaries: list[Summary], scale: float) -> dict[str, Any]:
    def up(s: Summary) -> float:
        return (s.high - s.median) * scale if s.high is not None and s.median is not None else 0.0

    def down(s: Summary) -> float:
        return (s.median - s.low) * scale if s.low is not None and s.median is not None else 0.0

    return {"type": "data", "symmetric": False, "array": [up(s) for s in summaries],
            "arrayminus": [down(s) for s in summaries], "visible": any(s.level for s in summaries)}


def hover(s: Summary, scale: float, unit: str) -> str:
    if s.median is None:
        return "no value"
    text = f"median {s.median * scale:.4g} {unit} over {s.n} process(es)"
    if s.low is not None and s.high is not None and s.level is not None:
        text += f"<br>{s.level:.0%} interval [{s.low * scale:.4g}, {s.high * scale:.4g}]"
    return text + ("<br>unstable" if s.unstable else "")


def summary_of(metric: str) -> Callable[[Config], Summary]:
    return lambda c: c.summary(metric)


@dataclass(frozen=True)
class Bars:
    """One bar trace: a summary per configuration."""

    name: str
    color: str
    configs: list[Config]
    summary: Callable[[Config], Summary]
    with_run: bool  # the x labels name the run (when traces are not one per run)
    pattern: str = ""  # a bar fill pattern: tells metrics apart where colour is the framework's
    window: bool = False  # a metric of the timed window: hatch the bars of windows too short to time


# Medians further apart than this in one panel put its value axis on a log scale: on a linear one
# a 444 samples/s bar beside 79,845 is invisible.
LOG_AXIS_RATIO = 20.0


SHORT_PATTERN = "/"  # the hatching of a bar whose timed window was too short to time


def _log_axis(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) > 1 and max(positive) / min(positive) > LOG_AXIS_RATIO


def bar_figure(report: Report, traces: Callable[[list[Config]], list[Bars]], scale: float,
                unit: str, configs: list[Config]) -> go.Figure:
    """Bars with the median's interval as whiskers, one panel per workload, its value axis
    logarithmic where its medians span more than LOG_AXIS_RATIO. Traces that share an x
    position (runs side by side, percentiles) are grouped, others centred. A bar of a timed
    window too short to time is hatched, with `~` before its label and the reason in its hover."""
    panels = _panels(configs)
    titles = [escape(w) for w, _ in panels] if len(panels) > 1 else None
    fig = make_subplots(rows=1, cols=len(panels), subplot_titles=titles)
    shown: set[str] = set()
    shared_x = False
    for col, (_, group) in enumerate(panels, start=1):
        xs: list[str] = []
        values: list[float] = []
        for bars in traces(group):
            summaries = [bars.summary(c) for c in bars.configs]
            short = [bars.window and cells.short_window(c) for c in bars.configs]
            busy = [c.interference for c in bars.configs]  # `^` after the label, as in the tables
            x = [escape(("~ " if sh else "") + report.short_label(c, with_run=bars.with_run) + (" ^" if b.busy else ""))
                 for c, sh, b in zip(bars.configs, short, busy, strict=True)]
            shared_x = shared_x or bool(set(x) & set(xs))
            xs += x
            y = [None if s.median is None else s.median * scale for s in summaries]
            values += [v for v in y if v is not None]
            fig.add_trace(go.Bar(
                x=x, y=y, error_y=error_bars(summaries, scale), name=escape(bars.name), legendgroup=escape(bars.name),
                showlegend=bars.name not in shown, marker_color=bars.color,
                # a metric's own pattern wins (efficiency); its short windows keep the `~` label
                marker_pattern_shape=[bars.pattern or (SHORT_PATTERN if sh else "") for sh in short],
                hovertext=[hover(s, scale, unit) + ("<br>~ timed window too short to time: indicative only" if sh else "")
                           + (f"<br>^ {escape(b.text())}: on a busy machine" if b.busy else "")
                           for s, sh, b in zip(summaries, short, busy, strict=True)], hoverinfo="x+text+name",
            ), row=1, col=col)
            shown.add(bars.name)
        log = _log_axis(values)
        fig.update_yaxes(title_text=escape(unit + (" (log scale)" if log else "")), type="log" if log else None,
                         row=1, col=col)
    return layout(fig, barmode="group" if shared_x else "relative")


def curves(report: Report, pairs: list[tuple[Config, Trial]], series: tuple[str, str], titles: list[str], mode: str,
           each: Callable[[go.Figure, Trial, str, str], None] | None = None) -> go.Figure:
    """Two panels on one y axis, one line a trial in its framework's colour, its legend entry
    once: `series[0]` on the left (by step), `series[1]` on the right (by training seconds);
    `each(fig, trial, name, colour)` adds a trial's own traces after its lines."""
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.05, subplot_titles=titles)
    for c, t in pairs:
        name, colour = escape(trial_name(report, c, t)), color(report, c.axes["framework"])
        for col, one in enumerate(series, start=1):
            points = t.series.get(one) or []
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode=mode,
                                     name=name, legendgroup=name, showlegend=col == 1,
                                     line={"color": colour, "width": 1.5}), row=1, col=col)
        if each is not None:
            each(fig, t, name, colour)
    return fig


def trial_name(report: Report, config: Config, trial: Trial) -> str:
    """The configuration's short label, and the repeat where it has several."""
    return report.short_label(config) + (f" #{trial.repeat}" if len(config.trials) > 1 else "")

