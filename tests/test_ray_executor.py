"""The Ray executor: what a trial asks of the cluster, how Ray's failures become trial
statuses, bad input, and one real sweep on a local Ray instance compared with the local
executor. ray.init costs seconds on two cores: the module shares one Ray session."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.results.store import Store
from dlbench.runner import executors, ray_executor, resume
from dlbench.runner.plan import PlannedTrial, workload_spec
from dlbench.runner.ray_executor import NODE_RESOURCE, Cluster, failure_result, infeasible, task_options
from dlbench.spec import Policy, TrialSpec

TESTS_DIR = Path(__file__).resolve().parent
TINY = ["--preset", "tiny", "--dataset-size", "64", "--batch-size", "16"]
# Picked by repeat index (fake_backend.behaviour): repeat 1 raises at step 3 (a failed trial),
# repeat 3 kills the process that started its worker (a lost Ray worker).
BEHAVIOURS = "ok,raise,ok,kill_parent"


def _trial(threads: int | None = None, devices: int = 1) -> TrialSpec:
    return TrialSpec(workload=workload_spec("mlp", "tiny"), framework="fake", policy=Policy(mode="eager", threads=threads),
                     devices=devices)


# --- what a trial asks for ----------------------------------------------------------------


def test_a_timed_trial_takes_a_whole_node_and_is_never_retried():
    options = task_options(_trial(threads=2), Cluster(), cluster_gpus=0)
    assert options == {"num_cpus": 2, "num_gpus": 0, "max_retries": 0, "retry_exceptions": False,
                       "resources": {NODE_RESOURCE: 1}}


def test_allow_concurrent_shares_a_node_only_with_threads_given():
    shared = Cluster(share_nodes=True)
    assert "resources" not in task_options(_trial(threads=1), shared, cluster_gpus=0)
    # without --threads the worker uses every core of its node: it still takes the node
    assert task_options(_trial(threads=None), shared, cluster_gpus=0)["resources"] == {NODE_RESOURCE: 1}


def test_gpus_are_asked_for_where_the_cluster_has_them():
    assert task_options(_trial(), Cluster(), cluster_gpus=8)["num_gpus"] == 1
    assert task_options(_trial(), Cluster(), cluster_gpus=0)["num_gpus"] == 0


def test_a_trial_no_node_can_run_is_named_with_the_fix():
    options = task_options(_trial(threads=4), Cluster(), cluster_gpus=0)
    node = {"Alive": True, "Resources": {"CPU": 8.0}}
    why = infeasible(options, [node])
    assert why is not None and "CPU 4, dlbench_node 1" in why and "ray start" in why
    assert infeasible(options, [{**node, "Resources": {"CPU": 8.0, NODE_RESOURCE: 1.0}}]) is None
    assert infeasible(options, [{"Alive": False, "Resources": {"CPU": 8.0, NODE_RESOURCE: 1.0}}])


# --- Ray's failures become trial statuses (fake exceptions named like Ray's) --------------


class RayError(Exception):
    pass


class RayTaskError(RayError):
    pass


class ObjectLostError(RayError):
    pass


def _ray_exception(name: str, base: type[Exception], text: str) -> Exception:
    return type(name, (base,), {})(text)


@pytest.mark.parametrize("name,base,status,cause", [
    ("WorkerCrashedError", RayError, "crashed", "the Ray worker process running it died"),
    ("NodeDiedError", RayError, "crashed", "the Ray node running it died"),
    ("OwnerDiedError", ObjectLostError, "crashed", "the driver that owned its Ray task died"),
    ("ObjectLostError", RayError, "crashed", "its result was lost"),
    ("OutOfMemoryError", RayError, "oom", "Ray's memory monitor killed"),
    ("TaskCancelledError", RayError, "interrupted", "its Ray task was cancelled"),
    ("RaySystemError", RayError, "failed", "Ray failed"),
])
def test_a_lost_worker_or_node_is_that_trials_failure_with_the_cause(name, base, status, cause):
    result = failure_result(_ray_exception(name, base, "Task abc failed.\nmore details"))
    assert result.status == status
    assert result.error is not None and result.error.startswith(cause)
    assert result.error.endswith(": Task abc failed.")
    assert "more details" in result.notes["ray_error"]


def test_a_task_that_raised_is_failed_with_its_own_message():
    # Ray's RayTaskError(ValueError) subclasses both; its text is the remote traceback
    exc = type("RayTaskError(ValueError)", (RayTaskError, ValueError), {})(
        "ray::run_on_node() (pid=1, ip=127.0.0.1)\n  File \"x.py\", line 1\nValueError: disk full")
    result = failure_result(exc)
    assert (result.status, result.error) == ("failed", "its Ray task raised: ValueError: disk full")
    plain = failure_result(RuntimeError("no"))
    assert (plain.status, plain.error) == ("failed", "the Ray executor failed: no")


def test_the_mapped_names_are_rays():
    exceptions = pytest.importorskip("ray.exceptions")
    missing = [name for name, _, _ in ray_executor.FAILURES if name not in vars(exceptions)]
    assert missing == []


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize("argv,msg", [
    (["run", "-f", "fake", "--executor", "slurm"], "invalid choice: 'slurm' (choose from 'local', 'ray')"),
    (["run", "-f", "fake", "--address", "auto"], "--address auto goes with --executor ray"),
    (["run", "--resume", "--address", "auto"], "--address auto goes with --executor ray"),
])
def test_bad_executor_input_is_one_line_exit_2(argv, msg, capsys, tmp_path, monkeypatch, fake_env):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_a_suite_file_names_a_bad_executor(capsys, tmp_path, fake_env):
    suite = tmp_path / "s.toml"
    suite.write_text('executor = "slurm"\n')
    assert main(["run", str(suite), "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "key 'executor': 'slurm' is not one of: local, ray" in capsys.readouterr().err


def test_ray_not_installed_names_the_extra(capsys, tmp_path, monkeypatch, fake_env):
    monkeypatch.setattr(executors, "ray_installed", lambda: False)
    assert main(["run", "-f", "fake", "--executor", "ray", "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert "--executor ray needs Ray, which is not installed: pip install 'dlbench[ray]'" in err


def test_resume_reruns_a_ray_trial_and_kills_nothing(tmp_path, monkeypatch, fake_env):
    """A Ray trial records no pid (its node's pid is in the notes): a dead driver's trial is
    run again and no local process is touched."""
    store = Store(tmp_path / "s.sqlite")
    run_id = store.create_run("dlbench run --executor ray", {}, False)
    tid = store.add_trial(run_id, 0, _trial())
    store.mark_running(tid, started_at=1.0)  # the driver died between a task's end and its store
    monkeypatch.setattr(resume.processes, "kill_survivors", lambda *a: pytest.fail("killed"))
    resumption = resume.prepare(store, run_id, retry_failed=False)
    assert [t for t, _ in resumption.trials] == [tid] and resumption.killed == []
    assert isinstance(resumption.trials[0][1], PlannedTrial)


# --- one real sweep on a local Ray instance ---------------------------------------------------


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One local Ray instance for the module, started with the fake backend's environment:
    Ray's workers inherit the environment the instance was started with."""
    pytest.importorskip("ray")
    cache = tmp_path_factory.mktemp("ray-cache")
    path = os.environ.get("PYTHONPATH", "")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend")
        mp.setenv("PYTHONPATH", f"{TESTS_DIR}{os.pathsep}{path}" if path else str(TESTS_DIR))
        mp.setenv("FAKE_BEHAVIOUR", BEHAVIOURS)
        mp.setenv("DLBENCH_REFERENCE_FRAMEWORK", "fake")
        mp.setenv("DLBENCH_CACHE_DIR", str(cache))
        with ray_executor.connected(Cluster()):
            yield


@pytest.fixture
def same_env(ray_session: None, monkeypatch: pytest.MonkeyPatch, fake_env: None) -> None:
    """This process (the driver, and the local executor's workers) as the Ray workers see it."""
    monkeypatch.setenv("FAKE_BEHAVIOUR", BEHAVIOURS)
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend")


def ray_executor_node() -> str:
    """How the notes name the one node of the module's local instance."""
    import socket

    import ray

    [node] = ray.nodes()
    return f"{socket.gethostname()} ({node['NodeManagerAddress']}, node {node['NodeID'][:12]})"


def _trials(store_path: Path) -> list[tuple[str, str, str | None]]:
    """Each stored trial in the run's order: its whole spec, status and parity verdict."""
    with Store(store_path) as store:
        run_id = store.resolve_runs("latest")[0]
        return [(json.dumps(t.spec, sort_keys=True), t.status, (t.data.get("parity") or {}).get("verdict"))
                for t in store.trials(run_id)]


@pytest.mark.timeout(240)
def test_a_ray_sweep_gives_the_trials_of_the_local_executor(tmp_path, capsys, same_env):
    """2 configurations x 2 repeats, repeat 1 failing: the same trials, statuses and parity
    verdicts, in the same order (seeded), through either executor; then --resume on Ray. 47 s
    here (two cores, shared), after the module's ray.init (14 s)."""
    sweep = ["run", "-f", "fake", "--mode", "eager,compiled", *TINY, "--repeats", "2", "--order-seed", "7"]
    local, on_ray = tmp_path / "local.sqlite", tmp_path / "ray.sqlite"
    assert main([*sweep, "--store", str(local)]) == 3
    assert main([*sweep, "--executor", "ray", "--store", str(on_ray)]) == 3
    assert "submitted 4 trial(s) to the Ray cluster: 1 node(s)" in capsys.readouterr().out
    expected = _trials(local)
    assert sorted(status for _, status, _ in expected) == ["failed", "failed", "ok", "ok"]
    assert _trials(on_ray) == expected
    with Store(on_ray) as store:
        trials = store.trials(store.resolve_runs("latest")[0])
    node = ray_executor_node()
    assert all(t.data["notes"]["ray_node"] == node for t in trials if t.status == "ok")
    assert all("fake failure at step 3" in (t.error or "") for t in trials if t.status == "failed")
    with sqlite3.connect(on_ray) as db:  # no node's pid where --resume would kill it
        assert db.execute("SELECT count(*) FROM trials WHERE pid IS NOT NULL").fetchone() == (0,)
    # --resume re-runs only what is missing: here the failed trials, on Ray again
    assert main(["run", "--resume", "--retry-failed", "--executor", "ray", "--store", str(on_ray)]) == 3
    assert "2 trial(s) to run again (2 failed)" in capsys.readouterr().out
    assert _trials(on_ray) == expected


@pytest.mark.timeout(240)
def test_a_lost_ray_worker_is_a_crashed_trial_and_the_others_go_on(tmp_path, same_env):
    store_path = tmp_path / "ray.sqlite"
    argv = ["run", "-f", "fake", "--mode", "eager", *TINY, "--repeats", "4", "--executor", "ray"]
    assert main([*argv, "--store", str(store_path)]) == 3
    with Store(store_path) as store:
        trials = store.trials(store.resolve_runs("latest")[0])
    by_repeat = {t.spec["repeat"]: t for t in trials}
    assert [by_repeat[r].status for r in range(4)] == ["ok", "failed", "ok", "crashed"]
    assert (by_repeat[3].error or "").startswith("the Ray worker process running it died")
    assert by_repeat[0].metrics["samples_per_s"] and by_repeat[2].metrics["samples_per_s"]


@pytest.mark.timeout(240)
def test_auto_repeats_run_their_rounds_on_ray(tmp_path, capsys, same_env):
    """--repeats auto with the Ray executor: each round is one batch of Ray tasks; round 2's
    trial (repeat 1) fails by the module's behaviours, and the rule still stops by its budget."""
    store_path = tmp_path / "ray.sqlite"
    argv = ["run", "-f", "fake", "--mode", "eager", *TINY, "--repeats", "auto,min=1,max=2", "--executor", "ray",
            "--store", str(store_path)]
    assert main(argv) == 3
    out = capsys.readouterr().out
    assert out.count("submitted 1 trial(s) to the Ray cluster") == 2
    assert "repeats auto,min=1,max=2: stopped after 2 rounds: the budget of 2 repeats is spent" in out
    with Store(store_path) as store:
        assert [t.status for t in store.trials(1)] == ["ok", "failed"]
        assert store.run(1)["repeats"]["stop"] == "budget"
