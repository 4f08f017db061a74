"""Nothing lost, part three (issue 39): NaNs, hostile plugins, hangs and deaths before the first
trial, a vanished store, worker output, signals before the first trial, the machine lock, and
the smaller input cases. Plugins are the misbehaving packages under tests/fixtures/plugins/; each
test is a row of docs/faults.md."""

from __future__ import annotations

import fcntl
import importlib.metadata
import json
import math
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from dlbench import plugins, workloads
from dlbench.cli.common import workload_names
from dlbench.cli.main import main
from dlbench.results import store as store_module
from dlbench.results.records import TrialResult
from dlbench.results.store import Store, StoreGone
from dlbench.runner import executor, reference, spawn
from dlbench.runner.probe_client import ProbeLimits
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

pytestmark = pytest.mark.usefixtures("fake_env")

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins"
TINY = ["-f", "fake", "--mode", "eager", "--preset", "tiny", "--dataset-size", "64", "--batch-size", "16",
        "--repeats", "1"]


@pytest.fixture
def plugin_site(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """plugin_site(name): the fixture distribution tests/fixtures/plugins/NAME installed for this
    process (sys.path, and only its entry points seen) and its worker processes (PYTHONPATH)."""
    every = importlib.metadata.entry_points
    sites: list[str] = []

    def ours(**select: Any) -> importlib.metadata.EntryPoints:
        return importlib.metadata.EntryPoints(
            ep for ep in every(**select) if any(s in str(getattr(ep.dist, "_path", "")) for s in sites))

    monkeypatch.setattr(importlib.metadata, "entry_points", ours)

    def install(name: str) -> None:
        site = str(FIXTURES / name)
        sites.append(site)
        monkeypatch.syspath_prepend(site)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([site, os.environ.get("PYTHONPATH", "")]))
        plugins.forget()

    yield install
    for name in [m for m in sys.modules if m.split(".")[0] in ("acme_hostile", "acme_badref")]:
        del sys.modules[name]
    plugins.forget()


def trials(path: Path) -> list[dict[str, Any]]:
    with Store(path, readonly=True) as s:
        return [{"status": t.status, "workload": t.spec["workload"]["name"], "error": t.error, **t.data,
                 "series": s.series(t.id)} for t in s.trials(s.resolve_runs("latest")[0])]


# --- 1. a NaN is data ----------------------------------------------------------------------

