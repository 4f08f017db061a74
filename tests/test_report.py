"""Reports and exports from real (fake-backend) runs: terminal tables, the HTML report opened in
headless Chromium, static images, and exports read back (CSV, JSON, Parquet, MLflow).

The browser test skips without a Chromium unless DLBENCH_REQUIRE_BROWSER=1 (.ci/run sets it).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cdp import Chromium, find_browser
from conftest import TESTS_DIR
from dlbench.analysis.summary import summarize
from dlbench.cli.main import main
from dlbench.report import model
from dlbench.results.store import Store
from zoo_store import FRAMEWORKS, WORKLOADS, zoo_store

TINY = ["--preset", "tiny", "--dataset-size", "64", "--chunk-steps", "1", "--epochs", "2"]
HOSTILE = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"
BASE_CHARTS = {"throughput", "step-times", "startup", "memory", "loss", "accuracy", "scaling", "efficiency", "roofline"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Run 1: eager (and unsupported graph) x batch 8,16 x 2 repeats; run 2: one ok trial;
    run 3: one trial that fails. Shared by the module's tests (6 worker processes in all)."""
    path = tmp_path_factory.mktemp("report") / "r.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend")
        mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
        mp.setenv("DLBENCH_LOCK", str(path.with_suffix(".lock")))
        mp.syspath_prepend(str(TESTS_DIR))
        mp.setenv("FAKE_BEHAVIOUR", "ok")
        # the fake is its own float64 parity reference, cached apart from real frameworks'
        mp.setenv("DLBENCH_REFERENCE_FRAMEWORK", "fake")
        mp.setenv("DLBENCH_CACHE_DIR", str(path.parent / "cache"))
        s = ["--store", str(path)]
        assert main(["run", "-f", "fake", "--mode", "eager,graph", "-b", "8,16", "--repeats", "2", *TINY, *s]) == 0
        assert main(["run", "-f", "fake", "--mode", "eager", "-b", "16", "--repeats", "1", *TINY, *s]) == 0
        mp.setenv("FAKE_BEHAVIOUR", "raise")
        assert main(["run", "-f", "fake", "--mode", "eager", "-b", "16", "--repeats", "1", *TINY, *s]) == 3
        yield str(path)


def _with_parity_latency_and_hostile_text(path: str, copy: Path) -> str:
    """A copy of the store with what later issues and hostile users put into one: parity
    verdicts (the lead's parity check), latency and efficiency metrics, markup in stored
    strings (a run's command, an error, a framework name that reaches the charts)."""
    src, db = sqlite3.connect(path), sqlite3.connect(copy)
    src.backup(db)
    src.close()
    with db:
        ids = [r[0] for r in db.execute("SELECT id FROM trials WHERE run_id=1 AND status='ok'")]
        for i, tid in enumerate(ids):
            verdict = {"verdict": "fail" if i == 0 else "pass", "worst_rel_err": 3e-2 if i == 0 else 2e-7}
            db.execute("UPDATE trials SET parity=? WHERE id=?", (json.dumps(verdict), tid))
            for name, value in (("latency_p50_s", 0.010 + i / 1000), ("latency_p99_s", 0.020), ("mfu", 0.31)):
                db.execute("INSERT OR REPLACE INTO metrics VALUES (?, ?, ?, ?)", (tid, name, value, "1"))
        db.execute("UPDATE runs SET command=? WHERE id=2", (f"dlbench run {HOSTILE}",))
        db.execute("UPDATE trials SET error=? WHERE run_id=3", (f"RuntimeError: {HOSTILE}",))
        [(tid, spec)] = db.execute("SELECT id, spec FROM trials WHERE run_id=2").fetchall()
        spec = json.loads(spec)
        spec["framework"] = HOSTILE
        db.execute("UPDATE trials SET spec=? WHERE id=?", (json.dumps(spec), tid))
    db.close()
    return str(copy)


