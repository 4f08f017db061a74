"""Spec validation: every rejection names the bad value and what is allowed."""

from __future__ import annotations

import dataclasses

import pytest

from dlbench.backends import support
from dlbench.spec import Numerics, Policy, SpecError, TrialSpec, WorkloadSpec, to_dict, trial_from_dict


def trial(**kw: object) -> TrialSpec:
    return TrialSpec(workload=WorkloadSpec(), framework="torch", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("t,msg", [
    (lambda: trial(precision="fp8"), "precision 'fp8' is not one of: fp32, tf32, bf16, fp16"),
    (lambda: trial(scenario="serve"), "scenario 'serve' is not one of: train, infer, converge"),
    (lambda: trial(devices=0), "devices must be an integer >= 1, got 0"),
    (lambda: trial(devices=3), "devices 3 must divide the global batch size 128 (equal shards per device)"),
    (lambda: trial(devices=2, scaling="diagonal"), "scaling 'diagonal' is not one of: weak, strong"),
    (lambda: trial(devices=2, bn_sync="global"), "bn sync 'global' is not one of: per-replica, synchronised"),
    (lambda: trial(epochs=0), "epochs must be an integer >= 1, got 0"),
    (lambda: trial(policy=Policy(mode="fast")), "mode 'fast' is not one of: eager, graph, compiled"),
    (lambda: trial(policy=Policy(compile_cache="hot")), "compile cache 'hot'"),
    (lambda: TrialSpec(workload=WorkloadSpec(batch_size=0), framework="torch"), "batch size must be an integer >= 1, got 0"),
    (lambda: TrialSpec(workload=WorkloadSpec(name="gan"), framework="torch"), "workload 'gan' is not one of: mlp, cnn, resnet"),
    (lambda: TrialSpec(workload=WorkloadSpec(), framework="mxnet"), "framework 'mxnet' is not one of"),
    (lambda: TrialSpec(workload=WorkloadSpec(batch_size=512, dataset_size=256), framework="torch"), "smaller than batch size"),
])
def test_rejections_name_the_value(t, msg):
    """Through backends.support.validate: the spec's own checks, its workload's and its
    framework's (spec.py alone knows no registry)."""
    with pytest.raises(SpecError) as e:
        support.validate(t())
    assert msg in str(e.value)
    assert "\n" not in str(e.value)


def test_single_device_pairs_weak_and_strong_trials_with_their_one_device_twin():
    def sized(batch: int, **kw: object) -> TrialSpec:
        return TrialSpec(workload=WorkloadSpec(batch_size=batch), framework="torch", **kw)  # type: ignore[arg-type]

    one, weak, strong = sized(64), sized(128, devices=2), sized(64, devices=2, scaling="strong")
    assert weak.per_device_batch == 64 and strong.per_device_batch == 32
    assert weak.single_device().config_key() == one.config_key() == strong.single_device().config_key()
    # one device: scaling and bn_sync are moot and leave the configuration key unchanged
    assert trial(scaling="strong").config_key() == trial().config_key()


def test_json_round_trip():
    t = trial(repeat=3, policy=Policy(mode="eager", threads=2))
    assert trial_from_dict(to_dict(t)) == t


def test_a_trial_written_with_its_options_nested_reads_the_same_as_flat():
    """`dataclasses.asdict` keeps a trial's options one dict; read back, they are the trial's
    options (never dropped for the defaults), and the same option given two ways is refused."""
    from dlbench.spec import ConvergeOptions

    t = trial(scenario="converge", options=ConvergeOptions(target_accuracy=0.5, eval_every=4, max_steps=40))
    nested = dataclasses.asdict(t)
    assert trial_from_dict(nested) == t == trial_from_dict(to_dict(t))
    nested["target_accuracy"] = 0.7
    with pytest.raises(SpecError, match="target_accuracy given twice"):
        trial_from_dict(nested)


def test_newer_trial_schema_is_refused():
    d = to_dict(trial())
    d["schema_version"] = 99
    with pytest.raises(SpecError, match="newer"):
        trial_from_dict(d)


def test_numerics_pin_the_adam_formula():
    n = WorkloadSpec().numerics
    assert (n.eps, n.eps_placement, n.bias_correction, n.padding, n.flatten_order) == (
        1e-8, "outside_sqrt", True, "VALID", "HWC")
    assert dataclasses.is_dataclass(n)


def test_the_ground_floor_checks_what_it_can_know_alone():
    """spec.py imports no registry: an unknown workload or framework passes its own validate()
    and is refused by backends.support.validate."""
    t = TrialSpec(workload=WorkloadSpec(name="gan"), framework="mxnet")
    t.validate()
    with pytest.raises(SpecError, match="workload 'gan'"):
        support.validate(t)


def test_empty_extras_and_options_leave_the_serialised_spec_and_its_keys_unchanged():
    t = trial()
    d = to_dict(t)
    assert "extra" not in d["workload"]["numerics"] and "options" not in d["policy"]
    with_extra = TrialSpec(workload=WorkloadSpec(numerics=Numerics(extra={"groups": 4})), framework="torch",
                           policy=Policy(options={"flavour": "spicy"}))
    back = trial_from_dict(to_dict(with_extra))
    assert back == with_extra and back.workload.numerics.value("groups") == 4
    assert with_extra.config_key() != t.config_key()


def test_a_stored_policy_with_the_old_onnxruntime_field_reads_as_an_option():
    d = to_dict(trial())
    d["policy"]["ort_optimization"] = "all"  # every trial stored before backend options had it
    assert trial_from_dict(d) == trial()
    d["policy"]["ort_optimization"] = "basic"
    assert trial_from_dict(d).policy.options == {"optimization": "basic"}
