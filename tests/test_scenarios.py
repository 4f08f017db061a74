"""A scenario is one thing (issue 31): one record per runner scenario (dlbench/scenarios.py), one
registration of its behaviour per layer, its options one frozen dataclass whose defaults the
sweep and the CLI take, programs checked by the capability the scenario names; and the stores of
the release before it read and pair in `compare` exactly as that release did. No worker process:
about a second."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import shutil
import sqlite3
import typing
from pathlib import Path

import pytest

from dlbench import scenarios, workloads
from dlbench.backends import base
from dlbench.backends.base import Generator, OdeModule, Rollout, Sampler, Servable, Trainable
from dlbench.cli.main import main
from dlbench.cli.run import SCENARIO_OPTION_FLAGS, SWEEP_DEFAULTS
from dlbench.report.scenarios import REPORTING
from dlbench.runner.estimates import ESTIMATES
from dlbench.runner.plan import Sweep, make_plan
from dlbench.runner.scenarios.registry import RUNS
from dlbench.runner.verdicts import JUDGES
from dlbench.spec import (
    OPTIONS,
    ConvergeOptions,
    InferOptions,
    NoOptions,
    SpecError,
    TrialSpec,
    WorkloadSpec,
    configuration_key,
    to_dict,
)

SRC = Path(__file__).parent.parent / "src" / "dlbench"
FIXTURES = Path(__file__).parent / "fixtures"

# Every place in src/ that names a scenario in its code (not its docstrings), with the names it
# uses. A new place fails this test: a scenario's behaviour goes through its record and the one
# registration per layer, not a new table keyed by scenario names. "train" is also the stored
# default of a spec's scenario, read where stored specs are.
NAME_PLACES: dict[str, set[str]] = {
    # the records, the workloads' --scenario -> runner scenario maps, the spec's choices
    "scenarios.py": {"train", "infer", "converge", "sample", "rollout", "rl_rollout", "rl_train", "rl_converge",
                     "generate", "solve"},
    "spec.py": {"train", "infer", "converge", "rollout", "generate", "solve"},
    # the problem registry: its module per runner scenario over problems
    "problems/__init__.py": {"solve"},
    "workloads/base.py": {"train", "infer", "converge"},
    "workloads/ppo.py": {"train", "converge", "rollout", "rl_rollout", "rl_train", "rl_converge"},
    "workloads/ddpm.py": {"train", "infer", "sample"},
    "workloads/lm.py": {"generate"},
    "workloads/__init__.py": {"train"},
    # one registration per layer
    "runner/scenarios/registry.py": {"train", "infer", "converge", "sample", "rl_rollout", "rl_train", "rl_converge",
                                     "generate", "solve"},
    # the runner's parent side: the planner's first estimate (the parent imports no scenario module)
    "runner/estimates.py": {"train", "infer", "converge", "sample", "rl_rollout", "rl_train", "rl_converge",
                            "generate", "solve"},
    "report/scenarios.py": {"train", "infer", "converge", "sample", "rl_rollout", "rl_train", "rl_converge",
                            "generate", "solve"},
    # capability names that read like scenarios (base: PROVIDED_FOR; each backend: the
    # capabilities it provides; verdicts: parity kinds)
    "backends/base.py": {"train", "rollout", "infer", "sample", "generate", "solve"},
    **{f"backends/{fw}/__init__.py": {"train", "infer", "generate", "solve"} for fw in ("torch", "tensorflow", "jax")},
    "backends/keras/__init__.py": {"train", "infer", "generate"},
    "backends/onnxruntime/__init__.py": {"infer", "generate"},
    "backends/litert/__init__.py": {"infer", "generate"},
    "backends/scipy/__init__.py": {"solve"},
    # the gap ledger's rows, as data: the --scenario each gap was measured in
    "analysis/gaps.py": {"train", "generate"},
    "runner/verdicts.py": {"sample", "train", "generate"},
    "runner/protocol.py": {"sample"},
    # what is still keyed by a --scenario name
    "backends/precision.py": {"train"},
        "cli/run.py": {"train", "rollout"},
    "cli/suite.py": {"rollout"},
    "runner/plan.py": {"train", "rollout"},
    "runner/scenarios/rl.py": {"rollout"},
    "report/history.py": {"train"},
    "report/model.py": {"train", "rollout"},
    "report/rl.py": {"rollout"},
    "report/terminal.py": {"train"},
    "results/dashboards.py": {"train"},
    "results/tidy.py": {"train"},
}
SCENARIO_WORDS = {"train", "infer", "converge", "rollout", "sample", "rl_rollout", "rl_train", "rl_converge",
                  "generate", "solve"}


def _names_in_code(path: Path) -> set[str]:
    """The scenario names a module's code holds as string constants (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in SCENARIO_WORDS
            and id(n) not in docs}


