"""The README's example output against what dlbench prints today (issue 38: the quick start's
example no longer matched: ranking first, payback last; issue 47: its notes were not what
prints, and its zoo counted 9 workloads when `-w all` had 10). The example is today's output of
the default suite's store to the character (its numbers are the synthetic store's, not
measurements); the zoo's counts are the registries'."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console
from zoo_store import zoo_store

from dlbench import workloads
from dlbench.backends import BASELINES, registered
from dlbench.report import model
from dlbench.report.terminal import print_report_tables

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    """The code block that follows "it ends with tables such as these"."""
    text = README.read_text(encoding="utf-8")
    start = text.index("it ends with tables such as these")
    block = re.search(r"```\n(.*?)```", text[start:], re.DOTALL)
    assert block is not None
    return block.group(1)


def _stripped(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").splitlines()]


def test_the_readme_example_is_todays_output(tmp_path):
    store = zoo_store(tmp_path / "s.sqlite", repeats=3, workloads=("cnn",), frameworks=("torch", "tensorflow", "jax"),
                      command="dlbench run")
    out = io.StringIO()
    print_report_tables(Console(file=out, width=100, highlight=False, markup=False, color_system=None),
                        model.load(store, [1]))
    real = _stripped(out.getvalue())
    shown = _stripped(_example())
    assert shown == real, "\n".join(f"{a!r}\n{b!r}" for a, b in zip(shown, real, strict=False) if a != b)
    # the last screen is the answer: the summary within the last 15 lines of a 100x40 terminal
    assert any(line.startswith("summary: the fastest framework per workload") for line in real[-15:])


def test_the_readme_counts_the_zoo_as_it_is():
    """`-w all` and `-f all` as the registries hold them today (a plugin's workloads come on top)."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    frameworks = [f for f in registered() if f not in BASELINES]
    assert f"the whole zoo: {len(workloads.WORKLOADS)} built-in workloads x {len(frameworks)} frameworks" in text
