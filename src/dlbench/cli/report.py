"""`dlbench report [RUN ...] [--html FILE] [--png DIR]`: the tables in the terminal, or one
self-contained HTML file with every chart that has data (and static images of them)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import ModuleType

from dlbench.cli.common import EXIT_OK, UsageError, add_store_argument, open_store
from dlbench.report import model
from dlbench.report.terminal import make_console, print_report_tables


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="tables in the terminal, or an HTML report with charts (--html)")
    p.add_argument("runs", nargs="*", metavar="RUN", default=["latest"],
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


def _output_path(text: str, kind: str) -> Path:
    path = Path(text)
    if not path.parent.is_dir():
        raise UsageError(f"{kind} {text}: directory {path.parent} does not exist")
    return path


def main(args: argparse.Namespace) -> int:
    console = make_console()
    store = open_store(args.store, must_exist=True)
    run_ids = list(dict.fromkeys(i for selector in args.runs for i in store.resolve_runs(selector)))
    report = model.load(store, run_ids)
    if args.html is None and args.png is None:
        print_report_tables(console, report, args.wide)
        return EXIT_OK
    html_path = _output_path(args.html, "--html") if args.html else None
    png_dir = _output_path(args.png, "--png") if args.png else None
    charts = _figures().charts(report)
    if html_path is not None:
        from dlbench.report.html import write_report

        write_report(report, charts, html_path)
        console.print(f"wrote {html_path} ({len(charts)} charts: {', '.join(c.id for c in charts)})",
                      highlight=False, markup=False)
    if png_dir is not None:
        from dlbench.report.png import write_pngs

        written, reason = write_pngs(charts, png_dir)
        console.print(f"wrote {len(written)} PNG files to {png_dir}" if reason is None
                      else f"--png: no images written: {reason}", highlight=False, markup=False, soft_wrap=True)
    return EXIT_OK
