"""Nothing lost: real faults through the fake backend in real worker processes, real signals to
a real `dlbench run` parent, and resume. Each test is a row of docs/faults.md."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from dlbench.cli.main import main
from dlbench.results.store import Store
from dlbench import processes
from dlbench.runner import spawn
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

pytestmark = pytest.mark.usefixtures("fake_env")

TINY = ["-f", "fake", "--mode", "eager", "--preset", "tiny", "--dataset-size", "64", "--batch-size", "16",
        "--repeats", "1"]
MB = 10**6


def rows(store: Path) -> list[dict[str, Any]]:
    """Every trial row, read with plain SQLite (the store may be written right now)."""
    db = sqlite3.connect(store, timeout=30)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM trials ORDER BY run_id, seq")]
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        db.close()


def run_status(store: Path, run_id: int) -> str:
    db = sqlite3.connect(store, timeout=30)
    try:
        return str(db.execute("SELECT status FROM runs WHERE id=?", (run_id,)).fetchone()[0])
    finally:
        db.close()


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def group_members(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                out.append(p.pid)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    return out


def _default_stop_signals() -> None:
    # SIGINT: a shell without job control starts background jobs with it ignored, and Python
    # then never raises KeyboardInterrupt. SIGHUP: a test session under `nohup` inherits it
    # ignored, and dlbench rightly keeps an ignored SIGHUP ignored (processes.py).
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def start_parent(store: Path, *argv: str) -> subprocess.Popen[str]:
    """A real `dlbench run` parent, its stop signals at their defaults first (as a terminal
    starts a command)."""
    return subprocess.Popen(
        [sys.executable, "-m", "dlbench.cli.main", "run", *argv, "--store", str(store)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_default_stop_signals)


def running_trial(store: Path, seq: int) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        for r in rows(store):
            if r["seq"] == seq and r["status"] == "running" and r["process_created_at"]:
                return r
        return None

    return check


def test_one_sweep_meets_every_fault_and_goes_on(tmp_path, monkeypatch, capsys):
    """Exception, import failure, segfault, abort, memory over the limit: each is its trial's
    status with the cause and every event written; the sweep runs every trial. (A hang is
    test_no_process_of_a_worker_outlives_its_trial: its timeout would cost every row here.)"""
    faults = ["ok", "raise", "import_error", "crash", "abort", "grow", "ok"]
    monkeypatch.setenv("FAKE_BEHAVIOUR", ",".join(faults))
    store = tmp_path / "s.sqlite"
    argv = ["run", *TINY, "--repeats", str(len(faults)), "--timeout", "120", "--memory-limit", "300MB",
            "--store", str(store)]
    assert main(argv) == 3
    out = capsys.readouterr().out
    by_repeat = {json.loads(r["spec"])["repeat"]: r for r in rows(store)}
    statuses = [by_repeat[i]["status"] for i in range(len(faults))]
    assert statuses == ["ok", "failed", "failed", "crashed", "crashed", "oom", "ok"]
    errors = [by_repeat[i]["error"] or "" for i in range(len(faults))]
    assert "fake failure at step 3" in errors[1]
    assert "cannot be imported" in errors[2]
    assert "SIGSEGV" in errors[3] and "SIGABRT" in errors[4]
    assert "over the memory limit of 286.1 MiB" in errors[5]
    for i in range(1, 6):
        events = json.loads(by_repeat[i]["events"])
        assert events and events[0]["event"] == "start", faults[i]
        if faults[i] != "import_error":  # every other fault strikes after the first step
            assert any(e.get("name") == "first_step" for e in events), faults[i]
    with Store(store) as s:
        peak = s.metrics(by_repeat[5]["id"])["rss_peak_bytes"]
    assert peak is not None and peak > 300 * MB
    assert "oom: process tree RSS reached" in out
    assert run_status(store, 1) == "failed"


def test_a_worker_killed_from_outside_is_crashed_with_a_hint(tmp_path, monkeypatch):
    """SIGKILL that dlbench did not send (the kernel's out-of-memory killer without
    --memory-limit, an operator): `crashed`, naming the likely cause and the RSS seen."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "hang")
    trial = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=128, eval_size=16),
                      framework="fake", policy=Policy(mode="eager"), epochs=1, warmup_epochs=1,
                      chunk_steps=4, timeout_s=60.0, trial_id=1)

    def kill_after_the_first_step(pid: int, created: float) -> None:
        events = tmp_path / "trial-1.result.json.events"
        killer = f"""
import os, time
while '"first_step"' not in (open({str(events)!r}).read() if os.path.exists({str(events)!r}) else ''):
    time.sleep(0.05)
os.kill({pid}, 9)
"""
        subprocess.Popen([sys.executable, "-c", killer])

    r = spawn.run_trial(trial, tmp_path, on_start=kill_after_the_first_step)
    assert r.status == "crashed"
    assert "killed by signal SIGKILL" in (r.error or "") and "out-of-memory killer" in (r.error or "")
    assert any(e.get("name") == "first_step" for e in r.events)
    assert r.metrics["rss_peak_bytes"]


