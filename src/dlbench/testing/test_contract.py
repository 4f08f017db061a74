"""`pytest --pyargs dlbench.testing`: the contract of a workload (testing/contract.py) as
tests, for a plugin's own CI. Which workloads: DLBENCH_CONTRACT_WORKLOADS (comma list; default:
every installed plugin's); frameworks: DLBENCH_CONTRACT_FRAMEWORKS (default: every installed one
that implements each); modes: DLBENCH_CONTRACT_MODES (default: every mode each one runs; parity
in the first of them each runs, else compiled)."""

from __future__ import annotations

import os

import pytest

from dlbench import workloads
from dlbench.spec import SpecError
from dlbench.testing import contract, program


def _listed(variable: str) -> list[str] | None:
    value = os.environ.get(variable, "").strip()
    return [v.strip() for v in value.split(",") if v.strip()] or None


WORKLOADS = _listed("DLBENCH_CONTRACT_WORKLOADS") or [n for n in workloads.names() if not workloads.origin(n).builtin]
FRAMEWORKS = _listed("DLBENCH_CONTRACT_FRAMEWORKS")
MODES = _listed("DLBENCH_CONTRACT_MODES")


def _frameworks(name: str) -> list[str]:
    """The frameworks checked for `name`: those asked for, else every installed implementation."""
    try:
        found = contract.implementing(name)
    except SpecError:
        return []  # test_neutral_contract reports why
    return FRAMEWORKS or [f for f, why in found.items() if why is None]


PAIRS = [(w, f) for w in WORKLOADS for f in _frameworks(w)]


@pytest.mark.parametrize("name", WORKLOADS or [pytest.param(None, marks=pytest.mark.skip(
    reason="no plugin workload installed; name one in DLBENCH_CONTRACT_WORKLOADS"))])
def test_neutral_contract(name: str) -> None:
    try:
        found = contract.neutral_problems(name) + contract.unknown_families(name)
    except SpecError as e:
        pytest.fail(str(e))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(("name", "framework"), PAIRS)
def test_program_contract(name: str, framework: str) -> None:
    why = contract.implementing(name).get(framework, "not registered")
    if why is not None:
        pytest.fail(f"{framework}: {why}")
    supported = [m for m, reason in contract.get_backend(framework).modes().items() if reason is None]
    found, facts = program.problems(framework, name, [m for m in MODES or supported if m in supported])
    assert facts or found, "no mode ran"
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", [w for w in WORKLOADS if _frameworks(w)])
def test_parity(name: str) -> None:
    found = contract.parity_problems(name, _frameworks(name), MODES)
    assert not found, "\n".join(found)
