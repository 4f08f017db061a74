"""The report's charts as Plotly figures, one function each. A chart whose metrics or series
exist in none of the runs is not made (None), so a report only shows what was measured.

Every text that reaches a figure passes through `_t` (html.escape): Plotly renders a subset of
HTML tags in labels and decodes entities, so an escaped label shows as written and never as markup.
"""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dlbench.analysis import interference
from dlbench.analysis import payback as payback_analysis
from dlbench.analysis import roofline as roofline_analysis
from dlbench.analysis.categories import CATEGORIES
from dlbench.analysis.history import segments
from dlbench.analysis.metrics import label as metrics_label
from dlbench.analysis.summary import Summary, summarize
from dlbench.report import cells, model
from dlbench.report import tune as tune_report
from dlbench.report import payback as payback_report
from dlbench.report import profile as profile_report
from dlbench.report import solve as solve_report
from dlbench.report.history import Series as HistorySeries
from dlbench.report.model import Config, Report, Trial
from dlbench.report.scenarios import CONVERGE_TABLE, reporting

GIB = 1024**3
# Colours of frameworks (in the order they first appear in the report, so one framework has one
# colour in every chart of a report) and of runs compared side by side.
PALETTE = ("#ee4c2c", "#ff8f00", "#1a73e8", "#2a9d8f", "#8e44ad", "#d00000", "#6c757d", "#b5838d",
           "#264653", "#e9c46a")
# Start-up segments in the order a process goes through them (DESIGN §4).
STARTUP_SEGMENTS = ("process start", "import", "build", "data", "compile / first step", "warm-up")
PHASE_COLORS = {"import": "#1f77b4", "build": "#9467bd", "data": "#8c564b", "compile": "#d62728",
                "first_step": "#ff7f0e", "warmup": "#bcbd22", "timed": "#2ca02c",
                "evaluate": "#17becf"}
LATENCY = re.compile(r"^latency_p(\d+(?:\.\d+)?)_s$")
EFFICIENCY = {"mfu": "MFU", "matmul_ceiling_share": "share of the measured matmul ceiling"}


@dataclass(frozen=True)
class Chart:
    id: str  # the DOM id stem: chart-<id>; tests look for these
    title: str
    figure: go.Figure
    note: str  # one sentence under the chart: what each mark is, how it is summarised
    # The workload whose section shows the chart, in a report of several (charts()); None: the
    # report has one workload and no sections.
    section: str | None = None


def _t(text: object) -> str:
    return html.escape(str(text))


def _color(report: Report, framework: object) -> str:
    """The framework's colour: by its place among the report's frameworks, the same in every
    chart of the report (no framework is named here: report/ knows none)."""
    frameworks = report.frameworks
    name = str(framework)
    return PALETTE[frameworks.index(name) % len(PALETTE)] if name in frameworks else PALETTE[-1]


def _layout(fig: go.Figure, height: int = 420, **kwargs: Any) -> go.Figure:
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


def _error_bars(summaries: list[Summary], scale: float) -> dict[str, Any]:
    def up(s: Summary) -> float:
        return (s.high - s.median) * scale if s.high is not None and s.median is not None else 0.0

    def down(s: Summary) -> float:
        return (s.median - s.low) * scale if s.low is not None and s.median is not None else 0.0

    return {"type": "data", "symmetric": False, "array": [up(s) for s in summaries],
            "arrayminus": [down(s) for s in summaries], "visible": any(s.level for s in summaries)}


def _hover(s: Summary, scale: float, unit: str) -> str:
    if s.median is None:
        return "no value"
    text = f"median {s.median * scale:.4g} {unit} over {s.n} process(es)"
    if s.low is not None and s.high is not None and s.level is not None:
        text += f"<br>{s.level:.0%} interval [{s.low * scale:.4g}, {s.high * scale:.4g}]"
    return text + ("<br>unstable" if s.unstable else "")


def _summary_of(metric: str) -> Callable[[Config], Summary]:
    return lambda c: c.summary(metric)


@dataclass(frozen=True)
class _Bars:
    """One bar trace: a summary per configuration."""

    name: str
    color: str
    configs: list[Config]
    summary: Callable[[Config], Summary]
    with_run: bool  # the x labels name the run (when traces are not one per run)
    pattern: str = ""  # a bar fill pattern: tells metrics apart where colour is the framework's
    window: bool = False  # a metric of the timed window: hatch the bars of windows too short to time


def _by_run_or_framework(report: Report, configs: list[Config], metric: str) -> list[_Bars]:
    """One trace per run when runs are compared, else one per framework (its color)."""
    groups: dict[str, list[Config]] = {}
    for c in configs:
        groups.setdefault(f"run {c.run_id}" if report.multi_run else str(c.axes["framework"]), []).append(c)
    return [_Bars(name, PALETTE[i % len(PALETTE)] if report.multi_run else _color(report, name), cs,
                  _summary_of(metric), False, window=metric in cells.WINDOW_METRICS)
            for i, (name, cs) in enumerate(groups.items())]


# Medians further apart than this in one panel put its value axis on a log scale: on a linear one
# a 444 samples/s bar beside 79,845 is invisible.
LOG_AXIS_RATIO = 20.0
SHORT_PATTERN = "/"  # the hatching of a bar whose timed window was too short to time


def _log_axis(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) > 1 and max(positive) / min(positive) > LOG_AXIS_RATIO


def _bar_figure(report: Report, traces: Callable[[list[Config]], list[_Bars]], scale: float,
                unit: str, configs: list[Config]) -> go.Figure:
    """Bars with the median's interval as whiskers, one panel per workload, its value axis
    logarithmic where its medians span more than LOG_AXIS_RATIO. Traces that share an x
    position (runs side by side, percentiles) are grouped, others centred. A bar of a timed
    window too short to time is hatched, with `~` before its label and the reason in its hover."""
    panels = _panels(configs)
    titles = [_t(w) for w, _ in panels] if len(panels) > 1 else None
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
            x = [_t(("~ " if sh else "") + report.short_label(c, with_run=bars.with_run) + (" ^" if b.busy else ""))
                 for c, sh, b in zip(bars.configs, short, busy, strict=True)]
            shared_x = shared_x or bool(set(x) & set(xs))
            xs += x
            y = [None if s.median is None else s.median * scale for s in summaries]
            values += [v for v in y if v is not None]
            fig.add_trace(go.Bar(
                x=x, y=y, error_y=_error_bars(summaries, scale), name=_t(bars.name), legendgroup=_t(bars.name),
                showlegend=bars.name not in shown, marker_color=bars.color,
                # a metric's own pattern wins (efficiency); its short windows keep the `~` label
                marker_pattern_shape=[bars.pattern or (SHORT_PATTERN if sh else "") for sh in short],
                hovertext=[_hover(s, scale, unit) + ("<br>~ timed window too short to time: indicative only" if sh else "")
                           + (f"<br>^ {_t(b.text())}: on a busy machine" if b.busy else "")
                           for s, sh, b in zip(summaries, short, busy, strict=True)], hoverinfo="x+text+name",
            ), row=1, col=col)
            shown.add(bars.name)
        log = _log_axis(values)
        fig.update_yaxes(title_text=_t(unit + (" (log scale)" if log else "")), type="log" if log else None,
                         row=1, col=col)
    return _layout(fig, barmode="group" if shared_x else "relative")


