"""Plugins without a framework: workloads and backends found through entry points, held to the
contract, shown with their origin, and a broken one (import error, missing function, wrong
parameter shapes, a clash) reported in one line with exit 2 while every other workload keeps
working. The plugins are small packages made in tmp dirs: a dist-info with entry_points.txt on
sys.path is an installed distribution to importlib.metadata, no pip needed."""

from __future__ import annotations

import importlib.metadata
import os
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dlbench import backends, plugins, workloads
from dlbench.backends.base import build_program
from dlbench.cli.common import workload_names
from dlbench.cli.main import main
from dlbench.plugins import PluginError
from dlbench.results.store import Store
from dlbench.runner.plan import workload_spec
from dlbench.spec import Policy, SpecError, TrialSpec

# A valid workload module: the built-in mlp under another name, with builders of its own.
GOOD = """
from dlbench.workloads.mlp import *
NAME = "{name}"
BUILDERS = {{"{family}": "{package}.builder"}}
"""
# A builder that fails on import, as a plugin's may in the worker.
RAISING_BUILDER = "raise ImportError('libfoo.so.1: cannot open shared object file')\n"


Install = Callable[..., Path]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    """install(package, {module: source}, entry_points, dist=..., version=...) -> site dir: a
    package and its dist-info in a fresh site directory, on sys.path and PYTHONPATH (for the
    worker processes); everything is forgotten again afterwards. Only these distributions'
    entry points are seen in this process (the README's test command installs the example
    plugin examples/plugin-lstm, which would otherwise be one more workload here)."""
    added: list[str] = []
    every = importlib.metadata.entry_points

    def ours(**select: Any) -> importlib.metadata.EntryPoints:
        return importlib.metadata.EntryPoints(
            ep for ep in every(**select) if str(tmp_path) in str(getattr(ep.dist, "_path", "")))

    monkeypatch.setattr(importlib.metadata, "entry_points", ours)

    def make(package: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]],
             dist: str = "acme-plugin", version: str = "1.2.3") -> Path:
        site = tmp_path / f"site-{package}"
        (site / package).mkdir(parents=True)
        (site / package / "__init__.py").write_text("")
        for name, source in modules.items():
            (site / package / f"{name}.py").write_text(textwrap.dedent(source))
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in entry_points.items()))
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
        added.append(package)
        plugins.forget()
        return site

    yield make
    for name in [m for m in sys.modules if m.split(".")[0] in added]:
        del sys.modules[name]
    plugins.forget()


def good_workload(install: Install, name: str = "mlp2", family: str = "acme_backend", **kw: str) -> Path:
    package = f"plug_{name}"
    return install(package, {"workload": GOOD.format(name=name, family=family, package=package),
                             "builder": RAISING_BUILDER},
                   {"dlbench.workloads": {name: f"{package}.workload"}}, **kw)


def test_a_plugin_workload_is_found_checked_and_listed_with_its_origin(install, capsys):
    good_workload(install)
    assert workloads.names()[-1] == "mlp2" and "mlp2" in workloads.usable()
    assert workloads.check("mlp2").NAME == "mlp2"
    origin = workloads.origin("mlp2")
    assert (origin.distribution, origin.version, origin.text()) == ("acme-plugin", "1.2.3", "plugin acme-plugin 1.2.3")
    assert workloads.origin("mlp").builtin and workloads.builders("mlp") is None
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mlp2" in out and "plugin acme-plugin 1.2.3" in out and "built-in" in out


def test_discovery_imports_nothing_until_a_plugin_is_asked_for(install):
    good_workload(install)
    assert "mlp2" in workloads.names()
    assert "plug_mlp2.workload" not in sys.modules
    workloads.get("mlp")  # a built-in name never imports a plugin
    assert "plug_mlp2.workload" not in sys.modules
    workloads.get("mlp2")
    assert "plug_mlp2.workload" in sys.modules


