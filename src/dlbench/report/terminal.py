"""The report in a terminal: table data (report/tabledata.py) rendered as rich tables, each
followed by its notes."""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from dlbench.report import model
from dlbench.report.model import Report
from dlbench.report.tabledata import UNSTABLE_MARK, Cell, Column, Table
from dlbench.report.tables import report_tables
from dlbench.results.store import Store


def make_console() -> Console:
    """A terminal's own width; logs and pipes (CI) get a wide one, since rich would otherwise
    squeeze the eleven headline columns into 80. No markup: errors from workers are printed as
    they are (a path like [/usr/lib/x.so] would be read as a closing tag)."""
    console = Console(highlight=False, markup=False)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(highlight=False, markup=False, width=200)


def _cell(cell: Cell, column: Column) -> Text:
    """The cell as Text (never markup): its marked text, `!` where unstable, its interval beside
    it in the column's units (inline columns) or under it relative to the median."""
    text = Text(cell.shown())
    if column.inline_interval:
        return text.append(f" {cell.interval}") if cell.interval else text
    if "unstable" in cell.flags:
        text.append(f" {UNSTABLE_MARK}", style="bold yellow")
    if cell.relative:
        text.append(f"\n{cell.relative}", style="dim")
    return text


def rich_table(table: Table) -> RichTable:
    """The one place where table data becomes a terminal table: a change of terminal layout
    (issue 23: compact intervals, constant columns in the title, empty columns dropped, wide
    tables split) belongs here."""
    out = RichTable(title=table.title)
    for column in table.columns:
        out.add_column(column.header, justify=column.align)
    for row in table.rows:
        out.add_row(*(_cell(c, col) for c, col in zip(row, table.columns, strict=True)))
    return out


def print_table(console: Console, table: Table) -> None:
    console.print(rich_table(table))
    for note in table.notes:
        console.print(Text(f"  {note}"), soft_wrap=True)


def print_report_tables(console: Console, report: Report) -> None:
    """Every table that has rows (report/tables.py), each with its notes."""
    for table in report_tables(report):
        print_table(console, table)


def print_run_tables(console: Console, store: Store, run_ids: list[int]) -> None:
    print_report_tables(console, model.load(store, run_ids))
