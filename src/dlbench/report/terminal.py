"""The report in a terminal: table data (report/tabledata.py) rendered as rich tables that fit
the terminal without cutting a number.

The rules, in the order they are tried (docs/cli.md, "Reading the tables"):
1. Always (both renderers, tabledata.tidy): a column empty in every row is dropped, named in one
   note; a label or status column holding one value in every row moves into the title.
2. The full form (each interval relative to its value under it, `-3.1%/+2.0% 75%`) where it fits
   the terminal's width without wrapping.
3. Else the compact form: one line per cell, the interval as `1721.3 ±5%` (how far its wider
   side reaches, relative to the value) with its level in a note; then, where that does not fit,
   header words wider than every cell of their column abbreviated (ABBREVIATIONS, listed in a
   note); then headers and cells wrapped at spaces, never inside a word or a number.
4. Still too wide: the table splits into at most MAX_PARTS parts, each repeating the row's key
   columns; where that is not enough, it turns vertical (one block per row, `header: value`).
`--wide` shows the full form whatever the width (the terminal then wraps its lines).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table as RichTable
from rich.text import Text

from dlbench.report import model
from dlbench.report.cells import percent_text
from dlbench.report.closing import closing_summary
from dlbench.report.model import Report
from dlbench.report.overview import overview_table
from dlbench.report.tabledata import (
    UNSTABLE_MARK,
    Cell,
    Column,
    Table,
    split_rows,
    tidy,
)
from dlbench.report.tables import report_tables
from dlbench.results.store import Store

# A table split into more parts than this reads worse than its vertical form.
MAX_PARTS = 3
# Between two columns: one space of padding and the (blank) divider of box.SIMPLE_HEAD.
GAP = 2
# Header words shortened when a compact table does not fit, only where the word is wider than
# every cell of its column (the note under the table lists the ones used).
ABBREVIATIONS = {
    "training": "train", "accuracy": "acc", "initial": "init", "efficiency": "eff",
    "configuration": "config", "achieved": "ach", "precision": "prec", "requests": "req",
    "pipeline": "pipe", "(Mann-Whitney)": "(MW)", "framework": "fw", "workload": "wl",
    "scenario": "scen", "devices": "dev", "reached": "done",
}
COMPACT_NOTE = "± (level {level}): how far the value's confidence interval reaches on its wider side, relative to it"


def make_console() -> Console:
    """A terminal's own width; logs and pipes (CI) get a wide one, since rich would otherwise
    squeeze the eleven headline columns into 80. No markup: errors from workers are printed as
    they are (a path like [/usr/lib/x.so] would be read as a closing tag)."""
    console = Console(highlight=False, markup=False)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return Console(highlight=False, markup=False, width=200)


@dataclass(frozen=True)
class _Form:
    """One way to show a table: header and cell texts per column (cells may hold lines)."""

    headers: list[str]
    cells: list[list[Text]]  # per column
    notes: list[str]

    def natural(self) -> list[int]:
        """Each column's width without wrapping anything."""
        return [max([cell_len(h), *(_longest_line(c) for c in col)]) for h, col in zip(self.headers, self.cells, strict=True)]

    def minimum(self) -> list[int]:
        """Each column's width wrapping at every space: its longest word or number."""
        return [max([_longest_word(h), *(_longest_word(c.plain) for c in col)])
                for h, col in zip(self.headers, self.cells, strict=True)]


def _longest_line(text: Text) -> int:
    return max((cell_len(line) for line in text.plain.split("\n")), default=0)


def _longest_word(text: str) -> int:
    return max((cell_len(w) for w in text.split()), default=0)


def _width(widths: Sequence[int]) -> int:
    return sum(widths) + GAP * max(len(widths) - 1, 0)


def _full_cell(cell: Cell, column: Column) -> Text:
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


def _compact_cell(cell: Cell, level: str | None) -> Text:
    """`1721.3 ±5%!`: the value, how far its interval reaches (with its level where it is not
    the table's), `!` where unstable."""
    text = Text(cell.shown())
    if cell.spread is not None:
        text.append(f" ±{percent_text(cell.spread)}")
        if cell.level is not None and cell.level != level:
            text.append(f" @{cell.level}")
    if "unstable" in cell.flags:
        text.append(UNSTABLE_MARK, style="bold yellow")
    return text


def _full(table: Table) -> _Form:
    cells = [[_full_cell(row[i], col) for row in table.rows] for i, col in enumerate(table.columns)]
    return _Form([c.header for c in table.columns], cells, [])


