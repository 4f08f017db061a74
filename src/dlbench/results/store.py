"""The embedded results store: SQLite in WAL mode, one transaction per finished trial.

Metrics are in long form (trial, name, value, unit) and raw series as (trial, series, t, value),
so a new metric needs no schema change. Spec, policy and environment are JSON.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.results.records import UNITS, TrialResult
from dlbench.spec import TrialSpec, to_dict

STORE_SCHEMA_VERSION = 2

# Migrations from version N to N+1, applied in one transaction when an older store is opened.
# The first release wrote version 1; tests/fixtures/store-v1.sqlite is a frozen store of it.
MIGRATIONS: dict[int, str] = {
    # 2: each trial's parity verdict against the float64 reference (DESIGN §2.10).
    1: "ALTER TABLE trials ADD COLUMN parity TEXT;",
}

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    finished_at REAL,
    command TEXT NOT NULL,
    status TEXT NOT NULL,
    environment TEXT NOT NULL,
    allow_concurrent INTEGER NOT NULL DEFAULT 0,
    order_seed INTEGER
);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    config_key TEXT NOT NULL,
    workload TEXT NOT NULL,
    framework TEXT NOT NULL,
    mode TEXT NOT NULL,
    repeat INTEGER NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT,
    policy TEXT,
    framework_info TEXT,
    numerics TEXT,
    notes TEXT,
    warnings TEXT,
    events TEXT,
    parity TEXT,
    pid INTEGER,
    started_at REAL,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS metrics (
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    name TEXT NOT NULL,
    value REAL,
    unit TEXT NOT NULL,
    PRIMARY KEY (trial_id, name)
);
CREATE TABLE IF NOT EXISTS series (
    trial_id INTEGER NOT NULL REFERENCES trials(id),
    series TEXT NOT NULL,
    t REAL NOT NULL,
    value REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS series_by_trial ON series(trial_id, series);
CREATE INDEX IF NOT EXISTS trials_by_run ON trials(run_id, seq);
"""


class StoreError(Exception):
    """The store cannot be used; the message is one line saying why."""


