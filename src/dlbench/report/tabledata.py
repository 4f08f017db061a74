"""Table data: what one report table shows, built once from the report model and rendered by
the terminal (report/terminal.py) and by the HTML report (report/html.py) alike.

Neutral: text, alignment, intervals and flags, no styling. Every string that enters a table
(cells, titles, notes) passes through `dlbench.text.printable` here, once, so stored text (an
error echoing an escape sequence) never drives a terminal. A renderer decides how a flag or an
interval looks. The layout changes both renderers share are functions from Table to Table
(`tidy`: constant columns lifted into the title, columns empty in every row dropped with one
note); the terminal's own (compact intervals, abbreviated headers, split or vertical tables)
live in report/terminal.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from dlbench.text import printable

Align = Literal["left", "right"]
# unstable: the median's interval is wide (UNSTABLE_NOTE); estimated: the value is an estimate
# (marked *); not_comparable: the row failed parity, its numbers are shown in parentheses;
# pass / fail / differs: a parity verdict; short: the timed window was too short to time (analysis/window.py),
# the value is marked ~; busy: some of its trials ran on a busy machine (analysis/busy.py), marked ^;
# undecided: its ranking against the next one down is not decided (the overview), marked ?.
Flag = Literal["unstable", "estimated", "not_comparable", "pass", "fail", "differs", "short", "busy", "undecided"]

MISSING = "–"
UNSTABLE_MARK = "!"
ESTIMATED_MARK = "*"
SHORT_MARK = "~"
BUSY_MARK = "^"
UNDECIDED_MARK = "?"


@dataclass(frozen=True)
class Cell:
    text: str
    # The median's interval in the column's units with its level, `[1.20, 1.40] 75%`, and the
    # same interval relative to the median, `-3.1%/+2.0% 75%` (narrow enough for a terminal).
    interval: str | None = None
    relative: str | None = None
    flags: frozenset[Flag] = field(default_factory=frozenset)
    # The same interval as one number: how far from the value its wider side reaches, relative
    # to the value (0.05 for `-3%/+5%`), and the interval's level as text (`75%`, `≥95%`): the
    # terminal's compact form `1721 ±5%` with the level in a note.
    spread: float | None = None
    level: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", printable(self.text))
        for name in ("interval", "relative", "level"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, printable(value))

    def shown(self) -> str:
        """The text with the marks every renderer shows: `~` before a value timed over too short
        a window, `*` after an estimate, `^` after a value with trials from a busy machine, `?`
        after an undecided one, parentheses around a number of a row that failed parity."""
        if self.text == MISSING:
            return self.text
        text = (SHORT_MARK if "short" in self.flags else "") + self.text
        text += ESTIMATED_MARK if "estimated" in self.flags else ""
        text += BUSY_MARK if "busy" in self.flags else ""
        text += UNDECIDED_MARK if "undecided" in self.flags else ""
        return f"({text})" if "not_comparable" in self.flags else text

    def with_flags(self, *flags: Flag) -> Cell:
        return dataclasses.replace(self, flags=self.flags | frozenset(flags))


@dataclass(frozen=True)
class Column:
    header: str
    align: Align = "left"
    # The terminal shows this column's intervals beside the value, in the column's units (a
    # column whose header names the interval); elsewhere relative, under the value.
    inline_interval: bool = False
    # key: the column names the row (a configuration axis): a split table repeats it in every
    # part. lift: when every row holds the same value, the value moves into the title ("mode
    # compiled") and the column goes (tidy); label axes and the status are lifted.
    key: bool = False
    lift: bool = False
    # quiet: a column only some workloads fill (ddpm's denoising MSE): dropped when empty without
    # the "not shown" note (a cnn-only run has no reason to hear of it).
    quiet: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "header", printable(self.header))


@dataclass(frozen=True)
class Table:
    id: str  # stable: the HTML section's anchor, tests find tables by it
    name: str  # short, for the HTML navigation: "Results", "Time to accuracy"
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    notes: tuple[str, ...] = ()  # footnotes: failures, reasons for missing values, definitions
    description: str | None = None  # how to read the table, where a renderer has room for it

    def __post_init__(self) -> None:
        for name in ("name", "title"):
            object.__setattr__(self, name, printable(getattr(self, name)))
        object.__setattr__(self, "notes", tuple(dict.fromkeys(printable(n) for n in self.notes)))
        if self.description is not None:
            object.__setattr__(self, "description", printable(self.description))
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(f"table {self.id}: a row of {len(row)} cells under {len(self.columns)} columns")

    def column(self, header: str) -> list[Cell]:
        """The cells under `header`, top to bottom."""
        i = [c.header for c in self.columns].index(header)
        return [row[i] for row in self.rows]


def lift_constants(table: Table) -> Table:
    """Columns marked `lift` whose every row holds one value leave the table; the title names
    them (`dlbench results · mode compiled · status ok`). A table of one row keeps one key
    column, its framework's where it has one (a lone row still says what it is: the title
    names the rest), and a table keeps at least one column."""
    if not table.rows:
        return table
    keys = [i for i, c in enumerate(table.columns) if c.key]
    kept = next((i for i in keys if table.columns[i].header == "framework"), keys[0] if keys else None)
    lifted = [i for i, c in enumerate(table.columns) if c.lift and len({row[i].shown() for row in table.rows}) == 1
              and not (len(table.rows) == 1 and i == kept)]
    if len(lifted) == len(table.columns):
        lifted = lifted[1:]
    if not lifted:
        return table
    # with its marks: a lifted `5/5^` keeps saying that busy trials were left out; a column of
    # `–` only (no value to name) leaves without a word
    constants = " · ".join(f"{table.columns[i].header} {table.rows[0][i].shown()}" for i in lifted
                           if table.rows[0][i].text != MISSING)
    return _keep(table, [i for i in range(len(table.columns)) if i not in lifted],
                 title=f"{table.title} · {constants}" if constants else table.title)


def drop_empty(table: Table) -> Table:
    """Columns with no value in any row leave the table, named in one note."""
    empty = [i for i, c in enumerate(table.columns)
             if table.rows and not c.key and all(row[i].text == MISSING for row in table.rows)]
    if not empty or len(empty) == len(table.columns):
        return table
    names = ", ".join(table.columns[i].header for i in empty if not table.columns[i].quiet)
    return _keep(table, [i for i in range(len(table.columns)) if i not in empty],
                 notes=(*table.notes, *([f"not shown, no value in any row: {names}"] if names else [])))


def tidy(table: Table) -> Table:
    """What both renderers show: constants in the title, empty columns dropped."""
    return lift_constants(drop_empty(table))


def split_rows(table: Table, header: str = "workload") -> list[Table]:
    """The table as one table per value of its key column `header` (rows in their order, the
    same title and notes), so that each lifts its own constants (a workload's batch size, model
    size, dataset); the table alone where it has no such column or one value in it."""
    i = next((i for i, c in enumerate(table.columns) if c.key and c.header == header), None)
    if i is None:
        return [table]
    groups: dict[str, list[tuple[Cell, ...]]] = {}
    for row in table.rows:
        groups.setdefault(row[i].text, []).append(row)
    if len(groups) < 2:
        return [table]
    return [dataclasses.replace(table, rows=tuple(rows)) for rows in groups.values()]


def _keep(table: Table, keep: list[int], **changes: object) -> Table:
    """The table with only the columns at `keep` (and `changes` to its other fields)."""
    columns = tuple(table.columns[i] for i in keep)
    rows = tuple(tuple(row[i] for i in keep) for row in table.rows)
    return dataclasses.replace(table, columns=columns, rows=rows, **changes)  # type: ignore[arg-type]


def cells(*values: object) -> list[Cell]:
    """Plain cells from values (stored strings, numbers): their str."""
    return [Cell(str(v)) for v in values]