def _compact(table: Table, abbreviate: bool) -> _Form:
    """One line per cell, intervals as `±x%` with their (most common) level in a note; header
    words abbreviated where `abbreviate` and the word is wider than every cell of its column."""
    levels = Counter(c.level for row in table.rows for c in row if c.spread is not None)
    level = levels.most_common(1)[0][0] if levels else None
    cells = [[_compact_cell(row[i], level) for row in table.rows] for i in range(len(table.columns))]
    headers, used = [], {}
    for col, column_cells in zip(table.columns, cells, strict=True):
        widest = max((_longest_word(c.plain) for c in column_cells), default=0)
        words = []
        for word in col.header.split(" "):
            short = ABBREVIATIONS.get(word) if abbreviate and cell_len(word) > widest else None
            if short:
                used[short] = word
            words.append(short or word)
        headers.append(" ".join(words))
    notes = [COMPACT_NOTE.format(level=level)] if level else []
    if used:
        notes.append("abbreviated: " + ", ".join(f"{s} = {w}" for s, w in used.items()))
    return _Form(headers, cells, notes)


def _fit(form: _Form, width: int, wrap: bool) -> list[int] | None:
    """Column widths that fit `width`: the natural ones; else (where `wrap`) every cell on one
    line and the headers wrapped at spaces onto as few lines as the room allows (the same
    number for all); else cells wrapped too, at their longest word. The room left goes to the
    columns that need least of it to stop wrapping."""
    natural = form.natural()
    if _width(natural) <= width:
        return natural
    if not wrap:
        return None
    cells = [max((_longest_line(c) for c in col), default=0) for col in form.cells]
    longest = max((len(h.split()) for h in form.headers), default=1)
    for lines in range(2, longest + 1):
        widths = [max(c, _header_width(h, lines)) for c, h in zip(cells, form.headers, strict=True)]
        if _width(widths) <= width:
            return _grow(widths, natural, width)
    # cells wrapped at their longest word, the headers onto as few lines as the room allows (a
    # header wrapped word by word took five lines over rows of two)
    words = [max((_longest_word(c.plain) for c in col), default=0) for col in form.cells]
    for lines in range(1, longest + 1):
        widths = [max(w, _header_width(h, lines)) for w, h in zip(words, form.headers, strict=True)]
        if _width(widths) <= width:
            return _grow(widths, natural, width)
    return None


def _header_width(header: str, lines: int) -> int:
    """The narrowest width at which `header` wraps at spaces onto at most `lines` lines."""
    words = header.split()
    for width in range(max(map(cell_len, words), default=0), cell_len(header) + 1):
        used, count = 0, 1
        for word in words:
            if used and used + 1 + cell_len(word) > width:
                count, used = count + 1, cell_len(word)
            else:
                used += (1 if used else 0) + cell_len(word)
        if count <= lines:
            return width
    return cell_len(header)


def _grow(widths: list[int], natural: list[int], width: int) -> list[int]:
    """The room left in `width` given to the columns that need least of it to reach their
    natural width (so that as many as possible stop wrapping)."""
    room = width - _width(widths)
    for i in sorted(range(len(widths)), key=lambda i: natural[i] - widths[i]):
        grow = max(min(natural[i] - widths[i], room), 0)
        widths[i] += grow
        room -= grow
    return widths


def _rich(form: _Form, columns: Sequence[Column], widths: Sequence[int], keep: Sequence[int]) -> RichTable:
    """The columns at `keep` as a rich table of exactly these widths (nothing left to cut)."""
    out = RichTable(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0),
                    header_style="bold")
    for i in keep:
        out.add_column(form.headers[i], justify=columns[i].align, width=widths[i], overflow="fold")
    for r in range(len(form.cells[0]) if form.cells else 0):
        out.add_row(*(form.cells[i][r] for i in keep))
    return out


def _split(form: _Form, columns: Sequence[Column], width: int) -> list[list[int]] | None:
    """Column groups that each fit `width` at their minimum widths, each led by the key
    columns, as few as can be and as even as can be; None where the keys and one more column
    do not fit."""
    minimum = form.minimum()
    keys = [i for i, c in enumerate(columns) if c.key]
    values = [i for i in range(len(columns)) if i not in keys]

    def pack(budget: int) -> list[list[int]] | None:
        parts: list[list[int]] = []
        for i in values:
            if parts and _width([minimum[j] for j in parts[-1] + [i]]) <= budget:
                parts[-1].append(i)
            elif _width([minimum[j] for j in keys + [i]]) <= budget:
                parts.append(keys + [i])
            else:
                return None
        return parts or None

    parts = pack(width)
    if parts is None:
        return None
    # the narrowest budget that needs no more parts: the columns spread evenly over them
    for budget in range(_width([minimum[j] for j in keys]), width):
        even = pack(budget)
        if even is not None and len(even) == len(parts):
            return even
    return parts


