"""The plugin's own CI: dlbench's contract checks, imported from the installed dlbench (the same
ones `pytest --pyargs dlbench.testing` runs). The neutral module's checks take seconds; the
frameworks' Programs and parity need the frameworks installed (dlbench[torch], ...)."""

from __future__ import annotations

import pytest

from dlbench import workloads
from dlbench.testing import contract


def test_lstm_is_installed_as_a_plugin():
    origin = workloads.origin("lstm")
    assert origin.distribution == "dlbench-lstm" and not origin.builtin


def test_the_neutral_module_holds_the_contract():
    assert contract.neutral_problems("lstm") + contract.unknown_families("lstm") == []


@pytest.mark.parametrize("framework", ["torch", "tensorflow", "jax", "keras-jax"])
def test_each_framework_holds_the_contract(framework):
    why = contract.implementing("lstm")[framework]
    if why is not None:
        pytest.skip(why)
    assert contract.run("lstm", [framework], None, parity=True) == []