def test_median_interval_from_order_statistics():
    s = summarize([3.0, None, 1.0, 2.0])
    assert (s.n, s.median, s.low, s.high, s.level) == (3, 2.0, 1.0, 3.0, 0.75)
    assert s.unstable  # half-width 1 of a median of 2
    assert summarize([5.0]).level is None and summarize([]).median is None
    assert not summarize([100.0, 101.0, 102.0]).unstable


def test_terminal_report_shows_intervals_statuses_and_runs(store, capsys):
    assert main(["report", "--store", store]) == 0  # latest: the failed run
    out = capsys.readouterr().out
    assert "failed" in out and "fake failure at step 3" in out
    assert main(["report", "1", "2", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "run" in out and "batch" in out and "parity" in out
    assert re.search(r"(±|-[\d.]+%/\+)[\d.]+% 50%", out)  # 2 repeats: [min, max] at 50 %
    assert "unsupported" in out and "the fake has no graph mode" in out
    assert main(["report", "7", "--store", store]) == 2
    assert "run 7 is not in the store" in capsys.readouterr().err


@pytest.mark.parametrize("argv,msg", [
    (["report", "x"], "dlbench report: argument RUN: run 'x' is not a run id (a whole number from 1 to"
                      " 9223372036854775807), 'latest' or 'all'"),
    (["report", "--html", "/nonexistent/dir/r.html"],
     "cannot write '/nonexistent/dir/r.html': directory '/nonexistent/dir' does not exist"),
    (["export", "1", "--format", "parquet"], "format parquet writes three files: give a directory with -o DIR"),
    (["export", "1", "--format", "xml"], "format 'xml' is not one of: json, csv, parquet, github-action-benchmark, bencher"),
])
def test_bad_report_and_export_input_is_one_line(store, argv, msg, capsys):
    assert main([*argv, "--store", store]) == 2
    err = capsys.readouterr().err
    assert err == f"dlbench: error: {msg}\n"


def test_the_charts_are_the_generic_ones_then_those_the_scenarios_register_in_the_reports_order():
    """report/figures.py builds CHARTS once: the charts of every trial's measurements, and those
    each scenario registers beside its tables (report/scenarios.py: its report module's), in the
    order the report has shown them (work precision moved before efficiency, roofline and scaling,
    which a solve trial never has)."""
    pytest.importorskip("plotly")
    from dlbench.report import figures

    assert [f.__name__ for f in figures.CHARTS] == [
        "throughput", "step_times", "startup", "memory", "loss", "accuracy", "convergence", "convergence_perplexity",
        "returns", "latency", "served_load", "served_tokens", "work_precision", "efficiency", "roofline", "scaling",
        "profile_bars", "payback", "batch_sweep", "headroom"]
    assert {f.__name__: f.__module__.rsplit(".", 1)[1] for f in figures.CHARTS if f.__module__ != figures.__name__} == {
        "convergence": "converge", "convergence_perplexity": "converge", "returns": "rl", "latency": "infer",
        "served_load": "infer", "served_tokens": "generate", "work_precision": "solve", "headroom": "tune"}


def test_charts_exist_only_for_measured_metrics(store, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", "1", "--store", store, "--html", str(out)]) == 0
    ids = set(re.findall(r"<div class='chart' id='chart-([\w-]+)'>", out.read_text()))
    assert ids == BASE_CHARTS  # no latency metrics in a train run: no latency chart
    assert "https://" not in out.read_text().split("<script>", 1)[0]  # nothing fetched by the page head


def test_phase_spans_and_wall_clock_come_from_the_raw_series(store):
    report = model.load(Store(store), [1])
    config, trial = next((c, t) for c, t in report.trials() if t.status == "ok")
    spans = {name: (a, b) for name, a, b in model.phase_spans(trial)}
    assert list(spans)[:3] == ["import", "build", "data"] and "timed" in spans
    assert all(b is not None and a <= b for a, b in spans.values())
    rss_t = [t for t, _ in trial.series["rss_bytes"]]
    assert rss_t[0] <= spans["import"][0] and spans["evaluate"][1] <= rss_t[-1]
    timed = model.loss_by_time(trial)
    assert len(timed) == len(trial.series["loss"]) == 2 * 64 // trial.spec["workload"]["batch_size"]
    assert all(a < b for (a, _), (b, _) in zip(timed, timed[1:]))
    assert timed[-1][0] == pytest.approx(trial.series["step_s"][-1][0])
    assert config.summary("samples_per_s").n == 2


def _browser() -> str:
    """Chromium's path; the test skips without one, unless CI requires it."""
    browser = find_browser()
    if browser is None:
        if os.environ.get("DLBENCH_REQUIRE_BROWSER") == "1":
            pytest.fail("DLBENCH_REQUIRE_BROWSER=1 but no chromium on PATH (.ci/run installs it)")
        pytest.skip("no chromium on PATH (apt-get install chromium); CI makes this test mandatory")
    return browser


def test_html_report_in_headless_chromium(store, tmp_path, capsys):
    browser = _browser()
    hostile_store = _with_parity_latency_and_hostile_text(store, tmp_path / "copy.sqlite")
    out = tmp_path / "report.html"
    assert main(["report", "1", "2", "3", "--store", hostile_store, "--html", str(out)]) == 0
    expected = BASE_CHARTS | {"latency", "efficiency"}
    b = Chromium(browser)
    try:
        b.open(out)
        rendered = b.evaluate(RENDERED_CHARTS)
        requested = b.requested_urls()
        text = b.evaluate("document.body.innerText")
        chart_text = b.evaluate("document.getElementById('chart-throughput').textContent")
        injected = b.evaluate("document.querySelectorAll('img').length"
                              " + [...document.scripts].filter(s => s.type !== 'application/json').length")
        pixels = b.evaluate(PIXEL_STATS % _b64(b.screenshot()))
    finally:
        b.close()
    assert b.errors() == []
    assert requested == [out.as_uri()]  # the page itself, nothing from any host
    assert {k for k, n in rendered.items() if n > 0} == expected, rendered
    assert text.count(HOSTILE) >= 3 and HOSTILE in chart_text  # shown as written, never as markup
    assert "FAIL 3.0e-02" in text  # as in the terminal: one parity text for both
    assert injected == 2  # the page's own two scripts; no element from a stored string
    assert pixels["colors"] > 50 and pixels["non_white"] > 0.05, pixels


RENDERED_CHARTS = """new Promise(done => {
  const t0 = Date.now();
  (function poll() {
    const divs = [...document.querySelectorAll('div.chart')];
    if (divs.every(d => d.querySelector('.main-svg')) || Date.now() - t0 > 20000)
      done(Object.fromEntries(divs.map(d => [d.id.slice(6), d.querySelectorAll('.main-svg .trace').length])));
    else setTimeout(poll, 100);
  })();
})"""

# The screenshot decoded by the browser itself: distinct colours and the share of non-white pixels.
PIXEL_STATS = """(async () => {
  const img = new Image(); img.src = 'data:image/png;base64,%s'; await img.decode();
  const c = document.createElement('canvas'); c.width = img.width; c.height = img.height;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const colors = new Set(); let nonWhite = 0;
  for (let i = 0; i < d.length; i += 4) {
    colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    if (d[i] < 240 || d[i + 1] < 240 || d[i + 2] < 240) nonWhite++;
  }
  return {colors: colors.size, non_white: nonWhite / (d.length / 4)};
})()"""


def test_html_report_of_thirty_configurations_is_legible(tmp_path, capsys):
    """`-w all -f all` (a store written in code, tests/zoo_store.py): one section per workload,
    every chart drawn with no tick label, axis title, subplot title or legend over a plot area,
    every plot area of a readable size, labels naming only what differs, one legend entry per
    framework."""
    browser = _browser()
    zoo_store(tmp_path / "zoo.sqlite").close()
    out = tmp_path / "zoo.html"
    assert main(["report", "--store", str(tmp_path / "zoo.sqlite"), "--html", str(out)]) == 0
    b = Chromium(browser, width=1280, height=1000, timeout_s=120)
    try:
        b.open(out)
        geometry = b.evaluate(CHART_GEOMETRY)
        sections = b.evaluate("[...document.querySelectorAll('section.workload')].map(s => s.id)")
        ticks = b.evaluate("[...document.querySelectorAll('.xtick text')].map(t => t.textContent)")
        legend = b.evaluate("[...document.querySelectorAll('#chart-cnn-throughput .legend .traces')]"
                            ".map(t => t.textContent)")
    finally:
        b.close()
    assert b.errors() == []
    assert sections == [f"workload-{w}" for w, *_ in WORKLOADS]
    assert {f"{w}-{c}" for w, *_ in WORKLOADS for c in ("throughput", "memory", "loss", "startup")} <= set(geometry)
    for chart, g in geometry.items():
        assert g["plots"] >= 1 and g["overlaps"] == [], (chart, g)
        assert g["min_plot_h"] >= 150 and g["min_plot_w"] >= 200, (chart, g)
    assert geometry["cnn-memory"]["plots"] == len(FRAMEWORKS)  # a panel per configuration, not per process
    assert not [t for t in ticks if any(word in t for word in ("compiled", "batch", "size", "dataset"))]
    assert legend == list(FRAMEWORKS)


# Per chart: its plot areas (Plotly's drag rectangles) and every label (tick labels, axis titles,
# subplot titles, the legend) as client rectangles; a label over a plot area is an overlap.
CHART_GEOMETRY = """new Promise(done => {
  const t0 = Date.now();
  (function poll() {
    const divs = [...document.querySelectorAll('div.chart')];
    if (!(divs.every(d => d.querySelector('.main-svg')) || Date.now() - t0 > 60000)) { setTimeout(poll, 100); return; }
    const box = e => { const r = e.getBoundingClientRect();
      return {x: r.left, y: r.top, w: r.width, h: r.height, text: (e.textContent || '').slice(0, 40)}; };
    const hit = (a, b) => Math.min(a.x + a.w, b.x + b.w) - Math.max(a.x, b.x) > 1
      && Math.min(a.y + a.h, b.y + b.h) - Math.max(a.y, b.y) > 1;
    const out = {};
    for (const div of divs) {
      const plots = [...div.querySelectorAll('.draglayer .nsewdrag')].map(box);
      const labels = [...div.querySelectorAll('.xtick text, .ytick text, [class^="g-x"][class$="title"],'
        + ' [class^="g-y"][class$="title"], .annotation, .legend')].map(box).filter(b => b.w > 0 && b.h > 0);
      const overlaps = labels.filter(l => plots.some(p => hit(l, p))).map(l => l.text);
      out[div.id.slice(6)] = {plots: plots.length, overlaps: overlaps,
        min_plot_h: Math.min(...plots.map(p => p.h)), min_plot_w: Math.min(...plots.map(p => p.w))};
    }
    done(out);
  })();
})"""


def _b64(png: bytes) -> str:
    import base64

    return base64.b64encode(png).decode()


def test_png_images_or_one_line_reason(store, tmp_path, capsys):
    out = tmp_path / "png"
    assert main(["report", "2", "--store", store, "--png", str(out)]) == 0  # one trial: 6 charts
    line = capsys.readouterr().out.strip()
    if line.startswith("--png: no images written"):
        assert "\n" not in line
        if os.environ.get("DLBENCH_REQUIRE_BROWSER") == "1":  # CI has Kaleido and Chromium
            pytest.fail(line)
        pytest.skip(line)
    expected = BASE_CHARTS - {"scaling"}
    assert line == f"wrote {len(expected)} PNG files to {out}"
    for name in expected:
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_csv_json_and_parquet_exports_round_trip(store, tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    db = Store(store)
    want = {(t.id, k): v for rid in (1, 2, 3) for t in db.trials(rid) for k, v in t.metrics.items()}
    assert main(["export", "all", "--store", store, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    # issue 38: no empty rows for what a CPU trial cannot measure; a trial without metrics
    # (unsupported, failed early) is one row with its reason instead of none
    measured = {k: v for k, v in want.items() if v is not None}
    assert {(int(r["trial_id"]), r["metric"]): float(r["value"]) for r in rows if r["metric"]} == measured
    empty = {t.id: t.error for rid in (1, 2, 3) for t in db.trials(rid) if all(v is None for v in t.metrics.values())}
    assert empty and {int(r["trial_id"]): r["error"] for r in rows if not r["metric"]} == empty
    assert main(["export", "all", "--store", store, "--format", "parquet", "-o", str(tmp_path / "pq")]) == 0
    metrics = pq.read_table(tmp_path / "pq" / "metrics.parquet").to_pylist()
    assert {(r["trial_id"], r["metric"]): r["value"] for r in metrics} == want
    series = pq.read_table(tmp_path / "pq" / "series.parquet").to_pylist()
    tid = next(t.id for t in db.trials(1) if t.status == "ok")
    for name, points in db.series(tid).items():
        assert [(r["t"], r["value"]) for r in series if r["trial_id"] == tid and r["series"] == name] == points
    trials = pq.read_table(tmp_path / "pq" / "trials.parquet").to_pylist()
    assert {r["trial_id"]: r["status"] for r in trials} == {t.id: t.status for rid in (1, 2, 3) for t in db.trials(rid)}
    assert main(["export", "1", "--store", store, "--format", "json", "-o", str(tmp_path / "e.json")]) == 0
    [run] = json.loads((tmp_path / "e.json").read_text())["runs"]
    assert {t["id"]: [tuple(p) for p in t["series"]["loss"]] for t in run["trials"] if t["status"] == "ok"} == {
        t.id: db.series(t.id)["loss"] for t in db.trials(1) if t.status == "ok"}


def test_mlflow_export_reads_back(store, tmp_path, capsys, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    assert main(["export", "1", "--store", store, "--mlflow"]) == 0  # default: ./mlruns
    assert "-> MLflow run" in capsys.readouterr().out
    assert main(["export", "1", "--store", store, "--mlflow"]) == 0
    assert "exported before" in capsys.readouterr().out
    # the read-back docs/cli.md gives, as written (no pandas with mlflow-skinny)
    readback = subprocess.run(
        [sys.executable, "-c", "import mlflow; mlflow.set_tracking_uri('mlruns'); print([(r.info.run_name,"
         " r.data.metrics.get('samples_per_s')) for r in mlflow.search_runs(experiment_names=['dlbench'],"
         " output_format='list')])"], cwd=tmp_path, env={**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true"},
        capture_output=True, text=True, check=True)
    assert "dlbench run 1" in readback.stdout
    assert main(["export", "1", "--store", store, "--mlflow", "sqlite:///x.db"]) == 2
    assert "needs the full mlflow package" in capsys.readouterr().err
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    exp = client.get_experiment_by_name("dlbench")
    runs = client.search_runs([exp.experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [a.path for a in client.list_artifacts(parent.info.run_id)] == ["dlbench-report.html"]
    children = {int(r.data.tags["dlbench.trial_id"]): r for r in runs if r is not parent}
    db = Store(store)
    assert set(children) == {t.id for t in db.trials(1)}
    for t in db.trials(1):
        run = children[t.id]
        assert run.data.tags["dlbench.status"] == t.status
        assert run.data.params["spec.workload.batch_size"] == str(t.spec["workload"]["batch_size"])
        assert run.data.params["spec.policy.mode"] == t.spec["policy"]["mode"]
        if t.status != "ok":
            continue
        assert run.data.params["policy.env.OMP_NUM_THREADS"] == t.data["policy"]["env"]["OMP_NUM_THREADS"]
        assert {k: v for k, v in run.data.metrics.items() if k in t.metrics} == {
            k: v for k, v in t.metrics.items() if v is not None}
        history = client.get_metric_history(run.info.run_id, "loss")
        assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
            (i, v) for i, (_, v) in enumerate(db.series(t.id)["loss"])]


def test_mlflow_thins_long_series_and_keeps_the_peak():
    """A 5,000-sample RSS series becomes at most MAX_SERIES_POINTS + 1 MLflow points: first,
    last and the largest kept, steps still the sample indices; a short one is kept whole."""
    pytest.importorskip("mlflow")
    from dlbench.results.mlflow_export import MAX_SERIES_POINTS, thinned

    points = [(i * 0.025, float(i % 97)) for i in range(5000)]
    points[1234] = (1234 * 0.025, 1e9)  # a spike between two evenly spaced picks
    kept = thinned(points)
    assert len(kept) <= MAX_SERIES_POINTS + 1 and kept == sorted(set(kept))
    assert kept[0] == 0 and kept[-1] == 4999 and 1234 in kept
    assert thinned(points[:10]) == list(range(10))


def test_loss_points_keep_chunk_means_at_the_chunks_end():
    """Issue 38: a chunk's one mean (Keras's fit) is one point at its chunk's last step and end
    time; per-step losses keep their own steps and times."""
    from dlbench.runner.scenarios.train import loss_points

    by_step, by_time, means = loss_points([4, 4], [np.array([2.2]), np.array([1.9])], [(2.0, 2.0), (2.0, 4.0)])
    assert means and by_step == [(3.0, 2.2), (7.0, 1.9)] and by_time == [(2.0, 2.2), (4.0, 1.9)]
    by_step, by_time, means = loss_points([2], [np.array([3.0, 2.5])], [(1.0, 1.0)])
    assert not means and by_step == [(0.0, 3.0), (1.0, 2.5)] and by_time == [(0.5, 3.0), (1.0, 2.5)]


def _configs_report(rows: list[tuple[str, dict[str, float]]], workload: str = "cnn") -> model.Report:
    """A one-run report of configurations of the given frameworks and metrics (no store)."""
    configs = []
    for i, (framework, metrics) in enumerate(rows):
        spec = {"workload": {"name": workload, "batch_size": 32, "dataset_size": 1024, "seed": 0, "labels": "learnable"},
                "framework": framework, "policy": {"mode": "compiled"}, "scenario": "train", "devices": 1}
        trial = model.Trial(i, 1, spec, "ok", None, dict(metrics), {}, [], {})
        configs.append(model.Config(1, f"k{i}", {a: f(spec) for a, f in model.AXES.items()}, (trial,)))
    return model.Report((model.Run(1, {}, tuple(t for c in configs for t in c.trials)),), tuple(configs),
                        model._label_axes(tuple(configs)))


def test_throughput_axis_is_logarithmic_where_medians_span_a_wide_range_and_short_windows_are_hatched():
    """Issue 38: 444 beside 79,845 samples/s on a linear axis hid the slow framework; bars of
    windows too short to time looked like any other."""
    from dlbench.report import figures

    wide = _configs_report([("torch", {"samples_per_s": 79845.0}), ("keras-torch", {"samples_per_s": 444.0,
                                                                                  "timed_window_short": 1.0})])
    chart = figures.throughput(wide)
    assert chart is not None and chart.figure.layout.yaxis.type == "log"
    torch, keras = chart.figure.data
    assert list(torch.marker.pattern.shape) == [""] and list(keras.marker.pattern.shape) == ["/"]
    assert list(keras.x) == ["~ keras-torch"] and "too short to time" in keras.hovertext[0]
    narrow = _configs_report([("torch", {"samples_per_s": 800.0}), ("jax", {"samples_per_s": 444.0})])
    assert figures.throughput(narrow).figure.layout.yaxis.type != "log"  # type: ignore[union-attr]


def test_efficiency_keeps_one_colour_per_framework_and_memory_panels_share_axes():
    from dlbench.report import figures

    report = _configs_report([(f, {"mfu": 0.2 + i / 10, "matmul_ceiling_share": 0.3}) for i, f in enumerate(("torch", "jax"))])
    chart = figures.efficiency(report)
    assert chart is not None
    colours = {d.name: d.marker.color for d in chart.figure.data}
    assert colours["torch MFU"] == colours["torch ceiling share"] != colours["jax MFU"] == colours["jax ceiling share"]
    assert {tuple(d.marker.pattern.shape) for d in chart.figure.data} == {("",), (".",)}  # the metric by its fill
    rss = {"rss_bytes": [(0.0, 1e9), (1.0, 2e9)]}
    configs = [dataclasses.replace(c, trials=tuple(dataclasses.replace(t, series=rss) for t in c.trials))
               for c in report.configs]
    memory = figures.memory(dataclasses.replace(report, configs=tuple(configs)))
    assert memory is not None and memory.figure.layout.yaxis2.matches == "y" and memory.figure.layout.xaxis2.matches == "x"


def test_detect_gets_a_map_chart_and_the_html_has_no_duplicate_nav_or_internal_wording(tmp_path):
    from dlbench.report import figures, html

    detect = _configs_report([("torch", {"map": 0.41}), ("jax", {"map": 0.39})], "detect")
    chart = figures.accuracy(detect)
    assert chart is not None and chart.title == "mAP@0.5 on the held-out split"
    assert [list(d.y) for d in chart.figure.data] == [[0.41], [0.39]]
    report = _configs_report([("torch", {"time_to_first_step_s": 5.0, "step_s_median": 0.03, "samples_per_s": 1e3}),
                              ("jax", {"time_to_first_step_s": 20.0, "step_s_median": 0.01, "samples_per_s": 3e3})])
    page = html.render(report, figures.charts(report), html.methodology_markdown())
    nav = re.search(r"<nav>(.*?)</nav>", page)
    assert nav is not None
    entries = re.findall(r">([^<]+)</a>", nav[1])
    assert "When compilation pays back" in entries and len(entries) == len(set(entries)), entries
    # the overview opens the page, first in the navigation
    assert entries[0] == "Overview" and page.index("id='table-overview'") < page.index("id='table-results'")
    method = page[page.index("<section id='method'"):]
    assert not re.search(r"issue \d+|the issue's|done-means", method)


def test_the_report_of_an_unfinished_run_says_so_and_its_method_links_nowhere_dead(tmp_path, capsys):
    """Issue 47.5: `report --html` of a run in progress wrote `(0 charts: )` without saying the run
    was running; the HTML's Method section linked `cluster.md`, dead in a standalone file."""
    from zoo_store import _result, _spec

    from dlbench.report import html
    from dlbench.results.records import TrialResult

    path = tmp_path / "running.sqlite"
    store = Store(path)
    run = store.create_run("dlbench run -w cnn", {}, False)  # still `running`: nothing finished it
    store.add_trial(run, 0, _spec(WORKLOADS[1], "torch", 0))  # pending
    store.finish_trial(store.add_trial(run, 1, _spec(WORKLOADS[1], "jax", 0)), TrialResult(status="crashed",
                                                                                           error="killed"))
    store.close()
    out_html = tmp_path / "r.html"
    assert main(["report", "--html", str(out_html), "--store", str(path)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "run 1 has not finished: 1 of 2 trials have ended, and the report shows those" in said
    assert f"dlbench run --resume 1 --store {path}" in said
    assert "(no charts: no trial with data)" in said and "(0 charts: )" not in said
    page = out_html.read_text()
    assert "run 1 has not finished: 1 of 2 trials have ended" in page
    # the Method section: docs/methodology.md with its links to other docs pages as their paths
    method = page[page.index("<section id='method'"):page.index("</section>", page.index("<section id='method'"))]
    assert "<code>docs/cluster.md</code>" in method
    assert not re.search(r"href=['\"](?![a-z]+:|#)[^'\"]+['\"]", method), "a relative link, dead in one file"
    assert html.standalone("see [the cluster page](cluster.md) and [a site](https://example.org)") == \
        "see the cluster page (`docs/cluster.md`) and [a site](https://example.org)"
    # a finished trial: its charts listed as before
    finished = tmp_path / "done.sqlite"
    s = Store(finished)
    r = s.create_run("dlbench run -w cnn", {}, False)
    s.finish_trial(s.add_trial(r, 0, _spec(WORKLOADS[1], "torch", 0)), _result(1, 0, 0))
    s.finish_run(r, "ok")
    s.close()
    assert main(["report", "--html", str(tmp_path / "d.html"), "--store", str(finished)]) == 0
    said = capsys.readouterr().out
    assert "has not finished" not in said and re.search(r"\(\d+ charts: [a-z]", said)