SHORT_CAPTION = (" Hatched, `~` before the label: a timed window too short to time (fewer than"
                 f" {cells.MIN_TIMED_STEPS} steps or under {cells.MIN_TIMED_WINDOW_S:g} s): indicative only."
                 f" A panel whose medians span more than {LOG_AXIS_RATIO:g}x has a log axis. `^` after the label:"
                 " trials on a busy machine, left out of the median where others remain.")


def _with_metric(report: Report, metric: str) -> list[Config]:
    # Time-to-accuracy trials have a chart of their own (convergence): their samples/s include
    # the first step's compile and their accuracy is the one at the stop, not after a timed window.
    return [c for c in report.configs if c.summary(metric).median is not None
            and CONVERGE_TABLE not in reporting(c).tables]


def throughput(report: Report) -> Chart | None:
    configs = _with_metric(report, "samples_per_s")
    if not configs:
        return None
    fig = _bar_figure(report, lambda cs: _by_run_or_framework(report, cs, "samples_per_s"), 1.0,
                      "samples/s", configs)
    return Chart("throughput", "Training throughput", fig,
                 "Median samples/s over the processes of each configuration; whiskers span the "
                 "median's confidence interval (its level in the hover) where there are 2 or more." + SHORT_CAPTION)


def accuracy(report: Report) -> Chart | None:
    """The held-out quality after the timed window: accuracy, or the workload's own quality
    metric (detect's mAP@0.5, stored as `map`) where its configurations share one."""
    learnable = [c for c in report.configs if c.axes.get("labels") == "learnable"
                 and CONVERGE_TABLE not in reporting(c).tables]
    names = {model.workload_quality(str(c.axes["workload"])) for c in learnable}
    metric = names.pop() if len(names) == 1 else "accuracy"
    if metric not in ("accuracy", "map"):
        metric = "accuracy"  # a quality of another kind (ddpm's denoising MSE) is in the headline table
    configs = [c for c in _with_metric(report, metric) if c in learnable]
    if not configs:
        return None
    label = metrics_label(metric)
    fig = _bar_figure(report, lambda cs: _by_run_or_framework(report, cs, metric), 1.0, label, configs)
    title = "Accuracy on the held-out split" if metric == "accuracy" else f"{label} on the held-out split"
    return Chart("accuracy" if metric == "accuracy" else "quality", title, fig,
                 "After the timed window, on labels a model can learn (`labels = learnable`); "
                 "median over processes with its interval.")


def startup_segments(m: dict[str, float | None]) -> dict[str, float | None]:
    """One trial's start-up split into the stacked segments, seconds. `compile / first step`
    is the ahead-of-time compile where the framework exposes it plus the first step (which holds
    the compile otherwise); `process start` is the rest of the time to the first step:
    interpreter start, dlbench's own import, framework settings, memory samples."""
    first = m.get("first_step_s")
    compile_first = None if first is None else first + (m.get("compile_s") or 0.0)
    parts = [m.get("import_s"), m.get("build_s"), m.get("data_s"), compile_first]
    ttfs = m.get("time_to_first_step_s")
    start = None
    if ttfs is not None and all(p is not None for p in parts):
        start = max(ttfs - sum(p for p in parts if p is not None), 0.0)
    return dict(zip(STARTUP_SEGMENTS, [start, *parts, m.get("warmup_s")], strict=True))


def startup(report: Report) -> Chart | None:
    configs = [c for c in report.configs if c.ok]
    if not configs:
        return None
    x = [_t(report.short_label(c)) for c in configs]
    fig = go.Figure()
    colors = ("#c7c7c7", "#1f77b4", "#9467bd", "#8c564b", "#d62728", "#bcbd22")
    for seg, color in zip(STARTUP_SEGMENTS, colors, strict=True):
        summaries = [summarize(startup_segments(t.metrics)[seg] for t in c.ok) for c in configs]
        fig.add_trace(go.Bar(x=x, y=[s.median for s in summaries], name=_t(seg), marker_color=color,
                             hovertext=[_hover(s, 1.0, "s") for s in summaries], hoverinfo="x+text+name"))
    fig.update_yaxes(title_text="seconds")
    return Chart("startup", "Start-up breakdown", _layout(fig, barmode="stack"),
                 "Median seconds of each phase over the processes of a configuration, bottom to top "
                 "in the order a process goes through them; `process start` is the rest of the time "
                 "to the first step (interpreter start, dlbench's own import and settings).")


def step_times(report: Report) -> Chart | None:
    """Within each process: one box of its chunks' per-step times. Across processes: one
    point per process (its median step), the unit of replication. Below, where the trials
    measured interference: each process's chunks over its timed window with the machine's
    foreign CPU share shaded behind them, so that a contended stretch shows where it was."""
    pairs = [(c, t) for c, t in report.trials() if t.series.get("step_s")]
    if not pairs:
        return None
    over_time = any(t.series.get(interference.SERIES) for _, t in pairs)
    titles = ["within each process (one value per chunk)", "across processes (one median per process)"]
    fig = make_subplots(rows=2 if over_time else 1, cols=2, column_widths=[0.62, 0.38], horizontal_spacing=0.08,
                        vertical_spacing=0.16, row_heights=[0.55, 0.45] if over_time else None,
                        specs=[[{}, {}], [{"colspan": 2, "secondary_y": True}, None]] if over_time else None,
                        subplot_titles=titles + (["over the timed window: ms per step of each chunk, and the"
                                                  " foreign CPU share of the machine (shaded, right axis)"]
                                                 if over_time else []))
    for c, t in pairs:
        fig.add_trace(go.Box(y=[v * 1e3 for _, v in t.series["step_s"]], name=_t(_trial_name(report, c, t)),
                             marker_color=_color(report, c.axes["framework"]), boxpoints="outliers",
                             showlegend=False), row=1, col=1)
    for c in {id(c): c for c, _ in pairs}.values():
        values = [t.metrics.get("step_s_median") for t in c.ok]
        fig.add_trace(go.Box(y=[v * 1e3 for v in values if v is not None], name=_t(report.short_label(c)),
                             marker_color=_color(report, c.axes["framework"]), boxpoints="all",
                             jitter=0.3, pointpos=0, showlegend=False), row=1, col=2)
    fig.update_yaxes(title_text="ms per step", row=1, col=1)
    note = ("Left: the spread inside one process (each chunk's seconds divided by its steps). "
            "Right: the spread between processes, which is what a confidence interval describes.")
    if over_time:
        _chunks_over_time(report, fig, pairs)
        note += (" Below: each chunk at its end, seconds into the timed window, and shaded on the right axis the"
                 " CPU time other processes took, as a share of the machine's capacity, about once a second"
                 f" (dashed: the busy threshold of {interference.busy_foreign_share():.0%}); a trial is busy when its"
                 " window's share passes it.")
    return Chart("step-times", "Step-time distributions", _layout(fig, height=780 if over_time else 460), note)


