"""Run-time estimates (issue 27): a first estimate from each backend's start-up and compile cost
guesses and the workload's size; then what the store's trials say, for the same configuration or
the same kind of trial at other sizes."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from dlbench.cli.main import main
from dlbench.results.store import Store
from dlbench.runner.plan import Costs, Sweep, at_load, estimate_s, estimates, learn, make_plan
from dlbench import workloads
from dlbench.spec import SolveOptions, TrialSpec, to_dict


def _trial(framework: str = "torch", workload: str = "cnn", preset: str = "cpu", mode: str = "compiled") -> TrialSpec:
    plan = make_plan(Sweep(workloads=(workload,), frameworks=(framework,), modes=(mode,), preset=preset,
                           repeats=1))
    return plan.trials[0].spec


def test_a_first_estimate_counts_start_up_and_compiles_by_framework_and_workload_size():
    costs = Costs()
    jax_mlp, _ = estimate_s(_trial("jax", "mlp", "tiny"), costs)
    keras_torch_resnet, how = estimate_s(_trial("keras-torch", "resnet", "tiny"), costs)
    assert how == "rough"
    # keras-torch compiles resnet for minutes (docs/benchmarks.md: 173 s to the first step)
    assert keras_torch_resnet > 150 > 20 > jax_mlp > 5
    eager, _ = estimate_s(_trial("torch", "resnet", "tiny", "eager"), costs)
    compiled, _ = estimate_s(_trial("torch", "resnet", "tiny", "compiled"), costs)
    assert compiled > 2 * eager  # the compile is most of a tiny trial


def test_a_first_estimate_of_a_solve_run_follows_what_its_trials_do():
    def solve_s(workload: str, framework: str = "jax", options: SolveOptions = SolveOptions()) -> float:
        plan = make_plan(Sweep(workloads=(workload,), frameworks=(framework,), scenarios=("solve",), repeats=1,
                               scenario_options=(options,)))
        return estimate_s(plan.trials[0].spec, Costs())[0]

    plan = make_plan(Sweep(workloads=("lotka-volterra", "robertson", "hires", "node-ode"),
                           frameworks=("jax", "torch", "tensorflow"), scenarios=("solve",), repeats=1))
    specs = [p.spec for p in plan.trials]
    found = dict(zip([(s.workload.name, s.framework) for s in specs], estimates(specs, Costs())))
    # docs/benchmarks.md's quiet run of this plan took 9.7 min (with SciPy's baseline in every trial,
    # 2 of them); the estimate before this one said 16.6
    assert 6 < sum(s for s, _ in found.values()) / 60 < 13
    # SciPy's baseline is a trial of its own per problem, estimated as its sweep: what the first
    # framework trial of the problem carried before (so the run's total is what it was)
    assert found[("robertson", "jax")][0] == solve_s("robertson", "jax")
    assert found[("robertson", "scipy")] == (pytest.approx(2 * 1.5 + 3 * 8 * 0.3), "rough")  # stiff: capped curves
    assert found[("lotka-volterra", "scipy")] == (pytest.approx(2 * 8 * 0.3 + 3 * 8 * 0.3), "rough")
    # torch's explicit solvers run to the step cap on a stiff problem: a lower cap costs less there,
    # not on a non-stiff one; the neural ODE adds its gradients; two tolerances cost less than eight
    capped = SolveOptions(solve_max_steps=500)
    assert solve_s("robertson", "torch", capped) < solve_s("robertson", "torch") / 3
    assert solve_s("lotka-volterra", "torch", capped) == solve_s("lotka-volterra", "torch")
    assert solve_s("node-ode", "torch") > solve_s("lotka-volterra", "torch") + 10
    assert solve_s("lotka-volterra", "jax", SolveOptions(solve_rtol_tightest=1e-4)) < solve_s("lotka-volterra", "jax")


def test_the_store_teaches_the_same_configuration_and_the_same_kind_at_other_sizes():
    trial = _trial("torch", "cnn", "cpu")
    spec = to_dict(trial)
    costs = learn([(spec, 80.0, 24.0)])  # 3 timed epochs in 24 s, 1 warm-up: 32 s of compute
    assert estimate_s(trial, costs) == (80.0, "store")
    bigger = replace(trial, workload=replace(trial.workload, dataset_size=2 * trial.workload.dataset_size))
    seconds, how = estimate_s(bigger, costs)
    assert how == "similar"
    assert seconds == pytest.approx(48.0 + 64.0, rel=0.02)  # the same overhead, twice the compute
    other_framework, how = estimate_s(_trial("jax", "cnn", "cpu"), costs)
    assert how == "rough"


@pytest.mark.usefixtures("fake_env")
def test_run_learns_its_estimate_from_the_store(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    argv = ["run", "-w", "mlp", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--repeats", "1",
            "--store", str(store)]
    assert main(argv) == 0
    assert "rough" in capsys.readouterr().out
    assert main(argv) == 0
    assert "from earlier trials in the store" in capsys.readouterr().out
    assert main([*argv[:-2], "-b", "16", "--store", str(store)]) == 0
    assert "from the store's trials of the same kinds" in capsys.readouterr().out
    assert Store(store, readonly=True).trial_costs()


@pytest.mark.usefixtures("fake_env")
def test_the_present_load_stretches_first_guesses_only(tmp_path, capsys, monkeypatch):
    """Issue 45: a second run planned "11.7 min from earlier trials in the store; at the present
    load about 128.7 min" and took 10.6: the store's times already hold the load they ran under."""
    from dlbench.cli import run as run_command

    monkeypatch.setattr(run_command, "busy_machine", lambda load=None, cores=None: (3.0, "load average 6.0 on 2 cores"))
    store = tmp_path / "s.sqlite"
    argv = ["run", "-w", "mlp", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--repeats", "1",
            "--store", str(store)]
    assert main(argv) == 0
    line = " ".join(capsys.readouterr().out.split("\n[1/1]")[0].split())  # the plan's line, however wrapped
    rough, loaded = (float(x) for x in re.findall(r"([0-9.]+) min", line))
    assert "rough" in line and "at the present load (load average 6.0 on 2 cores)" in line
    assert loaded == pytest.approx(3 * rough, abs=0.1)
    assert main(argv) == 0
    line = " ".join(capsys.readouterr().out.split("\n[1/1]")[0].split())
    assert "from earlier trials in the store" in line and "present load" not in line
    # the arithmetic: only "rough" stretches
    assert at_load(10.0, "rough", 3.0) == 30.0 and at_load(10.0, "store", 3.0) == at_load(10.0, "similar", 3.0) == 10.0