def test_the_places_that_know_scenario_names_are_these():
    found = {str(p.relative_to(SRC)): names for p in sorted(SRC.rglob("*.py")) if (names := _names_in_code(p))}
    new = {k: sorted(v - NAME_PLACES.get(k, set())) for k, v in found.items() if v - NAME_PLACES.get(k, set())}
    assert not new, (f"scenario names in new places: {new}; register the behaviour through the scenario's"
                     " record (dlbench/scenarios.py) and the layer's one registration instead")
    gone = sorted(set(NAME_PLACES) - set(found))
    assert not gone, f"these places no longer name scenarios: take them out of NAME_PLACES: {gone}"
    fewer = {k: sorted(v - found[k]) for k, v in NAME_PLACES.items() if k in found and v - found[k]}
    assert not fewer, f"these places name fewer scenarios: shrink NAME_PLACES: {fewer}"


# Module names a scenario no longer goes by (one name per scenario in every layer, issue 44): the
# record's name finds its modules (runner/scenarios/infer.py, report/infer.py ...).
RETIRED_MODULE_NAMES = {"inference", "generation", "convergence", "time_to_target", "odesolve", "headroom", "odes"}


def test_each_scenarios_modules_carry_its_records_name():
    modules = {p.stem for p in SRC.rglob("*.py")}
    assert not modules & RETIRED_MODULE_NAMES, sorted(modules & RETIRED_MODULE_NAMES)
    for name, run in RUNS.items():
        # the runner's entry lives in runner/scenarios/<name>.py (the RL family: rl.py)
        assert run.__module__ == f"dlbench.runner.scenarios.{name.split('_')[0]}", (name, run.__module__)
    for name, reporting in REPORTING.items():
        for table in reporting.tables:
            # each scenario table is built in report/<table id>.py
            assert (SRC / "report" / f"{table.split('-')[0]}.py").is_file(), (name, table)
        for chart in reporting.charts:
            # and its charts beside its tables, in report/<its name>.py (the RL family: rl.py)
            module, _, function = chart.partition(":")
            assert module == f"dlbench.report.{name.split('_')[0]}", (name, chart)
            assert callable(getattr(importlib.import_module(module), function)), (name, chart)


def test_every_layer_registers_exactly_the_recorded_scenarios():
    names = set(scenarios.SCENARIOS)
    assert set(RUNS) == names  # runner: its entry
    assert set(ESTIMATES) == names  # runner, in the parent: its first time estimate
    assert set(REPORTING) == names  # report: its tables and progress line
    assert {r.parity for r in scenarios.SCENARIOS.values()} <= set(JUDGES)  # runner: its judge
    for name, module in workloads.WORKLOADS.items():
        assert set(module.SCENARIOS.values()) <= names, name
        for user, runner_name in module.SCENARIOS.items():
            # a runner scenario's options are those its --scenario takes
            assert scenarios.get(runner_name).options is OPTIONS.get(user, NoOptions), (name, user)
    with pytest.raises(KeyError, match="no runner scenario 'gan'"):
        scenarios.get("gan")


def test_each_capability_is_a_protocol_and_the_supervised_program_has_train_and_infer():
    protocols = {"train": Trainable, "infer": Servable, "rollout": Rollout, "sample": Sampler, "generate": Generator,
                 "solve": OdeModule}
    assert set(protocols) == set(scenarios.CAPABILITIES)
    assert all(getattr(base, p.__name__) is p for p in protocols.values())
    # a supervised Program is both; a rollout program needs no compile nor inference stubs
    assert issubclass(base.Program, Trainable) and issubclass(base.Program, Servable)
    assert "compile" not in dir(Rollout) and "infer_fn" not in dir(Rollout)