def _chunks_over_time(report: Report, fig: go.Figure, pairs: list[tuple[Config, Trial]]) -> None:
    """The bottom row: per-step times of each chunk as steps (a chunk covers the time up to its
    end), the foreign share as a shaded step area on the secondary axis (each point covers the
    interval up to its time), both in the framework's colour, named by the trial on hover."""
    for c, t in pairs:
        name, color = _t(_trial_name(report, c, t)), _color(report, c.axes["framework"])
        steps = t.series["step_s"]
        fig.add_trace(go.Scatter(x=[0.0] + [x for x, _ in steps], y=[steps[0][1] * 1e3] + [v * 1e3 for _, v in steps],
                                 mode="lines", line={"color": color, "width": 1.5, "shape": "vh"}, name=name,
                                 showlegend=False, hoverinfo="x+y+name"), row=2, col=1)
        share = t.series.get(interference.SERIES)
        if share:
            fig.add_trace(go.Scatter(x=[0.0] + [x for x, _ in share], y=[share[0][1] * 100] + [v * 100 for _, v in share],
                                     mode="lines", line={"color": color, "width": 0.5, "shape": "vh"},
                                     fill="tozeroy", fillcolor=_rgba(color, 0.15), name=f"{name}: foreign CPU %",
                                     showlegend=False, hoverinfo="x+y+name"), row=2, col=1, secondary_y=True)
    fig.add_hline(y=interference.busy_foreign_share() * 100, row=2, col=1, secondary_y=True,
                  line={"dash": "dash", "color": "#6c757d", "width": 1})
    fig.update_xaxes(title_text="s into the timed window", row=2, col=1)
    fig.update_yaxes(title_text="ms per step", row=2, col=1, secondary_y=False)
    fig.update_yaxes(title_text="foreign CPU %", range=[0, 100], autorange=False, tickmode="array",
                     tickvals=[0, 25, 50, 75, 100], showgrid=False, row=2, col=1, secondary_y=True)


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


# Memory over time as small multiples: one panel per configuration, MEMORY_COLUMNS to a row, each
# MEMORY_PANEL_PX tall with MEMORY_GAP_PX between rows for its tick labels and the next title.
MEMORY_COLUMNS = 3
MEMORY_PANEL_PX = 220
MEMORY_GAP_PX = 80


def _trial_name(report: Report, config: Config, trial: Trial) -> str:
    """The configuration's short label, and the repeat where it has several."""
    return report.short_label(config) + (f" #{trial.repeat}" if len(config.trials) > 1 else "")


def memory(report: Report) -> Chart | None:
    """Small multiples, one panel per configuration: RSS (and VRAM where a GPU was sampled)
    over time for each of its processes (the first solid, repeats fainter), the first process's
    phases shaded."""
    configs = [c for c in report.configs if any(t.series.get("rss_bytes") for t in c.trials)]
    if not configs:
        return None
    cols = min(MEMORY_COLUMNS, len(configs))
    rows = -(-len(configs) // cols)
    plot_px = rows * MEMORY_PANEL_PX + (rows - 1) * MEMORY_GAP_PX
    # shared axes: panels read against each other (the same GiB and seconds in every one)
    fig = make_subplots(rows=rows, cols=cols, vertical_spacing=MEMORY_GAP_PX / plot_px if rows > 1 else 0.0,
                        horizontal_spacing=0.08, subplot_titles=[_t(report.short_label(c)) for c in configs],
                        shared_xaxes="all", shared_yaxes="all")
    shapes: list[dict[str, Any]] = []
    for i, c in enumerate(configs):
        row, col = i // cols + 1, i % cols + 1
        trials = [t for t in c.trials if t.series.get("rss_bytes")]
        for k, t in enumerate(trials):
            for series, name, color in (("rss_bytes", "RSS", "#333333"), ("vram_bytes", "VRAM", "#d62728")):
                points = t.series.get(series) or []
                if points:
                    fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] / GIB for p in points], mode="lines",
                                             name=name, line={"color": color, "width": 1.5}, opacity=1.0 if k == 0 else 0.45,
                                             legendgroup=name, showlegend=i == 0 and k == 0,
                                             hovertext=_t(_trial_name(report, c, t)), hoverinfo="x+y+text"),
                                  row=row, col=col)
        shapes += _phase_shapes(trials[0], i + 1)
        if col == 1:
            fig.update_yaxes(title_text="GiB", row=row, col=col)
        if i + cols >= len(configs):  # the lowest panel of its column
            fig.update_xaxes(title_text="s since start", row=row, col=col)
    fig.update_layout(shapes=shapes)  # at once: add_vrect per panel is quadratic in the shapes
    _phase_legend(fig, [(c, t) for c in configs for t in c.trials if t.series.get("rss_bytes")])
    return Chart("memory", "Memory over time", _layout(fig, height=plot_px + 140),
                 "One panel per configuration, all on the same axes: raw samples every 25 ms over the worker's"
                 " process tree, seconds since the sampler started (repeats fainter); shaded: the phases the first process "
                 "reported (import, build, data, compile, first step, warm-up, timed window, evaluation).")


def _phase_shapes(trial: Trial, panel: int) -> list[dict[str, Any]]:
    """The trial's phases as shaded rectangles over the whole height of subplot `panel` (1 the
    first, row by row: make_subplots numbers its axes so)."""
    last = (trial.series.get("rss_bytes") or [(0.0, 0.0)])[-1][0]
    axis = "" if panel == 1 else str(panel)
    return [{"type": "rect", "xref": f"x{axis}", "yref": f"y{axis} domain", "x0": start,
             "x1": last if end is None else end, "y0": 0, "y1": 1, "line": {"width": 0},
             "fillcolor": PHASE_COLORS.get(name, "#999999"), "opacity": 0.18, "layer": "below"}
            for name, start, end in model.phase_spans(trial)]


def _phase_legend(fig: go.Figure, pairs: list[tuple[Config, Trial]]) -> None:
    """Shapes have no legend: one square marker entry per phase that occurs."""
    names = dict.fromkeys(n for _, t in pairs for n, _, _ in model.phase_spans(t))
    for name in names:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=_t(name.replace("_", " ")),
                                 marker={"symbol": "square", "size": 12, "opacity": 0.4,
                                         "color": PHASE_COLORS.get(name, "#999999")}), row=1, col=1)


