"""Table data: what one report table shows, built once from the report model and rendered by
the terminal (report/terminal.py) and by the HTML report (report/html.py) alike.

Neutral: text, alignment, intervals and flags, no styling. Every string that enters a table
(cells, titles, notes) passes through `dlbench.text.printable` here, once, so stored text (an
error echoing an escape sequence) never drives a terminal. A renderer decides how a flag or an
interval looks; a change of layout (compact intervals, constant columns lifted into the title,
empty columns dropped, wide tables split) is a function from Table to Table applied in one
place, the renderer's entry.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from dlbench.text import printable

Align = Literal["left", "right"]
# unstable: the median's interval is wide (UNSTABLE_NOTE); estimated: the value is an estimate
# (marked *); not_comparable: the row failed parity, its numbers are shown in parentheses;
# pass / fail: a parity verdict.
Flag = Literal["unstable", "estimated", "not_comparable", "pass", "fail", "differs"]

MISSING = "–"
UNSTABLE_MARK = "!"
ESTIMATED_MARK = "*"


@dataclass(frozen=True)
class Cell:
    text: str
    # The median's interval in the column's units with its level, `[1.20, 1.40] 75%`, and the
    # same interval relative to the median, `-3.1%/+2.0% 75%` (narrow enough for a terminal).
    interval: str | None = None
    relative: str | None = None
    flags: frozenset[Flag] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", printable(self.text))
        for name in ("interval", "relative"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, printable(value))

    def shown(self) -> str:
        """The text with the marks every renderer shows: `*` after an estimate, parentheses
        around a number of a row that failed parity."""
        if self.text == MISSING:
            return self.text
        text = self.text + (ESTIMATED_MARK if "estimated" in self.flags else "")
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


def cells(*values: object) -> list[Cell]:
    """Plain cells from values (stored strings, numbers): their str."""
    return [Cell(str(v)) for v in values]
