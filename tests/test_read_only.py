"""Read-only commands (report, export, compare, list, env) never create or modify a store or any
file they are pointed at, and read stores where they cannot write: a directory without write
permission, a read-only mount, an older schema (migrated in a copy in memory, not in the file)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import STORE_SCHEMA_VERSION, Store, StoreError
from dlbench.spec import TrialSpec, WorkloadSpec

FIXTURES = Path(__file__).parent / "fixtures"
KINDS = ("current", "empty", "v1", "v2")


def _trial() -> TrialSpec:
    return TrialSpec(workload=WorkloadSpec(), framework="fake", repeat=0)


def _write_store(path: Path) -> None:
    """A store of this version with one ok trial, written and closed (WAL mode, no -wal left)."""
    with Store(path) as store:
        rid = store.create_run("dlbench run", {"python": "3.11"}, False)
        store.finish_trial(store.add_trial(rid, 0, _trial()),
                           TrialResult(status="ok", metrics={"samples_per_s": 10.0, "x_s": 1.0}))


def _make(directory: Path, kind: str) -> Path:
    path = directory / f"{kind}.sqlite"
    if kind == "current":
        _write_store(path)
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        shutil.copy(FIXTURES / f"store-{kind}.sqlite", path)
    return path


def snapshot(directory: Path) -> dict[str, str]:
    """Every file in the directory and its sha256: new, removed and changed files all show."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_a_read_only_open_reads_every_kind_and_writes_nothing(tmp_path):
    """The current store, a zero-byte file, and the frozen stores of schemas 1 and 2: read,
    the older ones migrated in memory; the connection refuses writes; no byte or file changes."""
    paths = {kind: _make(tmp_path, kind) for kind in KINDS}
    before = snapshot(tmp_path)
    for kind, path in paths.items():
        with Store(path, readonly=True) as store:
            runs = store.resolve_runs("all")
            assert len(runs) == {"current": 1, "empty": 0, "v1": 1, "v2": 2}[kind]
            if kind == "v1":
                (row,) = store.trials(runs[0])
                assert row.metrics["samples_per_s"] == 1234.5 and row.data["parity"] is None
            if kind == "v2":
                assert store.trials(2)[1].data["attempts"] is None  # a column schema 3 added
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                store.create_run("x", {}, False)
    assert snapshot(tmp_path) == before
    # the writing open still migrates in place (the path `dlbench run` takes)
    with Store(paths["v1"]):
        pass
    db = sqlite3.connect(paths["v1"])
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(STORE_SCHEMA_VERSION)
    db.close()


READ_COMMANDS = {
    "report": ["report", "all"],
    "report-html": ["report", "latest", "--html", "{out}/r.html"],
    "export-json": ["export", "all"],
    "export-csv": ["export", "all", "--format", "csv"],
    "compare": ["compare", "latest", "latest"],
    "list": ["list"],
    "env": ["env", "--json"],
}


@pytest.mark.usefixtures("fake_env")
@pytest.mark.parametrize("kind", KINDS)
def test_read_commands_change_no_file_they_are_pointed_at(tmp_path, capsys, kind):
    """sha256 of every file in the store's directory before and after each read command, with
    the store in each state; an empty store answers in one line (no runs), the others succeed
    (compare: one line when a side has no ok trials)."""
    stores = tmp_path / "stores"
    stores.mkdir()
    path = _make(stores, kind)
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(stores)
    for name, argv in READ_COMMANDS.items():
        if name == "report-html" and kind == "empty":
            continue
        code = main([*(a.format(out=out) for a in argv), "--store", str(path)])
        err = capsys.readouterr().err
        # compare of a run with itself: same, or undecided (4) with few repeats
        assert code in (0, 2) or name == "compare" and code == 4, (name, code, err)
        assert code in (0, 4) or (err.startswith("dlbench: error: ") and err.count("\n") == 1), (name, err)
        assert code == 0 or kind == "empty" or name == "compare", (name, err)
        assert snapshot(stores) == before, name