def loss(report: Report) -> Chart | None:
    """Loss per step, against the step index and against seconds into the timed window."""
    pairs = [(c, t) for c, t in report.trials() if t.series.get("loss")]
    if not pairs:
        return None
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=["by step", "by wall-clock time"])
    shown: set[str] = set()
    any_means = False
    for c, t in pairs:
        # one legend entry per configuration, in its framework's colour; its repeats share it
        means = model.chunk_means(t)
        any_means |= means
        name, color = _t(report.short_label(c) + (" (chunk means)" if means else "")), _color(report, c.axes["framework"])
        # a chunk's mean is one measurement at the chunk's end: a marker on a dotted line, never a flat run of steps
        style = {"mode": "lines+markers", "marker": {"color": color, "size": 7, "symbol": "diamond"},
                 "line": {"color": color, "width": 1, "dash": "dot"}} if means else \
            {"mode": "lines", "line": {"color": color, "width": 1.5}}
        for col, points in ((1, t.series["loss"]), (2, model.loss_by_time(t))):
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], name=name, legendgroup=name,
                                     showlegend=col == 1 and name not in shown,
                                     hovertext=_t(_trial_name(report, c, t)), **style), row=1, col=col)
        shown.add(name)
    fig.update_xaxes(title_text="step of the timed window", row=1, col=1)
    fig.update_xaxes(title_text="seconds since the timed window began", row=1, col=2)
    fig.update_yaxes(title_text="training loss", row=1, col=1)
    means_note = (" A framework that reports one mean loss per training call (Keras's fit) is drawn as"
                  " diamonds: each the mean over its chunk's steps, at the chunk's last step.") if any_means else ""
    return Chart("loss", "Loss curves", _layout(fig, height=460),
                 "Training loss of every step in the timed window, per process; identical weights and "
                 "data order make the curves comparable step by step." + means_note)


def _several_metrics(report: Report, names: dict[str, str], scale: float, unit: str) -> go.Figure | None:
    """Bars of several metrics (trace names given) side by side per configuration; None when
    none of them was measured."""
    present = [m for m in names if any(c.summary(m).median is not None for c in report.configs)]
    if not present:
        return None

    def traces(configs: list[Config]) -> list[_Bars]:
        return [_Bars(names[m], PALETTE[i % len(PALETTE)],
                      [c for c in configs if c.summary(m).median is not None], _summary_of(m),
                      report.multi_run) for i, m in enumerate(present)]

    configs = [c for c in report.configs if any(c.summary(m).median is not None for m in present)]
    return _bar_figure(report, traces, scale, unit, configs)


def _percentile(metric: str) -> float:
    match = LATENCY.match(metric)
    return float(match.group(1)) if match else -1.0


def latency(report: Report) -> Chart | None:
    metrics = sorted({k for _, t in report.trials() for k in t.metrics if LATENCY.match(k)}, key=_percentile)
    fig = _several_metrics(report, {m: f"p{_percentile(m):g}" for m in metrics}, 1e3, "ms")
    if fig is None:
        return None
    return Chart("latency", "Inference latency percentiles", fig,
                 "Each bar a percentile of the per-request latency inside one process, summarised as "
                 "the median over processes with its interval.")


def _offered_load_lines(fig: go.Figure, report: Report, lines: list[tuple[Config, Trial]], series: str,
                        bound_metric: str, bound_name: str, row: int | None = None, col: int | None = None) -> None:
    """Each process's `series` (seconds over target QPS) as a line in ms, filled markers where
    LoadGen called the test VALID, and each bound (`bound_metric`) dotted: a trace, not a shape
    (a shape's y on a log axis is read as a power of ten)."""
    where = {"row": row, "col": col} if row is not None else {}
    for c, t in lines:
        points = t.series[series]
        valid = dict(t.series.get("server_valid") or [])
        fig.add_trace(go.Scatter(
            x=[p[0] for p in points], y=[p[1] * 1e3 for p in points], mode="lines+markers",
            name=_t(_trial_name(report, c, t)), legendgroup=_t(_trial_name(report, c, t)), showlegend=col in (None, 1),
            line={"color": _color(report, c.axes.get("framework"))},
            marker={"symbol": ["circle" if valid.get(p[0]) else "circle-open" for p in points], "size": 9},
            hovertext=[_t(f"{p[0]:.1f} QPS offered: {bound_name} {p[1] * 1e3:.3f} ms, "
                          + ("VALID" if valid.get(p[0]) else "INVALID")) for p in points], hoverinfo="text"), **where)
    xs = [p[0] for _, t in lines for p in t.series[series]]
    for b in sorted({b for _, t in lines if (b := t.metrics.get(bound_metric)) is not None}):
        fig.add_trace(go.Scatter(x=[min(xs), max(xs)], y=[b * 1e3, b * 1e3], mode="lines",
                                 name=_t(f"{bound_name} bound {b * 1e3:g} ms"), line={"dash": "dot", "color": "#6c757d"}),
                      **where)


def served_load(report: Report) -> Chart | None:
    """LoadGen Server tests (`--load server`): p99 latency against the offered load (target
    QPS), one line per process, filled markers where LoadGen called the test VALID; dotted: the
    p99 bound."""
    lines = [(c, t) for c in report.configs for t in c.trials if t.series.get("server_latency_p99_s")]
    if not lines:
        return None
    fig = go.Figure()
    _offered_load_lines(fig, report, lines, "server_latency_p99_s", "server_p99_bound_s", "p99")
    fig.update_xaxes(title_text="offered load (target QPS, Poisson arrivals)", type="log")
    fig.update_yaxes(title_text="p99 latency (ms)", type="log")
    return Chart("served-load", "Latency against offered load (LoadGen Server)", _layout(fig),
                 "Each marker one LoadGen Server test of a process (the sweep's bisection, or --qps): its p99 "
                 "latency from issue to completion, queueing included; filled: LoadGen's VALID verdict against "
                 "the p99 bound (early stopping included), open: INVALID.")


def served_tokens(report: Report) -> Chart | None:
    """Generation under LoadGen's Server with token latencies (`--scenario generate --load
    server`): TTFT p99 and TPOT p99 against the offered load, side by side, each with its bound."""
    lines = [(c, t) for c in report.configs for t in c.trials if t.series.get("server_ttft_p99_s")]
    if not lines:
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=["time to first token, p99", "time per output token, p99"])
    for col, (series, bound, name) in enumerate((("server_ttft_p99_s", "server_ttft_bound_s", "TTFT p99"),
                                                 ("server_tpot_p99_s", "server_tpot_bound_s", "TPOT p99")), start=1):
        _offered_load_lines(fig, report, [(c, t) for c, t in lines if t.series.get(series)], series, bound, name,
                            row=1, col=col)
        fig.update_xaxes(title_text="offered load (target QPS, Poisson arrivals)", type="log", row=1, col=col)
        fig.update_yaxes(title_text="ms", type="log", row=1, col=col)
    return Chart("served-tokens", "Token latencies against offered load (LoadGen Server)", _layout(fig),
                 "Each marker one LoadGen Server test of a generate process under token latencies (the sweep, or"
                 " --qps): LoadGen's TTFT p99 (issue to the first token, queueing included) and TPOT p99 (per query,"
                 " the rest of its generation over its tokens after the first); filled: VALID, both p99s within their"
                 " bounds (dotted; early stopping included), open: INVALID.")