def test_a_nan_loss_is_stored_and_the_other_trials_run(tmp_path, monkeypatch, capsys):
    """A diverging trial (NaN and infinite losses) once failed the store write ("NOT NULL
    constraint failed: series.value"), stopping the sweep with exit 2 for good; now its series
    is stored as it is, the next trial runs, and the store reads back NaN and infinity."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "nan,ok")
    store = tmp_path / "s.sqlite"
    assert main(["run", *TINY, "--repeats", "2", "--store", str(store)]) == 0, capsys.readouterr().err
    stored = trials(store)
    assert [t["status"] for t in stored] == ["ok", "ok"]
    losses = [v for t in stored for _, v in t["series"]["loss"]]
    assert any(math.isnan(v) for v in losses) and math.inf in losses and -math.inf in losses
    # the resume of a store holding a NaN trial reads it and finishes (nothing left here)
    assert main(["run", "--resume", "--store", str(store)]) == 0
    # and its export is JSON (null where the value is not finite), not Python's NaN/Infinity
    out = tmp_path / "e.json"
    assert main(["export", "latest", "--format", "json", "-o", str(out), "--store", str(store)]) == 0
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON export"))


def test_the_store_keeps_nan_and_infinity_in_a_series(tmp_path):
    with Store(tmp_path / "s.sqlite") as s:
        run = s.create_run("test", {}, False)
        tid = s.add_trial(run, 0, TrialSpec(workload=WorkloadSpec(), framework="fake"))
        s.finish_trial(tid, TrialResult(status="ok", series={"loss": [(0.0, math.nan), (1.0, math.inf), (2.0, 1.5)]}))
        got = s.series(tid)["loss"]
    assert math.isnan(got[0][1]) and got[1:] == [(1.0, math.inf), (2.0, 1.5)]


# --- 2. a plugin's sys.exit / KeyboardInterrupt / BaseException at import --------------------

@pytest.mark.parametrize("name,what", [("exits", "SystemExit: it called sys.exit(3) at import"),
                                       ("interrupts", "KeyboardInterrupt"),
                                       ("baseexc", "Boom: boom at import")])
def test_a_hostile_import_is_one_line_exit_2_and_all_runs_the_rest(name, what, plugin_site, capsys):
    plugin_site("hostile-imports")
    assert main(["run", "-w", name, *TINY]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"acme-hostile 0.1 (dlbench.workloads: {name} = acme_hostile.{name}) failed to import: {what}" in err
    assert main(["list"]) == 0  # every broken plugin listed with its reason, the built-ins too
    out = capsys.readouterr().out
    assert "acme-hostile 0.1" in out and "transformer" in out
    assert workload_names(("all",)) == (*workloads.WORKLOADS, "bigshapes")  # the one valid plugin there
    assert f"workload {name!r} left out of 'all'" in capsys.readouterr().err


# --- 3, 5, 7. the parity reference's probe: hang, death, memory -------------------------------

def test_a_probe_that_hangs_dies_or_grows_names_its_workload_and_the_others_keep_parity(
        plugin_site, tmp_path, monkeypatch):
    """The float64 reference of three plugin workloads hangs, calls os._exit, and grows without
    end, in the one probe process that once served them all (1800 s fixed limit, no memory
    limit, "the probe wrote no result" for everything after the culprit). Now the run's
    --timeout and --memory-limit bound the probe per workload, each culprit is named, the probe
    restarts for the rest, and the built-in mlp planned after them gets its reference."""
    plugin_site("bad-references")
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path / "cache"))  # computed here, not cached
    specs = [_trial(workload=WorkloadSpec(name=w, batch_size=8, dataset_size=64, eval_size=16),
                    timeout_s=t, memory_limit_bytes=m)
             for w, t, m in (("refhang", 5.0, 700 * 2**20), ("refexit", 4.0, None), ("refgrow", 3.0, 600 * 2**20),
                             ("mlp", 3.0, 2**30))]
    limits = executor.probe_limits(specs)  # what `run` gives the reference: the trials' own limits
    assert limits == ProbeLimits(timeout_s=5.0, memory_limit_bytes=None)
    limits = ProbeLimits(timeout_s=5.0, memory_limit_bytes=700 * 2**20)
    t0 = time.monotonic()
    refs = reference.ensure([t.workload for t in specs], 0, None, limits)
    assert time.monotonic() - t0 < 60
    got = {t.workload.name: refs[reference.key(t.workload, 0)] for t in specs}
    assert isinstance(got["mlp"], reference.Reference), got["mlp"]
    assert "did not finish within 5 s" in got["refhang"] and "while probing refhang" in got["refhang"]
    assert "refexit, refgrow, mlp probed again in a fresh process" in got["refhang"]
    assert "exited with code 7" in got["refexit"] and "while probing refexit" in got["refexit"]
    assert "over the memory limit of 700.0 MiB" in got["refgrow"], got["refgrow"]


# --- 4. a deleted or replaced store --------------------------------------------------------

@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_store_deleted_or_replaced_under_a_writer_is_refused_never_written(how, tmp_path):
    path = tmp_path / "s.sqlite"
    s = Store(path)
    run = s.create_run("test", {}, False)
    if how == "deleted":
        path.unlink()
    else:
        other = tmp_path / "other.sqlite"
        with Store(other) as o:
            o.create_run("the replacement's own run", {}, False)
        os.replace(other, path)
    with pytest.raises(StoreGone, match=f"was {how}"):
        s.finish_run(run, "ok")
    s.close()
    assert not Path(f"{path}-wal").exists()  # no log of the old file left to pair with another
    if how == "replaced":  # the replacement keeps its own run, untouched
        with Store(path, readonly=True) as o:
            assert o.run(1)["command"] == "the replacement's own run" and o.run(1)["status"] == "running"
    else:
        assert not path.exists()


def test_a_run_whose_store_is_deleted_says_so_and_never_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "hang")
    store = tmp_path / "del.sqlite"
    parent = subprocess.Popen([sys.executable, "-m", "dlbench.cli.main", "run", *TINY,
                               "--timeout", "3", "--store", str(store)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _running(store) and time.monotonic() < deadline:
        time.sleep(0.05)
    store.unlink()
    out, err = parent.communicate(timeout=60)
    assert parent.returncode == 2, (out, err)
    assert "stored as run" not in out
    assert f"{store} was deleted while dlbench wrote to it" in err and err.count("\n") == 1


def _running(store: Path) -> bool:
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)
        try:
            return bool(db.execute("SELECT count(*) FROM trials WHERE status='running'").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return False


# --- 6. worker output ------------------------------------------------------------------------

def test_a_worker_writing_half_a_gigabyte_costs_the_parent_no_memory(tmp_path, monkeypatch):
    """The worker's output file grows to 512 MiB (sparse, so no disk) before it fails; the
    parent keeps the last lines for the error without reading the rest (it once read the whole
    log: 2.16 GB of RSS for a 1 GB output)."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "spew")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    r = spawn.run_trial(_trial(), tmp_path)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert (tmp_path / "trial-1.log").stat().st_size > 512 * 2**20
    assert r.status == "failed" and "the last line of a long output" in r.notes["output_tail"]
    assert len(r.notes["output_tail"]) <= 2000
    assert grown < 64 * 2**20, grown