@pytest.mark.usefixtures("fake_env")
def test_progress_lines_name_every_axis_that_varies(tmp_path, capsys):
    """A batch-size sweep printed `[1/2] cnn/torch/eager#0` twice: each line names the batch."""
    argv = ["run", "-w", "mlp", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--repeats", "1",
            "-b", "8,16", "--store", str(tmp_path / "s.sqlite")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "mlp/fake/eager batch 8 #0 ..." in out and "mlp/fake/eager batch 16 #0 ..." in out


def test_bf16_and_fp16_reasons_follow_this_cpu(monkeypatch):
    """The fp16 reason named AVX2 on an AVX-512-BF16 CPU; bf16 never said native or emulated."""
    from dlbench import machine

    monkeypatch.setattr(machine, "cpu_isa", lambda: ["avx", "avx2", "avx512_bf16", "avx512f", "fma"])
    assert machine.bf16_on_cpu() == "native (avx512_bf16)"
    assert "AVX-512: no AVX512_FP16" in machine.fp16_on_cpu()
    monkeypatch.setattr(machine, "cpu_isa", lambda: ["avx", "avx2", "fma"])
    assert machine.bf16_on_cpu() == "emulated through float32 (AVX2: no AVX512_BF16 or AMX)"


def test_inference_throughput_keeps_the_median_call_and_says_when_stalls_dominate():
    """Three 70 ms stalls among 100 calls of 0.1 ms gave 3,765 samples/s for a median call of
    40,000 (batch 4): both rates are kept, and the disagreement is a warning."""
    from dlbench.results.records import TrialResult
    from dlbench.runner.scenarios.infer import infer_metrics

    trial = _trial("torch", "mlp", "tiny")
    trial = replace(trial, scenario="infer", workload=replace(trial.workload, batch_size=4))
    result = TrialResult(status="ok")
    batch_s = [1e-4] * 97 + [0.07] * 3
    mlp = workloads.get("mlp")
    infer_metrics(trial, mlp, result, [5e-5] * 200, batch_s)
    m = result.metrics
    assert m["infer_samples_per_s_median"] == pytest.approx(40_000)
    assert m["infer_samples_per_s"] == pytest.approx(400 / sum(batch_s))
    assert any("dominate the total" in w for w in result.warnings)
    steady = TrialResult(status="ok")
    infer_metrics(trial, mlp, steady, [5e-5] * 200, [1e-4] * 100)
    assert not any("throughput" in w for w in steady.warnings)


def test_the_estimate_says_what_the_present_load_makes_of_it():
    """Issue 38: a tiny run estimated at 1.9 min took 11.3 at a load average of 12 on 2 cores; the
    plan now says so beside the estimate, and nothing on a machine with cores to spare."""
    from dlbench.cli.run import busy_machine

    factor, why = busy_machine(load=12.2, cores=2) or (0.0, "")
    assert factor == pytest.approx(6.1) and why == "load average 12.2 on 2 cores"
    assert busy_machine(load=1.5, cores=2) is None
