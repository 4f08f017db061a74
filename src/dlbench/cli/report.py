"""`dlbench report [RUN ...] [--html FILE] [--png DIR]`: the tables in the terminal, or one
self-contained HTML file with every chart that has data (and static images of them)."""

from __future__ import annotations

import argparse
from types import ModuleType

from dlbench.cli.common import (
    EXIT_OK,
    UsageError,
    add_store_argument,
    open_store,
    output_path,
    run_selector,
    writing,
)
from dlbench.report import model
from dlbench.report.terminal import make_console, print_report_tables
from dlbench.results.store import Store
from dlbench.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="tables in the terminal, or an HTML report with charts (--html)")
    p.add_argument("runs", nargs="*", metavar="RUN", default=["latest"], type=run_selector,
                   help="run ids, 'latest' or 'all' (default: latest); several runs are compared side by side")
    p.add_argument("--html", metavar="FILE", help="write one self-contained HTML file (works offline)")
    p.add_argument("--png", metavar="DIR", help="also write each chart as a PNG into DIR (needs Kaleido)")
    p.add_argument("--wide", action="store_true", help="the tables at their full width, whatever the terminal's")
    add_store_argument(p)


def _figures() -> ModuleType:
    try:
        from dlbench.report import figures
    except ImportError as e:
        raise UsageError(f"charts need plotly ({(e.name or '?').split('.')[0]} is missing): pip install 'dlbench[report]'") from None
    return figures


def running_lines(store: Store, report: model.Report) -> list[str]:
    """A line per run that has not finished (still running, or left by a process that died):
    how many trials have ended, which the report shows, and how to finish it."""
    return [f"{text} (still running, or its process died: dlbench run --resume {run_id} --store {store.path}"
            " finishes it)" for run_id, text in model.unfinished(report)]


def main(args: argparse.Namespace) -> int:
    console = make_console()
    # Outputs are checked before the store is read and the charts are drawn.
    html_path = output_path(args.html) if args.html is not None else None
    png_dir = output_path(args.png, directory=True) if args.png is not None else None
    store = open_store(args.store, readonly=True)
    run_ids = list(dict.fromkeys(i for selector in args.runs for i in store.resolve_runs(selector)))
    report = model.load(store, run_ids)
    for line in running_lines(store, report):
        console.print(printable(line), highlight=False, markup=False, soft_wrap=True)
    if html_path is None and png_dir is None:
        print_report_tables(console, report, args.wide)
        return EXIT_OK
    charts = _figures().charts(report)
    if html_path is not None:
        from dlbench.report.html import write_report

        with writing(html_path):
            write_report(report, charts, html_path)
        drawn = f"{len(charts)} charts: {', '.join(c.id for c in charts)}" if charts else "no charts: no trial with data"
        console.print(printable(f"wrote {html_path} ({drawn})"), highlight=False, markup=False)
    if png_dir is not None:
        from dlbench.report.png import write_pngs

        with writing(png_dir):
            written, reason = write_pngs(charts, png_dir)
        console.print(printable(f"wrote {len(written)} PNG files to {png_dir}" if reason is None
                                else f"--png: no images written: {reason}"), highlight=False, markup=False,
                      soft_wrap=True)
    return EXIT_OK