def test_a_backend_provides_capabilities_by_name_and_covers_the_scenarios_they_grant():
    assert set(base.PROVIDED_FOR) == set(scenarios.CAPABILITIES)
    assert set(base.PROVIDED_FOR.values()) == set(typing.get_args(base.Provided))
    trains = base.Capabilities(frozenset({"train"}))
    assert [c for c in scenarios.CAPABILITIES if trains.covers(c) is None] == ["train", "rollout"]
    serves = base.Capabilities(frozenset({"infer"}), grads=False)
    assert [c for c in scenarios.CAPABILITIES if serves.covers(c) is None] == ["infer", "sample"]
    assert serves.covers("rollout") == "train" and serves.covers("generate") == "generate"
    # what `dlbench list` shows, in its order whatever the set's
    assert base.Capabilities(frozenset({"solve", "infer", "train"})).names() == ["train", "infer", "grads", "solve"]
    assert serves.names() == ["infer"]
    with pytest.raises(ValueError, match="frozenset of train, infer, generate, solve; got frozenset"):
        base.Capabilities(frozenset({"serve"}))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="got {'train'}"):
        base.Capabilities({"train"})  # type: ignore[arg-type]


def test_options_are_frozen_dataclasses_whose_defaults_the_spec_sweep_and_cli_take():
    for user in ("train", "infer", "converge"):  # a trial carries its scenario's options, at their defaults
        assert TrialSpec(workload=WorkloadSpec(), framework="x", scenario=user).options == OPTIONS.get(user, NoOptions)()
    assert Sweep().options_for("infer") == InferOptions() and Sweep().options_for("converge") == ConvergeOptions()
    assert Sweep().options_for("train") == NoOptions()
    # every field declares its flag and help; the flags, their destinations and defaults come from there
    # (a `shared` field takes the flag, and its help, that another options type declares: generate's --load)
    own = [(kind, f) for kind in OPTIONS.values() for f in dataclasses.fields(kind) if not f.metadata.get("shared")]
    flags = {f.metadata["flag"]: (kind, f.name) for kind, f in own}
    assert all(f.metadata["help"] for _, f in own)
    shared = {f.metadata["flag"] for kind in OPTIONS.values() for f in dataclasses.fields(kind) if f.metadata.get("shared")}
    assert shared == {"--load", "--qps"} and shared <= set(flags)
    assert {"--" + dest.replace("_", "-"): v for dest, v in SCENARIO_OPTION_FLAGS.items()} == flags
    assert SCENARIO_OPTION_FLAGS["load"] == (InferOptions, "infer_load")
    assert SCENARIO_OPTION_FLAGS["qps"] == (InferOptions, "server_qps")
    assert SCENARIO_OPTION_FLAGS["rtol_loosest"][1] == "solve_rtol_loosest"
    for dest, (kind, name) in SCENARIO_OPTION_FLAGS.items():
        assert SWEEP_DEFAULTS[dest] == getattr(kind(), name), dest
    with pytest.raises(dataclasses.FrozenInstanceError):
        ConvergeOptions().eval_every = 3  # type: ignore[misc]
    with pytest.raises(SpecError, match="eval every must be an integer >= 1, got 0"):
        ConvergeOptions(eval_every=0).validate("train")
    with pytest.raises(SpecError, match="load 'server' applies to the infer scenario only, not 'train'"):
        InferOptions(infer_load="server", p99_bound_ms=5.0).validate("train")


def test_a_sweep_gives_each_trial_its_own_scenarios_options_only(fake_env):
    plan = make_plan(Sweep(workloads=("cnn",), frameworks=("fake",), modes=("eager",), repeats=1, preset="tiny",
                           scenarios=("train", "infer", "converge"), scenario_options=(InferOptions(infer_requests=300),
                           ConvergeOptions(target_accuracy=0.5, eval_every=4))))
    by = {t.spec.scenario: t.spec for t in plan.trials}
    assert by["infer"].options == InferOptions(infer_requests=300)
    assert by["converge"].options == ConvergeOptions(target_accuracy=0.5, eval_every=4)
    assert by["train"].options == NoOptions()
    # stored flat, every scenario's fields at their defaults but the trial's own (the keys of old stores)
    stored = {s: to_dict(spec) for s, spec in by.items()}
    assert stored["infer"]["infer_requests"] == 300 and stored["infer"]["eval_every"] == ConvergeOptions().eval_every
    assert stored["converge"]["eval_every"] == 4 and stored["converge"]["infer_requests"] == InferOptions().infer_requests
    assert stored["train"]["infer_requests"] == InferOptions().infer_requests and "options" not in stored["train"]