@pytest.mark.parametrize("behaviour", ["grow", "leak"])
def test_memory_over_the_limit_is_oom_with_the_peak(tmp_path, monkeypatch, behaviour):
    """`grow` is caught by the parent's watchdog and killed; `leak` grows ~400 MB in a fraction
    of a second and may end between two polls: the worker's own peak then says `oom` too."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", behaviour)
    trial = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=128, eval_size=16),
                      framework="fake", policy=Policy(mode="eager"), epochs=2, warmup_epochs=1,
                      chunk_steps=4, timeout_s=60.0, memory_limit_bytes=200 * MB, trial_id=1)
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "oom", r.error
    assert "memory limit of 190.7 MiB" in (r.error or "")
    assert r.metrics["rss_peak_bytes"] > 200 * MB
    assert r.events and not group_members(r.pid)


def test_parent_killed_mid_sweep_then_resume_runs_each_trial_once(tmp_path, monkeypatch, capsys):
    """SIGKILL to `dlbench run` while trial 2 of 3 runs: its worker dies with the parent
    (PR_SET_PDEATHSIG), the child it started survives in its process group; `--resume` kills
    the survivor and runs trials 2 and 3 once each, trial 1 untouched."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok,orphan,ok")
    store = tmp_path / "s.sqlite"
    parent = start_parent(store, *TINY, "--repeats", "3")
    victim = wait_for("trial 2 to run", running_trial(store, 1))
    worker = victim["pid"]
    wait_for("the worker's child", lambda: len(group_members(worker)) >= 2)
    survivors = [p for p in group_members(worker) if p != worker]
    parent.kill()
    parent.communicate()
    wait_for("the worker to die with its parent", lambda: not processes.is_alive(
        worker, victim["process_created_at"]), timeout_s=10)
    assert all(psutil.pid_exists(p) for p in survivors)
    before = rows(store)
    assert [r["status"] for r in before] == ["ok", "running", "pending"]

    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
    assert main(["run", "--resume", "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "resuming run 1: 2 trial(s) to run again (1 running, 1 pending)" in out
    assert "killed 1 process(es)" in out
    assert not group_members(worker)
    after = rows(store)
    assert [r["id"] for r in after] == [r["id"] for r in before]  # no trial added or lost
    assert [r["status"] for r in after] == ["ok", "ok", "ok"]
    assert after[0]["finished_at"] == before[0]["finished_at"]  # not run again
    assert json.loads(after[1]["attempts"])[0]["status"] == "running"
    assert run_status(store, 1) == "ok"
    assert main(["run", "--resume", "--store", str(store)]) == 0  # exactly once: nothing left
    assert "nothing to resume" in capsys.readouterr().out
    assert len(rows(store)) == 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM],
                         ids=lambda s: signal.Signals(s).name)
def test_interrupt_marks_the_trial_and_run_and_says_how_to_resume(tmp_path, monkeypatch, sig):
    """Ctrl-C, a closed terminal (SIGHUP) or a plain `kill` (SIGTERM) while a trial runs: its
    process group is killed, it is stored `interrupted` with its events, the run too; exit
    130; resume finishes."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "hang,ok")
    store = tmp_path / "s.sqlite"
    parent = start_parent(store, *TINY, "--repeats", "2")
    victim = wait_for("trial 1 to run", running_trial(store, 0))
    events = Path(psutil.Process(victim["pid"]).cmdline()[-1] + ".events")
    wait_for("the first step", lambda: events.exists() and '"first_step"' in events.read_text())
    parent.send_signal(sig)
    out, err = parent.communicate(timeout=30)
    assert parent.returncode == 130, err
    assert f"dlbench run --resume 1 --store {store}" in out
    assert not group_members(victim["pid"])
    interrupted, pending = rows(store)
    assert interrupted["status"] == "interrupted" and pending["status"] == "pending"
    assert signal.Signals(sig).name in interrupted["error"]
    assert any(e.get("name") == "first_step" for e in json.loads(interrupted["events"]))
    assert run_status(store, 1) == "interrupted"
    if sig == signal.SIGINT:  # the same store state either way: resume once
        monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
        assert main(["run", "--resume", "1", "--store", str(store)]) == 0
        assert [r["status"] for r in rows(store)] == ["ok", "ok"]


def test_an_interrupted_generate_run_says_how_to_resume_and_is_reported(tmp_path, monkeypatch, capsys):
    """SIGTERM during the first trial of a generate run (issue 48.1): exit 130 with the resume
    hint, not a traceback from its tables (the trials after it have no notes); report and
    report --html read the store."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "hang,ok")
    store = tmp_path / "lm.sqlite"
    parent = start_parent(store, "-w", "lm", "-f", "fake", "--mode", "eager", "--scenario", "generate",
                          "--prompt-len", "8", "--new-tokens", "4", "--gen-batch", "2", "--preset", "tiny",
                          "--repeats", "2")
    wait_for("trial 1 to run", running_trial(store, 0))
    parent.send_signal(signal.SIGTERM)
    out, err = parent.communicate(timeout=60)
    assert parent.returncode == 130, err
    assert "Traceback" not in err and f"dlbench run --resume 1 --store {store}" in out
    assert [r["status"] for r in rows(store)] == ["interrupted", "pending"]
    assert main(["report", "--store", str(store)]) == 0
    assert main(["report", "--html", str(tmp_path / "r.html"), "--store", str(store)]) == 0
    assert "interrupted" in capsys.readouterr().out and (tmp_path / "r.html").exists()


