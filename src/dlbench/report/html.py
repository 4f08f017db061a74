"""One self-contained HTML report: Plotly's JavaScript embedded, no request to any other host.

Every user-supplied or stored string goes through html.escape; chart data is Plotly's own JSON
inside <script type="application/json">, with <, > and & written as \\u escapes so no text can
close the script element.
"""

from __future__ import annotations

import datetime
import html
import json
from pathlib import Path
from typing import Any

import plotly.io
import plotly.offline
from markdown_it import MarkdownIt
from rich.table import Table
from rich.text import Text

import dlbench
from dlbench.report import model, scaling
from dlbench.report.columns import HEADLINE, Column
from dlbench.report.figures import Chart
from dlbench.report.model import Config, Report
from dlbench.report.table import UNSTABLE_NOTE, cell_summary, headline_configs
from dlbench.results.tidy import flatten

METHODOLOGY = Path(__file__).resolve().parents[3] / "docs" / "methodology.md"
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #222;
       margin: 0 auto; max-width: 1280px; padding: 0 24px 48px; }
h1 { margin: 24px 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ddd; }
nav a { margin-right: 14px; } .runs { color: #555; margin: 0; padding-left: 18px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { padding: 4px 8px; border-bottom: 1px solid #eee; vertical-align: top; text-align: left; }
table.headline td.num { text-align: right; white-space: nowrap; }
table.scenario td { white-space: nowrap; font-size: 13px; }
td .ci { display: block; color: #777; font-size: 12px; }
.unstable { color: #b8860b; font-weight: bold; } .fail { color: #c0392b; font-weight: bold; }
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


# A scenario table and its notes (report/table.py: scenario_tables), as the terminal shows them.
ScenarioTable = tuple[Table, list[str]]


def render(report: Report, charts: list[Chart], method_markdown: str | None,
           tables: list[ScenarioTable] | None = None) -> str:
    """The whole page as a string."""
    body = "\n".join([
        _header(report, charts, tables or []),
        _headline(report),
        *(_scenario_table(i, t, n) for i, (t, n) in enumerate(tables or [])),
        _scaling(report),
        *(_chart_section(c) for c in charts),
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


def _title(report: Report) -> str:
    return "dlbench report: " + ", ".join(f"run {r.id}" for r in report.runs)


def _when(ts: object) -> str:
    if not isinstance(ts, int | float):
        return "–"
    return datetime.datetime.fromtimestamp(ts).isoformat(sep=" ", timespec="seconds")


def _header(report: Report, charts: list[Chart], tables: list[ScenarioTable]) -> str:
    runs = "".join(
        f"<li>run {r.id} ({_e(_when(r.info.get('created_at')))}, {_e(r.info.get('status'))}, "
        f"{len(r.trials)} trials): <code>{_e(r.info.get('command'))}</code></li>"
        for r in report.runs)
    links = [("results", "Results"), *((f"table-{i}", _short_title(t)) for i, (t, _) in enumerate(tables)),
             *((f"chart-{c.id}", c.title) for c in charts),
             ("environment", "Environment and policy"), ("method", "Method")]
    nav = "".join(f"<a href='#{_e(a)}'>{_e(t)}</a>" for a, t in links)
    return f"<h1>{_e(_title(report))}</h1><ul class='runs'>{runs}</ul><nav>{nav}</nav>"


def _short_title(table: Table) -> str:
    """A table's title up to its parenthesis: `time to accuracy 0.9`, `input pipeline: ...`."""
    return _cell_text(table.title or "").split(" (")[0]


def _headline_cell(col: Column, config: Config) -> str:
    s, estimated = cell_summary(col, config)
    text = _e(col.render(s.median)) + ("*" if estimated and s.median is not None else "")
    if s.unstable:
        text += f" <span class='unstable' title='{_e(UNSTABLE_NOTE)}'>!</span>"
    ci = col.render_ci(s)
    if ci is not None:
        text += f"<span class='ci'>{_e(ci)}</span>"
    return f"<td class='num'>{text}</td>"


def _headline(report: Report) -> str:
    lead = (["run"] if report.multi_run else []) + list(report.label_axes)
    heads = "".join(f"<th>{_e(h)}</th>" for h in [*lead, *(c.header for c in HEADLINE), "parity", "status"])
    rows = []
    for config in headline_configs(report):
        cells = ([str(config.run_id)] if report.multi_run else []) + [str(config.axes[a]) for a in report.label_axes]
        par = model.parity(config.trials)
        rows.append("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in cells)
                    + "".join(_headline_cell(col, config) for col in HEADLINE)
                    + f"<td class='{_e(par.verdict.replace('/', ''))}'>{_e(par.text())}</td>"
                    + f"<td>{_e(model.status_text(config.trials))}</td></tr>")
    notes = model.notes(report)
    if any("class='unstable'" in r for r in rows):
        notes.insert(0, UNSTABLE_NOTE)
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    if not rows:  # a converge- or infer-only report: its scenario tables (and notes) follow
        return ("<section id='results'><h2>Results</h2><p class='note'>No training-throughput"
                " configuration in these runs; the scenario tables follow.</p></section>")
    return (f"<section id='results'><h2>Results</h2><p class='note'>Medians over processes; under "
            f"each, the median's confidence interval from order statistics and its true level. "
            f"* compile estimated as first step minus a median step.</p>"
            f"<table class='headline'><thead><tr>{heads}</tr></thead><tbody>{''.join(rows)}</tbody>"
            f"</table><ul class='notes'>{items}</ul></section>")


def _cell_text(cell: object) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _scenario_table(index: int, table: Table, notes: list[str]) -> str:
    """A terminal scenario table (time to accuracy, input stall, inference) as HTML, its cells
    escaped; the title names the section."""
    title = _cell_text(table.title or "")
    heads = "".join(f"<th>{_e(_cell_text(c.header))}</th>" for c in table.columns)
    columns = [list(c.cells) for c in table.columns]
    rows = "".join("<tr>" + "".join(f"<td>{_e(_cell_text(col[r]))}</td>" for col in columns) + "</tr>"
                   for r in range(table.row_count))
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return (f"<section id='table-{index}'><h2>{_e(title)}</h2><table class='scenario'><thead><tr>{heads}"
            f"</tr></thead><tbody>{rows}</tbody></table><ul class='notes'>{items}</ul></section>")


def _scaling(report: Report) -> str:
    """The data-parallel scaling table (report/scaling.py), where the runs have one."""
    found = scaling.rows(report)
    if not found:
        return ""
    heads = "".join(f"<th>{_e(h)}</th>" for h in ("configuration", *scaling.HEADERS))
    body = "".join("<tr>" + f"<td>{_e(report.label(r.config))}</td>"
                   + "".join(f"<td>{_e(c)}</td>" for c in r.cells) + "</tr>" for r in found)
    return (f"<section id='scaling'><h2>Data-parallel scaling</h2><p class='note'>{_e(scaling.NOTE)}</p>"
            f"<table class='headline'><thead><tr>{heads}</tr></thead><tbody>{body}</tbody></table></section>")


def _chart_section(chart: Chart) -> str:
    spec = chart.figure.to_plotly_json()
    payload = plotly.io.to_json({"data": spec["data"], "layout": spec["layout"]}, validate=False)
    return (f"<section><h2 id='chart-{_e(chart.id)}-title'>{_e(chart.title)}</h2>"
            f"<p class='note'>{_e(chart.note)}</p><div class='chart' id='chart-{_e(chart.id)}'></div>"
            f"<script type='application/json' id='chart-{_e(chart.id)}-data'>{data_text(payload)}</script>"
            "</section>")


def _kv_table(d: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in flatten(d).items())
    return f"<table class='kv'>{rows}</table>"


def _environment(report: Report) -> str:
    parts = ["<section id='environment'><h2>Environment and policy</h2>"]
    for run in report.runs:
        info = {k: _when(v) if k.endswith("_at") else v for k, v in run.info.items() if k != "environment"}
        parts.append(f"<details open><summary>run {run.id}: machine and software</summary>"
                     f"{_kv_table(info)}{_kv_table(run.info.get('environment') or {})}</details>")
    for config in report.configs:
        t = (config.ok or list(config.trials))[0]
        shown = {"spec": t.spec, "policy (as read back)": t.data.get("policy") or {},
                 "framework": t.data.get("framework_info") or {}, "numerics": t.data.get("numerics") or {},
                 "parity": t.data.get("parity") or {}}
        parts.append(f"<details><summary>{_e(report.label(config))}: spec and policy (trial {t.id}, "
                     f"repeat {t.repeat})</summary>{_kv_table(shown)}</details>")
    return "".join(parts) + "</section>"


def _method(markdown: str | None) -> str:
    if markdown is None:
        body = ("<p>docs/methodology.md is not part of this installation; it is in the dlbench "
                "source tree.</p>")
    else:
        # html=False: raw HTML in the markdown is shown as text, never rendered.
        body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return f"<section id='method' class='method'><h2>Method</h2>{body}</section>"


def methodology_markdown() -> str | None:
    """docs/methodology.md of the source tree dlbench runs from (an editable install or a
    checkout); None for an installed wheel, which does not carry docs/."""
    return METHODOLOGY.read_text() if METHODOLOGY.is_file() else None


def write_report(report: Report, charts: list[Chart], path: Path, tables: list[ScenarioTable] | None = None) -> None:
    path.write_text(render(report, charts, methodology_markdown(), tables), encoding="utf-8")
