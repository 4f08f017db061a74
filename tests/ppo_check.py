"""One framework's PPO program at the tiny preset, for tests/test_ppo.py (one process per framework
and mode, as a trial runs it):

    python ppo_check.py FRAMEWORK MODE ROLLOUTS OUT.npz

ROLLOUTS is a comma list of placements (host, fused). Saves: `env_obs` (K environment steps from
the spec's initial states with fixed actions and resets), `env_done`, then per placement P:
`P/actions`, `P/finished` (two rollouts with the spec's draws), `P/losses` (the updates of two
iterations), and `loss`, `grad/<name>` (the fixed frozen batch from the canonical parameters).
"""

from __future__ import annotations

import sys

import numpy as np

from dlbench.backends import get_backend, support
from dlbench.spec import Policy, TrialSpec
from dlbench.workloads import contract, ppo

K_ENV_STEPS = 40


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
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:5])