def test_an_error_that_looks_like_markup_is_printed_as_it_is(tmp_path, monkeypatch, capsys):
    """A worker's error is text, never terminal markup: "[/usr/lib/x.so]" once raised
    MarkupError in the parent and stopped the sweep."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", "raise")
    monkeypatch.setenv("FAKE_ERROR", "cannot open [/usr/lib/x.so] [bold]")
    assert main(["run", *TINY, "--store", str(tmp_path / "s.sqlite")]) == 3
    assert "cannot open [/usr/lib/x.so] [bold]" in capsys.readouterr().out


def test_retry_failed_reruns_failures_and_keeps_the_failed_attempt(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_BEHAVIOUR", "raise")
    store = tmp_path / "s.sqlite"
    assert main(["run", *TINY, "--store", str(store)]) == 3
    assert main(["run", "--resume", "--store", str(store)]) == 0
    assert "nothing to resume" in capsys.readouterr().out
    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
    assert main(["run", "--resume", "--retry-failed", "--store", str(store)]) == 0
    (row,) = rows(store)
    assert row["status"] == "ok"
    (attempt,) = json.loads(row["attempts"])
    assert attempt["status"] == "failed" and "fake failure at step 3" in attempt["error"]
    assert attempt["metrics"]["import_s"] is not None and attempt["events"]
    with Store(store) as s:  # the re-run's series only: the failed attempt's are not appended
        series = s.series(row["id"])
    assert len(series["loss"]) == 4
    times = [t for t, _ in series["rss_bytes"]]
    assert times == sorted(times)


def test_resume_refuses_a_run_whose_parent_still_runs(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store(store) as s:
            run_id = s.create_run("dlbench run", {}, False)
            s.add_trial(run_id, 0, TrialSpec(workload=WorkloadSpec(), framework="fake"))
        db = sqlite3.connect(store)
        with db:  # as if `owner` were the `dlbench run` that created the run
            db.execute("UPDATE runs SET pid=?, process_created_at=? WHERE id=?",
                       (owner.pid, processes.created_at(owner.pid), run_id))
        db.close()
        assert main(["run", "--resume", "--store", str(store)]) == 2
        err = capsys.readouterr().err
        assert f"run 1 is still being run by process {owner.pid}" in err
        assert [r["status"] for r in rows(store)] == ["pending"]
    finally:
        owner.kill()
        owner.wait()


def test_a_reused_pid_is_never_killed():
    """A pid recorded with another creation time is someone else's now."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    try:
        created = processes.created_at(other.pid)
        assert created is not None
        assert processes.kill_survivors(other.pid, created - 5.0) == []
        assert processes.kill_survivors(other.pid, None) == []
        assert other.poll() is None
        assert processes.kill_survivors(other.pid, created) == [other.pid]
        assert not processes.is_alive(other.pid, created)
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("argv,msg", [
    (["run", "--resume", "--mode", "eager"], "it takes no suite file or sweep option (got --mode)"),
    (["run", "--retry-failed"], "--retry-failed goes with --resume [RUN]"),
    (["run", "--resume", "7"], "run 7 is not in the store"),
    (["run", "--resume", "all"], "--resume takes one run"),
])
def test_resume_bad_input(tmp_path, capsys, argv, msg):
    store = tmp_path / "s.sqlite"
    Store(store).close()
    assert main([*argv, "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


@pytest.mark.parametrize("behaviour,status", [("orphan", "timeout"), ("stray", "ok")])
def test_no_process_of_a_worker_outlives_its_trial(tmp_path, monkeypatch, behaviour, status):
    """The worker starts a child that would live on; whether the worker hangs past the timeout
    or ends normally, its whole process group is gone when the trial is."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", behaviour)
    trial = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=128, eval_size=16),
                      framework="fake", policy=Policy(mode="eager"), epochs=1, warmup_epochs=1,
                      chunk_steps=4, timeout_s=3.0 if status == "timeout" else 60.0, trial_id=1)
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == status, r.error
    assert r.pid is not None
    # SIGKILL is delivered at once, the exit takes the kernel a moment
    wait_for("the worker's process group to be gone", lambda: not group_members(r.pid), timeout_s=5)
    assert r.metrics["rss_peak_bytes"]  # after a timeout, the watchdog's peak


def test_a_child_started_in_its_starters_group_goes_with_the_group(tmp_path):
    """What torch's DDP worker does with its ranks (processes.start_child, own_group=False): the
    rank is in the worker's process group and carries the worker's cookie, so the parent's kill
    of the worker takes it too; killing the rank alone leaves the worker running."""
    leader = processes.start_child("rank_child", [str(tmp_path)], tmp_path / "leader.log")
    try:
        rank = int(wait_for("the rank to start", lambda: (tmp_path / "rank.pid").exists()
                            and (tmp_path / "rank.pid").read_text(), timeout_s=30))
        assert os.getpgid(rank) == leader.pid and sorted(group_members(leader.pid)) == sorted([leader.pid, rank])
        assert f"{processes.COOKIE_VAR}={leader.cookie}".encode() in Path(f"/proc/{rank}/environ").read_bytes().split(b"\0")
    finally:
        leader.kill()
    wait_for("the leader's group to be gone", lambda: not group_members(leader.pid), timeout_s=5)

    (tmp_path / "k").mkdir()
    starter = processes.start_child("rank_child", [str(tmp_path / "k"), "kill"], tmp_path / "starter.log")
    try:
        killed = wait_for("the rank to be killed", lambda: (tmp_path / "k" / "killed").exists()
                          and (tmp_path / "k" / "killed").read_text(), timeout_s=30)
        assert killed == str(-signal.SIGKILL) and not starter.exited()
    finally:
        starter.kill()


def test_every_test_the_fault_matrix_names_exists():
    """docs/faults.md names, in each row, the tests that cover it: they must exist."""
    import re

    root = Path(__file__).resolve().parent
    text = (root.parent / "docs" / "faults.md").read_text()
    named = re.findall(r"`(test_\w+\.py)::(test_\w+)", text)
    assert len(named) > 20
    for file, test in named:
        assert f"def {test}(" in (root / file).read_text(), f"{file}::{test}"



@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=lambda s: signal.Signals(s).name)
def test_stopping_check_from_outside_leaves_no_probe(tmp_path, monkeypatch, sig):
    """`dlbench check` stopped by SIGTERM (timeout, a CI runner), Ctrl-C or SIGKILL while its
    probe hangs: the probe is gone afterwards. SIGTERM and SIGINT kill the probe's whole group
    (the stray child it started too) and exit 130; SIGKILL leaves the probe to die with its
    parent (PR_SET_PDEATHSIG)."""
    events = tmp_path / "events.txt"
    monkeypatch.setenv("FAKE_BEHAVIOUR", "probe_hang")
    monkeypatch.setenv("FAKE_EVENTS", str(events))
    check = subprocess.Popen([sys.executable, "-m", "dlbench.cli.main", "check", "-w", "mlp", "-f", "fake",
                              "--mode", "eager", "-k", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    hung = wait_for("the probe to hang", lambda: events.exists() and re.search(r"(\d+) probe hangs", events.read_text()))
    probe = psutil.Process(int(hung.group(1)))
    assert "dlbench.runner.probe" in " ".join(probe.cmdline())
    created = probe.create_time()
    group = group_members(probe.pid)
    assert len(group) >= 2  # the probe and its stray child
    check.send_signal(sig)
    _, err = check.communicate(timeout=30)
    if sig != signal.SIGKILL:
        assert check.returncode == 130, err
        wait_for("the probe's group to be gone", lambda: not group_members(probe.pid), timeout_s=10)
    wait_for("the probe to be gone", lambda: not processes.is_alive(probe.pid, created), timeout_s=10)
    for pid in group_members(probe.pid):  # SIGKILL: what the probe itself started may be left
        os.kill(pid, signal.SIGKILL)