# The release before issue 31 wrote tests/fixtures/previous-release.sqlite (tests/fixtures/
# make_previous_release.sh: two runs of cnn on the fake backend, train, infer and converge, two
# repeats each), and its own `compare 1 2 --format markdown` printed previous-release-compare.md.
def _previous_store(tmp_path: Path) -> str:
    store = tmp_path / "previous.sqlite"
    shutil.copy(FIXTURES / "previous-release.sqlite", store)
    return str(store)


def test_a_previous_release_store_keeps_its_keys_and_pairs_in_compare_as_before(tmp_path, capsys, fake_env):
    store = _previous_store(tmp_path)
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT id, config_key, spec FROM trials ORDER BY id").fetchall()
    written = json.loads((FIXTURES / "previous-release-keys.json").read_text())
    assert {str(i): configuration_key(json.loads(spec)) for i, _, spec in rows} == written
    assert all(key == written[str(i)] for i, key, _ in rows)
    # the same sweep planned today makes the same configurations
    plan = make_plan(Sweep(workloads=("cnn",), frameworks=("fake",), modes=("eager",), batch_sizes=(16,),
                           dataset_size=64, preset="tiny", repeats=1, scenarios=("train", "infer", "converge"),
                           scenario_options=(InferOptions(infer_requests=100, infer_budget_s=0.3),
                                             ConvergeOptions(target_accuracy=0.5, eval_every=4, max_steps=8))))
    assert {t.spec.config_key() for t in plan.trials} == set(written.values())
    capsys.readouterr()
    assert main(["compare", "1", "2", "--store", store, "--format", "markdown"]) == 4  # undecided, as before
    assert capsys.readouterr().out == (FIXTURES / "previous-release-compare.md").read_text()