EFFICIENCY_PATTERNS = ("", ".", "x")  # one fill per efficiency metric; the colour stays the framework's
EFFICIENCY_SHORT = {"mfu": "MFU", "matmul_ceiling_share": "ceiling share"}


def efficiency(report: Report) -> Chart | None:
    """MFU and the matmul-ceiling share, one colour per framework as in every other chart, the
    metrics told apart by their fill pattern."""
    present = [m for m in EFFICIENCY if any(c.summary(m).median is not None for c in report.configs)]
    if not present:
        return None

    def traces(configs: list[Config]) -> list[_Bars]:
        out = []
        for i, m in enumerate(present):
            for bars in _by_run_or_framework(report, [c for c in configs if c.summary(m).median is not None], m):
                name = bars.name if len(present) == 1 else f"{bars.name} {EFFICIENCY_SHORT[m]}"
                out.append(dataclasses.replace(bars, name=name, with_run=report.multi_run,
                                               pattern=EFFICIENCY_PATTERNS[i % len(EFFICIENCY_PATTERNS)]))
        return out

    configs = [c for c in report.configs if any(c.summary(m).median is not None for m in present)]
    unit = "% of peak" if len(present) > 1 else f"{EFFICIENCY[present[0]]}, %"
    fig = _bar_figure(report, traces, 100.0, unit, configs)
    return Chart("efficiency", "Efficiency", fig,
                 "MFU: achieved FLOP/s over the device's dense peak for the dtype (GPUs in the peak "
                 "table); on CPUs the share of a measured matmul ceiling. Medians over processes; the"
                 " colour is the framework's, the fill pattern the metric.")


ROOFLINE_SYMBOLS = {roofline_analysis.TRAINING_STEP: "circle", roofline_analysis.DECODE_STEP: "diamond"}


def _roofline_points(report: Report) -> list[tuple[Config, Trial, roofline_analysis.Point]]:
    """Every ok trial with a training or decode step and both ceilings measured (CPUs)."""
    out = []
    for c, t in report.trials():
        p = roofline_analysis.point(t.metrics, int(t.spec.get("workload", {}).get("batch_size", 1)))
        if t.status == "ok" and p is not None and p.side() is not None:
            out.append((c, t, p))
    return out


def _roof_traces(fig: go.Figure, roofs: list[tuple[float, float]], x_lo: float, x_hi: float, y_lo: float) -> None:
    """Each distinct pair of ceilings as its roof, min(ceiling, x bandwidth), over [x_lo, x_hi],
    and its ridge as a dotted vertical line (traces, not shapes: a shape on a log axis takes
    powers of ten)."""
    for i, (ceiling, bandwidth) in enumerate(roofs):
        ridge = roofline_analysis.ridge_flops_per_byte(ceiling, bandwidth)
        xs = sorted({min(x_lo, ridge / 4), ridge, max(x_hi, ridge * 4)})
        ys = [roofline_analysis.attainable_flops_per_s(x, ceiling, bandwidth) / 1e9 for x in xs]
        name = f"roof: matmul ceiling {ceiling / 1e9:.4g} GFLOP/s, memory {bandwidth / 1e9:.4g} GB/s"
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=_t(name), hoverinfo="name",
                                 line={"color": "#222222" if i == 0 else "#6c757d", "width": 2}))
        fig.add_trace(go.Scatter(x=[ridge, ridge], y=[y_lo / 1e9, ceiling / 1e9], mode="lines+text",
                                 name=_t(f"ridge {ridge:.3g} FLOP/B"), text=["", _t(f"ridge {ridge:.3g} FLOP/B")],
                                 textposition="top center", hoverinfo="name",
                                 line={"color": "#6c757d", "dash": "dot", "width": 1}))


def roofline(report: Report) -> Chart | None:
    """Achieved FLOP/s against arithmetic intensity, log-log, one point per trial (training
    steps and decode steps, told apart by their marker), under the roofs of the measured matmul
    ceiling and memory bandwidth, each ridge marked (analysis/roofline.py)."""
    found = _roofline_points(report)
    if not found:
        return None
    fig = go.Figure()
    roofs = sorted({(p.ceiling_flops_per_s or 0.0, p.bandwidth_bytes_per_s or 0.0) for _, _, p in found})
    xs, ys = [p.flops_per_byte for _, _, p in found], [p.flops_per_s for _, _, p in found]
    _roof_traces(fig, roofs, min(xs) / 4, max(xs) * 4, min(ys) / 4)
    shown: set[str] = set()
    for c, t, p in found:
        framework = str(c.axes.get("framework"))
        name = f"{framework} {p.kind}s"
        roof = roofline_analysis.attainable_flops_per_s(p.flops_per_byte, p.ceiling_flops_per_s or 0.0,
                                                         p.bandwidth_bytes_per_s or 0.0)
        hover = (f"{_trial_name(report, c, t)}: {p.kind}<br>{p.flops_per_byte:.3g} FLOP/B, {p.flops_per_s / 1e9:.4g}"
                 f" GFLOP/s, {p.flops_per_s / roof:.1%} of the roof there<br>{p.side()}")
        fig.add_trace(go.Scatter(x=[p.flops_per_byte], y=[p.flops_per_s / 1e9], mode="markers", name=_t(name),
                                 legendgroup=_t(name), showlegend=name not in shown, hovertext=_t(hover), hoverinfo="text",
                                 marker={"color": _color(report, framework), "size": 11,
                                         "symbol": ROOFLINE_SYMBOLS.get(p.kind, "square"),
                                         "line": {"width": 1, "color": "#ffffff"}}))
        shown.add(name)
    fig.update_xaxes(title_text="arithmetic intensity (FLOP per byte moved, log scale)", type="log")
    fig.update_yaxes(title_text="achieved GFLOP/s (log scale)", type="log")
    return Chart("roofline", "Roofline", _layout(fig, height=480),
                 "One point per process: circles training steps (FLOPs per step over the bytes of the optimizer state a"
                 " step must stream once: weights, gradients and Adam's two moments, 7 x 4 B a parameter), diamonds"
                 " decode steps (decode FLOPs over the bytes one step must read: every weight once and the KV cache at"
                 " the generation's mean position). Both byte counts leave out activations and re-reads: lower bounds,"
                 " so a point may sit further right than its step really is. Roofs: the measured float32 matmul"
                 " ceiling and the measured memory bandwidth for the trial's threads; left of the dotted ridge a step"
                 " is bound by memory, right of it by compute (docs/methodology.md).")


