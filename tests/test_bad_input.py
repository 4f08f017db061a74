"""Bad input everywhere: generated command lines and suite files. Whatever they hold, the answer
is a run that would start (stubbed here: nothing is executed), a normal exit, or one line on
stderr with exit 2, never a traceback. In-process through main(argv), plus real processes."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dlbench.cli import run as run_command
from dlbench.cli.main import main
from dlbench.cli.suite import KEYS

pytestmark = pytest.mark.usefixtures("fake_env")
# The examples share one temporary directory (the fixtures are per test, not per example).
FIXTURES_OK = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


class WouldRun(Exception):
    """Raised by the stubs instead of importing frameworks or starting workers."""


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    def would_run(*args: Any, **kwargs: Any) -> Any:
        raise WouldRun

    monkeypatch.setattr(run_command, "warm_imports", would_run)
    monkeypatch.setattr(run_command, "execute", would_run)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("not a store")
    return tmp_path


def answer(argv: list[str]) -> tuple[int | None, str]:
    """(exit code or None when it would run, stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code: int | None = main(argv)
        except WouldRun:
            code = None
        except SystemExit as e:  # --help and --version, reached by abbreviation (--he)
            assert e.code == 0, argv
            code = 0
    return code, err.getvalue()


def assert_one_line_or_accepted(argv: list[str], code: int | None, err: str) -> None:
    event("would run" if code is None else f"exit {code}")
    assert "Traceback" not in err, argv
    if code == 2:
        assert err.startswith("dlbench: error: ") and err.count("\n") == 1, (argv, err)
    else:
        assert code in (None, 0), (argv, code, err)


VALUES = st.one_of(
    st.sampled_from(["cnn", "fake", "missing", "torch", "eager", "graph", "compiled", "fp32",
                     "bf16", "train", "infer", "tiny", "cpu", "cold", "warm", "0", "1", "2", "-1",
                     "16", "64", "1000000", "nan", "inf", "-inf", "1e3", "300MB", "8G", "0.5GiB",
                     "latest", "all", "fake,fake", "", ",", " x", "s.sqlite", "notes.txt", "."]),
    st.text(max_size=8),
    st.integers(-(10**20), 10**20).map(str),
)
FLAGS = st.sampled_from([
    "-w", "-f", "-b", "--mode", "--precision", "--scenario", "--devices", "--seed", "--repeats",
    "--preset", "--epochs", "--warmup-epochs", "--dataset-size", "--chunk-steps", "--threads",
    "--compile-cache", "--timeout", "--memory-limit", "--resume", "--retry-failed",
    "--allow-concurrent", "--format", "-o", "--json", "--bogus", "-x", "--"])
# Half the command lines start from a valid sweep, so that acceptance is reached too.
VALID = ["-f", "fake", "--mode", "eager", "--preset", "tiny"]
ARGV = st.tuples(
    st.sampled_from([["run"], ["run", *VALID], ["run", *VALID], ["export"], ["list"], ["env"],
                     ["bogus"], ["--bogus"]]),
    st.lists(st.tuples(FLAGS, st.lists(VALUES, max_size=1)), max_size=5),
    st.sampled_from([[], ["--store", "s.sqlite"], ["--store", "notes.txt"], ["--store", "no/dir.sqlite"]]),
).map(lambda t: [*t[0], *(x for flag, vals in t[1] for x in (flag, *vals)), *t[2]])


@FIXTURES_OK
@given(argv=ARGV)
def test_any_command_line_is_accepted_or_one_line_exit_2(sandbox, argv):
    code, err = answer(argv)
    assert_one_line_or_accepted(argv, code, err)


def toml_value(v: Any) -> str:
    """A tiny TOML writer for the generated values (tomllib reads only)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v).replace("\x7f", "\\u007f")
    if isinstance(v, list):
        return "[" + ", ".join(map(toml_value, v)) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=10)
SCALARS = st.one_of(
    st.sampled_from(["cnn", "fake", "missing", "eager", "compiled", "graph", "fp32", "train",
                     "tiny", "cold", "300MB", "8G", "1GiB", "eager,compiled", "16,32", ""]),
    TEXT, st.integers(-(2**70), 2**70), st.integers(0, 70), st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
)
TOML_VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(TEXT, inner, max_size=2)), max_leaves=6)
SUITES = st.dictionaries(st.one_of(st.sampled_from(list(KEYS)), TEXT), TOML_VALUES, max_size=5)


@FIXTURES_OK
@given(table=SUITES)
def test_any_suite_file_is_accepted_or_one_line_naming_the_file(sandbox, table):
    path = sandbox / "suite.toml"
    path.write_text("\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items()) + "\n")
    code, err = answer(["run", str(path), "--store", "s.sqlite"])
    assert_one_line_or_accepted([table], code, err)
    if code == 2:
        assert str(path) in err, err


@FIXTURES_OK
@given(data=st.binary(max_size=64))
def test_any_bytes_as_a_suite_file(sandbox, data):
    path = sandbox / "suite.toml"
    path.write_bytes(data)
    code, err = answer(["run", str(path), "--store", "s.sqlite"])
    assert_one_line_or_accepted([data], code, err)


@pytest.mark.parametrize("argv,files,expected", [
    (["run", "suite.toml"], {"suite.toml": 'mode = "fast"\n'},
     "dlbench: error: suite.toml: key 'mode': 'fast' is not one of: eager, graph, compiled (or a list of them)"),
    (["run", "--memory-limit", "8G"], {},
     "dlbench: error: dlbench run: argument --memory-limit: size '8G' is not a number of bytes or a"
     " number with one of the units B, kB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. 8GiB)"),
    (["run", "--resume"], {}, "dlbench: error: store dlbench.sqlite does not exist;"
     " run `dlbench run --store dlbench.sqlite` first"),
    (["export", "latest", "-o", "no/such/dir/x.json"], {"dlbench.sqlite": None},
     "dlbench: error: cannot write 'no/such/dir/x.json': directory 'no/such/dir' does not exist"),
])
def test_real_processes_answer_in_one_line(tmp_path, argv, files, expected):
    for name, text in files.items():
        if text is None:
            subprocess.run([sys.executable, "-m", "dlbench.cli.main", "run", "-f", "fake", "--mode",
                            "graph", "--store", name], cwd=tmp_path, capture_output=True, check=True)
        else:
            (tmp_path / name).write_text(text)
    out = subprocess.run([sys.executable, "-m", "dlbench.cli.main", *argv], capture_output=True,
                         text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "80"})
    assert out.returncode == 2, out.stderr
    assert out.stderr == expected + "\n"