def _vertical(table: Table, form: _Form) -> list[RenderableType]:
    """One block per row: its key cells, then `header: value` lines (compact values)."""
    keys = [i for i, c in enumerate(table.columns) if c.key]
    out: list[RenderableType] = []
    for r in range(len(table.rows)):
        head = " · ".join(form.cells[i][r].plain for i in keys) or f"row {r + 1}"
        lines = [Text(head, style="bold")]
        lines += [Text(f"  {form.headers[i]}: ") + form.cells[i][r] for i in range(len(table.columns)) if i not in keys]
        out += lines
    return out


def rich_table(table: Table, width: int | None = None, wide: bool = False,
               said: set[str] | None = None) -> list[RenderableType]:
    """The one place where table data becomes terminal output, fitted to `width` (None: no
    limit) by the rules in this module's docstring: a table of several workloads as one table
    per workload (each lifts its own constants into its title), each as its title and table (or
    parts, or vertical form), then the notes once. Notes already in `said` (printed under an
    earlier table of the same output) are left out, and the ones printed here are added to it.
    Every renderable is printed as is."""
    blocks: list[RenderableType] = []
    notes: dict[str, None] = {}
    for part in split_rows(table):
        tidied = tidy(part)
        made, form = _layout(tidied, width, wide)
        blocks += made
        notes.update(dict.fromkeys([*form.notes, *tidied.notes]))
    if said is not None:
        notes = {n: None for n in notes if n not in said}
        said.update(notes)
    return [*blocks, *(Padding(Text(note), (0, 0, 0, 2), expand=False) for note in notes)]


def _layout(table: Table, width: int | None, wide: bool) -> tuple[list[RenderableType], _Form]:
    """The title and the table in the first form that fits (module docstring), and that form
    (its notes go under the table)."""
    title = Text(table.title, style="bold")
    full = _full(table)
    if wide or width is None or _fit(full, width, wrap=False):
        return [title, _rich(full, table.columns, full.natural(), range(len(table.columns)))], full
    for form, wrap in ((_compact(table, False), False), (_compact(table, True), False), (_compact(table, True), True)):
        widths = _fit(form, width, wrap)
        if widths is not None:
            return [title, _rich(form, table.columns, widths, range(len(table.columns)))], form
    parts = _split(form, table.columns, width)
    if parts is None or len(parts) > MAX_PARTS:
        return [title, *_vertical(table, form)], form
    blocks: list[RenderableType] = []
    for n, keep in enumerate(parts, start=1):
        widths = _fit(_Form([form.headers[i] for i in keep], [form.cells[i] for i in keep], []), width, True)
        assert widths is not None  # _split checked the minimum widths
        placed = [0] * len(table.columns)
        for i, w in zip(keep, widths, strict=True):
            placed[i] = w
        blocks += [Text(f"{table.title} ({n}/{len(parts)})", style="bold"), _rich(form, table.columns, placed, keep)]
    return blocks, form


def print_table(console: Console, table: Table, wide: bool = False, said: set[str] | None = None) -> None:
    """The table fitted to the console's width (or in full where `wide`, the console widened
    to it); titles and notes wrap at spaces; notes in `said` are not printed again."""
    blocks = rich_table(table, console.width, wide, said)
    needed = max((_table_width(b) for b in blocks if isinstance(b, RichTable)), default=0)
    saved = console.width
    console.width = max(saved, needed)  # only --wide needs more than the terminal has
    try:
        for block in blocks:
            console.print(block, crop=False)
    finally:
        console.width = saved


def _table_width(table: RichTable) -> int:
    return _width([c.width or 0 for c in table.columns])


def print_report_tables(console: Console, report: Report, wide: bool = False) -> None:
    """The overview (frameworks x workloads), then every table that has rows (report/tables.py),
    each with its notes (a note said under an earlier table is not repeated), then the closing
    summary (report/closing.py): the last screen is the answer."""
    said: set[str] = set()
    overview = overview_table(report)
    for table in [*([overview] if overview is not None else []), *report_tables(report)]:
        print_table(console, table, wide, said)
    print_summary(console, closing_summary(report))


def print_summary(console: Console, lines: list[str]) -> None:
    """The closing summary: its title, then each line indented (wrapped at spaces)."""
    if not lines:
        return
    console.print(Text(lines[0], style="bold"), crop=False)
    for line in lines[1:]:
        console.print(Padding(Text(line), (0, 0, 0, 2), expand=False), crop=False)


def print_run_tables(console: Console, store: Store, run_ids: list[int], wide: bool = False) -> None:
    print_report_tables(console, model.load(store, run_ids), wide)