def scaling(report: Report) -> Chart | None:
    """Throughput against batch size where a sweep has several, and scaling efficiency against
    devices where it was measured (each multi-device configuration with its one-device
    baseline at efficiency 1: _device_curves)."""
    curves = _curves(report, "batch", "samples_per_s")
    curves += _device_curves(report)
    if not curves:
        return None
    fig = make_subplots(rows=1, cols=len({axis for axis, *_ in curves}))
    cols = {axis: i for i, axis in enumerate(dict.fromkeys(axis for axis, *_ in curves), start=1)}
    for axis, metric, name, framework, xs, summaries in curves:
        fig.add_trace(go.Scatter(x=xs, y=[s.median for s in summaries], mode="lines+markers",
                                 name=_t(name), line={"color": _color(report, framework)},
                                 error_y=_error_bars(summaries, 1.0),
                                 hovertext=[_hover(s, 1.0, metric) for s in summaries]),
                      row=1, col=cols[axis])
        fig.update_xaxes(title_text=_t("batch size" if axis == "batch" else "devices"), row=1, col=cols[axis])
        fig.update_yaxes(title_text=_t(metric), row=1, col=cols[axis])
    return Chart("scaling", "Scaling", _layout(fig),
                 "Median over processes at each point, with its interval; one line per configuration "
                 "that differs only in the swept axis.")


Curve = tuple[str, str, str, object, list[object], list[Summary]]


def _curves(report: Report, axis: str, metric: str) -> list[Curve]:
    """Lines through configurations equal in every axis but `axis`, where there are 2+ points."""
    lines: dict[tuple[object, ...], list[Config]] = {}
    for c in _with_metric(report, metric):
        rest = tuple(v for a, v in c.axes.items() if a != axis)
        lines.setdefault((c.run_id, *rest), []).append(c)
    out: list[Curve] = []
    for configs in lines.values():
        if len({c.axes[axis] for c in configs}) < 2:
            continue
        configs.sort(key=lambda c: float(str(c.axes[axis])))
        name = report.label(configs[0]).replace(f"{axis} {configs[0].axes[axis]}", "").strip()
        out.append((axis, metric, name, configs[0].axes["framework"],
                    [c.axes[axis] for c in configs], [c.summary(metric) for c in configs]))
    return out


def _device_curves(report: Report) -> list[Curve]:
    """Scaling efficiency against devices: each configuration that ran on several devices, with
    the one-device configuration it was measured against (analysis/scaling.py: the per-device
    batch under weak scaling, the same global batch under strong) as the point (1, 1). Under
    weak scaling the two differ in batch and in the scaling axis, so `_curves` never pairs them."""
    singles: dict[tuple[object, ...], Config] = {}
    multis: dict[tuple[object, ...], list[Config]] = {}
    for c in report.configs:
        devices = int(str(c.axes["devices"]))
        rest = tuple(v for a, v in c.axes.items() if a not in ("devices", "batch", "scaling"))
        if devices == 1:
            singles[(c.run_id, *rest, c.axes["batch"])] = c
        elif c.summary("scaling_efficiency").median is not None:
            per_device = int(str(c.axes["batch"])) // devices if c.axes["scaling"] == "weak" else c.axes["batch"]
            multis.setdefault((c.run_id, *rest, per_device, c.axes["scaling"]), []).append(c)
    out: list[Curve] = []
    for key, configs in multis.items():
        configs.sort(key=lambda c: int(str(c.axes["devices"])))
        base = singles.get(key[:-1])
        xs: list[object] = [c.axes["devices"] for c in configs]
        points = [c.summary("scaling_efficiency") for c in configs]
        if base is not None:
            xs, points = [1, *xs], [summarize([1.0] * max(1, len(base.ok))), *points]
        name = f"{report.label(configs[0])} ({configs[0].axes['scaling']} scaling)"
        name = name.replace(f"devices {configs[0].axes['devices']}", "").replace("  ", " ").strip()
        out.append(("devices", "scaling_efficiency", name, configs[0].axes["framework"], xs, points))
    return out


# A time-to-target trial's curve: the metric its target names (lm's default target is a held-out
# perplexity, recorded as `eval_perplexity`; every other workload's is its quality, `accuracy`),
# its series by step and by training seconds, the spec field of its target, the axis title.
_CURVES = (("accuracy", "accuracy", "accuracy_by_time", "target_accuracy", "held-out accuracy"),
           ("perplexity", "eval_perplexity", "eval_perplexity_by_time", "target_perplexity", "held-out perplexity"))


def convergence(report: Report) -> Chart | None:
    """Held-out accuracy at each evaluation of a time-to-accuracy trial, by step and by training
    seconds (evaluation excluded), one line per process, the target dashed."""
    return _convergence(report, *_CURVES[0])


def convergence_perplexity(report: Report) -> Chart | None:
    """The same for a trial whose target is a held-out perplexity (lm's default), on a log axis:
    it falls from about the vocabulary's size towards exp(the entropy rate)."""
    return _convergence(report, *_CURVES[1])


def _convergence(report: Report, kind: str, by_step: str, by_time: str, target_field: str, title: str) -> Chart | None:
    # RL trials (a `return` series) have their own chart: returns(); a trial whose target is a
    # perplexity is drawn by perplexity only (its accuracy series is there, but not its target)
    pairs = [(c, t) for c, t in report.trials()
             if t.series.get(by_time) and not t.series.get("return")
             and (kind == "perplexity" or not t.series.get("eval_perplexity_by_time"))]
    if not pairs:
        return None
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=["by step", "by wall-clock time (training only)"])
    for c, t in pairs:
        name, color = _t(_trial_name(report, c, t)), _color(report, c.axes["framework"])
        for col, series in enumerate((by_step, by_time), start=1):
            points = t.series.get(series) or []
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines+markers",
                                     name=name, legendgroup=name, showlegend=col == 1,
                                     line={"color": color, "width": 1.5}), row=1, col=col)
    for target in sorted({float(t.spec[target_field]) for _, t in pairs if t.spec.get(target_field)}):
        fig.add_hline(y=target, line_dash="dash", line_color="#555555", line_width=1)
    fig.update_xaxes(title_text="training step", row=1, col=1)
    fig.update_xaxes(title_text="seconds of training (first step's compile included)", row=1, col=2)
    fig.update_yaxes(title_text=title, row=1, col=1)
    if kind == "perplexity":
        fig.update_yaxes(type="log")
        return Chart("convergence-perplexity", "Time to perplexity: curves", _layout(fig, height=460),
                     "Held-out perplexity after every K steps of each time-to-perplexity process (lower is better,"
                     " log axis), against steps and against training seconds (the clock stops while evaluating);"
                     " dashed: the target.")
    return Chart("convergence", "Time to accuracy: curves", _layout(fig, height=460),
                 "Held-out accuracy after every K steps of each time-to-accuracy process, against steps and "
                 "against training seconds (the clock stops while evaluating); dashed: the target.")


