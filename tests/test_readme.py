"""The README's example output against what dlbench prints today (issue 38: the quick start's
example no longer matched: ranking first, payback last). The layout is compared, not the
numbers: the same tables in the same order, each with the same column headers."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console
from zoo_store import zoo_store

from dlbench.report import model
from dlbench.report.overview import overview_table
from dlbench.report.tables import report_tables
from dlbench.report.terminal import print_report_tables

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    """The code block that follows "it ends with tables such as these"."""
    text = README.read_text(encoding="utf-8")
    start = text.index("it ends with tables such as these")
    block = re.search(r"```\n(.*?)```", text[start:], re.DOTALL)
    assert block is not None
    return block.group(1)


def _prefix(title: str) -> str:
    """`dlbench results (run 1) · mode compiled` -> `dlbench results`."""
    return re.split(r" \(|:| ·", title)[0]


def _tables(text: str, prefixes: list[str]) -> list[tuple[str, frozenset[str]]]:
    """(title prefix, the words of its header lines) of each table in a terminal output: the
    lines between a title and the rule under the headers."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        prefix = next((p for p in prefixes if line.startswith(p)), None)
        if prefix is None:
            continue
        rule = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("─"))
        out.append((prefix, frozenset(" ".join(lines[i + 1:rule]).split())))
    return out


def test_the_readme_example_has_the_tables_and_columns_of_todays_output(tmp_path):
    store = zoo_store(tmp_path / "s.sqlite", repeats=3, workloads=("cnn",), frameworks=("torch", "tensorflow", "jax"),
                      command="dlbench run")
    report = model.load(store, [1])
    out = io.StringIO()
    print_report_tables(Console(file=out, width=100, highlight=False, markup=False, color_system=None), report)
    overview = overview_table(report)
    titles = [_prefix(t.title) for t in [*([overview] if overview else []), *report_tables(report)]]
    real = _tables(out.getvalue(), titles)
    shown = _tables(_example(), titles)
    assert len(shown) >= 3, shown
    # the README shows the first tables of today's output, in order, with their columns
    assert shown == real[:len(shown)]
