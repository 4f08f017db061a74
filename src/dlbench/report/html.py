"""One self-contained HTML report: Plotly's JavaScript embedded, no request to any other host.

Every user-supplied or stored string goes through html.escape; chart data is Plotly's own JSON
inside <script type="application/json">, with <, > and & written as \\u escapes so no text can
close the script element.
"""

from __future__ import annotations

import datetime
import html
import json
import re
from pathlib import Path
from typing import Any

import plotly.io
import plotly.offline
from markdown_it import MarkdownIt

import dlbench
from dlbench.report import model
from dlbench.report.figures import section_id
from dlbench.report.headline import UNSTABLE_NOTE
from dlbench.report.model import Report
from dlbench.report.overview import overview_table
from dlbench.report.plot import Chart
from dlbench.report.tabledata import Cell, Column, Table, tidy
from dlbench.report.tables import report_tables
from dlbench.results.tidy import flatten

METHODOLOGY = Path(__file__).resolve().parents[3] / "docs" / "methodology.md"
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       margin: 0 auto; max-width: 1280px; padding: 0 24px 48px; }
h1 { margin: 24px 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ddd; } h3 { margin-top: 28px; }
section.workload { border-top: 3px solid #444; margin-top: 40px; } section.workload > h2 { border: 0; }
nav a { margin-right: 14px; } .runs { color: #555; margin: 0; padding-left: 18px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { padding: 4px 8px; border-bottom: 1px solid #eee; vertical-align: top; text-align: left; }
table.data td.num { text-align: right; white-space: nowrap; }
td .ci { display: block; color: #777; font-size: 12px; }
.unstable { color: #b8860b; font-weight: bold; } .fail { color: #c0392b; font-weight: bold; }
.differs { color: #b8860b; } td.busy { background: #fdebd0; }
.pass { color: #1e8449; } .note { color: #555; margin: 4px 0 8px; }
.chart { width: 100%; min-height: 300px; }
ul.notes li { white-space: pre-wrap; } details { margin: 6px 0; } summary { cursor: pointer; }
table.kv td:first-child { color: #555; white-space: nowrap; } table.kv td { font-size: 13px; }
.method { max-width: 960px; } .method table { font-size: 13px; }
"""

LOADER = """
document.querySelectorAll("div.chart").forEach(function (div) {
  var spec = JSON.parse(document.getElementById(div.id + "-data").textContent);
  Plotly.newPlot(div, spec.data, spec.layout, %s);
});
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def data_text(text: str) -> str:
    """JSON text made safe inside a <script> element: no `</script>`, no `<!--`."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# A report of time-to-accuracy or inference trials only has no headline table: its scenario tables follow.
NO_HEADLINE = ("<section id='table-{prefix}results'><h{h}>Results</h{h}><p class='note'>No training-throughput"
               " configuration in these runs; the scenario tables follow.</p></section>")


def render(report: Report, charts: list[Chart], method_markdown: str | None) -> str:
    """The whole page as a string: every table of the terminal report (report/tables.py), then
    the charts, the environment and the method; a report of several workloads as one section
    per workload (its tables and its charts, figures.charts), the environment and method once."""
    parts = report.by_workload()
    sections = [_section(w, part, [c for c in charts if c.section == w], len(parts) > 1) for w, part in parts]
    if len(parts) == 1:  # one workload: the charts made for the whole report, whatever their section
        sections = [_section(parts[0][0], report, charts, False)]
    overview = overview_table(report)
    body = "\n".join([
        _header(report, parts, charts, overview),
        *([_table(tidy(overview), "", 2)] if overview is not None else []),
        *sections,
        _environment(report),
        _method(method_markdown),
        f"<footer><p class='note'>dlbench {_e(dlbench.__version__)}, generated "
        f"{_e(datetime.datetime.now().isoformat(timespec='seconds'))}</p></footer>",
    ])
    js = plotly.offline.get_plotlyjs().replace("</script", "<\\/script")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(_title(report))}</title><style>{CSS}</style></head>\n<body>\n{body}\n"
        f"<script>{js}</script>\n<script>{LOADER % json.dumps(PLOTLY_CONFIG)}</script>\n"
        "</body></html>\n"
    )


def _section(workload: str, report: Report, charts: list[Chart], several: bool) -> str:
    """The workload's tables (constants in their titles, empty
    columns dropped: tabledata.tidy) and charts; in a report of several workloads, inside a
    section of its own headed by the workload and what holds for all its configurations."""
    tables = [tidy(t) for t in report_tables(report)]
    prefix = f"{section_id(workload)}-" if several else ""
    level = 3 if several else 2
    inner = [*([] if any(t.id == "results" for t in tables) else [NO_HEADLINE.format(prefix=prefix, h=level)]),
             *(_table(t, prefix, level) for t in tables), *(_chart_section(c, level) for c in charts)]
    if not several:
        return "\n".join(inner)
    constants = " · ".join(f"{a} {v}" for a, v in report.constants() if a != "workload")
    head = (f"<section id='workload-{_e(section_id(workload))}' class='workload'><h2>{_e(workload)}</h2>"
            f"<p class='note'>{len(report.configs)} configurations" + (f", each with {_e(constants)}" if constants else "")
            + "</p>")
    return head + "\n".join(inner) + "</section>"


def _title(report: Report) -> str:
    return "dlbench report: " + ", ".join(f"run {r.id}" for r in report.runs)


def _when(ts: object) -> str:
    if not isinstance(ts, int | float):
        return "–"
    return datetime.datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")


def _header(report: Report, parts: list[tuple[str, Report]], charts: list[Chart], overview: Table | None = None) -> str:
    """Title, runs, and the navigation: to each workload's section where there are several,
    else to each table and chart."""
    runs = "".join(
        f"<li>run {r.id} ({_e(_when(r.info.get('created_at')))}, {_e(r.info.get('status'))}, "
        f"{len(r.trials)} trials): <code>{_e(r.info.get('command'))}</code></li>"
        for r in report.runs)
    links = [("table-overview", "Overview")] if overview is not None else []
    if len(parts) > 1:
        links += [(f"workload-{section_id(w)}", w) for w, _ in parts]
    else:
        links += [*((f"table-{t.id}", t.name) for t in report_tables(report)),
                 *((f"chart-{c.id}", c.title) for c in charts)]
    links += [("environment", "Environment and policy"), ("method", "Method")]
    # a table and a chart of one name (a plugin's, or a future one) get one entry each, told apart
    seen: dict[str, int] = {}
    for i, (a, t) in enumerate(links):
        seen[t] = seen.get(t, 0) + 1
        if seen[t] > 1:
            links[i] = (a, f"{t} ({'chart' if a.startswith('chart-') else seen[t]})")
    nav = "".join(f"<a href='#{_e(a)}'>{_e(t)}</a>" for a, t in links)
    unfinished = "".join(f"<p class='note'>{_e(line)}</p>" for _, line in model.unfinished(report))
    return f"<h1>{_e(_title(report))}</h1><ul class='runs'>{runs}</ul>{unfinished}<nav>{nav}</nav>"



def _td(cell: Cell, column: Column) -> str:
    """A cell: its marked text, `!` where unstable, its interval in the column's units under it;
    a parity verdict coloured, a value with busy trials shaded."""
    shown = cell.flags & {"pass", "fail", "differs", "busy"}
    classes = [c for c in ("num" if column.align == "right" else "", *sorted(shown)) if c]
    text = _e(cell.shown())
    if "unstable" in cell.flags:
        text += f" <span class='unstable' title='{_e(UNSTABLE_NOTE)}'>!</span>"
    if cell.interval:
        text += f"<span class='ci'>{_e(cell.interval)}</span>"
    return f"<td class='{' '.join(classes)}'>{text}</td>" if classes else f"<td>{text}</td>"


def _table(table: Table, prefix: str = "", level: int = 2) -> str:
    """A table of the report with its notes; every stored string escaped."""
    heads = "".join(f"<th>{_e(c.header)}</th>" for c in table.columns)
    rows = "".join("<tr>" + "".join(_td(c, col) for c, col in zip(row, table.columns, strict=True)) + "</tr>"
                   for row in table.rows)
    about = f"<p class='note'>{_e(table.description)}</p>" if table.description else ""
    items = "".join(f"<li>{_e(n)}</li>" for n in table.notes)
    return (f"<section id='table-{_e(prefix + table.id)}'><h{level}>{_e(table.title)}</h{level}>{about}"
            f"<table class='data'><thead><tr>{heads}</tr></thead><tbody>{rows}</tbody></table>"
            f"<ul class='notes'>{items}</ul></section>")


def _chart_section(chart: Chart, level: int = 2) -> str:
    spec = chart.figure.to_plotly_json()
    payload = plotly.io.to_json({"data": spec["data"], "layout": spec["layout"]}, validate=False)
    return (f"<section><h{level} id='chart-{_e(chart.id)}-title'>{_e(chart.title)}</h{level}>"
            f"<p class='note'>{_e(chart.note)}</p><div class='chart' id='chart-{_e(chart.id)}'></div>"
            f"<script type='application/json' id='chart-{_e(chart.id)}-data'>{data_text(payload)}</script>"
            "</section>")


def _kv_table(d: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in flatten(d).items())
    return f"<table class='kv'>{rows}</table>"


def _preflight(checks: Any) -> str:
    """The pre-flight findings the run recorded before its first trial (monitors/preflight.py),
    one line each; nothing for a run made before pre-flights were recorded."""
    if not isinstance(checks, list) or not checks:
        return ""
    items = "".join(f"<li>{_e(c.get('level', ''))}: {_e(c.get('check', ''))}: {_e(c.get('state', ''))}"
                    + (f"; {_e(c['advice'])}" if c.get("advice") else "") + "</li>"
                    for c in checks if isinstance(c, dict))
    return f"<p>pre-flight, before the first trial:</p><ul class='preflight'>{items}</ul>"


def _environment(report: Report) -> str:
    parts = ["<section id='environment'><h2>Environment and policy</h2>"]
    for run in report.runs:
        info = {k: _when(v) if k.endswith("_at") else v for k, v in run.info.items() if k not in ("environment", "tune")}
        env = dict(run.info.get("environment") or {})
        checks = env.pop("preflight", None)
        parts.append(f"<details open><summary>run {run.id}: machine and software</summary>"
                     f"{_kv_table(info)}{_kv_table(env)}{_preflight(checks)}</details>")
    for config in report.configs:
        t = (config.ok or list(config.trials))[0]
        shown = {"spec": t.spec, "policy (as read back)": t.data.get("policy") or {},
                 "framework": t.data.get("framework_info") or {}, "numerics": t.data.get("numerics") or {},
                 "parity": t.data.get("parity") or {}}
        parts.append(f"<details><summary>{_e(report.label(config))}: spec and policy (trial {t.id}, "
                     f"repeat {t.repeat})</summary>{_kv_table(shown)}</details>")
    return "".join(parts) + "</section>"


# A link to another page of docs/ (no scheme, no anchor of this page): dead in a standalone file.
RELATIVE_LINK = re.compile(r"\[([^\]]+)\]\((?![a-z][a-z0-9+.-]*:|#)([^)\s]+)\)")


def _method(markdown: str | None) -> str:
    if markdown is None:
        body = ("<p>docs/methodology.md is not part of this installation; it is in the dlbench "
                "source tree.</p>")
    else:
        # html=False: raw HTML in the markdown is shown as text, never rendered.
        body = MarkdownIt("commonmark", {"html": False}).enable("table").render(standalone(markdown))
    return f"<section id='method' class='method'><h2>Method</h2>{body}</section>"


def standalone(markdown: str) -> str:
    """The markdown of a docs/ page with its links to other docs/ pages as their paths in the
    source tree (`docs/cluster.md`): the report is one file, where such a link leads nowhere."""
    def path(m: re.Match[str]) -> str:
        target = "docs/" + m[2].removeprefix("./")
        return f"`{target}`" if m[1] in (m[2], f"`{m[2]}`") else f"{m[1]} (`{target}`)"
    return RELATIVE_LINK.sub(path, markdown)


def methodology_markdown() -> str | None:
    """docs/methodology.md of the source tree dlbench runs from (an editable install or a
    checkout); None for an installed wheel, which does not carry docs/."""
    return METHODOLOGY.read_text() if METHODOLOGY.is_file() else None


def write_report(report: Report, charts: list[Chart], path: Path) -> None:
    path.write_text(render(report, charts, methodology_markdown()), encoding="utf-8")


def render_page(title: str, tables: list[Table], charts: list[Chart]) -> str:
    """A page of other tables and charts than a report's (`dlbench history --html`), laid out
    and escaped as the report's are."""
    links = [*((f"table-{t.id}", t.name) for t in tables), *((f"chart-{c.id}", c.title) for c in charts)]
    nav = "".join(f"<a href='#{_e(a)}'>{_e(t)}</a>" for a, t in links)
    body = "\n".join([f"<h1>{_e(title)}</h1><nav>{nav}</nav>", *(_chart_section(c) for c in charts),
                      *(_table(t) for t in tables),
                      f"<footer><p class='note'>dlbench {_e(dlbench.__version__)}, generated "
                      f"{_e(datetime.datetime.now().isoformat(timespec='seconds'))}</p></footer>"])
    js = plotly.offline.get_plotlyjs().replace("</script", "<\\/script")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_e(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n"
        f"<script>{js}</script>\n<script>{LOADER % json.dumps(PLOTLY_CONFIG)}</script>\n"
        "</body></html>\n"
    )
