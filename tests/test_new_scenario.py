"""Adding a runner scenario takes the files docs/scenarios.md counts ("Adding a runner scenario"):
a throwaway scenario (tests/throwaway_scenario.py), registered through the registries at test
time, runs one trial on the fake backend through `dlbench run`, and `dlbench report` shows it in
its table and its chart; the files of dlbench it had to touch, with the two modules of its own it
stands in for, are the number the doc says. A worker, a reference child: about ten seconds."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import throwaway_scenario
from dlbench.cli.main import main
from dlbench.results.store import Store

DOC = Path(__file__).parent.parent / "docs" / "scenarios.md"
NUMBERS = {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


def _documented_files() -> int:
    found = re.search(r"A new runner scenario takes (\w+) files", DOC.read_text())
    assert found, "docs/scenarios.md no longer says how many files a new runner scenario takes"
    return NUMBERS[found.group(1)]


def test_a_new_scenario_takes_the_files_the_doc_counts_and_runs_and_reports(tmp_path, fake_env, monkeypatch, capsys):
    pytest.importorskip("plotly")
    # the worker registers it too, before it reads its trial: a sitecustomize on its PYTHONPATH
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import throwaway_scenario\nthrowaway_scenario.register_here()\n")
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ['PYTHONPATH']}")
    places = throwaway_scenario.register(monkeypatch.setattr, monkeypatch.setitem)
    # what importing the report's charts builds from the registrations (an earlier test may have)
    from dlbench.report import figures

    monkeypatch.setattr(figures, "CHARTS", figures.build())

    store = str(tmp_path / "s.sqlite")
    assert main(["run", "-w", "mlp", "-f", "fake", "--scenario", "echo", "--mode", "eager", "--preset", "tiny",
                 "--dataset-size", "64", "--batch-size", "16", "--repeats", "1", "--store", store]) == 0
    assert re.search(r"ok: echo_steps_per_s \d", capsys.readouterr().out)  # its headline, no line of its own
    [row] = Store(store, readonly=True).trials(1)
    assert row.status == "ok" and row.metrics["echo_steps"] == 64 / 16 and row.metrics["echo_steps_per_s"] > 0

    assert main(["report", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "echo: the first epoch's steps in one chunk" in out and "echo steps/s" in out
    page = tmp_path / "r.html"
    assert main(["report", "--store", store, "--html", str(page)]) == 0
    assert "<div class='chart' id='chart-echo'>" in page.read_text()

    assert sorted(places) == ["report/scenarios.py", "report/tables.py", "runner/estimates.py",
                              "runner/scenarios/registry.py", "scenarios.py", "spec.py", "workloads/mlp.py"]
    assert len(places) + len(throwaway_scenario.NEW_MODULES) == _documented_files()
