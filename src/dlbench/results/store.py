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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from dlbench.analysis import metrics as metric_registry
from dlbench.results.records import TrialResult
from dlbench.spec import TrialSpec, to_dict

STORE_SCHEMA_VERSION = 4

# Migrations from version N to N+1, applied in one transaction when an older store is opened.
# tests/fixtures/store-v<N>.sqlite are frozen stores of every earlier version.
MIGRATIONS: dict[int, str] = {
    # 2: each trial's parity verdict against the float64 reference (DESIGN §2.10).
    1: "ALTER TABLE trials ADD COLUMN parity TEXT;",
    # 3: resume after the parent died: which process ran the run and each trial (pid plus
    # creation time, so a reused pid is never killed) and the attempts a re-run replaced.
    2: """ALTER TABLE trials ADD COLUMN process_created_at REAL;
          ALTER TABLE trials ADD COLUMN attempts TEXT;
          ALTER TABLE runs ADD COLUMN pid INTEGER;
          ALTER TABLE runs ADD COLUMN process_created_at REAL;""",
    # 4: the run's repeat rule and, for `--repeats auto`, its rounds, time spent and why it
    # stopped (JSON), so that `--resume` continues the rule and the report says what ended it.
    3: "ALTER TABLE runs ADD COLUMN repeats TEXT;",
}
# Trials `--resume` re-runs; `--retry-failed` adds the failures.
RESUMABLE_STATUSES = ("pending", "running", "interrupted")
RETRYABLE_STATUSES = ("failed", "crashed", "timeout", "oom")

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
    order_seed INTEGER,
    pid INTEGER,
    process_created_at REAL,
    repeats TEXT
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
    finished_at REAL,
    process_created_at REAL,
    attempts TEXT
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
    data: dict[str, Any]  # policy, framework_info, numerics, notes, warnings, parity, attempts


@dataclass(frozen=True)
class ResumableTrial:
    """A trial `--resume` will run again, with the process that last ran it (if any)."""

    id: int
    seq: int
    spec: dict[str, Any]
    status: str
    pid: int | None
    process_created_at: float | None


