"""A real hog (busy loops on every CPU) beside a real trial (the fake backend in a worker
process): the trial's record says busy, its step-time series shows the foreign share, and a
quiet wait beside the hog runs out. Marked slow (a hog that takes every core slows whatever
else runs). Nothing here asserts quiet: CI machines are busy."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator
from dataclasses import replace

import pytest

from dlbench.analysis import interference
from dlbench.runner import spawn
from dlbench.spec import Policy, TrialSpec, WorkloadSpec

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fake_env", "busy_judged")]


def _spin() -> None:
    while True:
        pass


@pytest.fixture
def hog() -> Iterator[None]:
    """One busy loop per CPU of the machine (forked: spinning at once), killed after the test."""
    fork = multiprocessing.get_context("fork")
    procs = [fork.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.join()


def test_a_trial_beside_a_hog_on_every_cpu_is_busy_and_a_quiet_wait_runs_out(tmp_path, monkeypatch, hog):
    monkeypatch.setenv("FAKE_STEP_S", "0.02")  # the fake's device work sleeps: the hog takes the CPU
    trial = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=512, eval_size=16), framework="fake",
                      policy=Policy(mode="eager"), epochs=2, warmup_epochs=1, chunk_steps=4, timeout_s=300.0,
                      trial_id=1)
    trial.validate()
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "ok", r.error
    record = interference.judge(r.metrics)
    assert record.state == interference.BUSY and record.busy is True, r.metrics
    assert record.foreign_cpu_share is not None and record.foreign_cpu_share > 0.5  # most of the machine
    points = r.series[interference.SERIES]
    assert len(points) >= 2 and all(v > interference.BUSY_FOREIGN_SHARE for _, v in points)
    waited = spawn.run_trial(replace(trial, quiet_wait_s=3.0, epochs=1, trial_id=2), tmp_path)
    assert waited.metrics["quiet_wait_gave_up"] == 1.0 and waited.metrics["quiet_wait_s"] >= 3.0
    assert any("ran anyway: other processes took" in w for w in waited.warnings)