@dataclass(frozen=True)
class TrialRow:
    id: int
    run_id: int
    spec: dict[str, Any]
    status: str
    error: str | None
    metrics: dict[str, float | None]
    data: dict[str, Any]  # policy, framework_info, numerics, notes, warnings, parity


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db = _open(self.path)

    def close(self) -> None:
        self._db.close()

    # --- writing -------------------------------------------------------------------------
    def create_run(self, command: str, environment: dict[str, Any], allow_concurrent: bool,
                   order_seed: int | None = None) -> int:
        with self._db:
            cur = self._db.execute(
                "INSERT INTO runs (created_at, command, status, environment, allow_concurrent,"
                " order_seed) VALUES (?, ?, 'running', ?, ?, ?)",
                (time.time(), command, json.dumps(environment), int(allow_concurrent), order_seed),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_trial(self, run_id: int, seq: int, trial: TrialSpec, status: str = "pending") -> int:
        with self._db:
            cur = self._db.execute(
                "INSERT INTO trials (run_id, seq, config_key, workload, framework, mode, repeat,"
                " spec, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, seq, trial.config_key(), trial.workload.name, trial.framework,
                 trial.policy.mode, trial.repeat, json.dumps(to_dict(trial)), status),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def mark_running(self, trial_id: int) -> None:
        with self._db:
            self._db.execute("UPDATE trials SET status='running', started_at=? WHERE id=?",
                             (time.time(), trial_id))

    def finish_trial(self, trial_id: int, result: TrialResult) -> None:
        """One transaction: the trial's status, metrics and raw series land together or not."""
        with self._db:
            self._db.execute(
                "UPDATE trials SET status=?, error=?, policy=?, framework_info=?, numerics=?,"
                " notes=?, warnings=?, events=?, parity=?, pid=?, finished_at=? WHERE id=?",
                (result.status, result.error, json.dumps(result.policy_effective),
                 json.dumps(result.framework_info), json.dumps(result.numerics),
                 json.dumps(result.notes), json.dumps(result.warnings),
                 json.dumps(result.events), json.dumps(result.parity) if result.parity else None,
                 result.pid, time.time(), trial_id),
            )
            self._db.executemany(
                "INSERT OR REPLACE INTO metrics (trial_id, name, value, unit) VALUES (?, ?, ?, ?)",
                [(trial_id, k, v, UNITS.get(k, _unit_from_name(k)))
                 for k, v in result.metrics.items()],
            )
            self._db.executemany(
                "INSERT INTO series (trial_id, series, t, value) VALUES (?, ?, ?, ?)",
                [(trial_id, name, t, v) for name, pts in result.series.items() for t, v in pts],
            )

    def finish_run(self, run_id: int, status: str) -> None:
        with self._db:
            self._db.execute("UPDATE runs SET status=?, finished_at=? WHERE id=?",
                             (status, time.time(), run_id))

    # --- reading -------------------------------------------------------------------------
    def resolve_runs(self, selector: str) -> list[int]:
        """A run id, `latest` or `all` -> run ids; StoreError naming the selector otherwise."""
        if selector == "all":
            return [r[0] for r in self._db.execute("SELECT id FROM runs ORDER BY id")]
        if selector == "latest":
            row = self._db.execute("SELECT max(id) FROM runs").fetchone()
            if row[0] is None:
                raise StoreError(f"the store {self.path} has no runs yet")
            return [row[0]]
        if not selector.isdigit():
            raise StoreError(f"run {selector!r} is not a run id, 'latest' or 'all'")
        if self._db.execute("SELECT 1 FROM runs WHERE id=?", (int(selector),)).fetchone() is None:
            raise StoreError(f"run {selector} is not in the store {self.path}")
        return [int(selector)]

    def run(self, run_id: int) -> dict[str, Any]:
        row = self._db.execute(
            "SELECT id, created_at, finished_at, command, status, environment, allow_concurrent,"
            " order_seed FROM runs WHERE id=?", (run_id,)).fetchone()
        keys = ("id", "created_at", "finished_at", "command", "status", "environment",
                "allow_concurrent", "order_seed")
        run = dict(zip(keys, row, strict=True))
        run["environment"] = json.loads(run["environment"])
        run["allow_concurrent"] = bool(run["allow_concurrent"])
        return run

    def trials(self, run_id: int) -> list[TrialRow]:
        rows = self._db.execute(
            "SELECT id, spec, status, error, policy, framework_info, numerics, notes, warnings,"
            " parity FROM trials WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
        out = []
        for tid, spec, status, error, *blobs in rows:
            names = ("policy", "framework_info", "numerics", "notes", "warnings", "parity")
            data = {k: json.loads(b) if b else None for k, b in zip(names, blobs, strict=True)}
            out.append(TrialRow(tid, run_id, json.loads(spec), status, error,
                                self.metrics(tid), data))
        return out

    def metrics(self, trial_id: int) -> dict[str, float | None]:
        return dict(self._db.execute(
            "SELECT name, value FROM metrics WHERE trial_id=? ORDER BY name", (trial_id,)))

    def metric_units(self, trial_id: int) -> dict[str, str]:
        return dict(self._db.execute(
            "SELECT name, unit FROM metrics WHERE trial_id=?", (trial_id,)))

    def series(self, trial_id: int) -> dict[str, list[tuple[float, float]]]:
        out: dict[str, list[tuple[float, float]]] = {}
        for name, t, v in self._db.execute(
                "SELECT series, t, value FROM series WHERE trial_id=? ORDER BY rowid", (trial_id,)):
            out.setdefault(name, []).append((t, v))
        return out

    def events(self, trial_id: int) -> list[dict[str, Any]]:
        row = self._db.execute("SELECT events FROM trials WHERE id=?", (trial_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else []

    def durations_by_config(self) -> dict[str, float]:
        """Median wall time of finished trials per configuration key: for run-time estimates."""
        rows = self._db.execute(
            "SELECT config_key, finished_at - started_at FROM trials WHERE status='ok'"
            " AND started_at IS NOT NULL AND finished_at IS NOT NULL").fetchall()
        by_key: dict[str, list[float]] = {}
        for key, d in rows:
            by_key.setdefault(key, []).append(d)
        return {k: sorted(v)[len(v) // 2] for k, v in by_key.items()}


def _unit_from_name(name: str) -> str:
    for suffix, unit in (("_bytes", "B"), ("_s", "s"), ("_w", "W"), ("_j", "J")):
        if name.endswith(suffix):
            return unit
    return "1"


def _open(path: Path) -> sqlite3.Connection:
    """Open or create a store; refuse a foreign or corrupt file and a newer schema, clearly,
    without ever writing to them."""
    if path.is_dir():
        raise StoreError(f"store path {path} is a directory; give a file path such as {path}/dlbench.sqlite")
    if not path.parent.exists():
        raise StoreError(f"store path {path}: directory {path.parent} does not exist")
    existed = path.exists() and path.stat().st_size > 0
    if existed:
        with open(path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                raise StoreError(f"{path} is not a dlbench store (not an SQLite file); refusing to touch it")
    try:
        db = sqlite3.connect(path, timeout=60)
        db.execute("PRAGMA journal_mode=WAL")
        version = _schema_version(db) if existed else None
        if existed and version is None:
            db.close()
            raise StoreError(f"{path} is an SQLite file but not a dlbench store; refusing to touch it")
        if version is not None and version > STORE_SCHEMA_VERSION:
            db.close()
            raise StoreError(
                f"{path} was written by a newer dlbench (store schema {version}, this one reads"
                f" up to {STORE_SCHEMA_VERSION}); upgrade dlbench")
        if version is not None and version < STORE_SCHEMA_VERSION:
            _migrate(db, version)
        with db:
            db.executescript(SCHEMA)
            db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                       (str(STORE_SCHEMA_VERSION),))
        return db
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path} cannot be used as a store: {e}") from None


def _migrate(db: sqlite3.Connection, version: int) -> None:
    """Bring an older store up to STORE_SCHEMA_VERSION, all steps in one transaction: a failure
    leaves the store as it was."""
    previous = db.isolation_level
    db.isolation_level = None  # explicit BEGIN: executescript would otherwise commit early
    try:
        db.execute("BEGIN IMMEDIATE")
        for v in range(version, STORE_SCHEMA_VERSION):
            for statement in filter(str.strip, MIGRATIONS[v].split(";")):
                db.execute(statement)
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(STORE_SCHEMA_VERSION),))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    finally:
        db.isolation_level = previous


def _schema_version(db: sqlite3.Connection) -> int | None:
    try:
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.OperationalError:
        return None
    return int(row[0]) if row else None


def lock_path() -> Path:
    return Path(os.environ.get("DLBENCH_LOCK", Path(tempfile.gettempdir()) / "dlbench-run.lock"))


@contextlib.contextmanager
def machine_lock(allow_concurrent: bool, on_wait: Any = None) -> Iterator[None]:
    """One `dlbench run` at a time on a machine: trials timed against each other are worthless.
    A second run waits; --allow-concurrent skips the lock (and the run records that)."""
    if allow_concurrent:
        yield
        return
    with open(lock_path(), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
