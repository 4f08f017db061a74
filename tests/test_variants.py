"""Variants as backend data (issue 32): every framework option a backend declares is well formed
(values, default, the variant's why, source, tried values and where it applies, the variables it
sets before the import, all recorded); Variant.values answers where the headroom search tries
what; a GPU-only value on a CPU is one line; an option at its default keeps the configuration
key; the JAX pool written as reshape + max equals lax.reduce_window in values and gradients,
ties included; and real tiny cnn trials with the variants set pass parity with what the program
did read back into their effective policy (one trial per framework; every variant value alone
under the slow marker).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlbench import workloads
from dlbench.analysis.categories import CATEGORIES
from dlbench.backends import REGISTRY, get_backend, support
from dlbench.backends.base import Option, Variant, option_environment
from dlbench.runner.child import recorded_variables, setup_environment
from dlbench.runner.plan import Sweep, make_plan
from dlbench.spec import MODES, Policy, TrialSpec, configuration_key, to_dict
from dlbench.workloads.contract import preset_spec

# --- the data, over every registered backend ------------------------------------------------------


def _options(name: str) -> dict[str, Option]:
    return get_backend(name).options


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_option_is_well_formed_and_every_variant_says_why_where_and_what(name):
    backend = get_backend(name)
    for opt, o in backend.options.items():
        where = f"{name}.{opt}"
        assert o.default in o.allowed and len(set(o.allowed)) == len(o.allowed), where
        assert o.help.strip(), where
        assert set(o.environment) <= set(o.allowed), where
        for value, env in o.environment.items():
            # set before the import, and recorded with every trial of the framework
            assert env and set(env) <= set(recorded_variables(backend)), (where, value, env)
        v = o.variant
        if v is None:
            continue
        assert v.why.strip() and v.source.strip(), where
        assert v.tried and set(v.tried) <= set(o.allowed) and o.default not in v.tried, where
        assert set(v.gpu_only) <= set(v.tried), where
        assert set(v.modes) <= set(MODES) and set(v.devices) <= {"cpu", "gpu"}, where
        assert set(v.workloads) <= set(workloads.WORKLOADS), where
        assert v.addresses and set(v.addresses) <= set(CATEGORIES), where
        for workload, value in v.same_as_default:
            assert workload in v.workloads and value in v.tried, (where, workload, value)
        for other, value in v.together:
            assert other != opt and value in backend.options[other].allowed, (where, other, value)


def test_the_declared_variants_are_the_ones_issue_32_asks_for():
    declared = {f"{n}.{opt}" for n in REGISTRY for opt, o in _options(n).items() if o.variant is not None}
    assert {"jax.pool", "jax.matmul_precision", "jax.steps_per_call", "jax.loop", "torch.memory_format",
            "torch.compile_mode", "torch.optimizer", "torch.compile_scope", "torch.loader", "torch.mkldnn",
            "torch.matmul_precision", "torch.omp_wait_policy", "tensorflow.onednn",
            "tensorflow.inter_op_threads", "tensorflow.steps_per_call"} <= declared


def test_variant_values_say_where_the_search_tries_what():
    v = Variant(why="w", source="s", tried=("a", "b", "c"), workloads=("cnn", "resnet"), modes=("compiled",),
                gpu_only=("c",), devices=(), same_as_default=(("resnet", "a"),))
    assert v.values("cnn", "compiled", "cpu") == ("a", "b")
    assert v.values("cnn", "compiled", "gpu") == ("a", "b", "c")
    assert v.values("resnet", "compiled", "gpu") == ("b", "c")  # "a" is resnet's default already
    assert v.values("mlp", "compiled", "gpu") == () and v.values("cnn", "eager", "gpu") == ()
    assert dataclasses.replace(v, devices=("cpu",)).values("cnn", "compiled", "gpu") == ()
    torch, jax, tf = _options("torch"), _options("jax"), _options("tensorflow")

    def values(o: Option, *at: str) -> tuple[str, ...]:
        assert o.variant is not None
        return o.variant.values(*at)

    # the memory format the workload's model does not declare, where there are images at all
    assert values(torch["memory_format"], "cnn", "eager", "cpu") == ("contiguous",)
    assert values(torch["memory_format"], "ddpm", "compiled", "gpu") == ("channels_last",)
    assert values(torch["memory_format"], "mlp", "eager", "cpu") == ()
    assert values(torch["compile_mode"], "cnn", "compiled", "cpu") == ("max-autotune-no-cudagraphs",)
    assert values(torch["compile_mode"], "cnn", "compiled", "gpu") == ("max-autotune-no-cudagraphs", "max-autotune")
    assert values(torch["compile_mode"], "cnn", "eager", "cpu") == () == values(torch["compile_scope"], "cnn", "eager", "cpu")
    assert values(torch["mkldnn"], "cnn", "eager", "gpu") == () and values(torch["mkldnn"], "cnn", "eager", "cpu") == ("off",)
    assert values(jax["pool"], "cnn", "compiled", "cpu") == ("reshape",) and values(jax["pool"], "resnet", "compiled", "cpu") == ()
    assert values(tf["onednn"], "cnn", "graph", "cpu") == ("off",) and values(tf["steps_per_call"], "cnn", "eager", "cpu") == ()
    assert jax["loop"].variant is not None and ("steps_per_call", "8") in jax["loop"].variant.together


# --- the listing -----------------------------------------------------------------------------------


def test_list_counts_the_options_on_one_line_and_long_and_json_show_every_variant(capsys, monkeypatch):
    from dlbench.cli.main import main

    monkeypatch.setenv("COLUMNS", "100")
    assert main(["list"]) == 0
    text = capsys.readouterr().out
    [line] = [x for x in text.splitlines() if x.startswith("--option:")]
    assert f"torch {len(_options('torch'))}" in line and "variants" in line and len(line) <= 100
    assert "jax.pool" not in text  # one line for every option, not one per option
    assert main(["list", "--long"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--option jax.pool=reduce_window|reshape (default reduce_window)" in text
    assert "variant: tries reshape (workloads cnn)" in text and "Source: issue 32" in text
    assert main(["list", "--json"]) == 0
    data = {d["framework"]: d["options"] for d in json.loads(capsys.readouterr().out)["frameworks"]}
    memory = data["torch"]["memory_format"]
    assert memory["default"] == "model" and memory["variant"]["tried"] == ["channels_last", "contiguous"]
    assert ["cnn", "channels_last"] in memory["variant"]["same_as_default"]
    assert data["torch"]["omp_wait_policy"]["environment"]["passive"] == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert data["onnxruntime"]["optimization"]["variant"] is None


# --- planning: GPU-only values, keys, the environment seam ----------------------------------------


def _trial(framework: str, options: dict[str, str], workload: str = "cnn", mode: str = "compiled") -> TrialSpec:
    return TrialSpec(workload=preset_spec(workloads.get(workload)), framework=framework,
                     policy=Policy(mode=mode, options=options))


def test_a_gpu_only_value_on_a_cpu_is_one_clear_line():
    trial = _trial("torch", {"compile_mode": "max-autotune"})
    backend = support.validate(trial)
    reason = support.unsupported(trial, backend, "cpu")
    if backend.modes()["compiled"] is not None:
        pytest.skip(f"torch compiled mode is unsupported here: {backend.modes()['compiled']}")
    assert reason == ("torch option compile_mode=max-autotune needs a GPU (this trial runs on cpu); on a CPU use"
                      " default or max-autotune-no-cudagraphs")
    assert support.unsupported(trial, backend, "cuda") is None
    assert support.unsupported(_trial("torch", {"compile_mode": "max-autotune-no-cudagraphs"}), backend, "cpu") is None


def test_an_option_at_its_default_keeps_the_configuration_key_and_a_variant_changes_it():
    def planned(*options: tuple[str, str, str]) -> TrialSpec:
        sweep = Sweep(workloads=("cnn",), frameworks=("torch", "jax"), repeats=1, preset="tiny", options=options)
        return next(t.spec for t in make_plan(sweep).trials if t.spec.framework == "torch")

    plain = planned()
    at_default = planned(("torch", "mkldnn", "on"), ("torch", "memory_format", "model"))
    variant = planned(("torch", "mkldnn", "off"), ("jax", "pool", "reshape"))
    assert at_default.policy.options == {} and "options" not in to_dict(at_default)["policy"]
    assert configuration_key(to_dict(at_default)) == configuration_key(to_dict(plain))
    assert variant.policy.options == {"mkldnn": "off"}  # jax's option stays with jax's trials
    assert configuration_key(to_dict(variant)) != configuration_key(to_dict(plain))


def test_options_set_their_variables_before_the_import_and_the_trial_records_them(monkeypatch):
    monkeypatch.setattr(os, "environ", dict(os.environ))  # setup_environment writes os.environ
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    trial = _trial("tensorflow", {"onednn": "off"}, mode="graph")
    backend = get_backend("tensorflow")
    assert option_environment(backend.options, trial.policy) == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    assert option_environment(backend.options, Policy()) == {}  # inherit: the environment's own
    recorded, fresh = setup_environment(trial, backend)
    try:
        assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
        assert recorded["env"]["TF_ENABLE_ONEDNN_OPTS"] == "0" and recorded["option_env"] == {"TF_ENABLE_ONEDNN_OPTS": "0"}
    finally:
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)
    torch = get_backend("torch")
    assert option_environment(torch.options, Policy(options={"omp_wait_policy": "active"})) == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_a_kernel_alternatives_probe_drops_the_options_that_set_its_variables():
    from dlbench.runner.verdicts import _yielding

    trial = _trial("tensorflow", {"onednn": "on", "inter_op_threads": "1"}, mode="graph")
    probed = _yielding(trial, {"TF_ENABLE_ONEDNN_OPTS": "0"})  # the "oneDNN off" alternative
    assert probed.policy.options == {"inter_op_threads": "1"}
    assert _yielding(trial, {"XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2"}) is trial


def test_torch_image_workloads_are_the_models_declared_memory_formats():
    torch = pytest.importorskip("torch")
    from dlbench.backends.torch import settings

    assert set(settings.PROGRAM_WORKLOADS) == {w for w in workloads.WORKLOADS if w != "ppo"}
    for w in settings.PROGRAM_WORKLOADS:
        module = importlib.import_module(f"dlbench.backends.torch.{w}")
        declared = {c.memory_format for c in vars(module).values()
                    if isinstance(c, type) and "memory_format" in vars(c) and c.__module__ == module.__name__}
        assert len(declared) == 1, (w, declared)
        name = "channels_last" if declared == {torch.channels_last} else "contiguous"
        assert settings.IMAGE_WORKLOADS.get(w, "contiguous") == name, w


# --- the JAX pool: reshape + max against lax.reduce_window ----------------------------------------


def _pools() -> tuple[Any, Any, Any]:
    jax = pytest.importorskip("jax")
    from dlbench.backends.jax import cnn

    return jax, cnn.max_pool_reduce_window, cnn.max_pool_reshape


def test_the_reshape_pool_equals_reduce_window_in_values_and_gradients():
    jax, window, reshape = _pools()
    rng = np.random.default_rng(0)
    for shape in ((3, 13, 13, 5), (2, 30, 30, 4)):  # odd sides: the last row and column are dropped
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(jax.jit(reshape)(x)), np.asarray(jax.jit(window)(x)))
        g = rng.standard_normal(np.asarray(jax.jit(window)(x)).shape).astype(np.float32)
        grads = [np.asarray(jax.jit(jax.grad(lambda a, f=f: (f(a) * g).sum()))(x)) for f in (window, reshape)]
        np.testing.assert_array_equal(grads[1], grads[0])  # one maximum per window: exact


def test_on_ties_the_pools_differ_only_where_a_relu_gives_no_gradient():
    jax, window, reshape = _pools()
    rng = np.random.default_rng(1)
    # Pre-activations with a third of them negative, so whole windows are ReLU zeros (tied).
    x = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)
    x[:, :6] = -np.abs(x[:, :6])
    g = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    relu = jax.nn.relu
    grads = [np.asarray(jax.jit(jax.grad(lambda a, f=f: (f(relu(a)) * g).sum()))(x)) for f in (window, reshape)]
    assert (x[:, :6] <= 0).all()  # ReLU zeros
    np.testing.assert_array_equal(grads[1], grads[0])
    # A tie among the pooled values themselves: reduce_window gives the gradient to the window's
    # first maximum, jnp.max splits it evenly; the window's total is 1 either way.
    ones = np.ones((1, 2, 2, 1), np.float32)
    first, split = (np.asarray(jax.jit(jax.grad(lambda a, f=f: f(a).sum()))(ones)).ravel() for f in (window, reshape))
    assert first.tolist() == [1.0, 0.0, 0.0, 0.0] and split.tolist() == [0.25] * 4


def test_the_jax_cnn_trains_the_same_with_either_pool():
    jax, _, _ = _pools()
    from dlbench.backends.jax import cnn

    spec = preset_spec(workloads.get("cnn"))
    wl = workloads.get("cnn")
    params = {k: jax.numpy.asarray(v) for k, v in wl.init_params(spec).items()}
    batch = wl.fixed_batch(spec, 8)
    x = np.asarray(batch.x, np.float32)

    def grads(pool: str) -> dict[str, np.ndarray]:
        model = cnn.CnnModel(cnn.POOLS[pool])
        loss = lambda p: jax.nn.logsumexp(model.apply(p, {}, x, True)[0], axis=-1).mean()  # noqa: E731
        return {k: np.asarray(v) for k, v in jax.jit(jax.grad(loss))(params).items()}

    a, b = grads("reduce_window"), grads("reshape")
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_the_jax_program_reads_back_the_pool_it_lowers_to():
    _pools()
    from dlbench.backends.base import OptionsReadBack

    backend = get_backend("jax")
    pools = {}
    for pool in ("reduce_window", "reshape"):
        program = support.build(_trial("jax", {"pool": pool}), backend)
        assert isinstance(program, OptionsReadBack)
        pools[pool] = program.applied_options()["pool"]
    assert pools["reduce_window"] == {"reduce_window": 2, "reduce": 0}
    assert pools["reshape"]["reduce_window"] == 0 and pools["reshape"]["reduce"] >= 1
    assert support.build(_trial("jax", {}, workload="mlp"), backend).applied_options() == {}  # type: ignore[attr-defined]


# --- real trials: the variants train with parity, what they did read back --------------------------

TINY = ["-w", "cnn", "--preset", "tiny", "--dataset-size", "64", "--batch-size", "16", "--epochs", "1",
        "--repeats", "1", "--threads", "1", "--allow-concurrent"]
# One trial per framework with every variant that the cheap modes can run set at once: torch
# and TensorFlow eager in one run (compile mode and scope need torch's compiled mode, and JAX
# compiles: the slow matrix below runs them; the JAX pool's gradients and read-back are checked
# in process above).
CI_OPTIONS = {
    "torch": {"memory_format": "contiguous", "optimizer": "foreach", "loader": "tensor_dataset", "mkldnn": "off",
              "omp_wait_policy": "passive"},
    "tensorflow": {"onednn": "off", "inter_op_threads": "1"},
}


def dlbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("dlbench") or ""
    cmd = [exe] if exe else [sys.executable, "-m", "dlbench.cli.main"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd, timeout=900,
                          env={**os.environ, "COLUMNS": "250"})


def run_trials(tmp: Path, frameworks: list[str], mode: str, options: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """One `dlbench run` of the tiny cnn; its trials as exported."""
    given = [f"{f}.{k}={v}" for f in frameworks for k, v in options.get(f, {}).items()]
    flags = ["--option", ",".join(given)] if given else []  # one comma list: a second --option replaces it
    out = dlbench("run", *TINY, "-f", ",".join(frameworks), "--mode", mode, "--store", "v.sqlite", *flags, cwd=tmp)
    assert out.returncode in (0, 1), out.stdout[-3000:] + out.stderr[-3000:]  # 1: a parity failure, judged below
    exported = dlbench("export", "latest", "--format", "json", "--store", "v.sqlite", cwd=tmp)
    assert exported.returncode == 0, exported.stderr
    trials: list[dict[str, Any]] = json.loads(exported.stdout)["runs"][0]["trials"]
    return trials


def _installed(names: list[str]) -> list[str]:
    return [n for n in names if get_backend(n).available()[0]]


def assert_read_back(framework: str, t: dict[str, Any]) -> None:
    """What each framework's variants did, as the trial recorded it."""
    policy, asked = t["policy"], t["spec"]["policy"].get("options", {})
    fw, applied = policy["framework"], policy.get("options", {}).get("applied", {})
    assert policy["options"]["asked"] == asked
    if framework == "torch":
        assert applied["memory_format"] == ("contiguous" if asked.get("memory_format") == "contiguous" else "channels_last")
        optimizer = asked.get("optimizer", "fused")
        assert applied["optimizer"] == {"fused": {"fused": True, "foreach": None}, "foreach": {"fused": None, "foreach": True},
                                        "for-loop": {"fused": None, "foreach": False}}[optimizer]
        assert applied["loader"] == asked.get("loader", "batch_dataset")
        assert fw["mkldnn_enabled"] is (asked.get("mkldnn", "on") == "on")
        assert fw["float32_matmul_precision"] == asked.get("matmul_precision", "highest")
        if "omp_wait_policy" in asked:
            assert fw["OMP_WAIT_POLICY"] == policy["env"]["OMP_WAIT_POLICY"] == asked["omp_wait_policy"].upper()
        if t["spec"]["policy"]["mode"] == "compiled":
            assert fw["compile_mode"] == applied["compile_mode"] == asked.get("compile_mode", "default")
            assert applied["compile_scope"] == asked.get("compile_scope", "step")
    elif framework == "tensorflow":
        if "onednn" in asked:
            assert fw["TF_ENABLE_ONEDNN_OPTS"] == policy["env"]["TF_ENABLE_ONEDNN_OPTS"] == {"on": "1", "off": "0"}[asked["onednn"]]
            assert fw["tf_onednn_enabled"] in (asked["onednn"] == "on", None)
        if "inter_op_threads" in asked:
            assert fw["tf_inter_op_threads"] == int(asked["inter_op_threads"])
    elif framework == "jax":
        pool = applied["pool"]  # ops in the forward's StableHLO (a jitted jnp.max may be one shared function)
        if asked.get("pool") == "reshape":
            assert pool["reduce_window"] == 0 and pool["reduce"] >= 1, pool
        else:
            assert pool == {"reduce_window": 2, "reduce": 0}, pool
        assert fw["matmul_precision"] == policy["precision"]["default_matmul_precision"] == asked.get("matmul_precision", "highest")
        if "steps_per_call" in asked:
            assert policy["train_loop"]["steps_per_call"] == int(asked["steps_per_call"])
            assert policy["train_loop"]["loop"] == asked.get("loop", "unroll")