@pytest.mark.usefixtures("fake_env")
@pytest.mark.parametrize("argv", [["report"], ["export", "all"], ["compare", "1", "1"], ["list"], ["env", "--json"]])
def test_a_missing_store_is_never_created(tmp_path, capsys, argv):
    missing = tmp_path / "missing.sqlite"
    code = main([*argv, "--store", str(missing)])
    err = capsys.readouterr().err
    if argv[0] in ("list", "env"):  # they take --store and use no store
        assert code == 0
    else:
        assert code == 2 and err.count("\n") == 1 and "does not exist" in err
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_store_object_refuses_a_missing_file(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "none.sqlite", readonly=True)
    assert list(tmp_path.iterdir()) == []


# --- stores where nothing can be written -------------------------------------------------

MOUNT = ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"']


@pytest.fixture(params=["chmod-0555", "read-only-mount"])
def unwritable(request, tmp_path) -> Iterator[tuple[Path, list[str]]]:
    """(a directory, a command prefix under which nothing in it can be written). chmod 0555
    does not stop root; a read-only bind mount in a private mount namespace stops everyone."""
    directory = tmp_path / "archive"
    directory.mkdir()
    if request.param == "chmod-0555":
        if os.geteuid() == 0:
            pytest.skip("root writes through permission bits (the read-only mount case runs instead)")
        prefix: list[str] = []
    else:
        prefix = [*MOUNT, str(directory)]
        if shutil.which("unshare") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode:
            pytest.skip("no private mount namespace here (unshare -rm)")
    yield directory, prefix
    directory.chmod(0o755)


def _lock_down(directory: Path, prefix: list[str]) -> None:
    """chmod now (the store is in place); either way, prove that a write there fails."""
    if not prefix:
        directory.chmod(0o555)
    probe = subprocess.run([*prefix, sys.executable, "-c", f"open({str(directory / 'probe')!r}, 'w')"],
                           capture_output=True, text=True)
    assert probe.returncode != 0, "the directory is writable: the test would prove nothing"


def _dlbench(prefix: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "dlbench.cli.main", *argv],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})


def test_a_store_in_an_unwritable_place_is_read(unwritable):
    """An archived store (closed, no -wal file): report and export read it; nothing is written."""
    directory, prefix = unwritable
    path = directory / "s.sqlite"
    _write_store(path)
    _lock_down(directory, prefix)
    before = snapshot(directory)
    csv = _dlbench(prefix, "export", "all", "--format", "csv", "--store", str(path))
    assert csv.returncode == 0, csv.stderr
    assert "samples_per_s" in csv.stdout
    report = _dlbench(prefix, "report", "all", "--store", str(path))
    assert report.returncode == 0, report.stderr
    assert "fake" in report.stdout
    assert snapshot(directory) == before


HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1])
db.execute("PRAGMA wal_autocheckpoint=0")  # the commit stays in the -wal file
with db:
    db.execute("UPDATE runs SET command='committed in the log'")
print("holding", flush=True)
time.sleep(60)
"""


def test_a_store_being_written_is_read_with_its_log(unwritable):
    """A store a writer has open (its last commit only in the -wal file): a reader that cannot
    write there still sees that commit, through the -wal and a private copy of the -shm index."""
    directory, prefix = unwritable
    path = directory / "s.sqlite"
    _write_store(path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        _lock_down(directory, prefix)
        before = snapshot(directory)
        out = _dlbench(prefix, "export", "latest", "--store", str(path))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["runs"][0]["command"] == "committed in the log"
        assert snapshot(directory) == before
    finally:
        holder.kill()
        holder.wait()


def test_a_log_that_cannot_be_read_is_one_line_saying_what_to_do(unwritable):
    """A -wal file with commits but no -shm (copied without it) where none can be created:
    one line naming the log and what to do, the files as they were."""
    directory, prefix = unwritable
    source = directory.parent / "live.sqlite"
    _write_store(source)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(source)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        shutil.copy(source, directory / "s.sqlite")
        shutil.copy(f"{source}-wal", directory / "s.sqlite-wal")
    finally:
        holder.kill()
        holder.wait()
    _lock_down(directory, prefix)
    before = snapshot(directory)
    out = _dlbench(prefix, "export", "all", "--store", str(directory / "s.sqlite"))
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "its write-ahead log" in out.stderr and "copy the store" in out.stderr
    assert snapshot(directory) == before