BROKEN = {
    "import error": ("import numpy\nraise ModuleNotFoundError(\"No module named 'scipy.special.lstm'\")\n",
                     "failed to import: ModuleNotFoundError: No module named 'scipy.special.lstm'"),
    "missing function": (GOOD.replace('NAME = "{name}"', 'NAME = "{name}"\ndel reference_loss'),
                         "breaks the workload contract: it lacks reference_loss"),
    "wrong parameter shapes": (GOOD + "\nimport numpy as np\n_init = init_params\n"
                               "def init_params(spec):\n    p = _init(spec)\n"
                               "    p['dense1.kernel'] = np.zeros((3, 3), np.float32)\n    return p\n",
                               "init_params dense1.kernel is (3, 3) float32, param_shapes says (32, 64) float32"),
    "param_shapes not shapes": (GOOD + "\ndef param_shapes(spec):\n    return {{'w': [4, 4]}}\n",
                                "param_shapes: 'w' not a name -> tuple of positive ints"),
    "wrong name": (GOOD.replace('NAME = "{name}"', 'NAME = "other"'), "NAME 'other' is not its registered name"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_plugin_is_one_line_and_exit_2_and_breaks_nothing_else(case, install, capsys):
    source, reason = BROKEN[case]
    install("plug_bad", {"workload": source.format(name="bad", family="x", package="plug_bad")},
            {"dlbench.workloads": {"bad": "plug_bad.workload"}}, dist="acme-bad", version="0.0.1")
    for argv in (["check", "-w", "bad", "-f", "torch"], ["run", "-w", "mlp,bad", "--preset", "tiny"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "acme-bad 0.0.1" in err and "dlbench.workloads: bad = plug_bad.workload" in err and reason in err, err
    # Every other workload is untouched: list shows the broken one and why, `all` leaves it out.
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "acme-bad 0.0.1" in out and "no: plugin" in out and "transformer" in out
    assert workload_names(("all",)) == tuple(workloads.WORKLOADS)
    assert "left out of 'all'" in capsys.readouterr().err
    assert workloads.get("mlp") is workloads.WORKLOADS["mlp"]


def test_a_plugin_clashing_with_a_built_in_name_is_refused_by_name_and_leaves_the_built_in(install, capsys):
    good_workload(install, name="cnn")
    assert workloads.get("cnn") is workloads.WORKLOADS["cnn"]  # workers and internals: the built-in
    assert main(["check", "-w", "cnn", "-f", "torch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "clashes with the built-in workload 'cnn'" in err and "acme-plugin 1.2.3" in err
    assert workload_names(("all",)) == tuple(workloads.WORKLOADS)
    assert "clashes" in capsys.readouterr().err


def test_two_plugins_registering_one_name_are_refused(install):
    good_workload(install, name="dup", dist="acme-one")
    install("plug_dup2", {"workload": GOOD.format(name="dup", family="x", package="plug_dup2")},
            {"dlbench.workloads": {"dup": "plug_dup2.workload"}}, dist="acme-two")
    with pytest.raises(PluginError, match="registered by several plugins.*acme-one.*acme-two|acme-two.*acme-one"):
        workloads.check("dup")


def test_an_entry_point_that_names_no_module_is_refused(install):
    install("plug_cls", {"workload": "class Model:\n    pass\n"},
            {"dlbench.workloads": {"cls": "plug_cls.workload:Model"}})
    with pytest.raises(PluginError, match="names a type, not a module"):
        workloads.check("cls")


def test_removing_the_plugin_leaves_every_command_working(install, monkeypatch, capsys):
    site = good_workload(install)
    assert "mlp2" in workloads.names()
    sys.path.remove(str(site))  # uninstalled (monkeypatch restores sys.path afterwards)
    plugins.forget()
    assert workloads.names() == tuple(workloads.WORKLOADS)
    assert main(["list"]) == 0 and "mlp2" not in capsys.readouterr().out
    assert main(["check", "-w", "mlp2"]) == 2
    assert "workload 'mlp2' is not one of: all, mlp, cnn" in capsys.readouterr().err


def test_a_plugin_builder_is_found_by_backend_family_and_fails_in_one_line(install):
    good_workload(install, family="acme_backend")
    trial = TrialSpec(workload=workload_spec("mlp2", "tiny"), framework="torch", policy=Policy(mode="eager"))
    with pytest.raises(RuntimeError) as e:
        build_program("acme_backend", trial)
    assert str(e.value).count("\n") == 0
    assert ("mlp2's acme_backend builder plug_mlp2.builder (plugin acme-plugin 1.2.3) failed to import:"
            " ImportError: libfoo.so.1") in str(e.value)
    # No builder for a family: unsupported, with the reason.
    from dlbench.backends.base import Unsupported, builder_module
    assert builder_module("dlbench.backends.jax", "mlp2") is None
    assert builder_module("dlbench.backends.jax", "mlp") == "dlbench.backends.jax.mlp"
    with pytest.raises(Unsupported, match="jax has no implementation of 'mlp2'"):
        build_program("dlbench.backends.jax", trial)


FAKE_BACKEND = "fake_backend:FakeBackend"


def test_a_plugin_backend_is_registered_listed_and_a_broken_one_refused(install, fake_env, capsys):
    install("plug_fw", {"broken": "raise RuntimeError('no device found\\nsecond line')\n"},
            {"dlbench.backends": {"acmefw": FAKE_BACKEND, "brokenfw": "plug_fw.broken:Backend",
                                  "torch": FAKE_BACKEND}}, dist="acme-fw", version="2.0")
    assert "acmefw" in backends.registered() and "brokenfw" not in backends.registered()
    assert backends.origin("acmefw").text() == "plugin acme-fw 2.0" and backends.origin("torch").builtin
    assert type(backends.get_backend("torch")).__module__ == "dlbench.backends.torch"  # the built-in wins
    status = {name: reason for name, _, reason in backends.plugin_status()}
    assert status["acmefw"] is None
    assert "clashes with the built-in framework 'torch'" in str(status["torch"])
    assert "failed to import: RuntimeError: no device found" in str(status["brokenfw"])
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "acmefw (plugin acme-fw 2.0)" in out and "broken plugin" in out
    for name in ("brokenfw", "torch"):
        assert main(["check", "-w", "mlp", "-f", name]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "acme-fw 2.0" in err and "Traceback" not in err, err


def test_a_plugin_workload_runs_and_its_origin_is_stored_and_reported(install, fake_env, tmp_path, capsys):
    """Through the real runner (worker processes) with the fake backend: the trial stores where
    its workload came from, and the report says it."""
    good_workload(install, name="mlp2", dist="acme-mlp", version="0.3")
    store = str(tmp_path / "s.sqlite")
    argv = ["run", "-w", "mlp2", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--repeats", "1",
            "--epochs", "1", "--warmup-epochs", "0", "--store", store]
    assert main(argv) == 0, capsys.readouterr().err
    with Store(store) as s:
        trial = s.trials(s.resolve_runs("latest")[0])[0]
    assert trial.status == "ok"
    origin = trial.data["framework_info"]["workload_origin"]
    assert origin == {"source": "plugin", "distribution": "acme-mlp", "version": "0.3",
                      "entry_point": "mlp2 = plug_mlp2.workload"}
    assert trial.data["framework_info"]["framework_origin"]["source"] == "built-in"
    capsys.readouterr()
    assert main(["report", "--store", store]) == 0
    assert "mlp2: workload from the plugin acme-mlp 0.3" in capsys.readouterr().out


def test_contract_checks_find_what_a_plugin_author_gets_wrong():
    from dlbench.workloads import contract, mlp
    assert contract.interface(mlp, "mlp", plugin=False) == []
    assert contract.shapes(mlp) == [] and contract.behaviour(mlp) == []
    assert contract.interface(mlp, "mlp") == ["it lacks BUILDERS"]
    bad = replace(mlp.NUMERICS, extra={"alpha": 1.0})
    assert contract.numerics_problems(bad, ("optimizer", "alpha", "beta")) == [
        "NUMERICS_FIELDS lacks the common fields learning_rate, beta1, beta2, eps, eps_placement, bias_correction,"
        " weight_decay, dropout, loss, dtype",
        "NUMERICS_FIELDS names beta, neither a spec.Numerics field nor in NUMERICS.extra"]
    with pytest.raises(SpecError, match="workload 'nope' is not one of"):
        workloads.check("nope")
