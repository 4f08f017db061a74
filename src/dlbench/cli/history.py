"""`dlbench history [METRIC] [-w W] [-f F] [--html FILE]`: a metric of each configuration across
the store's runs, with the steps in its level and what changed between runs (report/history.py)."""

from __future__ import annotations

import argparse

from dlbench.analysis.compare import HEADLINE_METRIC
from dlbench.cli.common import EXIT_OK, UsageError, add_store_argument, comma_list, open_store, output_path, writing
from dlbench.report.history import history_tables, load
from dlbench.report.terminal import make_console, print_table
from dlbench.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("history", help="a metric across the store's runs: steps and what changed (versions, machine, policy)")
    p.add_argument("metric", nargs="?", default="median", metavar="METRIC",
                   help="the metric to follow (default: median, the headline samples/s)")
    p.add_argument("-w", "--workload", type=comma_list("workload"), default=(), help="only these workloads")
    p.add_argument("-f", "--framework", type=comma_list("framework"), default=(), help="only these frameworks")
    p.add_argument("--html", metavar="FILE", help="also write the tables and a chart as one HTML file")
    add_store_argument(p)


def main(args: argparse.Namespace) -> int:
    metric = HEADLINE_METRIC if args.metric == "median" else args.metric
    # checked before the store is read (a directory, a missing directory, a name too long)
    html_path = output_path(args.html) if args.html is not None else None
    store = open_store(args.store, readonly=True)
    series = load(store, metric, args.workload, args.framework)
    if not series:
        which = "".join([f" of workload {', '.join(args.workload)}" if args.workload else "",
                         f" of framework {', '.join(args.framework)}" if args.framework else ""])
        raise UsageError(f"no run in {args.store} has an ok value of {metric}{which}")
    tables = history_tables(series)
    console = make_console()
    said: set[str] = set()  # a note shared by every configuration's table is printed once
    for table in tables:
        print_table(console, table, said=said)
    if html_path is not None:
        try:
            from dlbench.report import figures, html
        except ImportError as e:
            raise UsageError(f"--html needs plotly ({(e.name or '?').split('.')[0]} is missing):"
                             " pip install 'dlbench[report]'") from None
        chart = figures.history(series)
        page = html.render_page(f"dlbench history: {metric}", tables, [chart] if chart else [])
        with writing(html_path):  # what cannot be foreseen: a full disk, /proc
            html_path.write_text(page, encoding="utf-8")
        console.print(printable(f"wrote {html_path}"), highlight=False, markup=False)
    return EXIT_OK