def returns(report: Report) -> Chart | None:
    """Reinforcement learning (runner/scenarios/rl.py, time to the return target): the mean return of the last finished
    episodes after each iteration, by environment steps and by training seconds, one line per
    process (seed), the target dashed."""
    pairs = [(c, t) for c, t in report.trials() if t.series.get("return")]
    if not pairs:
        return None
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.05,
                        subplot_titles=["by environment steps", "by wall-clock time (training only)"])
    for c, t in pairs:
        name, color = _t(_trial_name(report, c, t)), _color(report, c.axes["framework"])
        for col, series in enumerate(("return", "return_by_time"), start=1):
            points = t.series.get(series) or []
            fig.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="lines",
                                     name=name, legendgroup=name, showlegend=col == 1,
                                     line={"color": color, "width": 1.5}), row=1, col=col)
        # every episode's return at its global env step (CleanRL's charts/episodic_return form)
        episodes = t.series.get("episodic_return") or []
        fig.add_trace(go.Scatter(x=[p[0] for p in episodes], y=[p[1] for p in episodes], mode="markers",
                                 name=name, legendgroup=name, showlegend=False, opacity=0.35,
                                 marker={"color": color, "size": 3}), row=1, col=1)
    for target in sorted({float(t.spec["target_accuracy"]) for _, t in pairs if t.spec.get("target_accuracy")}):
        fig.add_hline(y=target * RL_MAX_RETURN, line_dash="dash", line_color="#555555", line_width=1)
    fig.update_xaxes(title_text="environment steps", row=1, col=1)
    fig.update_xaxes(title_text="seconds of training (first compile included)", row=1, col=2)
    fig.update_yaxes(title_text="mean episodic return", row=1, col=1)
    return Chart("returns", "Reinforcement learning: returns", _layout(fig, height=460),
                 "Mean return of the last 20 finished episodes after each PPO iteration, one line per process"
                 " (seed): against environment steps and against training seconds; dots: every finished"
                 " episode's return at the global environment step it ended (the points published PPO curves,"
                 " e.g. CleanRL's charts/episodic_return, are drawn from); dashed: the target (the"
                 " normalised target x 500, CartPole's longest episode). Seeds differ by design: once one action"
                 " flips at a rounding boundary two frameworks' runs diverge, so compare distributions.")


def work_precision(report: Report) -> Chart | None:
    """The solver scenario (report/solve.py): per problem, log10 error against log10 warm seconds
    over the tolerance sweep, one curve per framework x solver x dtype (SciMLBenchmarks' diagram)."""
    traces = solve_report.diagram_traces(report)
    if not traces:
        return None
    fig = go.Figure()
    dashes = {"float64": "solid", "float32": "dot"}
    for i, (problem, name, log_s, log_err, hover) in enumerate(traces):
        framework = name.split(" ")[0]
        fig.add_trace(go.Scatter(
            x=log_s, y=log_err, mode="lines+markers", name=_t(f"{problem}: {name}" if len({t[0] for t in traces}) > 1
                                                              else name),
            text=hover, hovertemplate="%{text}<br>log10 s %{x:.2f}<br>log10 error %{y:.2f}<extra></extra>",
            line={"color": PALETTE[i % len(PALETTE)] if framework == "scipy" else _color(report, framework),
                  "dash": dashes.get(name.rsplit(" ", 1)[-1], "dash"), "width": 1.5}))
    fig.update_xaxes(title_text="log10 warm seconds per solve")
    fig.update_yaxes(title_text="log10 error at the output times")
    return Chart("work-precision", "Work precision", _layout(fig, height=520),
                 "One point per tolerance (the loosest upper left, tighter ones down and to the right): the error against the float64 reference and the median warm time of a solve;"
                 " lower-left is better; dotted: float32. Failed points (step cap, step-size collapse) are"
                 " left out here and named in the work-precision table.")


# CartPole-v1's longest episode: the target of an RL time-to-target trial is a share of it.
RL_MAX_RETURN = 500.0

CHARTS: tuple[Callable[[Report], Chart | None], ...] = (
    throughput, step_times, startup, memory, loss, accuracy, convergence, convergence_perplexity, returns, latency, served_load, served_tokens,
    efficiency, roofline, scaling, work_precision)


def charts(report: Report) -> list[Chart]:
    """Every chart that has data in these runs, in the report's order; for a report of several
    workloads, each workload's charts in turn (its section's), labelled by what differs within it
    and with the workload in their ids."""
    parts = report.by_workload()
    if len(parts) == 1:
        return [c for make in CHARTS if (c := make(report)) is not None]
    return [dataclasses.replace(c, id=f"{section_id(w)}-{c.id}", section=w)
            for w, part in parts for make in CHARTS if (c := make(part)) is not None]


def section_id(workload: str) -> str:
    """A workload's name as a DOM id fragment (letters, digits, `-` and `_`)."""
    return re.sub(r"[^\w-]", "-", workload)


def history(series: list[HistorySeries]) -> Chart | None:
    """`dlbench history --html`: each configuration's median run by run (whiskers: its
    interval) and the levels of the step fit as dashed segments. Not one of the report's CHARTS:
    the history command draws it."""
    if not series:
        return None
    fig = go.Figure()
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        xs = [f"run {p.run_id}" for p in s.points]
        summaries = [p.summary for p in s.points]
        fig.add_trace(go.Scatter(x=xs, y=[p.summary.median for p in s.points], mode="lines+markers",
                                 name=_t(s.label), line={"color": color}, error_y=_error_bars(summaries, 1.0),
                                 hovertext=[_hover(m, 1.0, s.metric) for m in summaries], hoverinfo="x+text+name"))
        for seg in segments([p.summary.median or 0.0 for p in s.points]):
            fig.add_trace(go.Scatter(x=xs[seg.start:seg.end], y=[seg.level] * (seg.end - seg.start), mode="lines",
                                     line={"color": color, "dash": "dash", "width": 1}, showlegend=False,
                                     hoverinfo="skip"))
    fig.update_yaxes(title_text=_t(series[0].metric))
    return Chart("history", "History", _layout(fig),
                 "Median over each run's processes, run by run (whiskers: its interval); dashed: the levels"
                 " of the step fit, a new level where the history table marks a STEP.")


PAYBACK_COLUMNS = 3  # panels per row of the payback chart


