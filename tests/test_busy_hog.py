"""A ranking decided with a real hog switched on and off during the run (issue 45): two busy-loop
processes (both cores of a 2-core machine) run beside the fake backend's first two rounds of
`fake` only, whose steps are a fixed amount of CPU work (FAKE_WORK=cpu), so that a hog slows it
as it slows a real framework; `fake2` does 1.5x the work of `fake`: quietly, `fake` is faster.
Counting the hogged trials would rank `fake` slower. The run (`--repeats auto`, with its retake
and its real wait for a quiet machine) must end with the quiet verdict or say the machine was
busy: never the opposite verdict.

The interference of each trial is read from /proc around it by this test (the machine's busy
time less the trial's own: the worker, reaped, and this process), unless the trial recorded its
own (the per-trial monitor). On a machine that others load, every trial may be busy: the run then
says so, which the assertion allows. Slow: a dozen worker processes and a bounded wait."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest

from dlbench.analysis import repeats
from dlbench.analysis.busy import record
from dlbench.analysis.interference import BUSY, FOREIGN_CPU_SHARE
from dlbench.monitors.interference import cpu_times, foreign_share
from dlbench.report import model
from dlbench.report.tables import report_tables
from dlbench.results.store import Store
from dlbench.runner import rounds
from dlbench.runner.executor import Outcome, Progress, execute, register
from dlbench.runner.plan import PlannedTrial, Sweep, make_plan

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("busy_judged")]


class Hog:
    """Busy loops on every core this process may use, for as long as the `with` lasts."""

    def __enter__(self) -> Hog:
        loop = "while True:\n    pass\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", loop]) for _ in os.sched_getaffinity(0)]
        time.sleep(0.5)  # the loops have started
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()


def _own_cpu_s() -> float:
    """This process's CPU and its reaped children's (the trial's worker, once it ended)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


def hogged_executor(hogged: set[tuple[str, int]], seen: list[tuple[int, bool]]):
    """`execute`, one trial at a time, the hog on for the (framework, repeat)s in `hogged`, each
    trial's foreign CPU share measured around it and stored where the trial has none."""
    def run_trials(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]], progress: Progress) -> Outcome:
        outcome = Outcome()
        for tid, planned in trials:
            on = (planned.spec.framework, planned.spec.repeat) in hogged
            hog = Hog().__enter__() if on else None
            try:
                before, own_before = cpu_times(), _own_cpu_s()
                outcome.add(execute(store, run_id, [(tid, planned)], progress))
                after, own_after = cpu_times(), _own_cpu_s()
            finally:
                if hog is not None:
                    hog.__exit__()
            assert before is not None and after is not None, "this test reads /proc/stat"
            if store.metrics(tid).get(FOREIGN_CPU_SHARE) is None:
                share = foreign_share(before, after, own_after - own_before)
                store.add_metrics(tid, {FOREIGN_CPU_SHARE: share}, {})
            seen.append((tid, on))
        return outcome
    return run_trials


@pytest.mark.usefixtures("fake_env")
def test_a_hog_switched_on_and_off_never_turns_the_ranking_around(tmp_path, monkeypatch):
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,fake2=fake_backend:FakeBackend")
    monkeypatch.setenv("FAKE_WORK", "cpu")
    monkeypatch.setenv("FAKE_STEP_S_FAKE", "0.01")
    monkeypatch.setenv("FAKE_STEP_S_FAKE2", "0.015")
    rule = repeats.parse("auto,min=3,max=6,wait=30s")
    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("dlbench run", {}, False, order_seed=3, repeats={"rule": rule.text})
    plan = make_plan(Sweep(frameworks=("fake", "fake2"), modes=("eager",), preset="tiny", repeats=rule.first,
                           dataset_size=512, batch_sizes=(16,), order_seed=3))
    seen: list[tuple[int, bool]] = []
    run_trials = hogged_executor({("fake", 0), ("fake", 1)}, seen)
    state = rounds.AutoState(rule.text)
    rounds.run_rounds(store, run, rule, state, register(store, run, plan), run_trials, Progress())
    rows = {r.id: r for r in store.trials(run)}
    # every trial the hog ran beside was measured busy
    assert all(record(rows[tid].metrics).state == BUSY for tid, on in seen if on), \
        [rows[tid].metrics.get(FOREIGN_CPU_SHARE) for tid, on in seen if on]
    ranking = next(t for t in report_tables(model.load(store, [run])) if t.id == "ranking")
    names = [c.text for c in ranking.column("framework")]
    verdict = ranking.column("verdict")[0].text
    assert (names[0] == "fake" and verdict.startswith("faster")) or "busy" in verdict, (names, verdict, state.text)
    # and the run said why it stopped: decided, or busy (never a call for more repeats alone)
    assert state.stop in ("decided", "intervals", "busy", "budget"), state.text
    if state.stop == "budget":
        assert "busy" in (state.text or "") or verdict.startswith("faster"), state.text