def test_a_previous_release_store_reports_every_scenario_table(tmp_path, capsys, fake_env):
    assert main(["report", "--store", _previous_store(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Results" in out or "dlbench results" in out
    assert "time to accuracy" in out and "inference" in out.lower()


def test_data_parallelism_and_the_profiler_follow_the_records(fake_env):
    from dlbench.backends import get_backend
    from dlbench.backends.support import data_parallel_unsupported

    dp = get_backend("fake").data_parallel
    for user in ("train", "infer", "converge"):
        trial = TrialSpec(workload=WorkloadSpec(name="mlp", batch_size=16), framework="fake", scenario=user,
                          devices=2, options=ConvergeOptions(target_accuracy=0.5) if user == "converge" else NoOptions())
        reason = data_parallel_unsupported(dp, trial)
        if scenarios.get(user).data_parallel:
            assert reason is None or "runner scenarios" not in reason, reason
        else:
            assert reason == ("devices 2: data parallelism runs the runner scenarios train, rl_train only, not mlp"
                              f" --scenario {user}")
    assert [n for n, r in scenarios.SCENARIOS.items() if r.profiled] == ["train", "infer", "sample", "rl_train"]


def test_a_run_finishes_in_the_parent_with_its_scaling_annotated_then_its_status(tmp_path, monkeypatch):
    from dlbench.results.store import Store
    from dlbench.runner import annotate, executor

    steps: list[str] = []
    monkeypatch.setattr(annotate, "annotate_run", lambda store, run_id: steps.append(f"annotate {run_id}") or 0)
    with Store(str(tmp_path / "s.sqlite")) as store:
        run_id = store.create_run("dlbench run", {}, True)
        assert executor.finish_run(store, run_id, interrupted=True) == "interrupted"
        assert executor.finish_run(store, run_id, interrupted=False) == "ok"
        assert store.run(run_id)["status"] == "ok"
    assert steps == [f"annotate {run_id}", f"annotate {run_id}"]


@pytest.mark.parametrize("scenario", ["train", "infer"])
def test_the_child_asks_once_whether_a_trial_can_run(tmp_path, fake_env, monkeypatch, scenario):
    """Issue 44.5: in the worker a trial is checked once, after the import (support.require);
    building its programs (train builds two: the trained one and the parity one) asks nothing
    again, and the scenario reads its options and its workload from the trial and the context.
    The worker's run_trial in this process, on the fake backend: about a second."""
    import time

    from dlbench.backends import get_backend, support
    from dlbench.results.records import TrialResult
    from dlbench.runner import worker
    from dlbench.runner.protocol import events_path, parity_path
    from dlbench.runner.timing import EventLog
    from dlbench.spec import Policy

    asked: list[str] = []
    real = support.unsupported
    monkeypatch.setattr(support, "unsupported", lambda trial, *a: asked.append(trial.scenario) or real(trial, *a))
    options = InferOptions(infer_requests=100, infer_budget_s=60.0, infer_load="loop") if scenario == "infer" \
        else NoOptions()
    trial = TrialSpec(workload=WorkloadSpec(batch_size=8, dataset_size=64, eval_size=16), framework="fake",
                      policy=Policy(mode="eager"), scenario=scenario, epochs=1, warmup_epochs=1, chunk_steps=4,
                      trial_id=1, options=options)
    trial.validate()
    out = tmp_path / "trial.json"
    log = EventLog(events_path(out))
    result = TrialResult(status="failed")
    try:
        worker.run_trial(trial, get_backend("fake"), log, time.monotonic(), result, out)
    finally:
        log.close()
    assert asked == [scenario]
    assert result.metrics["build_s"] is not None and parity_path(out).exists()
    if scenario == "infer":
        assert result.metrics["infer_requests"] == 100  # the options reached the scenario


def test_the_parent_computes_references_for_the_subjects_that_have_one(monkeypatch):
    """One path for every executor (executor.references): the trials whose record's subject has
    a parent reference (a workload's fixed batch) get one; a problem's trials none (each measures
    against its problem's reference solution), and their verdict says so."""
    from dlbench.results.records import TrialResult
    from dlbench.runner import executor, reference
    from dlbench.runner.verdicts import judge_parity

    asked: list[list[str]] = []
    monkeypatch.setattr(reference, "ensure", lambda specs, *a: asked.append([s.name for s in specs]) or {"k": "r"})
    cnn = TrialSpec(workload=WorkloadSpec(name="cnn"), framework="torch")
    hires = TrialSpec(workload=WorkloadSpec(name="hires", batch_size=8, dataset_size=8, eval_size=8),
                      framework="torch", scenario="solve")
    assert scenarios.get("train").parent_reference and not scenarios.get("solve").parent_reference
    assert executor.references([hires], print) == {} and asked == []
    assert executor.references([cnn, hires], print) == {"k": "r"} and asked == [["cnn"]]
    result = TrialResult(status="ok")
    judge_parity(hires, result, Path("/nonexistent"), {})
    assert result.parity["verdict"] == "n/a" and "float64 reference" in result.parity["reason"]


def test_a_problem_name_resolves_in_the_problem_registry_not_as_a_workload():
    """`-w hires` names a problem of the problem registry (dlbench/problems), looked up by
    dlbench/subjects.py: never a workload module, its record's subject "problem"; each record
    over problems has its problems and its builder module there, and none over workloads."""
    from dlbench import problems, subjects
    from dlbench.spec import SpecError

    assert set(problems.names()) == {"lotka-volterra", "robertson", "hires", "node-ode"}
    assert {n for n, r in scenarios.SCENARIOS.items() if r.subject == "problem"} == set(problems.BY_SCENARIO) \
        == set(problems.BUILDERS)
    with pytest.raises(SpecError, match="workload 'hires' is not one of: mlp"):
        workloads.get("hires")
    assert not set(problems.names()) & set(workloads.names())
    subjects.check("hires")
    with pytest.raises(SpecError, match=r"workload 'nope' is not one of: mlp, .* \(the solver scenario's:"
                                        r" lotka-volterra, robertson, hires, node-ode\)"):
        subjects.check("nope")
    assert isinstance(subjects.lookup("hires"), problems.Problem) and subjects.scenario("hires", "solve").subject == "problem"
    assert subjects.scenario_unsupported("hires", "train") == "hires has no train scenario (it runs: solve)"
    assert scenarios.unsupported("mlp", {"train": "solve"}, "train", "workload") == (
        "mlp is a workload, and the runner scenario 'solve' runs over a problem (runner scenarios over a workload:"
        " train, infer, converge, sample, rl_rollout, rl_train, rl_converge, generate)")
    assert subjects.preset("hires", "tiny") == subjects.PROBLEM_PRESET
    with pytest.raises(SpecError, match=r"preset 'published' is not one of: tiny, cpu, gpu \(the presets of hires\)"):
        subjects.preset("hires", "published")
    with pytest.raises(SpecError, match="augment 'crop_flip' does not fit hires"):
        subjects.validate(WorkloadSpec(name="hires", augment="crop_flip", batch_size=8, dataset_size=8))
