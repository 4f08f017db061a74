"""Shared fixtures. Worker processes find the fake backend through DLBENCH_BACKENDS and
PYTHONPATH; each test gets its own run lock so tests never wait on a real `dlbench run`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

TESTS_DIR = Path(__file__).resolve().parent

# CI profile: derandomised and bounded, so the suite is repeatable and fast on two cores.
settings.register_profile("ci", derandomize=True, max_examples=40, deadline=None)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment, which the
# report's console honours as the user's width (report/terminal.py): the tests read the output
# of a pipe, wide, as a single test process (and CI) sees it; a test that wants a width sets it.
# No trial is ever busy unless a test asks for the verdict (the `busy_judged` fixture): a machine
# running two test processes is never quiet, and the mechanics a test checks (how many trials a
# search runs, what a ranking says) must not depend on its load. Set for the whole session, so that
# module-scoped fixtures that run trials see it too.
os.environ["DLBENCH_BUSY_SHARE"] = "1"

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): DLBENCH_TEST_WORKERS, else two processes where this process
    may use two cores or more. Not one per core: a test file starts framework workers of a few GiB
    each (torch, TensorFlow, JAX), and each process computes the session's float64 references
    once for itself. Two ran the suite in 875 s against 1,326 s in one process on two cores
    (2026-11-28, the default tier, ~1,270 tests)."""
    asked = os.environ.get("DLBENCH_TEST_WORKERS")
    if asked:
        return int(asked)
    return min(2, len(os.sched_getaffinity(0)))


@pytest.fixture(scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dlbench-cache")


@pytest.fixture(autouse=True)
def _isolated_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _cache_dir: Path) -> None:
    monkeypatch.setenv("DLBENCH_LOCK", str(tmp_path / "run.lock"))

    # Parity references are computed once per test session, never read from the user's cache.
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(_cache_dir))


@pytest.fixture
def busy_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The busy verdict at dlbench's own threshold (analysis/interference.py), for the tests of
    interference: trials whose foreign CPU share is above it are busy."""
    monkeypatch.delenv("DLBENCH_BUSY_SHARE", raising=False)


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch, _cache_dir: Path) -> Iterator[None]:
    """Register the fake backend for this process and every worker it starts."""
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,missing=fake_backend:MissingBackend")
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{TESTS_DIR}{os.pathsep}{path}" if path else str(TESTS_DIR))
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
    # The fake computes its own float64 reference: runner tests never start a real framework.
    # Its references live apart: reference keys name no framework, so a fake "cnn" reference
    # would otherwise be what a real framework's cnn is judged against later in the session.
    monkeypatch.setenv("DLBENCH_REFERENCE_FRAMEWORK", "fake")
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(_cache_dir / "fake"))
    yield