def payback(report: Report) -> Chart | None:
    """Cumulative wall time against steps for the configurations ahead at some run length
    (report/payback.py), per group of configurations that differ only in framework and mode;
    each crossover a numbered dot whose step count is in its hover text and in the table (labels
    beside the dots overprinted each other where crossovers lie close)."""
    found = payback_report.groups(report)
    if not found:
        return None
    cols = min(len(found), PAYBACK_COLUMNS)
    rows = -(-len(found) // cols)
    fig = make_subplots(rows=rows, cols=cols, vertical_spacing=0.12 if rows > 1 else 0.1, subplot_titles=[
        _t(" ".join(f"{a} {c.axes[a]}" for a in ("workload", "batch"))) for c, _ in (g[0] for g in found)])
    shown: set[str] = set()
    any_short = False
    for i, group in enumerate(found):
        row, col = i // cols + 1, i % cols + 1
        lead = payback_analysis.leaders([made for _, made in group])
        # the leaders; where one leads throughout, its closest rival beside it (the gap is the point)
        ahead = {id(x.early) for x in lead} | {id(x.late) for x in lead if x.steps is not None or len(lead) == 1}
        horizon = payback_analysis.horizon_steps(lead)
        steps = [1 + round(k * (horizon - 1) / 100) for k in range(101)]
        for c, made in group:
            if id(made) not in ahead:
                continue  # never ahead: its line would only stretch the axis
            short = cells.short_window(c)
            any_short |= short
            name = _t(made.label + (" ~" if short else ""))
            fig.add_trace(go.Scatter(x=steps, y=[made.total_s(n) / 60 for n in steps], mode="lines",
                                     name=name, legendgroup=name, showlegend=name not in shown,
                                     line={"color": _color(report, c.axes["framework"]),
                                           "dash": "dot" if short else "solid"}), row=row, col=col)
            shown.add(name)
        crossings = [x for x in lead if x.steps is not None and x.seconds is not None]
        if crossings:
            fig.add_trace(go.Scatter(x=[x.steps for x in crossings], y=[(x.seconds or 0.0) / 60 for x in crossings],
                                     mode="markers", showlegend=False, marker={"color": "#333333", "size": 9},
                                     hovertext=[_t(x.text()) for x in crossings], hoverinfo="text"), row=row, col=col)
        fig.update_xaxes(title_text="training steps", row=row, col=col)
        fig.update_yaxes(title_text="total wall time, min" if col == 1 else None, row=row, col=col)
    short_text = (" Dotted, `~` in the legend: a configuration whose timed window was too short to time; its"
                  " crossover is indicative only.") if any_short else ""
    return Chart("payback", "Total wall time by run length", _layout(fig, height=max(380, 330 * rows)),
                 "Total wall time of a run of n steps = time to first step + (n - 1) x median step time, per "
                 "configuration ahead at some run length (medians over processes); dots: where the lead passes"
                 " to another configuration (hover for the step count; the table lists each)." + short_text)


def batch_sweep(report: Report) -> Chart | None:
    """Throughput against batch size, one line per framework (and mode), crossovers of the
    leader named in the chart's note and marked between the batch sizes where they happen."""
    found = payback_report.sweeps(report)
    if not found:
        return None
    fig = make_subplots(rows=1, cols=len(found), subplot_titles=[_t(w) for w, _ in found])
    said = []
    for col, (workload, rates) in enumerate(found, start=1):
        for name, by_batch in rates.items():
            xs = sorted(by_batch)
            framework = name.split("/")[0].split(" ")[0]
            fig.add_trace(go.Scatter(x=xs, y=[by_batch[b] for b in xs], mode="lines+markers", name=_t(name),
                                     legendgroup=_t(name), showlegend=col == 1,
                                     line={"color": _color(report, framework)}), row=1, col=col)
        for x in payback_analysis.batch_crossovers(rates):
            fig.add_vrect(x0=x.below, x1=x.above, fillcolor="#999999", opacity=0.12, line_width=0, row=1, col=col)
            said.append(f"{workload}: {x.text()}")
        fig.update_xaxes(title_text="batch size", type="log", row=1, col=col)
    fig.update_yaxes(title_text="samples/s", row=1, col=1)
    note = ("Median samples/s over processes at each batch size, one line per framework; shaded: where the"
            " leader changes. " + ("; ".join(said) if said else "The leader is the same at every batch size."))
    return Chart("batch-sweep", "Throughput against batch size", _layout(fig), note)



def profile_bars(report: Report) -> Chart | None:
    """Where the time goes: one stacked bar per profiled framework (and mode), ms per step by
    category (report/profile.py), one panel per workload."""
    found = profile_report.profiled(report)
    if not found:
        return None
    workloads = list(dict.fromkeys(p.workload for p in found))
    fig = make_subplots(rows=1, cols=len(workloads), subplot_titles=[_t(w) for w in workloads])
    for i, category in enumerate(CATEGORIES):
        for col, workload in enumerate(workloads, start=1):
            here = [p for p in found if p.workload == workload]
            values = [p.categories().get(category, 0.0) * 1e3 for p in here]
            totals = [sum(p.categories().values()) for p in here]
            fig.add_trace(go.Bar(x=[_t(p.label) for p in here], y=values, name=_t(category),
                                 legendgroup=_t(category), showlegend=col == 1,
                                 marker={"color": CATEGORY_COLORS[i % len(CATEGORY_COLORS)]},
                                 hovertext=[_t(f"{category}: {v:.2f} ms/step ({v / 1e3 / t:.0%})") if t else ""
                                            for v, t in zip(values, totals, strict=True)],
                                 hoverinfo="text"), row=1, col=col)
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title_text="ms per step (traced op time)", row=1, col=1)
    return Chart("profile", "Where the time goes", _layout(fig, height=480),
                 "Profiled trials (run --profile), apart from the timed ones: each bar one framework's traced op time"
                 " per step by category; host overhead and idle = time in the window where no traced op ran."
                 " Categories and rules: docs/methodology.md.")


CATEGORY_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                   "#bcbd22", "#7f7f7f", "#c7c7c7")
CHARTS = (*CHARTS, profile_bars, payback, batch_sweep)


def headroom(report: Report) -> Chart | None:
    """`dlbench tune` runs: each candidate's speed-up over the default of its phase, with its
    interval (whiskers), one colour per framework; the best of each cell a star; candidates
    without a speed-up (not run, failed, parity failures) are in the candidates table only."""
    found = tune_report.searches(report)
    points = [(run_id, r, j) for run_id, _, r in found for j in r.judged
              if j.speedup is not None and j.candidate.name != "default"]
    if not points:
        return None
    fig = go.Figure()
    names = [_t(f"{'run ' + str(run_id) + ' · ' if report.multi_run else ''}{r.cell.label}"
                f" {j.candidate.settings(r.cell.framework, r.cell.mode)} (phase {j.phase})") for run_id, r, j in points]
    for framework in dict.fromkeys(r.cell.framework for _, r, _ in points):
        mine = [i for i, (_, r, _) in enumerate(points) if r.cell.framework == framework]
        js = [points[i][2] for i in mine]
        fig.add_trace(go.Scatter(
            x=[j.speedup for j in js], y=[names[i] for i in mine], mode="markers", name=_t(framework),
            marker={"color": _color(report, framework), "size": 9},
            error_x={"type": "data", "symmetric": False, "array": [(j.high or j.speedup or 0) - (j.speedup or 0) for j in js],
                     "arrayminus": [(j.speedup or 0) - (j.low or j.speedup or 0) for j in js]},
            hovertext=[_t(f"{j.speedup:.3f}x" + (f", [{j.low:.3f}, {j.high:.3f}] at >= {j.level:.0%}"
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
    return Chart("headroom", "Headroom", _layout(fig, height=max(320, 140 + 28 * len(points))),
                 "Each candidate `dlbench tune` ran: its median headline over the default's of the same phase (whiskers:"
                 " the ratio's interval, its level a lower bound); dashed: the default; star: the best of its"
                 " workload and framework (decided faster, parity passing). Every candidate with its verdict:"
                 " the candidates table.")


CHARTS = (*CHARTS, headroom)
