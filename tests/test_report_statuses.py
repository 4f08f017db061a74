"""Every report table over trials that ended any way (issue 48.1): a store holding a trial of
each status (ok, failed, crashed, timeout, oom, interrupted, unsupported, skipped, pending,
running) in every scenario (train, infer, converge, generate, solve and its SciPy baseline,
rollout, RL train, sample, profiled), each with and without notes and metrics, is reported by
`dlbench report` and `report --html` (exit 0, DESIGN §4), alone and beside another run. An
interrupted run's trials have no notes (NULL in the store): a table that reads a note must read
none."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dlbench.cli.main import main
from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner.plan import Sweep, make_plan
from dlbench.scenarios import get as scenario_record
from dlbench.spec import ConvergeOptions, TrialSpec
from dlbench.workloads import stored_scenario

pytest.importorskip("plotly")

# (workload or problem, --scenario): every runner scenario (dlbench/scenarios.py), the solver's
# SciPy baseline planned beside it, and profiled trials of train and infer.
SUBJECTS = [("mlp", "train"), ("mlp", "infer"), ("mlp", "converge"), ("lm", "generate"), ("hires", "solve"),
            ("ppo", "rollout"), ("ppo", "train"), ("ppo", "converge"), ("ddpm", "infer")]
# Those without a result first: a table that takes "the first trial with a note" meets them first.
STATUSES = ("pending", "running", "unsupported", "skipped", "interrupted", "failed", "crashed", "timeout", "oom",
            "ok")


def _specs() -> list[TrialSpec]:
    out: list[TrialSpec] = []
    for workload, scenario in SUBJECTS:
        plan = make_plan(Sweep(workloads=(workload,), frameworks=("torch",), frameworks_explicit=True,
                               modes=("eager",), scenarios=(scenario,), repeats=1, preset="tiny",
                               profile=scenario in ("train", "infer") and workload == "mlp",
                               scenario_options=(ConvergeOptions(target_accuracy=0.5),) if scenario == "converge" else ()))
        out += [p.spec for p in plan.trials]
    return out


def _full(spec: TrialSpec, status: str) -> TrialResult:
    """A trial with the notes and metrics its scenario's tables read, the headline among them."""
    headline = scenario_record(stored_scenario({"workload": {"name": spec.workload.name},
                                                "scenario": spec.scenario}).name).headline
    metrics = {headline: 12.5, "samples_per_s": 100.0, "time_to_first_step_s": 1.0, "train_s": 2.0,
               "rss_peak_bytes": 2.0e8, "step_s": 0.01, "output_tokens_per_s": 50.0, "ttft_s": 0.1,
               "tpot_s": 0.02, "time_to_target_s": 3.0, "env_steps_per_s": 500.0, "accuracy": 0.6}
    notes = {"decoder": "kv cache", "steps_to_target": "not reached", "scaling_kind": "data-parallel",
             "profile_caveat": "sampled", "solve_failures": "{}"}
    return TrialResult(status=status, error=None if status == "ok" else f"{status}: what happened",
                       metrics=metrics, notes=notes, series={"loss": [(0.0, 2.3), (1.0, 2.2)]},
                       parity={"verdict": "pass"} if status == "ok" else {})


def _bare(status: str) -> TrialResult:
    """A trial with neither notes nor metrics (as an interrupted, crashed or pending one is)."""
    return TrialResult(status=status, error=None if status == "ok" else f"{status}: what happened")


# How much a trial holds: notes and metrics; an empty result (notes {}); nothing at all (NULL
# notes, parity, policy: a trial planned unsupported or skipped, or never started).
KINDS = ("nothing", "empty", "full")


def _store(path: Path) -> None:
    """Run 1: every spec once per status and kind; run 2: one ok trial of each spec and the
    others left pending and running (a run killed before they started)."""
    specs = _specs()
    with Store(path) as store:
        for run in (1, 2):
            rid = store.create_run("dlbench run ...", {"python": "3.11", "cpu_model": "x"}, False)
            seq = 0
            for spec in specs:
                for status in STATUSES if run == 1 else ("pending", "running", "ok"):
                    for kind in KINDS:
                        repeat = len(KINDS) * STATUSES.index(status) + KINDS.index(kind)
                        planned = dataclasses.replace(spec, repeat=repeat)
                        first = "pending" if status == "running" or kind != "nothing" else status
                        tid = store.add_trial(rid, seq, planned, status=first)
                        seq += 1
                        if status == "running":
                            store.mark_running(tid)
                        elif kind != "nothing" and status != "pending":
                            store.finish_trial(tid, _full(spec, status) if kind == "full" else _bare(status))


@pytest.fixture(scope="module")
def every_status(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("statuses") / "s.sqlite"
    _store(path)
    return path


@pytest.mark.parametrize("runs", [["1"], ["2"], ["1", "2"]])
def test_a_store_of_every_status_in_every_scenario_is_reported(every_status, runs, tmp_path, capsys):
    code = main(["report", *runs, "--wide", "--store", str(every_status)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in out + err
    for status in ("failed", "crashed", "timeout", "oom", "interrupted") if "1" in runs else ("pending",):
        assert status in out, status
    html = tmp_path / "r.html"
    code = main(["report", *runs, "--html", str(html), "--store", str(every_status)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert html.read_text().rstrip().endswith("</html>")


@pytest.mark.parametrize("argv", [["export", "all", "--format", "json"], ["export", "all", "--format", "csv"],
                                  ["compare", "1", "2", "--force"], ["history"]])
def test_exports_comparisons_and_history_of_every_status(every_status, argv, capsys):
    """The other readers of a store: an answer (compare: its documented exits), never a traceback."""
    code = main([*argv, "--store", str(every_status)])
    out, err = capsys.readouterr()
    assert code in ({0, 1, 3, 4} if argv[0] == "compare" else {0}), err
    assert "Traceback" not in out + err
