"""`dlbench why [RUN ...]`: why a framework is slower, in plain words. The findings of the
report (report/profile.py): what the profiled trials' categories show (`run --profile`), and which
configuration pairs show a gap the ledger has traced to its cause (docs/gaps.md), each pointing to
its row. The same table `dlbench report` prints among the others, alone."""

from __future__ import annotations

import argparse

from dlbench.cli.common import EXIT_OK, add_store_argument, open_store, run_selector
from dlbench.report import model
from dlbench.report.profile import findings_table
from dlbench.report.terminal import make_console, print_table
from dlbench.text import printable


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("why", help="why a framework is slower: the findings of profiled trials and of the gap ledger")
    p.add_argument("runs", nargs="*", metavar="RUN", default=["latest"], type=run_selector,
                   help="run ids, 'latest' or 'all' (default: latest)")
    p.add_argument("--wide", action="store_true", help="the table at its full width, whatever the terminal's")
    add_store_argument(p)


def main(args: argparse.Namespace) -> int:
    console = make_console()
    store = open_store(args.store, readonly=True)
    run_ids = list(dict.fromkeys(i for selector in args.runs for i in store.resolve_runs(selector)))
    table = findings_table(model.load(store, run_ids))
    if table is None:
        console.print(printable(f"no findings for run(s) {', '.join(map(str, run_ids))}: no profiled trial (run"
                                " --profile) and no pair of frameworks whose speed ratio is a gap of the ledger"
                                " (docs/gaps.md)"), highlight=False, markup=False, soft_wrap=True)
        return EXIT_OK
    print_table(console, table, args.wide)
    return EXIT_OK
