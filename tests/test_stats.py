"""Statistics against known answers, and the coverage of the median CI by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlbench.analysis import compare as cmp
from dlbench.analysis import stats


@pytest.mark.parametrize(("n", "level"), [(3, 0.75), (5, 1 - 2 / 32), (6, 1 - 2 / 64), (10, 1 - 2 * 11 / 1024)])
def test_median_ci_reports_its_true_level(n, level):
    lo, hi, got = stats.median_ci(list(range(n)))
    assert got == pytest.approx(level)
    if n == 10:  # [x_(2), x_(9)]: [x_(3), x_(8)] would cover only 89 %
        assert (lo, hi) == (1, 8)
    else:
        assert (lo, hi) == (0, n - 1)


def test_median_ci_covers_as_often_as_it_claims():
    """Simulated coverage of the true median (lognormal, skewed like timings) matches the level."""
    rng = np.random.default_rng(0)
    for n in (3, 5, 10, 20):
        hits = 0
        level = stats.median_ci(list(range(n)))[2]
        for _ in range(4000):
            x = rng.lognormal(0.0, 0.3, n)
            lo, hi, _ = stats.median_ci(x.tolist())
            hits += lo <= 1.0 <= hi  # the median of lognormal(0, s) is 1
        assert abs(hits / 4000 - level) < 0.025, (n, hits / 4000, level)


def test_summary_and_unstable_flag():
    s = stats.summarize([100.0, 101.0, 99.0, 100.5, 99.5])
    assert s.median == 100.0 and s.n == 5
    assert s.ci_low == 99.0 and s.ci_high == 101.0
    assert s.cv == pytest.approx(np.std([100, 101, 99, 100.5, 99.5], ddof=1) / 100)
    assert not s.unstable
    noisy = stats.summarize([80.0, 100.0, 120.0])
    assert noisy.unstable and noisy.rel_half_width == pytest.approx(0.2)
    assert not stats.summarize([5.0]).unstable


def test_required_repeats_known_answer():
    # 2 * (1.95996 + 0.84162)^2 * (0.05/0.05)^2 = 15.7 -> 16
    assert stats.required_repeats(0.05, change=0.05) == 16
    assert stats.required_repeats(0.01, change=0.05) == 3


def test_mann_whitney_exact_known_answers():
    assert stats.mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert stats.mann_whitney_p([1, 2, 3, 4], [5, 6, 7, 8]) == pytest.approx(2 / 70)
    assert stats.min_p_value(3, 3) == pytest.approx(0.1)
    assert stats.min_p_value(5, 5) == pytest.approx(2 / math.comb(10, 5))


def test_ratio_ci_contains_the_ratio():
    r, lo, hi, level = stats.ratio_ci([100, 101, 99, 100, 100], [90, 91, 89, 90, 90])
    assert r == pytest.approx(0.9)
    assert lo <= r <= hi and level == pytest.approx(2 * (1 - 2 / 32) - 1)


def _trial(framework: str, value: float, repeat: int, threads: int | None = None, status: str = "ok") -> dict:
    spec = {"workload": {"name": "cnn", "batch_size": 32, "seed": 0}, "framework": framework, "repeat": repeat,
            "policy": {"mode": "compiled", "threads": threads}, "precision": "fp32"}
    return {"spec": spec, "status": status, "metrics": {"samples_per_s": {"value": value, "unit": "1/s"},
                                                         "rss_peak_bytes": {"value": 1e9, "unit": "B"}}}


def test_compare_same_slower_and_gate():
    base = [_trial("torch", v, i) for i, v in enumerate([100, 102, 98, 101, 99])]
    same = [_trial("torch", v, i) for i, v in enumerate([101, 99, 100, 102, 98.5])]
    slow = [_trial("torch", v, i) for i, v in enumerate([80, 81, 79, 82, 80.5])]
    [r_same], _ = cmp.compare(base, same, ["samples_per_s"])
    assert r_same.verdict == cmp.SAME
    [r_slow], _ = cmp.compare(base, slow, ["samples_per_s"])
    assert r_slow.verdict == cmp.DIFFERENT and r_slow.decision.direction == "worse"
    assert r_slow.p_value == pytest.approx(2 / 252)
    rule = cmp.parse_fail("median:5%")
    assert cmp.regressions([r_slow], [rule]) and not cmp.regressions([r_same], [rule])
    assert cmp.gate(r_same, rule).outcome == "pass"
    # significant but within 25 %: the 90 % interval of the ratio ends above 0.75
    assert not cmp.regressions([r_slow], [cmp.parse_fail("median:25%")])
    assert cmp.gate(r_slow, cmp.parse_fail("median:25%")).outcome == "pass"


def test_compare_never_calls_an_undecidable_change_same():
    """3 + 3 repeats 2x apart: the exact test cannot reach p < 0.05, the interval is far from
    +-5 %: UNDECIDED, with one more repeat per side (4 + 4 can reach p = 0.029)."""
    base = [_trial("jax", v, i) for i, v in enumerate([100, 101, 99])]
    new = [_trial("jax", v, i) for i, v in enumerate([50, 51, 49])]
    [r], _ = cmp.compare(base, new, ["samples_per_s"])
    assert r.verdict == cmp.UNDECIDED and r.decision.more_repeats == 1
    assert cmp.gate(r, cmp.parse_fail("median:5%")).outcome == "undecided"


def test_policy_difference_is_named_and_bad_rules_rejected():
    base = [_trial("torch", 100, 0, threads=2)]
    new = [_trial("torch", 100, 0, threads=1)]
    assert cmp.policy_differences(base, new) == ["cnn/torch/compiled b32 s0: policy threads 2 -> 1"]
    with pytest.raises(cmp.CompareError, match="is not METRIC:PCT%"):
        cmp.parse_fail("median:five")
    assert cmp.parse_fail("rss_peak_bytes:10%") == cmp.FailRule("rss_peak_bytes", 0.1, text="rss_peak_bytes:10%")


def test_parity_judges_a_gradient_that_is_zero_by_construction_against_the_whole():
    from dlbench.analysis import parity

    rng = np.random.default_rng(0)
    ref = {"w": rng.standard_normal(100), "key.bias": np.full(4, 1e-19)}
    ok = {"w": ref["w"] * (1 + 1e-6), "key.bias": np.full(4, 3e-9)}  # float32 rounding
    v = parity.compare_grads(1.0, ok, 1.0, ref, "float32")
    assert v.verdict == "pass", v.reason
    wrong = {"w": ref["w"], "key.bias": np.full(4, 0.1)}  # a real, non-zero gradient
    assert parity.compare_grads(1.0, wrong, 1.0, ref, "float32").verdict == "fail"


def test_pairwise_gradients_treat_rounding_noise_of_a_zero_as_zero():
    from dlbench.analysis import parity

    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 8))
    # two frameworks' float32 noise on a bias that is zero in exact arithmetic: unrelated vectors
    a = {"w": w, "b_k": 1e-9 * rng.standard_normal(8)}
    b = {"w": w * (1 + 1e-7), "b_k": 1e-9 * rng.standard_normal(8)}
    assert parity.rel_err(a["b_k"], b["b_k"]) > 0.5  # what the plain metric made of it
    assert parity.pairwise_grad_err(a, b) < 1e-6
    # a real difference in the same tensor is not noise
    assert parity.pairwise_grad_err({**a, "b_k": 1e-2 * np.ones(8)}, b) > 1e-3


def test_resnet_float32_bounds_are_wider_but_still_catch_a_reversed_bn_momentum():
    from dlbench.analysis import parity

    base, res = parity.tolerance("float32"), parity.tolerance("float32", "resnet")
    assert res.rel_err > base.rel_err and res.trajectory_rel_err > base.trajectory_rel_err
    assert res.logits_rel_err == 1e-1 < 1.34  # momentum 0.9 for 0.1 errs by 1.34 (measured)
    ok, err = parity.compare_logits(np.ones(4) * 1.03, np.ones(4), "float32", "resnet")
    assert ok and not parity.compare_logits(np.ones(4) * 1.03, np.ones(4), "float32")[0]
