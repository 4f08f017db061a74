"""One framework's PPO program at the tiny preset, for tests/test_ppo.py (one process per framework
and mode, as a trial runs it):

    python ppo_check.py FRAMEWORK MODE ROLLOUTS OUT.npz

(or `check` from a process that has imported the framework: the zoo tests' children). The
tests judge the arrays with `assert_matches` against `numpy_reference`.

ROLLOUTS is a comma list of placements (host, fused). Saves: `env_obs` (K environment steps from
the spec's initial states with fixed actions and resets), `env_done`, then per placement P:
`P/actions`, `P/finished` (two rollouts with the spec's draws), `P/losses` (the updates of two
iterations), and `loss`, `grad/<name>` (the fixed frozen batch from the canonical parameters).
"""

from __future__ import annotations

import sys

import numpy as np

from dlbench.backends import get_backend, support
from dlbench.backends.base import Backend
from dlbench.spec import Policy, TrialSpec
from dlbench.workloads import cartpole, contract, ppo

K_ENV_STEPS = 40
SPEC = contract.preset_spec(ppo)


def env_actions(n: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Actions that push every cart one way for a while (some poles fall inside K steps: the
    reset path runs), and the resets."""
    rng = np.random.default_rng(7)
    actions = np.where(np.arange(steps)[:, None] % 10 < 8, 1, 0) * np.ones((1, n), np.int32)
    resets = rng.uniform(-0.05, 0.05, (steps, n, 4)).astype(np.float32)
    return actions.astype(np.int32), resets


def main(framework: str, mode: str, rollouts: str, out: str) -> None:
    backend = get_backend(framework)
    backend.import_framework()
    backend.configure(Policy(mode=mode, threads=1))
    np.savez(out, **check(backend, framework, mode, rollouts))


def check(backend: Backend, framework: str, mode: str, rollouts: str) -> dict[str, np.ndarray]:
    """The arrays the tests assert on (module docstring), in this process, whose framework is
    imported and configured (a zoo test's child calls it beside its other checks)."""
    spec = contract.preset_spec(ppo)
    arrays: dict[str, np.ndarray] = {}
    for placement in rollouts.split(","):
        trial = TrialSpec(workload=spec, framework=framework, policy=Policy(mode=mode, rollout=placement))
        program = support.build(trial, backend)
        state = support.init(trial, program)
        if "loss" not in arrays:
            batch = ppo.fixed_batch(spec, 8)
            loss, grads = program.loss_and_grads(state, batch.x, batch.y)
            arrays["loss"] = np.float64(loss)
            arrays.update({f"grad/{k}": v for k, v in grads.items()})
            env = program.env(ppo.initial_obs(spec))
            actions, resets = env_actions(ppo.size(spec).envs, K_ENV_STEPS)
            obs, done = [], []
            for a, r in zip(actions, resets):
                env, d, _ = program.env_step(env, a, r)
                obs.append(program.env_obs(env))
                done.append(d)
            arrays["env_obs"], arrays["env_done"] = np.stack(obs), np.stack(done)
            state = support.init(trial, program)
        env = program.env(ppo.initial_obs(spec))
        acts, fin, losses = [], [], []
        for i in range(2):
            d = ppo.draws(spec, i)
            env, traj = program.rollout(state, env, d.uniforms, d.resets)
            acts.append(program.actions(traj))
            fin.append(program.finished(traj))
            state, loss_values = program.update(state, env, traj, d.perms)
            losses.append(program.losses_to_numpy(loss_values))
        arrays[f"{placement}/actions"] = np.stack(acts)
        arrays[f"{placement}/finished"] = np.stack(fin)
        arrays[f"{placement}/losses"] = np.concatenate(losses)
    return arrays


def numpy_reference(rollouts: int = 2) -> dict[str, np.ndarray]:
    """What `check` computes, in float64 NumPy (the environment, the rollouts' actions)."""
    p64 = {k: v.astype(np.float64) for k, v in ppo.init_params(SPEC).items()}
    out: dict[str, np.ndarray] = {}
    env = cartpole.initial(ppo.initial_obs(SPEC).astype(np.float64))
    actions, resets = env_actions(ppo.size(SPEC).envs, K_ENV_STEPS)
    obs, done = [], []
    for a, r in zip(actions, resets):
        env, _, d, _ = cartpole.step(env, a, r.astype(np.float64))
        obs.append(env.obs)
        done.append(d)
    out["env_obs"], out["env_done"] = np.stack(obs), np.stack(done)
    env = cartpole.initial(ppo.initial_obs(SPEC).astype(np.float64))
    d = ppo.draws(SPEC, 0)
    _, r = ppo.rollout(p64, env, d.uniforms.astype(np.float64), d.resets.astype(np.float64))
    out["actions0"] = r.actions
    batch = ppo.fixed_batch(SPEC, 8)
    out["loss"] = np.float64(ppo.reference_loss(SPEC, ppo.init_params(SPEC), batch.x, batch.y))
    return out


def assert_matches(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], placements: list[str]) -> None:
    """One framework's arrays against numpy_reference: K environment steps through terminations
    and resets, the frozen batch's loss, the first rollout's actions, finite update losses; and
    every placement taking the same actions and updates."""
    assert got["env_done"].any() and np.array_equal(got["env_done"], ref["env_done"])  # the reset path ran
    np.testing.assert_allclose(got["env_obs"], ref["env_obs"], atol=2e-5)
    assert abs(float(got["loss"]) - float(ref["loss"])) <= 1e-5 * abs(float(ref["loss"])), (got["loss"], ref["loss"])
    for p in placements:
        assert np.array_equal(got[f"{p}/actions"][0], ref["actions0"])
        assert np.all(np.isfinite(got[f"{p}/losses"]))
    for p in placements[1:]:  # host and fused take the same actions and updates
        assert np.array_equal(got[f"{placements[0]}/actions"], got[f"{p}/actions"])
        np.testing.assert_allclose(got[f"{placements[0]}/losses"], got[f"{p}/losses"], rtol=1e-5)


if __name__ == "__main__":
    main(*sys.argv[1:5])
