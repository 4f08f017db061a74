"""The report's charts as Plotly figures, one function each, and CHARTS, every chart of the
report in its order: the charts of every trial's measurements, here, and those each scenario
registers beside its tables (report/scenarios.py: Reporting.charts, functions of its report
module). A chart whose metrics or series exist in none of the runs is not made (None), so a report
only shows what was measured. Drawn with report/plot.py's helpers.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable
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
from dlbench.report import cells, model, tune
from dlbench.report import payback as payback_report
from dlbench.report import profile as profile_report
from dlbench.report.history import Series as HistorySeries
from dlbench.report.model import Config, Report, Trial
# report/plot.py's helpers, under the names the charts here were written with
from dlbench.report.plot import LOG_AXIS_RATIO, PALETTE, Chart
from dlbench.report.plot import Bars as _Bars
from dlbench.report.plot import bar_figure as _bar_figure
from dlbench.report.plot import color as _color
from dlbench.report.plot import error_bars as _error_bars
from dlbench.report.plot import escape as _t
from dlbench.report.plot import hover as _hover
from dlbench.report.plot import layout as _layout
from dlbench.report.plot import summary_of as _summary_of
from dlbench.report.plot import trial_name as _trial_name
from dlbench.report.scenarios import CONVERGE_TABLE, REPORTING, reporting

GIB = 1024**3
# Start-up segments in the order a process goes through them (DESIGN §4).
STARTUP_SEGMENTS = ("process start", "import", "build", "data", "compile / first step", "warm-up")
PHASE_COLORS = {"import": "#1f77b4", "build": "#9467bd", "data": "#8c564b", "compile": "#d62728",
                "first_step": "#ff7f0e", "warmup": "#bcbd22", "timed": "#2ca02c",
                "evaluate": "#17becf"}
EFFICIENCY = {"mfu": "MFU", "matmul_ceiling_share": "share of the measured matmul ceiling"}


def _by_run_or_framework(report: Report, configs: list[Config], metric: str) -> list[_Bars]:
    """One trace per run when runs are compared, else one per framework (its color)."""
    groups: dict[str, list[Config]] = {}
    for c in configs:
        groups.setdefault(f"run {c.run_id}" if report.multi_run else str(c.axes["framework"]), []).append(c)
    return [_Bars(name, PALETTE[i % len(PALETTE)] if report.multi_run else _color(report, name), cs,
                  _summary_of(metric), False, window=metric in cells.WINDOW_METRICS)
            for i, (name, cs) in enumerate(groups.items())]


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

ChartMaker = Callable[[Report], Chart | None]


def registered() -> tuple[ChartMaker, ...]:
    """The charts the scenarios register beside their tables (report/scenarios.py), each once, in
    the order of the registrations: `module:function` names, looked up here (the modules that
    hold them import the registrations)."""
    names = dict.fromkeys(name for r in REPORTING.values() for name in r.charts)
    return tuple(getattr(importlib.import_module(module), function)
                 for module, _, function in (name.partition(":") for name in names))


def build() -> tuple[ChartMaker, ...]:
    """Every chart of the report, in its order: what every trial measures, the scenarios' own
    charts, then efficiency, scaling, the profile, run length and batch size, and tune's headroom."""
    return (throughput, step_times, startup, memory, loss, accuracy, *registered(), efficiency, roofline, scaling,
            profile_bars, payback, batch_sweep, tune.headroom)


CHARTS = build()
