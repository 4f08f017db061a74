"""Several train steps per compiled call (backends/multistep.py; issue 20): the auto rule, the
options' validation, and in real frameworks that K steps per call train exactly as one step per
call does: the same batches in the same order, the same per-step losses (to float32 rounding;
JAX's unrolled steps are bit-identical here), no compile after the first chunk, the loop
recorded with the trial's effective policy, and a converge trial that runs through it.

A fresh process per framework runs this file as a script, both at once:

    python test_multistep.py jax|tensorflow OUT.json
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dlbench import workloads
from dlbench.backends import multistep, support
from dlbench.runner import spawn
from dlbench.spec import ConvergeOptions, Policy, SpecError, TrialSpec
from dlbench.workloads.contract import preset_spec
from dlbench.workloads.data import batch_indices, epoch_order

# Chunks of 6 and 2 at K = 4: one K-step call and two leftover steps, then two leftover steps
# (a chunk shorter than K), then a whole epoch in chunks of 8 (no compile may happen there).
CHUNKS = (6, 2)
K = "4"
# (framework, options, data) variants; the first of each framework is one step per call.
VARIANTS = {
    "jax": [({"steps_per_call": "1"}, "pipeline"), ({"steps_per_call": K}, "pipeline"),
            ({"steps_per_call": K, "loop": "scan"}, "pipeline"), ({"steps_per_call": K}, "device")],
    "tensorflow": [({"steps_per_call": "1"}, "pipeline"), ({"steps_per_call": K}, "pipeline"),
                   ({"steps_per_call": K}, "device")],
}
LOSS_RTOL = 1e-6


def _trial(framework: str, policy_options: dict[str, str], data: str = "pipeline", **kw: Any) -> TrialSpec:
    """An mlp trial with the framework's `policy_options`; `kw` the TrialSpec's own fields (its
    scenario `options` among them)."""
    spec = preset_spec(workloads.get("mlp"))
    return TrialSpec(workload=spec, framework=framework, policy=Policy(options=policy_options, data=data), **kw)


def _variant_facts(backend: Any, trial: TrialSpec) -> dict[str, Any]:
    spec = trial.workload
    program = support.build(trial, backend)
    state = support.init(trial, workloads.get(spec.name), program)
    data = workloads.get(spec.name).make_dataset(spec)
    program.load(data)
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    program.compile(state, next(iter(program.batches(rows[:1]))))
    pulled: list[bool] = []

    def recorded(batches: Any) -> Any:
        for i, batch in enumerate(batches):
            x, y = program.canonical_batch(batch)
            pulled.append(bool(np.array_equal(x, data.x[rows[i]]) and np.array_equal(y, data.y[rows[i]])))
            yield batch

    batches = recorded(program.batches(rows))
    losses: list[float] = []
    for n in CHUNKS:
        state, chunk = program.train_chunk(state, batches, n)
        backend.sync(state, chunk)
        losses.extend(program.losses_to_numpy(chunk).tolist())
    compiles = program.compilations()
    state, chunk = program.train_chunk(state, program.batches(rows), len(rows))
    backend.sync(state, chunk)
    return {"losses": losses, "batches_in_order": pulled, "recompiles": program.compilations() - compiles,
            "train_loop": program.train_loop()}


def child(framework: str, out: Path) -> int:
    from dlbench.backends import get_backend
    from dlbench.runner.child import setup_environment

    backend = get_backend(framework)
    setup_environment(_trial(framework, {}), backend)
    backend.import_framework()
    backend.configure(Policy())
    facts = [_variant_facts(backend, _trial(framework, options, data)) for options, data in VARIANTS[framework]]
    out_facts: dict[str, Any] = {"variants": facts}
    if framework == "tensorflow":
        eager = _trial(framework, {"steps_per_call": K})
        eager = dataclasses.replace(eager, policy=dataclasses.replace(eager.policy, mode="eager"))
        out_facts["eager_loop"] = support.build(eager, backend).train_loop()
    out.write_text(json.dumps(out_facts))
    return 0


def test_auto_rule_runs_k_steps_per_call_only_for_cheap_steps_in_long_enough_epochs():
    cpu = dataclasses.replace(preset_spec(workloads.get("mlp"), "cpu"), dataset_size=64 * 128)
    tiny = _trial("jax", {})
    assert tiny.workload.dataset_size // tiny.workload.batch_size < multistep.MIN_EPOCH_STEPS
    assert multistep.train_loop(tiny).steps_per_call == 1
    at_cpu = TrialSpec(workload=cpu, framework="jax")
    assert multistep.train_loop(at_cpu).steps_per_call == multistep.AUTO_STEPS == 8
    assert multistep.train_loop(dataclasses.replace(at_cpu, chunk_steps=4)).steps_per_call == 4
    short = dataclasses.replace(at_cpu, workload=dataclasses.replace(cpu, dataset_size=63 * 128))
    assert multistep.train_loop(short).steps_per_call == 1
    node = TrialSpec(workload=preset_spec(workloads.get("node"), "cpu"), framework="tensorflow")
    assert multistep.train_loop(node).steps_per_call == 1 and "FLOPs per step" in multistep.train_loop(node).rule
    # JAX's auto stays at one step per call (no gain measured on CPU); an explicit K still applies
    jax_auto = multistep.train_loop(at_cpu, multistep.JAX_AUTO_STEPS)
    assert jax_auto.steps_per_call == 1 and "measured" in jax_auto.rule
    forced = multistep.train_loop(_trial("jax", {"steps_per_call": "16", "loop": "scan"}), multistep.JAX_AUTO_STEPS)
    assert (forced.steps_per_call, forced.loop) == (16, "scan") and "option" in forced.rule


@pytest.mark.parametrize(("framework", "options", "message"), [
    ("jax", {"steps_per_call": "3"}, "jax option steps_per_call '3' is not one of: auto, 1, 2, 4, 8, 16, 32"),
    ("tensorflow", {"loop": "scan"}, "tensorflow option loop 'scan' is not one of: unroll"),
    ("torch", {"steps_per_call": "8"}, "torch has no option 'steps_per_call'"),
])
def test_bad_options_name_the_value_and_what_is_allowed(framework, options, message):
    with pytest.raises(SpecError, match=message):
        support.validate(_trial(framework, options))


@pytest.fixture(scope="module")
def facts(tmp_path_factory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("multistep")
    procs = {f: subprocess.Popen([sys.executable, __file__, f, str(tmp / f"{f}.json")], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in VARIANTS}
    out = {}
    for f, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        out[f] = json.loads((tmp / f"{f}.json").read_text())
    return out


@pytest.mark.parametrize("framework", list(VARIANTS))
def test_k_steps_per_call_train_as_one_step_per_call(facts, framework):
    one, *multi = facts[framework]["variants"]
    assert one["train_loop"]["steps_per_call"] == 1
    for f, (options, data) in zip(multi, VARIANTS[framework][1:], strict=True):
        where = f"{options} {data}"
        assert f["train_loop"]["steps_per_call"] == int(K), where
        assert f["train_loop"]["loop"] == options.get("loop", "unroll"), where
        assert len(f["losses"]) == sum(CHUNKS) and all(f["batches_in_order"]), where
        np.testing.assert_allclose(f["losses"], one["losses"], rtol=LOSS_RTOL, err_msg=where)
        assert f["recompiles"] == 0, where
    # the losses fall: these are real steps, not one step's loss repeated
    assert one["losses"][-1] < one["losses"][0]


def test_tensorflow_eager_runs_one_step_per_call_and_says_why(facts):
    loop = facts["tensorflow"]["eager_loop"]
    assert loop["steps_per_call"] == 1 and "eager" in loop["rule"]


@pytest.mark.slow  # a whole JAX trial (13 s under load); the chunk arithmetic is covered above
def test_converge_trial_runs_k_steps_per_call(tmp_path):
    """Evaluation every 6 steps at K = 4: chunks that end between K-step calls."""
    t = _trial("jax", {"steps_per_call": K}, scenario="converge",
               options=ConvergeOptions(target_accuracy=1.0, eval_every=6, max_steps=12), chunk_steps=8, trial_id=1,
               timeout_s=300.0)
    t.validate()
    r = spawn.run_trial(t, tmp_path)
    assert r.status == "ok", r.error
    assert r.policy_effective["train_loop"]["steps_per_call"] == int(K)
    assert r.metrics["steps"] == 12.0 and len(r.series["loss"]) == 12
    assert [s for s, _ in r.series["accuracy"]] == [6.0, 12.0]


if __name__ == "__main__":
    sys.exit(child(sys.argv[1], Path(sys.argv[2])))
