"""The embedded store: round trip, refusal of foreign/corrupt/newer files, the run lock."""

from __future__ import annotations

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
