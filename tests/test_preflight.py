"""The pre-flight checks (monitors/preflight.py): each finding judged from a faked machine, the
readers of /sys over a faked tree, the biggest consumers by name; `dlbench env` shows them. No
test says this machine is quiet: it is busy, and so is CI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.monitors import preflight
from dlbench.monitors.preflight import Machine

# These tests judge trials at dlbench's own busy threshold (conftest: busy_judged).
pytestmark = pytest.mark.usefixtures("busy_judged")

QUIET = Machine(load_1min=0.2, cores=2, cpus=2, interval_s=1.0, foreign_share=0.01, steal_share=0.0,
                steal_since_boot_s=0.0, top=(), governors=("performance",), turbo=False,
                turbo_switch="echo 1 | sudo tee /sys/devices/system/cpu/intel_pstate/no_turbo", threads_per_core=1)


def by_check(found: list[preflight.Finding]) -> dict[str, preflight.Finding]:
    return {f.check: f for f in found}


def test_a_tuned_quiet_machine_has_no_warning_and_no_note():
    found = preflight.findings(QUIET, threads=2)
    assert [f.level for f in found] == ["ok"] * len(found)
    assert preflight.warnings(found) == []
    assert list(by_check(found)) == ["load", "other processes", "threads", "governor", "turbo", "smt"]


def test_other_processes_over_the_threshold_warn_with_the_biggest_by_name():
    busy = replace(QUIET, foreign_share=0.62, top=(("python", 0.9), ("cc1plus", 0.3)))
    f = by_check(preflight.findings(busy))["other processes"]
    assert f.level == "warn"
    assert "62% of the CPU" in f.state and "python 0.9 cores, cc1plus 0.3 cores" in f.state
    assert "--quiet-wait" in (f.advice or "")
    assert [w.check for w in preflight.warnings(preflight.findings(busy))] == ["other processes"]


def test_threads_beyond_the_free_cores_warn_and_name_a_count_that_fits():
    half = replace(QUIET, foreign_share=0.5)  # one of two cores taken
    f = by_check(preflight.findings(half, threads=2))["threads"]
    assert f.level == "warn" and "about 1.0 of 2 cores free" in f.state and "--threads 1" in (f.advice or "")
    assert by_check(preflight.findings(half, threads=1))["threads"].level == "ok"
    assert "threads" not in by_check(preflight.findings(half))  # no --threads: the foreign check says it


def test_load_over_the_cpus_warns_only_where_the_cpu_now_cannot_be_measured():
    loaded = replace(QUIET, load_1min=5.0)
    assert by_check(preflight.findings(loaded))["load"].level == "note"  # a minute's average, ours included
    blind = replace(loaded, foreign_share=None)
    found = by_check(preflight.findings(blind))
    assert found["load"].level == "warn" and found["other processes"].level == "note"


def test_steal_governor_turbo_and_smt_are_notes_with_what_to_do():
    vm = replace(QUIET, steal_since_boot_s=12.0, governors=("powersave",), turbo=True, threads_per_core=2)
    found = by_check(preflight.findings(vm))
    assert found["steal"].level == "note" and "virtual machine" in found["steal"].state
    assert found["governor"].level == "note" and "cpupower frequency-set -g performance" in (found["governor"].advice or "")
    assert found["turbo"].level == "note" and "no_turbo" in (found["turbo"].advice or "")
    assert found["smt"].level == "note" and "2 logical CPUs per core" in found["smt"].state
    stolen = by_check(preflight.findings(replace(vm, steal_share=0.2)))["steal"]
    assert stolen.level == "warn" and "20%" in stolen.state
    hidden = by_check(preflight.findings(replace(QUIET, governors=(), turbo=None, threads_per_core=None)))
    assert hidden["governor"].state.startswith("not exposed") and "turbo" not in hidden and "smt" not in hidden


def test_each_finding_is_one_line_and_serialises():
    for f in preflight.findings(replace(QUIET, foreign_share=0.7, top=(("x", 1.4),)), threads=2):
        assert "\n" not in f.line() and f.line().startswith(f.check + ": ")
        assert json.loads(json.dumps(f.to_dict()))["level"] == f.level


def test_sys_readers_over_a_faked_tree(tmp_path: Path):
    for cpu, governor in ((0, "powersave"), (1, "performance"), (2, "powersave")):
        (tmp_path / f"cpu{cpu}" / "cpufreq").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    assert preflight.read_governors(tmp_path) == ("powersave", "performance")
    assert preflight.read_turbo(tmp_path) == (None, None)
    (tmp_path / "cpufreq" / "boost").parent.mkdir(exist_ok=True)
    (tmp_path / "cpufreq" / "boost").write_text("1\n")
    on, switch = preflight.read_turbo(tmp_path)
    assert on is True and switch == f"echo 0 | sudo tee {tmp_path / 'cpufreq' / 'boost'}"
    (tmp_path / "intel_pstate").mkdir()
    (tmp_path / "intel_pstate" / "no_turbo").write_text("1\n")  # intel_pstate first: turbo off
    assert preflight.read_turbo(tmp_path)[0] is False
    topo = tmp_path / "cpu0" / "topology"
    topo.mkdir()
    for text, n in (("0-1", 2), ("0,4", 2), ("0", 1), ("0-3", 4)):
        (topo / "thread_siblings_list").write_text(text + "\n")
        assert preflight.read_threads_per_core(tmp_path) == n
    assert preflight.read_threads_per_core(tmp_path / "absent") is None


def test_top_consumers_are_summed_by_name_in_cores():
    before = {1: ("cc1plus", 10.0), 2: ("cc1plus", 5.0), 3: ("python", 0.0), 4: ("idle", 3.0)}
    after = {1: ("cc1plus", 10.5), 2: ("cc1plus", 5.5), 3: ("python", 1.8), 4: ("idle", 3.0), 5: ("new", 0.2)}
    assert preflight._top(before, after, 2.0) == (("python", 0.9), ("cc1plus", 0.5), ("new", 0.1))


def test_a_measurement_of_this_machine_is_complete(tmp_path):
    """Whatever the load: every number is there (this is Linux), and the interval was waited."""
    naps = []
    m = preflight.Measurement().finish(0.3, sleep=lambda s: (naps.append(s), __import__("time").sleep(s)))
    assert m.interval_s >= 0.3 and naps and naps[0] <= 0.3
    assert m.foreign_share is not None and 0.0 <= m.foreign_share <= 1.0
    assert m.cores >= 1 and m.cpus >= m.cores and m.load_1min is not None


def test_env_shows_the_preflight_and_its_json(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "pre-flight" in out and "other processes" in out
    assert main(["env", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    checks = [f["check"] for f in data["preflight"]]
    assert checks[:2] == ["load", "other processes"]
    assert {f["level"] for f in data["preflight"]} <= {"ok", "note", "warn"}


# -- run and tune: the pre-flight before the first trial, --quiet-wait before each ------------------

TINY = ["--preset", "tiny", "--dataset-size", "64", "--batch-size", "16", "--repeats", "1"]


@pytest.mark.usefixtures("fake_env")
def test_run_records_the_preflight_and_each_trials_quiet_wait(tmp_path, capsys):
    store = str(tmp_path / "s.sqlite")
    assert main(["run", "-f", "fake", "--mode", "eager", *TINY, "--quiet-wait", "2s", "--store", store]) == 0
    out = capsys.readouterr().out
    assert main(["export", "latest", "--store", store]) == 0
    [run] = json.loads(capsys.readouterr().out)["runs"]
    checks = {f["check"]: f for f in run["environment"]["preflight"]}
    assert {"load", "other processes"} <= set(checks)
    for f in checks.values():  # each warning was printed before the trials, one line each
        assert (f"pre-flight: {f['check']}: " in out.replace("\n", " ")) == (f["level"] == "warn")
    [trial] = run["trials"]
    waited, gave_up = trial["metrics"]["quiet_wait_s"]["value"], trial["metrics"]["quiet_wait_gave_up"]["value"]
    assert 0.9 <= waited and gave_up in (0.0, 1.0)  # one second's measurement at least; busy or not
    assert any("waited" in w and "ran anyway" in w for w in trial["warnings"]) == (gave_up == 1.0)
    assert "quiet_wait_s" not in trial["spec"] or trial["spec"]["quiet_wait_s"] == 2.0
    html = tmp_path / "r.html"
    assert main(["report", "1", "--store", store, "--html", str(html)]) == 0
    page = html.read_text()
    assert "pre-flight, before the first trial" in page and "other processes: other processes took" in page


def test_quiet_wait_is_no_part_of_the_configuration():
    from dlbench.spec import Policy, TrialSpec, WorkloadSpec, configuration_key, to_dict

    spec = TrialSpec(workload=WorkloadSpec(batch_size=8), framework="torch", policy=Policy(mode="eager"))
    waiting = replace(spec, quiet_wait_s=600.0)
    waiting.validate()
    assert configuration_key(to_dict(spec)) == configuration_key(to_dict(waiting))
    assert "quiet_wait_s" not in to_dict(spec)  # older keys and specs unchanged


def test_the_wait_is_recorded_given_up_or_not(monkeypatch):
    from dlbench.results.records import TrialResult
    from dlbench.runner import spawn
    from dlbench.spec import Policy, TrialSpec, WorkloadSpec

    trial = TrialSpec(workload=WorkloadSpec(batch_size=8), framework="fake", policy=Policy(mode="eager"),
                      quiet_wait_s=30.0)
    events = []

    def busy(limit_s, on_wait=None, **kw):
        on_wait(0.62, 1.0)
        return None

    monkeypatch.setattr(spawn, "wait_quiet", busy)
    gave_up = spawn._wait_quiet(trial, events.append).record(TrialResult(status="ok"))
    assert gave_up.metrics["quiet_wait_gave_up"] == 1.0
    assert "other processes took 62% of the CPU" in gave_up.warnings[0]
    assert "waiting for a quiet machine" in events[0]["name"]
    monkeypatch.setattr(spawn, "wait_quiet", lambda limit_s, on_wait=None, **kw: 4.0)
    quiet = spawn._wait_quiet(trial, None).record(TrialResult(status="ok"))
    assert quiet.metrics == {"quiet_wait_s": 4.0, "quiet_wait_gave_up": 0.0} and not quiet.warnings
    untouched = spawn._wait_quiet(replace(trial, quiet_wait_s=None), None).record(TrialResult(status="ok"))
    assert untouched.metrics == {}


@pytest.mark.parametrize("argv,msg", [
    (["run", "--quiet-wait", "soon"], "--quiet-wait 'soon' is not a duration such as 90s, 10min or 1h"),
    (["tune", "--quiet-wait", "0s"], "--quiet-wait '0s' is not a duration"),
])
def test_a_bad_quiet_wait_is_one_line_exit_2(argv, msg, capsys, tmp_path):
    assert main([*argv, "--store", str(tmp_path / "s.sqlite")]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1


def test_the_suite_key_takes_a_duration_or_seconds(tmp_path):
    from dlbench.cli import suite
    from dlbench.cli.common import UsageError

    path = tmp_path / "s.toml"
    path.write_text('quiet-wait = "10min"\n')
    assert suite.load(str(path))["quiet_wait"] == "10min"
    path.write_text("quiet-wait = 90\n")
    assert suite.load(str(path))["quiet_wait"] == 90.0
    path.write_text('quiet-wait = "later"\n')
    with pytest.raises(UsageError, match="key 'quiet-wait': 'later' is not a duration such as 90s"):
        suite.load(str(path))
