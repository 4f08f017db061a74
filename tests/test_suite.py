"""Suite files: the example validates, the command line overrides, a suite drives a real run,
and each bad file is one line naming the file, the key, the bad value and what is allowed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from dlbench.cli import suite
from dlbench.cli.main import build_parser, main
from dlbench.cli.run import plan_from_args

pytestmark = pytest.mark.usefixtures("fake_env")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "suite.toml"


def test_the_example_suite_is_valid_and_the_command_line_overrides_it():
    options = suite.load(str(EXAMPLE))
    assert options["mode"] == ("eager", "compiled") and options["memory_limit"] == 12 * 2**30
    # the fake framework instead of the real ones (nothing is imported), one seed fewer repeat
    args = build_parser().parse_args(["run", str(EXAMPLE), "-f", "fake", "--repeats", "2"])
    plan = plan_from_args(args)
    assert len(plan.trials) == 1 * 2 * 2 * 2  # workload x modes x batch sizes x repeats
    spec = plan.trials[0].spec
    assert spec.framework == "fake" and spec.timeout_s == 1200.0
    assert spec.memory_limit_bytes == 12 * 2**30 and spec.epochs == 2
    assert {t.spec.workload.batch_size for t in plan.trials} == {64, 128}


def test_a_suite_drives_a_real_run(tmp_path, capsys):
    path = tmp_path / "tiny.toml"
    path.write_text('framework = "fake"\nmode = ["eager"]\npreset = "tiny"\ndataset-size = 64\n'
                    'batch-size = 16\nmemory-limit = "2GiB"\ntimeout = 60\nrepeats = 1\n')
    store = tmp_path / "s.sqlite"
    assert main(["run", str(path), "--store", str(store)]) == 0
    assert "1 trial(s) to run" in capsys.readouterr().out
    db = sqlite3.connect(store)
    (spec, status), = db.execute("SELECT spec, status FROM trials").fetchall()
    assert status == "ok"
    assert json.loads(spec)["memory_limit_bytes"] == 2 * 2**30
    assert db.execute("SELECT command FROM runs").fetchone()[0] == f"dlbench run {path} --store {store}"
    db.close()


@pytest.mark.parametrize("content,msg", [
    ('mode = "fast"', "key 'mode': 'fast' is not one of: eager, graph, compiled (or a list of them)"),
    ('mode = ["eager", 3]', "key 'mode': 3 is not one of: eager, graph, compiled (or a list of them)"),
    ("mode = []", "key 'mode': [] is not one of: eager, graph, compiled (or a list of them)"),
    ("batch-size = [64, 0]", "key 'batch-size': 0 is not an integer >= 1 (or a list of them)"),
    ('batch-size = "64,x"', "key 'batch-size': 'x' is not an integer >= 1 (or a list of them)"),
    ("batch_size = 64", "key 'batch_size' is not one of: workload, framework, mode, batch-size,"),
    ("batch_size = 64", "(did you mean 'batch-size'?)"),
    ('repeats = "3"', "key 'repeats': '3' is not an integer from 1 to 1000"),
    ("repeats = 1001", "key 'repeats': 1001 is not an integer from 1 to 1000"),
    ("threads = 9999", "key 'threads': 9999 is not an integer from 1 to"),
    ("timeout = -1", "key 'timeout': -1 is not a number of seconds > 0"),
    ("timeout = nan", "key 'timeout': nan is not a number of seconds > 0"),
    ('memory-limit = "8G"', "key 'memory-limit': '8G' is not a size such as 300MB or 8GiB"),
    ('allow-concurrent = "yes"', "key 'allow-concurrent': 'yes' is not true or false"),
    ('precision = "fp8"', "key 'precision': 'fp8' is not one of: fp32, tf32, bf16, fp16"),
    ('preset = "huge"', "key 'preset': 'huge' is not one of: tiny, cpu, gpu"),
    ("devices = 0", "key 'devices': 0 is not "),
    ('scaling = "diagonal"', "key 'scaling': 'diagonal' is not one of: weak, strong"),
    ("target-accuracy = 1.5", "key 'target-accuracy': 1.5 is not a number in (0, 1]"),
    ("target-perplexity = 0.5", "key 'target-perplexity': 0.5 is not a finite number > 1 (a perplexity)"),
    ('target-perplexity = "4"', "key 'target-perplexity': '4' is not a finite number > 1 (a perplexity)"),
    ('data = "pipeline,host"', "key 'data': 'host' is not one of: pipeline, device (or a list of them)"),
    ("loader-workers = -1", "key 'loader-workers': -1 is not"),
    ('augment = "mixup"', "key 'augment': 'mixup' is not one of: none, crop_flip"),
    ('scenario = "converge"', "the converge scenario needs a target: --target-accuracy"),
    ('[run]\nmode = "eager"', "key 'run' is not one of:"),
    ("mode = [", "not valid TOML: "),
    ('framework = "missing"', "framework 'missing' cannot run here: missing is not installed"),
    ("batch-size = 128\ndataset-size = 64", "dataset size 64 is smaller than batch size 128"),
])
def test_a_bad_suite_is_one_line_naming_file_key_and_value(tmp_path, capsys, content, msg):
    path = tmp_path / "suite.toml"
    path.write_text(content + "\n")
    assert main(["run", str(path), "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dlbench: error: {path}: ") and err.count("\n") == 1
    assert msg in err


@pytest.mark.parametrize("name,data,msg", [
    ("missing.toml", None, "suite file {p} does not exist"),
    ("dir", "dir", "suite file {p} cannot be read: Is a directory"),
    ("latin1.toml", b'mode = "\xe9"\n', "{p}: not UTF-8 text (byte 8)"),
])
def test_an_unreadable_suite_file(tmp_path, capsys, name, data, msg):
    path = tmp_path / name
    if data == "dir":
        path.mkdir()
    elif data is not None:
        path.write_bytes(data)
    assert main(["run", str(path), "--store", str(tmp_path / "s.sqlite")]) == 2
    assert capsys.readouterr().err == f"dlbench: error: {msg.format(p=path)}\n"


def test_the_ci_example_suite_and_workflow_agree():
    """examples/ci (docs/ci.md): the suite is valid with the fake framework in place of the
    real ones, and the workflow runs that file and gates with compare's exit codes."""
    import yaml

    ci = EXAMPLE.parent / "ci"
    args = build_parser().parse_args(["run", str(ci / "suite.toml"), "-f", "fake"])
    plan = plan_from_args(args)
    assert len(plan.trials) == 2 * 6 and plan.trials[0].spec.workload.name in ("mlp", "cnn")
    workflow = yaml.safe_load((ci / "dlbench-pr.yml").read_text())
    steps = " ".join(str(step.get("run", "")) for job in workflow["jobs"].values() for step in job["steps"])
    assert "examples/ci/suite.toml" in steps and "dlbench compare 1 2" in steps and '"$code" = 4' in steps
    assert "--format github-action-benchmark" in steps
