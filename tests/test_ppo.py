"""The ppo workload (workloads/ppo.py, workloads/cartpole.py, backends/*/ppo.py, runner/scenarios/rl.py).

CI tier: the NumPy definition (environment, GAE, loss), the spec's draws, the plan's rollout axis,
Keras declared unsupported, and one cross-framework parity test (torch eager, tensorflow eager,
jax compiled: one process each, side by side) against the float64 NumPy definition.
Slow tier (pytest -m slow): every framework x mode x rollout placement, the FLOP count, and a
real `dlbench run` of the RL scenarios.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from dlbench.backends import installed
from dlbench.cli import listing
from dlbench.runner.plan import Sweep, make_plan
from dlbench.workloads import cartpole, contract, ppo

HERE = Path(__file__).parent
SPEC = contract.preset_spec(ppo)
P64 = {k: v.astype(np.float64) for k, v in ppo.init_params(SPEC).items()}


def _obs(n: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.05, 0.05, (n, 4))


def test_env_step_is_gymnasiums_euler_step():
    """One step written out by hand for one environment (Gymnasium's CartPoleEnv.step)."""
    x, x_dot, th, th_dot = 0.01, -0.02, 0.03, 0.04
    force = -10.0  # action 0
    temp = (force + 0.05 * th_dot**2 * math.sin(th)) / 1.1
    th_acc = (9.8 * math.sin(th) - math.cos(th) * temp) / (0.5 * (4 / 3 - 0.1 * math.cos(th) ** 2 / 1.1))
    x_acc = temp - 0.05 * th_acc * math.cos(th) / 1.1
    want = [x + 0.02 * x_dot, x_dot + 0.02 * x_acc, th + 0.02 * th_dot, th_dot + 0.02 * th_acc]
    got = cartpole.dynamics(np.array([[x, x_dot, th, th_dot]]), np.array([0]))
    np.testing.assert_allclose(got[0], want, rtol=1e-12)


def test_env_terminates_resets_and_truncates():
    reset = np.full((2, 4), 0.01)
    far = np.array([[2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    state = cartpole.EnvState(far, np.array([3, cartpole.MAX_STEPS - 1], np.int32), np.array([3.0, 499.0]))
    new, reward, done, finished = cartpole.step(state, np.array([1, 1]), reset)
    # the first leaves |x| <= 2.4 (terminated), the second reaches 500 steps (truncated)
    assert done.tolist() == [True, True] and reward.tolist() == [1.0, 1.0]
    assert finished.tolist() == [4.0, 500.0]
    np.testing.assert_array_equal(new.obs, reset)
    assert new.t.tolist() == [0, 0] and new.ret.tolist() == [0.0, 0.0]
    new, _, done, finished = cartpole.step(new, np.array([0, 1]), reset)
    assert done.tolist() == [False, False] and finished.tolist() == [0.0, 0.0] and new.t.tolist() == [1, 1]


def test_termination_edge_is_gymnasiums_float64_comparison():
    """Gymnasium steps in float64 and ends the episode when x > 2.4: a float32 state exactly at
    float32(2.4) (2.4000001) is past it, one float32 below (2.3999999) is not; likewise for
    float32(12 degrees). Zero velocities keep x and theta exact through the step."""
    sys.path.insert(0, str(HERE))
    import ppo_check

    for dtype in (np.float32, np.float64):
        obs = ppo_check.edge_states().astype(dtype)
        gym_rule = (np.abs(obs[:, 0].astype(np.float64)) > 2.4) | (np.abs(obs[:, 2].astype(np.float64)) > 12 * 2 * math.pi / 360)
        _, _, done, _ = cartpole.step(cartpole.initial(obs), np.zeros(4, np.int64), np.zeros((4, 4), dtype))
        assert done.tolist() == gym_rule.tolist() == [True, False, True, False], dtype
    assert cartpole.limits("float64") == (cartpole.X_LIMIT, cartpole.THETA_LIMIT)


def test_gae_with_lambda_one_is_the_discounted_return():
    rng = np.random.default_rng(0)
    rewards, values = np.ones((6, 3)), rng.normal(size=(6, 3))
    dones = np.zeros((6, 3), bool)
    dones[2, 1] = True
    last = rng.normal(size=3)
    adv, ret = ppo.gae(rewards, values, dones, last, 0.9, 1.0)
    for n in range(3):
        g = last[n]
        for t in range(5, -1, -1):
            g = rewards[t, n] + 0.9 * g * (1.0 - dones[t, n])
            assert ret[t, n] == pytest.approx(g) and adv[t, n] == pytest.approx(g - values[t, n])


def test_loss_at_the_rollout_policy_is_value_and_entropy_only():
    """At the parameters that collected the batch the ratio is 1 and normalised advantages have
    mean 0, so the surrogate is exactly 0; the rest is vf_coef x 0.5 MSE - ent_coef x entropy."""
    batch = ppo.fixed_batch(SPEC, 16).x.astype(np.float64)
    logits, value = ppo.forward(P64, batch[:, :4])
    logps = ppo.log_softmax(logits)
    entropy = -(np.exp(logps) * logps).sum(axis=1).mean()
    want = 0.5 * 0.5 * np.mean((value - batch[:, 7]) ** 2) - 0.01 * entropy
    assert ppo.ppo_loss(SPEC, P64, batch) == pytest.approx(want, rel=1e-5)


def test_frozen_rollout_rows_are_the_policys_actions_and_log_probs():
    data = ppo.make_dataset(SPEC)
    logits, _ = ppo.forward(P64, data.x[:, :4].astype(np.float64))
    logp = ppo.log_softmax(logits)[np.arange(len(data)), data.y]
    np.testing.assert_allclose(data.x[:, 5], logp, rtol=1e-5)
    assert set(np.unique(data.y)) == {0, 1} and np.array_equal(data.y, data.x[:, 4])


def test_sampling_is_the_inverse_cdf():
    logits = np.log(np.array([[0.25, 0.75], [0.9, 0.1]]))
    assert ppo.sample(logits, np.array([0.2, 0.95])).tolist() == [0, 1]
    assert ppo.sample(logits, np.array([0.3, 0.5])).tolist() == [1, 0]


def test_draws_are_the_specs():
    a, b = ppo.draws(SPEC, 3), ppo.draws(SPEC, 3)
    s = ppo.size(SPEC)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a.uniforms, ppo.draws(SPEC, 4).uniforms)
    assert not np.array_equal(a.uniforms, ppo.draws(dataclasses.replace(SPEC, seed=1), 3).uniforms)
    assert a.resets.shape == (s.steps, s.envs, 4) and np.abs(a.resets).max() <= 0.05
    assert all(sorted(p) == list(range(s.envs * s.steps)) for p in a.perms)


def test_plan_sweeps_rollout_placement_for_ppo_only():
    sweep = Sweep(workloads=("ppo", "mlp"), frameworks=("jax",), scenarios=("train",), preset="tiny",
                  rollouts=("host", "fused"), repeats=1)
    trials = [t.spec for t in make_plan(sweep).trials]
    assert sorted((t.workload.name, t.policy.rollout) for t in trials) == [
        ("mlp", "default"), ("ppo", "fused"), ("ppo", "host")]


@pytest.mark.parametrize("framework", ["keras-jax", "keras-torch", "keras-tensorflow"])
def test_list_shows_ppo_unsupported_with_the_reason(framework):
    reasons = listing.support(framework).modes["ppo"]
    assert all(r is not None and "Keras has no rollout API" in r for r in reasons.values()), reasons


def _probe(framework: str, mode: str, rollouts: str, tmp: Path) -> dict[str, np.ndarray]:
    out = tmp / f"{framework}-{mode}.npz"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(HERE / "ppo_check.py"), framework, mode, rollouts, str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with np.load(out) as f:
        return dict(f)


def _numpy_reference() -> dict[str, np.ndarray]:
    sys.path.insert(0, str(HERE))
    import ppo_check

    return ppo_check.numpy_reference()


def _assert_matches(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], placements: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    import ppo_check

    ppo_check.assert_matches(got, ref, placements)


def test_frameworks_agree_with_the_numpy_definition_and_each_other(tmp_path):
    """torch (eager), tensorflow (eager) and jax (compiled, fused) at the tiny preset: K
    environment steps through terminations and resets, the first rollout's actions, the frozen
    batch's loss; then gradients, both iterations' actions and update losses across frameworks."""
    wanted = {"torch": ("eager", "host"), "tensorflow": ("eager", "host"), "jax": ("compiled", "fused")}
    here = {f: mr for f, mr in wanted.items() if f in installed()}
    if len(here) < 2:
        pytest.skip(f"needs two of {', '.join(wanted)} installed")
    with ThreadPoolExecutor(len(here)) as pool:
        futures = {f: pool.submit(_probe, f, m, r, tmp_path) for f, (m, r) in here.items()}
        got = {f: fut.result() for f, fut in futures.items()}
    ref = _numpy_reference()
    for f, arrays in got.items():
        _assert_matches(arrays, ref, [here[f][1]])
    first, *others = got
    for f in others:
        a, b = got[first], got[f]
        for k in (k for k in a if k.startswith("grad/")):
            assert np.linalg.norm(a[k] - b[k]) <= 1e-5 * np.linalg.norm(a[k]) + 1e-9, (f, k)
        assert np.array_equal(a[f"{here[first][1]}/actions"], b[f"{here[f][1]}/actions"])
        np.testing.assert_allclose(a[f"{here[first][1]}/losses"], b[f"{here[f][1]}/losses"], rtol=1e-4)


MATRIX = [("torch", "eager", "host"), ("torch", "compiled", "host"), ("tensorflow", "eager", "host"),
          ("tensorflow", "graph", "host,fused"), ("tensorflow", "compiled", "host,fused"),
          ("jax", "compiled", "host,fused")]


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "mode", "rollouts"), MATRIX)
def test_every_mode_and_rollout_placement(framework, mode, rollouts, tmp_path):
    if framework not in installed():
        pytest.skip(f"{framework} is not installed")
    got = _probe(framework, mode, rollouts, tmp_path)
    _assert_matches(got, _numpy_reference(), rollouts.split(","))


@pytest.mark.slow
def test_flops_per_sample_equal_torch_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.backends.torch import ppo as torch_ppo

    p = {k: torch.tensor(v, requires_grad=True) for k, v in ppo.init_params(SPEC).items()}
    batch = torch.tensor(ppo.fixed_batch(SPEC, 8).x)
    with FlopCounterMode(display=False) as forward:
        torch_ppo.forward(p, batch[:, :4])
    with FlopCounterMode(display=False) as train:
        torch_ppo.ppo_loss(dict(SPEC.numerics.extra), p, batch).backward()
    assert forward.get_total_flops() == 8 * ppo.flops_per_sample(SPEC, train=False)
    assert train.get_total_flops() == 8 * ppo.flops_per_sample(SPEC, train=True)


@pytest.mark.slow
def test_run_reports_env_steps_for_every_framework(tmp_path):
    store = tmp_path / "s.sqlite"
    cmd = [sys.executable, "-m", "dlbench.cli.main", "run", "-w", "ppo", "-f", "jax,torch,tensorflow", "--mode", "eager,compiled",
           "--scenario", "rollout,train", "--rollout", "host,fused", "--preset", "tiny", "--repeats", "1", "--store", str(store),
           "--allow-concurrent"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from dlbench.results.store import Store

    with Store(store) as s:
        trials = s.trials(1)
    done = {(t.spec["framework"], t.spec["policy"]["mode"], t.spec["policy"].get("rollout"), t.spec["scenario"]): t
            for t in trials}
    ok = {k for k, t in done.items() if t.status == "ok"}
    assert ("jax", "compiled", "fused", "rollout") in ok and ("tensorflow", "compiled", "fused", "train") in ok
    assert ("torch", "eager", "host", "train") in ok
    assert done[("torch", "compiled", "fused", "rollout")].status == "unsupported"
    for k in ok:
        assert done[k].metrics["env_steps_per_s"] > 0


@pytest.mark.skipif("torch" not in installed(), reason="torch is not installed")
def test_one_ppo_trial_runs_through_the_runner(tmp_path):
    """One tiny torch-eager rollout trial through `dlbench run` and the worker (no compile): ok,
    env steps/s measured, and the loop it ran recorded with the effective policy. (The runner
    asks every program for its train loop; a PPO program without one failed every trial.)"""
    from dlbench.cli.main import main
    from dlbench.results.store import Store

    store = tmp_path / "s.sqlite"
    assert main(["run", "-w", "ppo", "-f", "torch", "--mode", "eager", "--scenario", "rollout", "--preset", "tiny",
                 "--repeats", "1", "--threads", "1", "--store", str(store), "--allow-concurrent"]) == 0
    with Store(store) as s:
        [trial] = s.trials(1)
    assert trial.status == "ok", trial.error
    assert trial.metrics["env_steps_per_s"] > 0
    assert trial.data["policy"]["train_loop"]["loop"] == "ppo, rollout host"


def test_finished_episodes_are_in_time_order_at_cleanrls_global_step():
    """finished (T=3, N=2): env 1 ends at t=0 (return 7), env 0 at t=2 (return 9), env 1 at t=2
    (return 2). Iteration 4: global steps (4*3 + t + 1) * 2 (every environment's steps)."""
    from dlbench.runner.scenarios.rl import finished_episodes

    finished = np.array([[0.0, 7.0], [0.0, 0.0], [9.0, 2.0]])
    assert finished_episodes(finished, 4) == [(26, 7.0), (30, 9.0), (30, 2.0)]
    assert finished_episodes(np.zeros((3, 2)), 0) == []


def test_episodic_return_curve_averages_episodes_per_span_of_steps():
    from dlbench.analysis.converge import episodic_return_curve

    episodes = [(10.0, 20.0), (40.0, 30.0), (50.0, 50.0), (100.0, 400.0)]
    # spans of 25 steps up to 100: (0,25]: 20; (25,50]: 30 and 50 -> 40 (50 is in the third span's
    # start: int(50*4/100)=2); (75,100]: 400
    assert episodic_return_curve(episodes, 4) == [(25.0, 20.0), (50.0, 30.0), (75.0, 50.0), (100.0, 400.0)]
    assert episodic_return_curve([], 4) == []


@pytest.mark.slow
@pytest.mark.skipif("torch" not in installed(), reason="torch is not installed")
def test_converge_keeps_every_episode_and_the_report_shows_the_published_form(tmp_path):
    """A tiny torch-eager converge trial (3 iterations, an unreachable target): every finished
    episode's return at its global env step is stored (`episodic_return`, steps non-decreasing,
    the same episodes the window mean is taken over), and the converge table's notes show the
    curve in that form beside dlbench's own metric."""
    from dlbench.cli.main import main
    from dlbench.report import model
    from dlbench.report.tables import report_tables
    from dlbench.results.store import Store

    store = tmp_path / "s.sqlite"
    assert main(["run", "-w", "ppo", "-f", "torch", "--mode", "eager", "--scenario", "converge", "--preset", "tiny",
                 "--target-accuracy", "0.99", "--max-steps", "3", "--repeats", "1", "--threads", "1",
                 "--store", str(store), "--allow-concurrent"]) in (0, 3)
    with Store(store) as s:
        report = model.load(s, [1])
    [(_, trial)] = list(report.trials())
    assert trial.status == "ok", trial.data
    episodes = trial.series["episodic_return"]
    steps = [s for s, _ in episodes]
    assert steps == sorted(steps) and 0 < steps[-1] <= 3 * 4 * 16 and len(episodes) == trial.metrics["episodes"]
    window = [r for _, r in episodes][-20:]
    assert trial.series["return"][-1][1] == pytest.approx(float(np.mean(window)))
    table = next(t for t in report_tables(report) if t.id == "converge")
    assert any(n.startswith("episodic return by global env step") for n in table.notes)
    assert any(n.startswith("ppo/torch seed 0: ") and "k:" in n for n in table.notes)


def test_converge_table_notes_the_episodic_return_curve(tmp_path):
    """Synthetic store: an RL converge trial with an `episodic_return` series gets the curve in
    the published form in the converge table's notes, after one note saying what it is; a
    trial without the series (a supervised workload) gets none."""
    from dlbench.report import model
    from dlbench.report.tables import report_tables
    from dlbench.results.records import TrialResult
    from dlbench.results.store import Store
    from dlbench.spec import ConvergeOptions, Policy, TrialSpec, WorkloadSpec

    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("dlbench run", {}, False)
    spec = TrialSpec(workload=WorkloadSpec(name="ppo", batch_size=128), framework="jax", policy=Policy(mode="compiled"),
                     scenario="converge", options=ConvergeOptions(target_accuracy=0.95))
    episodes = [(float(s), float(r)) for s, r in zip(range(512, 10241, 512), range(10, 500, 25))]
    store.finish_trial(store.add_trial(run, 0, spec), TrialResult(
        status="ok", metrics={"reached_target": 0.0, "accuracy": 0.8, "final_return": 400.0, "episodes": 20.0},
        series={"accuracy": [(10240.0, 0.8)], "episodic_return": episodes}))
    table = next(t for t in report_tables(model.load(store, [run])) if t.id == "converge")
    i = next(k for k, n in enumerate(table.notes) if n.startswith("episodic return by global env step"))
    # episode j = 1..20 ends at step 512 j with return 10 + 25 (j - 1); spans of 1024 steps hold
    # j = 1, then j = 2-3 (47.5), 4-5 (97.5), ..., and the last j = 18-20 (460)
    assert table.notes[i + 1] == ("ppo/jax seed 0: 1.024k:10 2.048k:48 3.072k:98 4.096k:148 5.12k:198 6.144k:248"
                                  " 7.168k:298 8.192k:348 9.216k:398 10.24k:460")
