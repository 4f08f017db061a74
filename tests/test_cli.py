"""The CLI in-process (main(argv)) with the fake backend, plus real subprocess error paths."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from dlbench.cli.main import main
from dlbench.runner.plan import Sweep, make_plan
from dlbench.spec import SpecError

pytestmark = pytest.mark.usefixtures("fake_env")

TINY = ["--preset", "tiny", "--dataset-size", "64", "--batch-size", "16", "--repeats", "1"]


def test_run_prints_the_table_and_stores_the_run(tmp_path, capsys):
    store = str(tmp_path / "r.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager,graph", *TINY, "--store", store]) == 0
    out = capsys.readouterr().out
    assert "1 trial(s) to run (1 unsupported or skipped)" in out
    assert "estimated" in out
    for header in ("framework", "mode", "training time s", "samples/s", "accuracy", "initial RAM",
                   "max RAM", "time to first step"):
        assert header in out.replace("\n", " ") or header.split()[0] in out
    assert "initial VRAM GiB" not in " ".join(out.split())  # no GPU: no VRAM columns
    assert "unsupported" in out and "the fake has no graph mode" in out
    assert "no GPU: " in out and "VRAM: no GPU" not in out  # one line says why, not one per column
    assert "~" in out and "timed window too short to time" in out  # the tiny preset's window is flagged
    exported = tmp_path / "e.json"
    assert main(["export", "latest", "--store", store, "-o", str(exported)]) == 0
    data = json.loads(exported.read_text())
    [run] = data["runs"]
    assert run["environment"]["python"]
    statuses = sorted(t["status"] for t in run["trials"])
    assert statuses == ["ok", "unsupported"]
    ok = next(t for t in run["trials"] if t["status"] == "ok")
    assert ok["metrics"]["samples_per_s"]["unit"] == "1/s"
    assert len(ok["series"]["loss"]) == 4  # 64/16 steps, 1 timed epoch
    assert ok["metrics"]["timed_window_short"]["value"] == 1.0 and ok["metrics"]["timed_steps"]["value"] == 4
    assert any(w.startswith("timed window too short to time: 4 step(s)") for w in ok["warnings"])
    assert ok["policy"]["env"]["OMP_NUM_THREADS"]
    assert any(e["event"] == "chunk" for e in ok["events"])


def test_csv_export_is_tidy(tmp_path, capsys):
    store = str(tmp_path / "r.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store, "--repeats", "2"]) == 0
    capsys.readouterr()
    assert main(["export", "all", "--store", store, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["repeat"] for r in rows} == {"0", "1"}
    assert {r["metric"] for r in rows} >= {"samples_per_s", "rss_peak_bytes", "train_s"}


def test_failed_trial_exits_3_and_keeps_the_others(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "raise")
    store = str(tmp_path / "r.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager,compiled", *TINY, "--store", store]) == 3
    out = capsys.readouterr().out
    assert "fake failure at step 3" in out
    assert "2 failed" not in out  # one row per mode, each failed once
    assert out.count("failed") >= 2


@pytest.mark.parametrize("argv,msg", [
    (["run", "-w", "gan"], "workload 'gan' is not one of: mlp, cnn, resnet"),
    (["run", "-f", "mxnet"], "framework 'mxnet' is not one of: torch, tensorflow, jax"),
    (["run", "-f", "missing"], "framework 'missing' cannot run here: missing is not installed (pip install 'dlbench[missing]')"),
    (["run", "-f", "fake", "-b", "0"], "batch size must be an integer >= 1, got 0"),
    (["run", "-f", "fake", "-b", "x"], "batch size 'x' is not valid"),
    (["run", "-f", "fake", "--mode", "fast"], "mode 'fast' is not one of"),
    (["run", "-f", "fake", "--threads", "999"], "threads 999 is not between 1 and"),
    (["run", "-f", "fake", "--repeats", "0"], "repeats must be an integer >= 1"),
    (["run", "-f", "fake", "--preset", "huge"], "preset 'huge' is not one of: tiny, cpu, gpu"),
    (["run", "-f", "fake", "--store", "/nonexistent/dir/x.sqlite"], "directory /nonexistent/dir does not exist"),
    (["run", "suite.toml"], "suite file suite.toml does not exist"),
    (["export", "latest", "--format", "xml"], "format 'xml' is not one of: json, csv"),
    (["export", "latest", "--store", "/nonexistent.sqlite"], "does not exist"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_bad_input_is_one_line_exit_2(argv, msg, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_export_unknown_run(tmp_path, capsys):
    store = str(tmp_path / "r.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store]) == 0
    assert main(["export", "42", "--store", store]) == 2
    assert "run 42 is not in the store" in capsys.readouterr().err


def test_default_suite_skips_a_missing_framework_with_a_note():
    plan = make_plan(Sweep(frameworks=("fake", "missing"), modes=("eager",), preset="tiny", repeats=1))
    assert [t.status for t in plan.trials] == ["pending", "skipped"]
    assert any("pip install 'dlbench[missing]'" in n for n in plan.notes)
    with pytest.raises(SpecError, match="cannot run here"):
        make_plan(Sweep(frameworks=("missing",), frameworks_explicit=True))


def test_repeats_are_interleaved_in_rounds():
    plan = make_plan(Sweep(frameworks=("fake",), modes=("eager", "compiled"), preset="tiny", repeats=3))
    assert [t.spec.repeat for t in plan.trials] == [0, 0, 1, 1, 2, 2]


def test_list_and_env_commands(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "torch" in out and "jax" in out and "graph" in out
    assert main(["env", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["cpu_logical"] >= 1 and env["ram_bytes"] > 0
    assert "reason" in env["gpu"] or env["gpu"]["gpus"]


def test_real_process_error_is_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dlbench.cli.main", "run", "-b", "0"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == "dlbench: error: batch size must be an integer >= 1, got 0"


def test_every_trial_gets_a_parity_verdict(tmp_path, capsys):
    store = str(tmp_path / "r.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store]) == 0
    out = capsys.readouterr().out
    assert "parity" in out and "pass" in out
    exported = tmp_path / "e.json"
    assert main(["export", "latest", "--store", store, "-o", str(exported)]) == 0
    [trial] = json.loads(exported.read_text())["runs"][0]["trials"]
    assert trial["parity"]["verdict"] == "pass"
    assert trial["parity"]["reference"] == "fake float64"
    assert trial["parity"]["worst_rel_err"] < 1e-5
    assert trial["metrics"]["parity_min_cosine"]["value"] > 0.99999


def test_a_wrong_framework_is_flagged_not_ranked(tmp_path, capsys, monkeypatch):
    store = str(tmp_path / "r.sqlite")
    main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store])  # reference first
    capsys.readouterr()
    monkeypatch.setenv("FAKE_BEHAVIOUR", "wrong")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store]) == 1
    out = capsys.readouterr().out
    assert "FAIL 1.0e-02" in out
    assert "parity against the float64 reference FAILED" in out
    assert "parity FAILED: over tolerance" in out


def test_check_prints_the_matrix_and_passes(tmp_path, capsys):
    out_json = tmp_path / "check.json"
    assert main(["check", "-w", "cnn", "-f", "fake", "--mode", "eager", "-k", "3", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "parity against the float64 reference" in out
    assert "pass grad" in out
    [cell] = json.loads(out_json.read_text())["cells"]
    assert cell["passed"] and len(cell["losses"]) == 3


def _events(path) -> list[list[str]]:
    """FAKE_EVENTS lines grouped by process, in order."""
    by_pid: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        pid, what = line.split(" ", 1)
        by_pid.setdefault(pid, []).append(what)
    return list(by_pid.values())


def test_check_forgets_compiled_state_before_each_workload(tmp_path, monkeypatch, capsys):
    # One probe process builds every workload; each must compile as in its own worker.
    monkeypatch.setenv("FAKE_EVENTS", str(tmp_path / "events"))
    assert main(["check", "-w", "cnn,mlp", "-f", "fake", "--mode", "eager", "-k", "2"]) == 0
    assert ["forget", "build cnn", "forget", "build mlp"] in _events(tmp_path / "events")
    from dlbench.runner import reference

    # issue 38: the machine with its ISA flags once, not once per workload's floor
    out = " ".join(capsys.readouterr().out.split())
    assert out.count(" ".join(reference.machine().split())) == 1 and "cnn: floor (fake float32)" in out


def test_a_trial_worker_never_forgets_its_compiled_step(tmp_path, monkeypatch):
    # The parity Program is built after the warm-up: a reset there would recompile the train
    # step inside the timed window.
    monkeypatch.setenv("FAKE_EVENTS", str(tmp_path / "events"))
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", str(tmp_path / "s.sqlite")]) == 0
    # The worker's whole record: the training Program, then the parity one, and no reset.
    assert ["build cnn", "build cnn"] in _events(tmp_path / "events")


def test_check_exits_1_on_a_wrong_framework(tmp_path, capsys, monkeypatch):
    assert main(["check", "-w", "cnn", "-f", "fake", "--mode", "eager", "-k", "2"]) == 0  # reference cached
    monkeypatch.setenv("FAKE_BEHAVIOUR", "wrong")
    assert main(["check", "-w", "cnn", "-f", "fake", "--mode", "eager", "-k", "2"]) == 1
    assert "FAIL grad 1e-02" in capsys.readouterr().out


def test_check_rejects_an_unknown_workload(capsys):
    assert main(["check", "-w", "gan"]) == 2
    assert "workload 'gan' is not one of: all," in capsys.readouterr().err


def test_compare_runs_from_the_store_and_files(tmp_path, capsys, monkeypatch):
    # steps long against a loaded machine's scheduling jitter: the two runs must agree within 50 %
    monkeypatch.setenv("FAKE_STEP_S", "0.01")
    store = str(tmp_path / "r.sqlite")
    args = ["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store, "--repeats", "4"]
    assert main(args) == 0
    assert main(args) == 0
    assert main([*args, "--threads", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", "1", "2", "--store", store, "--fail", "median:50%"]) == 0
    out = capsys.readouterr().out
    assert "NEW/BASE (Hodges-Lehmann)" in out and "PASS median:50%" in out
    # issue 47: the metric as the report names it, and the label's abbreviations explained
    joined = " ".join(out.split())
    assert "metric samples/s" in joined and "samples_per_s" not in joined and "b = batch size, s = seed" in joined
    # threads are policy: refused unless forced, naming the difference
    assert main(["compare", "1", "3", "--store", store]) == 2
    assert "policy differs" in capsys.readouterr().err
    exported = tmp_path / "base.json"
    assert main(["export", "1", "--store", store, "-o", str(exported)]) == 0
    assert main(["compare", str(exported), "3", "--store", store, "--force", "--format", "markdown",
                 "--fail", "median:80%"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| configuration |") and "forced: cnn/fake/eager b16 s0: policy threads" in out


def test_compare_bad_input_is_one_line(tmp_path, capsys):
    store = str(tmp_path / "r.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--store", store]) == 0
    capsys.readouterr()
    assert main(["compare", "1", "1", "--store", store, "--fail", "median:five"]) == 2
    assert "is not METRIC:PCT%" in capsys.readouterr().err
    assert main(["compare", "1", "missing.json", "--store", store]) == 2
    assert "'missing.json': no such file" in capsys.readouterr().err


def test_check_that_could_not_judge_a_cell_is_not_green_and_says_why(tmp_path, capsys, monkeypatch):
    """Issue 38: a plugin whose Keras port read back other numerics showed a bare `unsupported`
    and exited 0 (the reason only in --json). A cell the framework does not declare unsupported
    beforehand but that could not be judged is `NOT JUDGED`, with its reason, and exit 4."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "numerics")
    assert main(["check", "-w", "mlp", "-f", "fake", "--mode", "eager", "-k", "0"]) == 4
    out = " ".join(capsys.readouterr().out.split())
    assert "NOT JUDGED mlp/fake: the fake mlp computes eps 0.001 (spec: 1e-08)" in out
    # a declared unsupported (a mode the framework lacks) stays a plain, green `unsupported` with its reason
    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
    assert main(["check", "-w", "mlp", "-f", "fake", "--mode", "graph", "-k", "0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "unsupported fake: mlp: the fake has no graph mode" in out and "NOT JUDGED" not in out


def test_the_plan_names_an_unsupported_configuration_once_not_once_per_repeat():
    """Issue 47.5: ONNX Runtime's and LiteRT's train trials were listed once per repeat (6 x 2
    lines) before a run."""
    from dlbench.cli.run import not_run_lines
    from dlbench.runner.plan import Sweep, make_plan

    plan = make_plan(Sweep(workloads=("mlp", "cnn"), frameworks=("torch", "onnxruntime"), repeats=3, preset="tiny"))
    lines = not_run_lines(plan)
    assert len(lines) == 2, lines  # one per workload
    assert all(line.startswith(("mlp/onnxruntime/compiled", "cnn/onnxruntime/compiled")) and "#" not in line
               and line.endswith("(3 trials)") and ": unsupported: " in line for line in lines), lines