def test_tiny_cnn_trials_with_the_variants_pass_parity_and_record_what_ran(tmp_path):
    frameworks = _installed(list(CI_OPTIONS))
    if not frameworks:
        pytest.skip("neither torch nor tensorflow is installed")
    trials = run_trials(tmp_path, frameworks, "eager", CI_OPTIONS)
    assert sorted(t["spec"]["framework"] for t in trials) == sorted(frameworks)
    for t in trials:
        framework = t["spec"]["framework"]
        assert t["status"] == "ok", (framework, t["error"])
        assert t["spec"]["policy"]["options"] == CI_OPTIONS[framework]
        assert t["parity"]["verdict"] == "pass", (framework, t["parity"])
        assert_read_back(framework, t)


def _matrix() -> list[tuple[str, str, str, str]]:
    """(framework, mode, option, value) for every value the search tries on the cnn on a CPU
    (Variant.values), for every variant of torch, tensorflow and jax, in the cheapest mode it
    applies in."""
    out = []
    for framework in ("torch", "tensorflow", "jax"):
        for name, o in _options(framework).items():
            if o.variant is None:
                continue
            mode = next((m for m in ("eager", "graph", "compiled") if get_backend(framework).modes()[m] is None
                         and (not o.variant.modes or m in o.variant.modes)), None)
            if mode is not None:  # what the search tries on the cnn on a CPU
                out += [(framework, mode, name, v) for v in o.variant.values("cnn", mode, "cpu")]
    return out


# Variants whose parity verdict decides whether they count (a lower internal precision): a fail
# is a result to report, not a broken variant.
PARITY_DECIDES = {("torch", "matmul_precision"), ("jax", "matmul_precision")}


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "mode", "name", "value"), _matrix())
def test_each_variant_alone_trains_the_tiny_cnn(tmp_path, framework, mode, name, value):
    if not get_backend(framework).available()[0]:
        pytest.skip(f"{framework} is not installed")
    o = _options(framework)[name]
    assert o.variant is not None
    options = {name: value, **dict(o.variant.together)}
    [t] = run_trials(tmp_path, [framework], mode, {framework: options})
    assert t["status"] == "ok", t["error"]
    verdict = t["parity"]["verdict"]
    print(f"{framework}.{name}={value} ({mode}): parity {verdict} (worst {t['parity'].get('worst_rel_err')})")
    assert verdict in (("pass", "differs", "fail") if (framework, name) in PARITY_DECIDES else ("pass",)), t["parity"]
    assert_read_back(framework, t)
