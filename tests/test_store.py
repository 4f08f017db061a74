"""The embedded store: round trip, refusal of foreign/corrupt/newer files, the run lock."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlbench.results.records import TrialResult
from dlbench.results.store import STORE_SCHEMA_VERSION, Store, StoreError, machine_lock
from dlbench.spec import TrialSpec, WorkloadSpec, trial_from_dict

FIXTURES = Path(__file__).parent / "fixtures"


def _trial(repeat: int = 0) -> TrialSpec:
    return TrialSpec(workload=WorkloadSpec(), framework="torch", repeat=repeat)


def test_round_trip(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    rid = store.create_run("dlbench run", {"python": "3.11"}, allow_concurrent=False)
    tid = store.add_trial(rid, 0, _trial())
    result = TrialResult(status="ok", metrics={"samples_per_s": 123.5, "vram_peak_bytes": None,
                                               "rss_peak_bytes": 2.0**30},
                         series={"loss": [(0.0, 2.3), (1.0, 2.2)]}, notes={"vram_peak_bytes": "no GPU"},
                         warnings=["w"], events=[{"event": "start"}], policy_effective={"cores": [0]})
    store.finish_trial(tid, result)
    store.close()
    again = Store(tmp_path / "s.sqlite")
    [row] = again.trials(again.resolve_runs("latest")[0])
    assert row.status == "ok"
    assert row.metrics == {"samples_per_s": 123.5, "vram_peak_bytes": None, "rss_peak_bytes": 2.0**30}
    assert again.metric_units(row.id) == {"samples_per_s": "1/s", "vram_peak_bytes": "B", "rss_peak_bytes": "B"}
    assert again.series(row.id) == {"loss": [(0.0, 2.3), (1.0, 2.2)]}
    assert row.data["notes"] == {"vram_peak_bytes": "no GPU"}
    assert row.spec["framework"] == "torch"
    assert again.run(rid)["environment"] == {"python": "3.11"}
    assert again.events(row.id) == [{"event": "start"}]


def test_config_key_ignores_the_repeat_index():
    assert _trial(0).config_key() == _trial(1).config_key()
    other = TrialSpec(workload=WorkloadSpec(batch_size=64), framework="torch")
    assert other.config_key() != _trial().config_key()


def test_foreign_file_is_refused_and_untouched(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("my precious notes")
    with pytest.raises(StoreError, match="not a dlbench store"):
        Store(p)
    assert p.read_text() == "my precious notes"


def test_foreign_sqlite_is_refused(tmp_path):
    p = tmp_path / "other.sqlite"
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE x (a)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a dlbench store"):
        Store(p)


def test_newer_schema_is_refused(tmp_path):
    p = tmp_path / "s.sqlite"
    Store(p).close()
    db = sqlite3.connect(p)
    db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(STORE_SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="newer dlbench"):
        Store(p)


@pytest.mark.parametrize("selector,msg", [("7", "not in the store"), ("x1", "not a run id")])
def test_bad_run_selector(tmp_path, selector, msg):
    store = Store(tmp_path / "s.sqlite")
    store.create_run("x", {}, False)
    with pytest.raises(StoreError, match=msg):
        store.resolve_runs(selector)


def test_second_run_waits_for_the_lock(tmp_path):
    """A second process blocks on the machine-wide lock until the first releases it."""
    code = ("import time; from dlbench.results.store import machine_lock\n"
            "with machine_lock(False):\n    print('locked', flush=True); time.sleep(2)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    waited = []
    t0 = time.monotonic()
    with machine_lock(False, on_wait=lambda: waited.append(True)):
        elapsed = time.monotonic() - t0
    holder.wait()
    assert waited and elapsed > 1.0
    t0 = time.monotonic()
    with machine_lock(True):
        pass
    assert time.monotonic() - t0 < 0.5


def test_store_of_the_first_release_is_migrated(tmp_path: Path) -> None:
    """A frozen store written by schema version 1 opens, keeps its data and gains the parity
    column; the file is upgraded in place."""
    path = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "store-v1.sqlite", path)
    store = Store(path)
    (run_id,) = store.resolve_runs("latest")
    (row,) = store.trials(run_id)
    assert row.status == "ok"
    assert row.metrics["samples_per_s"] == 1234.5
    assert row.data["parity"] is None
    assert store.series(row.id)["loss"] == [(0.0, 2.3), (1.0, 2.2)]
    trial = trial_from_dict(row.spec)  # an old spec without the newer fields still loads
    assert trial.workload.model_size == "default"
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(STORE_SCHEMA_VERSION)
    db.close()


def test_store_of_schema_2_is_migrated_and_its_unfinished_run_resumes(tmp_path, monkeypatch, capsys, fake_env):
    """A frozen schema-2 store (before pids and attempts were recorded) whose parent died: run 2
    has one trial ok, one `running` (pid 4244, creation time unknown: never killed by pid alone)
    and one pending. It migrates, and `--resume` finishes exactly those two."""
    from dlbench.cli.main import main

    path = tmp_path / "old.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", path)
    assert main(["run", "--resume", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "resuming run 2: 2 trial(s) to run again (1 running, 1 pending)" in out
    assert "killed" not in out
    with Store(path) as store:
        assert [t.status for t in store.trials(1)] == ["ok"]
        assert store.metrics(store.trials(1)[0].id)["samples_per_s"] == 1000.0
        trials = store.trials(2)
        assert [t.status for t in trials] == ["ok", "ok", "ok"]
        assert trials[0].metrics["samples_per_s"] == 990.0  # finished before: not run again
        assert trials[1].data["attempts"][0]["pid"] == 4244
        assert store.run(2)["status"] == "ok"
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(STORE_SCHEMA_VERSION)
    db.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_foreign_sqlite_file_is_never_written(tmp_path):
    """The check reads only: switching the journal to WAL before it would rewrite the header."""
    p = tmp_path / "other.sqlite"
    db = sqlite3.connect(p)
    db.execute("CREATE TABLE x (a)")
    db.commit()
    db.close()
    before = _digest(p)
    with pytest.raises(StoreError, match="not a dlbench store"):
        Store(p)
    assert _digest(p) == before


@pytest.mark.parametrize("damage", ["pages", "truncated"])
def test_a_corrupted_store_is_one_line_and_left_as_it_is(tmp_path, capsys, damage):
    from dlbench.cli.main import main

    p = tmp_path / "s.sqlite"
    with Store(p) as store:
        for i in range(20):
            rid = store.create_run("dlbench run", {"i": i, "pad": "x" * 2000}, False)
            tid = store.add_trial(rid, 0, _trial(i))
            store.finish_trial(tid, TrialResult(status="ok", series={"loss": [(float(j), 1.0) for j in range(200)]}))
    data = p.read_bytes()
    p.write_bytes(data[:4096] + bytes(range(256)) * ((len(data) - 4096) // 256) if damage == "pages" else data[:100])
    before = _digest(p)
    for argv in (["export", "all", "--store", str(p)], ["run", "--resume", "--store", str(p)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("dlbench: error: ") and err.count("\n") == 1 and "Traceback" not in err
        assert _digest(p) == before


WRITER = """
import sys, time
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.spec import TrialSpec, WorkloadSpec
path, n, name, start = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
time.sleep(max(start - time.monotonic(), 0))  # CLOCK_MONOTONIC is system-wide: start together
store = Store(path)
for i in range(n):
    rid = store.create_run(name, {}, True)
    tid = store.add_trial(rid, 0, TrialSpec(workload=WorkloadSpec(seed=i), framework="torch"))
    store.mark_running(tid)
    store.set_trial_process(tid, 1, 0.0)
    store.finish_trial(tid, TrialResult(status="ok", metrics={"x_s": float(i)}, series={"loss": [(0.0, 1.0)] * 10}))
    store.finish_run(rid, "ok")
