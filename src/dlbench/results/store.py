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
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from dlbench.analysis import metrics as metric_registry
from dlbench.results.records import TrialResult
from dlbench.spec import TrialSpec, to_dict
from dlbench.text import shown

STORE_SCHEMA_VERSION = 5

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
    # 5: a `dlbench tune` run's search (analysis/tune.py SearchState, JSON): its budget, phases,
    # candidates with their trials, and why it stopped; NULL for every other run.
    4: "ALTER TABLE runs ADD COLUMN tune TEXT;",
}
# Trials `--resume` re-runs; `--retry-failed` adds the failures.
RESUMABLE_STATUSES = ("pending", "running", "interrupted")
RETRYABLE_STATUSES = ("failed", "crashed", "timeout", "oom")
# Run ids are SQLite rowids: 1 to 2**63 - 1.
MAX_RUN_ID = 2**63 - 1
RUN_ID = f"a run id (a whole number from 1 to {MAX_RUN_ID})"
RUN_SELECTORS = f"{RUN_ID}, 'latest' or 'all'"

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
    repeats TEXT,
    tune TEXT
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


class StoreGone(StoreError):
    """The store's file was deleted or replaced after this process opened it."""


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


def parse_run_selector(text: str) -> int | str:
    """The one check of a run selector, for every command that takes one: `latest`, `all`, or
    a run id in ASCII digits within SQLite's integer range. (`str.isdigit` and `int` also take
    `①` and full-width digits, and an id past 2**63 - 1 overflows SQLite's integer.)"""
    if text in ("latest", "all"):
        return text
    if text.isascii() and text.isdigit() and len(text) <= len(str(MAX_RUN_ID)) and 1 <= int(text) <= MAX_RUN_ID:
        return int(text)
    raise StoreError(f"run {shown(text)} is not {RUN_SELECTORS}")