def _trial(**kw: Any) -> TrialSpec:
    given = {"workload": WorkloadSpec(batch_size=8, dataset_size=128, eval_size=16), "timeout_s": 60.0, **kw}
    return TrialSpec(framework="fake", policy=Policy(mode="eager"), epochs=1, warmup_epochs=1, chunk_steps=4,
                     trial_id=1, **given)


# --- 8. signals before the first trial, and while waiting for the lock ----------------------

def _parent(store: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dlbench.cli.main", "run", *argv, "--store", str(store)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_stop_signal_during_the_reference_marks_the_run_interrupted_with_a_hint(tmp_path, monkeypatch):
    """Stopped while the parity reference's probe runs (before any trial): once the run stayed
    `running` with no resume hint; now it is `interrupted`, the hint printed, exit 130."""
    events = tmp_path / "events.txt"
    monkeypatch.setenv("FAKE_BEHAVIOUR", "probe_hang")
    monkeypatch.setenv("FAKE_EVENTS", str(events))
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(tmp_path / "cache"))
    store = tmp_path / "s.sqlite"
    parent = _parent(store, *TINY)
    deadline = time.monotonic() + 60
    while not (events.exists() and "probe hangs" in events.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    parent.send_signal(signal.SIGTERM)  # (SIGINT and SIGHUP take the same path: KeyboardInterrupt)
    out, err = parent.communicate(timeout=30)
    assert parent.returncode == 130, (out, err)
    assert "interrupted by SIGTERM before the next trial started" in out
    assert f"dlbench run --resume 1 --store {store}" in out
    with Store(store, readonly=True) as s:
        assert s.run(1)["status"] == "interrupted"
        assert [t.status for t in s.trials(1)] == ["pending"]


def test_sigterm_while_waiting_for_the_lock_says_so_and_leaves_no_wal(tmp_path):
    """Once: exit 143, no message, the store's -wal and -shm left behind."""
    lock = Path(os.environ["DLBENCH_LOCK"])
    store = tmp_path / "s.sqlite"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        parent = _parent(store, *TINY)
        assert parent.stdout is not None
        for line in parent.stdout:
            if "waiting for another dlbench run" in line:
                break
        parent.send_signal(signal.SIGTERM)
        out, err = parent.communicate(timeout=30)
    assert parent.returncode == 130, err
    assert "interrupted by SIGTERM while waiting for another dlbench run" in out and "nothing ran" in out
    assert not Path(f"{store}-wal").exists() and not Path(f"{store}-shm").exists()


# --- 9. the machine lock ----------------------------------------------------------------------

def test_the_machine_lock_is_one_path_whatever_tmpdir_says(tmp_path, monkeypatch):
    monkeypatch.delenv("DLBENCH_LOCK")
    paths = set()
    for tmpdir in (tmp_path / "a", tmp_path / "b"):
        tmpdir.mkdir()
        monkeypatch.setenv("TMPDIR", str(tmpdir))
        monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
        paths.add(store_module.lock_path())
    assert paths == {Path("/var/tmp/dlbench-run.lock")}


# --- 10, 11. input the plan must refuse in one line ----------------------------------------

def test_plugin_shapes_that_raise_past_the_tiny_preset_are_one_line(plugin_site, capsys):
    plugin_site("hostile-imports")
    assert main(["run", "-w", "bigshapes", "-f", "fake", "--mode", "eager", "--repeats", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "workload bigshapes (plugin acme-hostile 0.1) fails at" in err and "only knows the tiny preset" in err


@pytest.mark.parametrize("argv,msg", [
    (["-b", ",".join(map(str, range(1, 101))), "--seed", ",".join(map(str, range(101))), "--repeats", "3"],
     "the sweep has 30,300 trials, over the limit of 10,000 per run"),
    (["--timeout", "1e9"], "timeout must be a number of seconds > 0 and at most 604800"),
    (["--timeout", "inf"], "argument --timeout: 'inf' is not a number in ASCII digits"),
    (["--dataset-size", str(2**63 + 1)], "dataset size must be an integer from 1 to 2,147,483,647"),
])
def test_sweeps_timeouts_and_sizes_past_their_limits_are_refused(argv, msg, tmp_path, capsys):
    t0 = time.monotonic()
    assert main(["run", "-f", "fake", "--mode", "eager", "--preset", "tiny", *argv,
                 "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err
    assert time.monotonic() - t0 < 10  # refused before planning


def test_check_takes_a_probe_timeout_and_refuses_an_infinite_one(capsys):
    assert main(["check", "-w", "mlp", "-f", "fake", "--timeout", "inf"]) == 2
    err = capsys.readouterr().err
    assert "argument --timeout: 'inf' is not a number in ASCII digits" in err and err.count("\n") == 1
    assert main(["check", "-w", "mlp", "-f", "fake", "--timeout", "1e9"]) == 2
    err = capsys.readouterr().err
    assert "timeout 1000000000.0 is not a number of seconds > 0 and at most 604800" in err and err.count("\n") == 1


def test_suite_files_take_all_and_a_byte_order_mark(tmp_path):
    from dlbench.cli import suite

    path = tmp_path / "s.toml"
    path.write_bytes("\ufeffworkload = \"all\"\nframework = [\"all\"]\n".encode())
    assert suite.load(str(path)) == {"workload": ("all",), "framework": ("all",)}


# --- 11. a process that leaves the worker's session --------------------------------------------

def test_a_process_started_in_a_new_session_dies_with_its_trial(tmp_path, monkeypatch):
    """A worker's child that calls setsid() leaves the process group the parent kills; the
    cookie in its environment still names it."""
    pid_file = tmp_path / "escaped.pid"
    monkeypatch.setenv("FAKE_BEHAVIOUR", "setsid")
    monkeypatch.setenv("FAKE_ESCAPED_PID", str(pid_file))
    r = spawn.run_trial(_trial(), tmp_path)
    assert r.status == "ok", r.error
    escaped = int(pid_file.read_text())
    deadline = time.monotonic() + 5  # SIGKILL is sent at once; its reaping by init takes a moment
    while _alive(escaped) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(escaped)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --- issue 31: the worker never imports the store ----------------------------------------------

def test_the_worker_and_the_probe_import_no_store():
    code = ("import sys, dlbench.runner.worker, dlbench.runner.probe;"
            " print(sorted(m for m in sys.modules if m in ('sqlite3', 'dlbench.results.store')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_no_child_is_started_from_a_code_string_and_one_killer_exists():
    src = Path(__file__).resolve().parent.parent / "src" / "dlbench"
    texts = {p: p.read_text() for p in src.rglob("*.py")}
    assert not [p for p, t in texts.items() if '"-c"' in t or "'-c'" in t]
    # one starter and one killer of a child's group (processes.py: start_child and Child.kill,
    # and resume's kill_survivors of a dead run's leftover group), torch's DDP ranks included
    assert [p.name for p, t in texts.items() if "os.killpg(" in t] == ["processes.py"]
    assert [p.name for p, t in texts.items() if "subprocess.Popen(" in t] == ["processes.py"]