"""


def test_concurrent_writers_neither_corrupt_nor_lose_writes(tmp_path):
    """Four processes open one (version-1, so they also race to migrate it) store at the same
    moment and each writes 25 runs; every write is there and the file is intact."""
    path = tmp_path / "s.sqlite"
    shutil.copy(FIXTURES / "store-v1.sqlite", path)
    start = time.monotonic() + 1.5
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), "25", f"w{k}", str(start)],
                                stderr=subprocess.PIPE, text=True) for k in range(4)]
    for w in writers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    counts = dict(db.execute("SELECT command, count(*) FROM runs WHERE status='ok' GROUP BY command"))
    assert {k: counts.get(k) for k in ("w0", "w1", "w2", "w3")} == dict.fromkeys(("w0", "w1", "w2", "w3"), 25)
    assert db.execute("SELECT count(*) FROM metrics WHERE name='x_s'").fetchone()[0] == 100
    assert db.execute("SELECT count(*) FROM series").fetchone()[0] == 1000 + 2  # + the fixture's
    db.close()


def test_reads_and_exports_never_wait_for_the_run_lock_or_a_writer(tmp_path, capsys):
    """While another process holds the machine-wide run lock and an open write transaction on
    the store, an export still reads every committed trial."""
    from dlbench.cli.main import main

    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        rid = store.create_run("dlbench run", {}, False)
        store.finish_trial(store.add_trial(rid, 0, _trial()), TrialResult(status="ok", metrics={"x_s": 1.0}))
    code = ("import sqlite3, sys, time\nfrom dlbench.results.store import machine_lock\n"
            "with machine_lock(False):\n    db = sqlite3.connect(sys.argv[1])\n"
            "    db.execute('BEGIN IMMEDIATE')\n    db.execute('UPDATE runs SET command=\"changing\"')\n"
            "    print('holding', flush=True)\n    time.sleep(30)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        assert main(["export", "latest", "--store", str(path)]) == 0
        exported = json.loads(capsys.readouterr().out)
        assert exported["runs"][0]["command"] == "dlbench run"  # the committed state
        assert exported["runs"][0]["trials"][0]["metrics"]["x_s"]["value"] == 1.0
        assert holder.poll() is None  # it still holds both
    finally:
        holder.kill()
        holder.wait()


def test_the_waiting_message_names_the_holder_and_allow_concurrent(tmp_path, capsys):
    """Issue 38: the wait named neither the holder nor how not to wait."""
    from dlbench.cli.run import _waiting
    from dlbench.report.terminal import make_console

    code = ("import time; from dlbench.results.store import machine_lock\n"
            "with machine_lock(False):\n    print('locked', flush=True); time.sleep(30)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, "holder-marker"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        _waiting(make_console())
        out = " ".join(capsys.readouterr().out.split())
        assert f"pid {holder.pid} (" in out and "python" in out and ", since " in out
        assert "--allow-concurrent runs now" in out
    finally:
        holder.kill()
        holder.wait()