class Store:
    """The results store. `readonly` (report, export, compare) never creates, writes or
    migrates the file, and reads a store in a directory or on a mount it cannot write to."""

    def __init__(self, path: Path | str, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self._db = _open_readonly(self.path) if readonly else _open(self.path)
        # The file this store opened, checked before each write (a later chdir changes nothing)
        self._file = Path(os.path.abspath(self.path))
        self._identity = None if readonly else _identity(self._file)

    def close(self) -> None:
        if self._identity is None or _identity(self._file) == self._identity:
            self._db.close()
            return
        # The file was deleted or replaced: SQLite then neither checkpoints nor deletes its WAL
        # and shared-memory files, which keep the store's name; a new store at that path (or the
        # replacement) would read this one's log as its own. Remove them, where they are ours.
        ours = _open_files(self._file, ("-wal", "-shm"))
        self._db.close()
        for name, inode in ours.items():
            if _identity(Path(name)) == inode:
                with contextlib.suppress(OSError):
                    os.unlink(name)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing -------------------------------------------------------------------------
    def check_present(self) -> None:
        """Raise StoreGone when the file this store opened is no longer at its path (deleted, or
        replaced by another file): every write checks first, so nothing is written to a file no
        one will read, and the run never claims to have stored what is not there. (SQLite keeps
        writing to an open, deleted file without an error.)"""
        if self._identity is None:
            return
        now = _identity(self._file)
        if now == self._identity:
            return
        what = "deleted" if now is None else "replaced by another file"
        raise StoreGone(f"{self.path} was {what} while dlbench wrote to it: what this command wrote"
                        " there since it opened the store is lost, and nothing more is written")

    @contextlib.contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, into the file this store opened only."""
        self.check_present()
        with self._db:
            yield

    def create_run(self, command: str, environment: dict[str, Any], allow_concurrent: bool,
                   order_seed: int | None = None, repeats: dict[str, Any] | None = None,
                   tune: dict[str, Any] | None = None) -> int:
        """A new run, owned by this process (its pid and creation time are recorded, so that
        `--resume` can tell a run whose process died from one still going)."""
        with self._write():
            cur = self._db.execute(
                "INSERT INTO runs (created_at, command, status, environment, allow_concurrent,"
                " order_seed, pid, process_created_at, repeats, tune) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), command, json.dumps(environment), int(allow_concurrent), order_seed,
                 *_this_process(), None if repeats is None else json.dumps(repeats),
                 None if tune is None else json.dumps(tune)),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def add_trial(self, run_id: int, seq: int, trial: TrialSpec, status: str = "pending") -> int:
        with self._write():
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
        with self._write():
            self._db.execute("UPDATE trials SET status='running', started_at=? WHERE id=?",
                             (time.time() if started_at is None else started_at, trial_id))

    def set_trial_process(self, trial_id: int, pid: int, created_at: float) -> None:
        """The worker now running this trial: what `--resume` kills if it outlives its parent."""
        with self._write():
            self._db.execute("UPDATE trials SET pid=?, process_created_at=? WHERE id=?",
                             (pid, created_at, trial_id))

    def finish_trial(self, trial_id: int, result: TrialResult) -> None:
        """One transaction: the trial's status, metrics and raw series land together or not."""
        with self._write():
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
                [(trial_id, name, _real(t), _real(v)) for name, pts in result.series.items() for t, v in pts],
            )

    def add_metrics(self, trial_id: int, metrics: dict[str, float | None], notes: dict[str, str]) -> None:
        """Metrics derived after the trial finished (scaling efficiency from paired trials), with
        their notes merged into the trial's; one transaction."""
        with self._write():
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
        with self._write():
            self._db.execute("UPDATE runs SET repeats=? WHERE id=?", (json.dumps(repeats), run_id))

    def set_run_tune(self, run_id: int, tune: dict[str, Any]) -> None:
        """A `dlbench tune` run's search state (analysis/tune.py SearchState), replaced after
        every round."""
        with self._write():
            self._db.execute("UPDATE runs SET tune=? WHERE id=?", (json.dumps(tune), run_id))

    def finish_run(self, run_id: int, status: str) -> None:
        with self._write():
            self._db.execute("UPDATE runs SET status=?, finished_at=? WHERE id=?",
                             (status, time.time(), run_id))

    # --- resuming ------------------------------------------------------------------------
    def latest_resumable_run(self, statuses: tuple[str, ...]) -> int | None:
        """The newest run with a trial in one of `statuses`, a tune search's left out (`tune
        --resume` finishes those)."""
        marks = ",".join("?" * len(statuses))
        row = self._db.execute(
            f"SELECT max(run_id) FROM trials WHERE status IN ({marks})"
            " AND run_id NOT IN (SELECT id FROM runs WHERE tune IS NOT NULL)", statuses).fetchone()
        return int(row[0]) if row[0] is not None else None

    def claim_run(self, run_id: int, is_alive: AliveCheck) -> int | None:
        """Make this process the owner of a run to resume it. Returns None, or the pid of the
        live process that still runs it (then nothing changes). Check and claim are one
        transaction, so two resumes of one run cannot both go ahead."""
        self.check_present()
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
        self.check_present()
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
        parsed = parse_run_selector(selector)
        if parsed == "all":
            return [r[0] for r in self._db.execute("SELECT id FROM runs ORDER BY id")]
        if parsed == "latest":
            row = self._db.execute("SELECT max(id) FROM runs").fetchone()
            if row[0] is None:
                raise StoreError(f"the store {self.path} has no runs yet")
            return [row[0]]
        if self._db.execute("SELECT 1 FROM runs WHERE id=?", (parsed,)).fetchone() is None:
            raise StoreError(f"run {parsed} is not in the store {self.path}")
        return [int(parsed)]

    def run(self, run_id: int) -> dict[str, Any]:
        row = self._db.execute(
            "SELECT id, created_at, finished_at, command, status, environment, allow_concurrent,"
            " order_seed, repeats, tune FROM runs WHERE id=?", (run_id,)).fetchone()
        keys = ("id", "created_at", "finished_at", "command", "status", "environment",
                "allow_concurrent", "order_seed", "repeats", "tune")
        run = dict(zip(keys, row, strict=True))
        run["environment"] = json.loads(run["environment"])
        run["repeats"] = json.loads(run["repeats"]) if run["repeats"] else None
        run["tune"] = json.loads(run["tune"]) if run["tune"] else None
        run["allow_concurrent"] = bool(run["allow_concurrent"])
        return run

    def tune_states(self) -> list[tuple[int, dict[str, Any]]]:
        """(run id, search state) of every `dlbench tune` run in the store, oldest first: what the
        report's findings cite measured variants from."""
        rows = self._db.execute("SELECT id, tune FROM runs WHERE tune IS NOT NULL ORDER BY id").fetchall()
        return [(int(rid), json.loads(text)) for rid, text in rows]

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
            out.setdefault(name, []).append((float(t), float(v)))  # 'NaN' text: see _real
        return out

    def events(self, trial_id: int) -> list[dict[str, Any]]:
        row = self._db.execute("SELECT events FROM trials WHERE id=?", (trial_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else []

    def trial_costs(self) -> list[tuple[dict[str, Any], float, float | None]]:
        """(spec, wall seconds, train_s or None) of every finished ok trial: what the planner
        learns run-time estimates from (runner/plan.py: Costs)."""
        rows = self._db.execute(
            "SELECT t.spec, t.finished_at - t.started_at, m.value FROM trials t LEFT JOIN metrics m"
            " ON m.trial_id = t.id AND m.name = 'train_s' WHERE t.status = 'ok'"
            " AND t.started_at IS NOT NULL AND t.finished_at IS NOT NULL").fetchall()
        return [(json.loads(spec), float(wall), None if train is None else float(train)) for spec, wall, train in rows]


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`, None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _open_files(path: Path, suffixes: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """{file name: (device, inode)} of the files `path + suffix` this process holds open (Linux's
    /proc/self/fd; empty elsewhere)."""
    names = {os.path.realpath(f"{path}{suffix}") for suffix in suffixes}
    found = {}
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return {}
    for fd in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target in names:
                st = os.fstat(int(fd))
                found[target] = (st.st_dev, st.st_ino)
        except OSError:
            continue
    return found


def _real(value: float) -> float | str:
    """A series value as SQLite can hold it: SQLite binds a float NaN as NULL (the NOT NULL
    column then refuses the whole trial), so NaN is stored as the text 'NaN', which a REAL
    column keeps as text and `Store.series` reads back as NaN. Infinities are REAL values."""
    return "NaN" if value != value else value


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
    _check_file(path)
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


def _check_file(path: Path) -> int | None:
    """The checks that need no SQLite: a file path in an existing directory, and, if the file
    has content, an SQLite header. Returns the header's write version (2: WAL), None when the
    file is missing or empty."""
    if os.path.isdir(path):
        raise StoreError(f"store path {path} is a directory; give a file path such as {path}/dlbench.sqlite")
    if not os.path.isdir(path.parent):
        raise StoreError(f"store path {path}: directory {path.parent} does not exist")
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device would block or mislead
            raise StoreError(f"store path {path} is not a regular file")
        with open(path, "rb") as f:
            header = f.read(20)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreError(f"store path {path} cannot be read: {e.strerror}") from None
    if not header:
        return None
    if header[:16] != b"SQLite format 3\x00":
        raise StoreError(f"{path} is not a dlbench store (not an SQLite file); refusing to touch it")
    return header[18] if len(header) > 18 else None


WAL_FORMAT = 2  # header byte 18 of a database in WAL mode


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A store for reading only. An older schema (or an empty file) is migrated in a copy in
    memory, never in the file; a newer or foreign one is refused as when writing."""
    if not os.path.exists(path):
        raise StoreError(f"store {path} does not exist")
    write_format = _check_file(path)
    try:
        db = _connect_readonly(path, write_format)
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path} cannot be opened read-only: {e}") from None
    try:
        version = _checked_version(db, path)
        if version != STORE_SCHEMA_VERSION:
            memory = sqlite3.connect(":memory:")
            db.backup(memory)
            db.close()
            db = memory
            _prepare(db, path)
        db.execute("PRAGMA query_only=1")  # the copy too: a write is an error, never lost silently
        return db
    except sqlite3.DatabaseError as e:
        db.close()
        raise StoreError(f"{path} cannot be used as a store: {e}") from None
    except BaseException:
        db.close()
        raise


def _connect_readonly(path: Path, write_format: int | None) -> sqlite3.Connection:
    """A read-only connection that creates no file. SQLite (since 3.22) reads a WAL database
    read-only only if its -wal and -shm files exist, can be created, or the database is
    declared immutable (sqlite.org/wal.html, "Read-Only Databases"). So: with a -wal file (a
    writer has the store open, or died), a plain read-only connection, which sees the log's
    commits; without one, nothing is uncommitted to the file, and an immutable one, which
    would otherwise leave new -wal and -shm files behind, or fail where the directory or the
    mount is read-only. A -wal file this process cannot use (its -shm missing and not
    creatable) is refused, saying what to do, unless it is empty."""
    wal = Path(f"{path}-wal")
    immutable = write_format == WAL_FORMAT and not os.path.exists(wal)
    try:
        return _connect_uri(path, immutable)
    except sqlite3.OperationalError:
        if immutable or not os.path.exists(wal):
            raise
        if os.path.getsize(wal) == 0:
            return _connect_uri(path, immutable=True)
        raise StoreError(
            f"{path} cannot be read here: its write-ahead log {wal} holds changes that SQLite reads"
            f" only with write access to {path.parent}; copy the store with its -wal file to a"
            " writable directory and read the copy") from None


def _connect_uri(path: Path, immutable: bool) -> sqlite3.Connection:
    """Open by URI (percent-encoded bytes, so any file name works) and read once: SQLite opens
    lazily, and a failure to open shows at the first read."""
    uri = "file:" + urllib.parse.quote(os.fsencode(path.resolve())) + "?mode=ro" + ("&immutable=1" if immutable else "")
    db = sqlite3.connect(uri, uri=True, timeout=60)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
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
    version = _checked_version(db, path)
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


def _checked_version(db: sqlite3.Connection, path: Path) -> int | None:
    """The schema version, read only; a foreign SQLite file and a newer schema are refused."""
    version = _schema_version(db)
    if version is None and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise StoreError(f"{path} is an SQLite file but not a dlbench store; refusing to touch it")
    if version is not None and version > STORE_SCHEMA_VERSION:
        raise StoreError(
            f"{path} was written by a newer dlbench (store schema {version}, this one reads"
            f" up to {STORE_SCHEMA_VERSION}); upgrade dlbench")
    return version


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


# One lock per machine, whatever TMPDIR says (a per-user or per-job TMPDIR once let two runs time
# against each other): /var/tmp exists on every Linux system, is writable by every user and is
# not a per-session tmpfs. Where it cannot be used, the system's temporary directory (TMPDIR
# ignored) is the fallback; DLBENCH_LOCK names another path (the tests give each their own).
LOCK_DIRS = ("/var/tmp", "/tmp")
LOCK_NAME = "dlbench-run.lock"


def lock_path() -> Path:
    forced = os.environ.get("DLBENCH_LOCK")
    if forced:
        return Path(forced)
    for folder in LOCK_DIRS:
        if os.path.isdir(folder) and os.access(folder, os.W_OK | os.X_OK):
            return Path(folder) / LOCK_NAME
    return Path(LOCK_DIRS[0]) / LOCK_NAME


def _open_lock(path: Path) -> IO[str]:
    """The lock file: created if missing, else opened as it is. flock needs no write access,
    so another user's lock file (or Linux's protected_regular refusing to open it for writing
    in a sticky directory such as /var/tmp) is opened read-only: one lock for every user."""
    try:
        return open(path, "a")  # noqa: SIM115 -- held for the whole run
    except PermissionError:
        return open(path)  # noqa: SIM115
    except OSError as e:
        raise StoreError(f"the machine-wide run lock {path} cannot be opened: {e.strerror}"
                         " (set DLBENCH_LOCK to a path every user of this machine can read)") from None


@contextlib.contextmanager
def machine_lock(allow_concurrent: bool, on_wait: Any = None) -> Iterator[None]:
    """One `dlbench run` at a time on a machine: trials timed against each other are worthless.
    A second run waits; --allow-concurrent skips the lock (and the run records that)."""
    if allow_concurrent:
        yield
        return
    with _open_lock(lock_path()) as f:
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
