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


@pytest.fixture(scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dlbench-cache")


@pytest.fixture(autouse=True)
def _isolated_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _cache_dir: Path) -> None:
    monkeypatch.setenv("DLBENCH_LOCK", str(tmp_path / "run.lock"))
    # Parity references are computed once per test session, never read from the user's cache.
    monkeypatch.setenv("DLBENCH_CACHE_DIR", str(_cache_dir))


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Register the fake backend for this process and every worker it starts."""
    monkeypatch.setenv("DLBENCH_BACKENDS", "fake=fake_backend:FakeBackend,missing=fake_backend:MissingBackend")
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{TESTS_DIR}{os.pathsep}{path}" if path else str(TESTS_DIR))
    monkeypatch.syspath_prepend(str(TESTS_DIR))
    monkeypatch.setenv("FAKE_BEHAVIOUR", "ok")
    # The fake computes its own float64 reference: runner tests never start a real framework.
    monkeypatch.setenv("DLBENCH_REFERENCE_FRAMEWORK", "fake")
    yield
