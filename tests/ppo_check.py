"""One framework's PPO program at the tiny preset, for tests/test_ppo.py (one process per framework
and mode, as a trial runs it):

    python ppo_check.py FRAMEWORK MODE ROLLOUTS OUT.npz

(or `check` from a process that has imported the framework: the zoo tests' children). The
tests judge the arrays with `assert_matches` against `numpy_reference`.

ROLLOUTS is a comma list of placements (host, fused). Saves: `env_obs` (K environment steps from
the spec's initial states with fixed actions and resets), `env_done`, then per placement P:
`P/actions`, `P/finished` (two rollouts with the spec's draws), `P/losses` (the updates of two
iterations), and `loss`, `grad/<name>` (the fixed frozen batch from the canonical parameters);
`edge_done` (one step from states exactly at and one float32 below float32(2.4) and
float32(12 degrees)); `loss_ddof1` and `recorded_ddof1` (the fixed batch's loss, and the
program's recorded `adv_norm_ddof`, under a spec whose numerics ask for ddof 1).
"""

from __future__ import annotations

import dataclasses
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


def edge_states() -> np.ndarray:
    """(4, 4) float32 states with zero velocities (so one step keeps x and theta exactly): x at
    float32(2.4), x one float32 below, theta at float32(12 degrees), theta one float32 below."""
    out = np.zeros((4, 4), np.float32)
    for row, (col, limit) in enumerate(((0, cartpole.X_LIMIT), (0, cartpole.X_LIMIT), (2, cartpole.THETA_LIMIT),
                                        (2, cartpole.THETA_LIMIT))):
        at = np.float32(limit)
        out[row, col] = at if row % 2 == 0 else np.nextafter(at, np.float32(0))
    return out


def off_policy_batch(spec):  # type: ignore[no-untyped-def]
    """The fixed batch with its old log-probs moved by 0, 0.05, 0.1, ... (ratios != 1 and
    unequal): at the rollout policy the surrogate is -mean(normalised advantage) = 0 whatever
    the scale, so only an off-policy batch shows the ddof."""
    batch = ppo.fixed_batch(spec, 8)
    x = batch.x.copy()
    x[:, 5] -= (0.05 * (np.arange(len(x)) % 3)).astype(x.dtype)
    return dataclasses.replace(batch, x=x)


def with_ddof(spec, ddof: int):  # type: ignore[no-untyped-def]
    extra = {**spec.numerics.extra, "adv_norm_ddof": ddof}
    return dataclasses.replace(spec, numerics=dataclasses.replace(spec.numerics, extra=extra))


def probe_ddof_and_edge(framework: str, mode: str, spec, arrays: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
    """The ddof-1 loss and recorded ddof, and the threshold edge (saved into `arrays`)."""
    trial = TrialSpec(workload=with_ddof(spec, 1), framework=framework, policy=Policy(mode=mode, rollout="host"))
    program = support.build(trial, get_backend(framework))
    state = support.init(trial, ppo, program)
    batch = off_policy_batch(spec)
    arrays["loss_ddof1"] = np.float64(program.loss_and_grads(state, batch.x, batch.y)[0])
    arrays["recorded_ddof1"] = np.int64(program.numerics()["adv_norm_ddof"])
    zeros = np.zeros(4, np.int32)
    _, done, _ = program.env_step(program.env(edge_states()), zeros, np.zeros((4, 4), np.float32))
    arrays["edge_done"] = np.asarray(done)


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
        state = support.init(trial, ppo, program)
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
            state = support.init(trial, ppo, program)
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
    probe_ddof_and_edge(framework, mode, spec, arrays)
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
    off = off_policy_batch(SPEC)
    for ddof in (0, 1):
        out[f"loss_ddof{ddof}"] = np.float64(ppo.reference_loss(with_ddof(SPEC, ddof), ppo.init_params(SPEC), off.x, off.y))
    return out


def assert_matches(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], placements: list[str]) -> None:
    """One framework's arrays against numpy_reference: K environment steps through terminations
    and resets, the frozen batch's loss, the first rollout's actions, finite update losses; and
    every placement taking the same actions and updates."""
    assert got["env_done"].any() and np.array_equal(got["env_done"], ref["env_done"])  # the reset path ran
    np.testing.assert_allclose(got["env_obs"], ref["env_obs"], atol=2e-5)
    assert abs(float(got["loss"]) - float(ref["loss"])) <= 1e-5 * abs(float(ref["loss"])), (got["loss"], ref["loss"])
    # The recorded ddof is the one used: ddof 1 is recorded and gives the NumPy definition's loss
    # at ddof 1 (on an off-policy batch, 7e-4 relative from ddof 0's: 70x the tolerance).
    assert int(got["recorded_ddof1"]) == 1
    assert abs(float(got["loss_ddof1"]) - float(ref["loss_ddof1"])) <= 1e-5 * abs(float(ref["loss_ddof1"]))
    assert abs(float(ref["loss_ddof1"]) - float(ref["loss_ddof0"])) > 20 * 1e-5 * abs(float(ref["loss_ddof0"]))
    # Gymnasium's edge (float64 |x| > 2.4): at float32(2.4) terminated, one float32 below not.
    assert got["edge_done"].tolist() == [True, False, True, False]
    for p in placements:
        assert np.array_equal(got[f"{p}/actions"][0], ref["actions0"])
        assert np.all(np.isfinite(got[f"{p}/losses"]))
    for p in placements[1:]:  # host and fused take the same actions and updates
        assert np.array_equal(got[f"{placements[0]}/actions"], got[f"{p}/actions"])
        np.testing.assert_allclose(got[f"{placements[0]}/losses"], got[f"{p}/losses"], rtol=1e-5)


if __name__ == "__main__":
    main(*sys.argv[1:5])