# (pid, creation time) -> is that process still running? (dlbench/processes.is_alive)
AliveCheck = Callable[[int, "float | None"], bool]


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db = _open(self.path)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing -------------------------------------------------------------------------
    def create_run(self, command: str, environment: dict[str, Any], allow_concurrent: bool,
                   order_seed: int | None = None, repeats: dict[str, Any] | None = None) -> int:
        """A new run, owned by this process (its pid and creation time are recorded, so that
        `--resume` can tell a run whose process died from one still going)."""
        with self._db:
            cur = self._db.execute(
                "INSERT INTO runs (created_at, command, status, environment, allow_concurrent,"
                " order_seed, pid, process_created_at, repeats) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?)",
                (time.time(), command, json.dumps(environment), int(allow_concurrent), order_seed,
                 *_this_process(), None if repeats is None else json.dumps(repeats)),
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

    def mark_running(self, trial_id: int, started_at: float | None = None) -> None:
        """Running since now, or since `started_at` (a Ray task's start, known at its end)."""
        with self._db:
            self._db.execute("UPDATE trials SET status='running', started_at=? WHERE id=?",
                             (time.time() if started_at is None else started_at, trial_id))

    def set_trial_process(self, trial_id: int, pid: int, created_at: float) -> None:
        """The worker now running this trial: what `--resume` kills if it outlives its parent."""
        with self._db:
            self._db.execute("UPDATE trials SET pid=?, process_created_at=? WHERE id=?",
                             (pid, created_at, trial_id))

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
                [(trial_id, k, v, metric_registry.unit(k, result.units.get(k)))
                 for k, v in result.metrics.items()],
            )
            self._db.executemany(
                "INSERT INTO series (trial_id, series, t, value) VALUES (?, ?, ?, ?)",
                [(trial_id, name, t, v) for name, pts in result.series.items() for t, v in pts],
            )

    def add_metrics(self, trial_id: int, metrics: dict[str, float | None], notes: dict[str, str]) -> None:
        """Metrics derived after the trial finished (scaling efficiency from paired trials), with
        their notes merged into the trial's; one transaction."""
        with self._db:
            row = self._db.execute("SELECT notes FROM trials WHERE id=?", (trial_id,)).fetchone()
            merged = {**(json.loads(row[0]) if row and row[0] else {}), **notes}
            self._db.execute("UPDATE trials SET notes=? WHERE id=?", (json.dumps(merged), trial_id))
            self._db.executemany(
                "INSERT OR REPLACE INTO metrics (trial_id, name, value, unit) VALUES (?, ?, ?, ?)",
                [(trial_id, k, v, metric_registry.unit(k)) for k, v in metrics.items()],
            )

    def set_run_repeats(self, run_id: int, repeats: dict[str, Any]) -> None:
        """The run's repeat rule and its state (`--repeats auto`: rounds, time spent, why it
        stopped), replaced after every round."""
        with self._db:
            self._db.execute("UPDATE runs SET repeats=? WHERE id=?", (json.dumps(repeats), run_id))

    def finish_run(self, run_id: int, status: str) -> None:
        with self._db:
            self._db.execute("UPDATE runs SET status=?, finished_at=? WHERE id=?",
                             (status, time.time(), run_id))

    # --- resuming ------------------------------------------------------------------------
    def latest_resumable_run(self, statuses: tuple[str, ...]) -> int | None:
        """The newest run with a trial in one of `statuses`."""
        marks = ",".join("?" * len(statuses))
        row = self._db.execute(
            f"SELECT max(run_id) FROM trials WHERE status IN ({marks})", statuses).fetchone()
        return int(row[0]) if row[0] is not None else None

    def claim_run(self, run_id: int, is_alive: AliveCheck) -> int | None:
        """Make this process the owner of a run to resume it. Returns None, or the pid of the
        live process that still runs it (then nothing changes). Check and claim are one
        transaction, so two resumes of one run cannot both go ahead."""
        with _immediate(self._db):
            status, pid, created = self._db.execute(
                "SELECT status, pid, process_created_at FROM runs WHERE id=?", (run_id,)).fetchone()
            if status == "running" and pid is not None and pid != os.getpid() and is_alive(pid, created):
                return int(pid)
            self._db.execute(
                "UPDATE runs SET status='running', finished_at=NULL, pid=?, process_created_at=?"
                " WHERE id=?", (*_this_process(), run_id))
        return None

    def resumable_trials(self, run_id: int, statuses: tuple[str, ...]) -> list[ResumableTrial]:
        marks = ",".join("?" * len(statuses))
        rows = self._db.execute(
            f"SELECT id, seq, spec, status, pid, process_created_at FROM trials WHERE run_id=?"
            f" AND status IN ({marks}) ORDER BY seq", (run_id, *statuses)).fetchall()
        return [ResumableTrial(tid, seq, json.loads(spec), status, pid, created)
                for tid, seq, spec, status, pid, created in rows]

    def reset_trial(self, trial_id: int) -> None:
        """Back to `pending` for a re-run, in one transaction. What the replaced attempt left
        (status, error, process, metrics, notes, events) moves to the trial's `attempts`; only
        its raw series are dropped."""
        with _immediate(self._db):
            keys = ("status", "error", "pid", "started_at", "finished_at", "notes", "events", "attempts")
            row = dict(zip(keys, self._db.execute(
                f"SELECT {', '.join(keys)} FROM trials WHERE id=?", (trial_id,)).fetchone(), strict=True))
            attempts = json.loads(row.pop("attempts") or "[]")
            for k in ("notes", "events"):
                row[k] = json.loads(row[k]) if row[k] else None
            attempts.append({**row, "metrics": self.metrics(trial_id)})
            self._db.execute("DELETE FROM metrics WHERE trial_id=?", (trial_id,))
            self._db.execute("DELETE FROM series WHERE trial_id=?", (trial_id,))
            self._db.execute(
                "UPDATE trials SET status='pending', error=NULL, policy=NULL, framework_info=NULL,"
                " numerics=NULL, notes=NULL, warnings=NULL, events=NULL, parity=NULL, pid=NULL,"
                " process_created_at=NULL, started_at=NULL, finished_at=NULL, attempts=?"
                " WHERE id=?", (json.dumps(attempts), trial_id))

    def statuses(self, run_id: int) -> dict[str, int]:
        """Number of trials of a run per status."""
        return dict(self._db.execute(
            "SELECT status, count(*) FROM trials WHERE run_id=? GROUP BY status", (run_id,)))

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
            " order_seed, repeats FROM runs WHERE id=?", (run_id,)).fetchone()
        keys = ("id", "created_at", "finished_at", "command", "status", "environment",
                "allow_concurrent", "order_seed", "repeats")
        run = dict(zip(keys, row, strict=True))
        run["environment"] = json.loads(run["environment"])
        run["repeats"] = json.loads(run["repeats"]) if run["repeats"] else None
        run["allow_concurrent"] = bool(run["allow_concurrent"])
        return run

    def trials(self, run_id: int) -> list[TrialRow]:
        rows = self._db.execute(
            "SELECT id, spec, status, error, policy, framework_info, numerics, notes, warnings,"
            " parity, attempts FROM trials WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
        out = []
        for tid, spec, status, error, *blobs in rows:
            names = ("policy", "framework_info", "numerics", "notes", "warnings", "parity", "attempts")
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


def _this_process() -> tuple[int, float]:
    return os.getpid(), psutil.Process().create_time()


@contextlib.contextmanager
def _immediate(db: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the write lock at BEGIN (waiting up to the busy timeout).
    A deferred transaction that reads and then writes can fail at once with SQLITE_BUSY when
    another process committed in between (WAL snapshot upgrade): no waiting, a lost write."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.rollback()
        raise
    db.commit()


def _open(path: Path) -> sqlite3.Connection:
    """Open or create a store; refuse a foreign or corrupt file and a newer schema, clearly,
    without ever writing to them."""
    if path.is_dir():
        raise StoreError(f"store path {path} is a directory; give a file path such as {path}/dlbench.sqlite")
    if not path.parent.exists():
        raise StoreError(f"store path {path}: directory {path.parent} does not exist")
    if path.exists() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                raise StoreError(f"{path} is not a dlbench store (not an SQLite file); refusing to touch it")
    try:
        db = sqlite3.connect(path, timeout=60)
    except sqlite3.Error as e:
        raise StoreError(f"{path} cannot be opened as a store: {e}") from None
    try:
        _prepare_retrying(db, path)
    except sqlite3.DatabaseError as e:
        db.close()
        raise StoreError(f"{path} cannot be used as a store: {e}") from None
    except BaseException:
        db.close()
        raise
    return db


# Switching to WAL and upgrading a read lock to a write lock can return SQLITE_BUSY at once,
# without the busy handler (SQLite avoids a deadlock that way), when other processes open or
# migrate the same store at the same moment: seen with 4 writers racing a migration on a machine
# at load 8. Each attempt is a complete, idempotent _prepare, so retrying it is safe.
PREPARE_RETRY_S = 60.0


def _prepare_retrying(db: sqlite3.Connection, path: Path) -> None:
    deadline = time.monotonic() + PREPARE_RETRY_S
    delay_s = 0.01
    while True:
        try:
            _prepare(db, path)
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            if db.in_transaction:
                db.rollback()
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 0.5)


def _prepare(db: sqlite3.Connection, path: Path) -> None:
    """Check the file by reading only, then switch to WAL, migrate and create the tables. The
    schema is created in one transaction, so a process opening the store at the same moment sees
    either no tables (a new store) or all of them, and a store at this version is complete."""
    version = _schema_version(db)
    if version is None and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise StoreError(f"{path} is an SQLite file but not a dlbench store; refusing to touch it")
    if version is not None and version > STORE_SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer dlbench (store schema {version}, this one reads"
            f" up to {STORE_SCHEMA_VERSION}); upgrade dlbench")
    db.execute("PRAGMA journal_mode=WAL")
    if version == STORE_SCHEMA_VERSION:
        return  # complete: opening it takes no write lock, so readers never wait for a writer
    if version is not None:
        _migrate(db)
    with _immediate(db):
        for statement in filter(str.strip, SCHEMA.split(";")):
            db.execute(statement)
        db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                   (str(STORE_SCHEMA_VERSION),))


def _migrate(db: sqlite3.Connection) -> None:
    """Bring an older store up to STORE_SCHEMA_VERSION, all steps in one transaction: a failure
    leaves the store as it was. The version is read again under the write lock: another process
    may have migrated the store since it was opened."""
    with _immediate(db):
        version = _schema_version(db)
        assert version is not None
        for v in range(version, STORE_SCHEMA_VERSION):
            for statement in filter(str.strip, MIGRATIONS[v].split(";")):
                db.execute(statement)
        db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(STORE_SCHEMA_VERSION),))


def _schema_version(db: sqlite3.Connection) -> int | None:
    try:
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return None
        raise
    if row is None:
        return None
    try:
        return int(row[0])
    except ValueError:
        raise sqlite3.DatabaseError(f"its schema version {row[0]!r} is not a number") from None


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
