"""Effect sizes, tests and verdicts (issue 26) against known answers: Hodges-Lehmann intervals
computed by hand on tiny samples, the U distribution and the Kolmogorov-Smirnov test against
SciPy, Holm's adjustment, the verdicts and gates of compare (the issue's two reproducers must be
UNDECIDED), the ranking, and the --repeats auto rule. Pure functions: about a second."""

from __future__ import annotations

import json
import re
import math

import numpy as np
import pytest
from scipy import stats as sps

from dlbench.analysis import compare as cmp
from dlbench.analysis import repeats, stats
from dlbench.cli.main import main

# --- statistics -----------------------------------------------------------------------------


def test_hodges_lehmann_by_hand():
    # differences 4-1 .. 6-3: 1 2 2 3 3 3 4 4 5; median 3; with 3 + 3 the widest interval,
    # [min, max] = [1, 5], covers with 1 - 2 P(U = 0) = 1 - 2/20 = 0.9
    s = stats.hodges_lehmann([1, 2, 3], [4, 5, 6], 0.9)
    assert (s.estimate, s.low, s.high) == (3, 1, 5) and s.level == pytest.approx(0.9)
    # base (10, 20), new (12, 25, 30): differences -8 2 5 10 15 20, median 7.5; U counts over
    # 0..6 are 1 1 2 2 2 1 1 of C(5, 2) = 10: [D(1), D(6)] at 0.8, [D(2), D(5)] at 0.6
    wide = stats.hodges_lehmann([10, 20], [12, 25, 30], 0.8)
    assert (wide.estimate, wide.low, wide.high) == (7.5, -8, 20) and wide.level == pytest.approx(0.8)
    narrow = stats.hodges_lehmann([10, 20], [12, 25, 30], 0.6)
    assert (narrow.low, narrow.high) == (2, 15) and narrow.level == pytest.approx(0.6)
    # a ratio is the shift of the logarithms: 2x throughout
    r = stats.hodges_lehmann([10, 20, 40], [20, 40, 80], 0.9, ratio=True)
    assert r.estimate == pytest.approx(2.0) and r.low == pytest.approx(0.5) and r.high == pytest.approx(8.0)


def test_u_distribution_matches_scipys_exact_mann_whitney():
    assert stats.u_null_counts(2, 3) == [1, 1, 2, 2, 2, 1, 1]
    rng = np.random.default_rng(3)
    for m, n in [(3, 3), (4, 6), (7, 5), (9, 9)]:
        counts = stats.u_null_counts(m, n)
        assert sum(counts) == math.comb(m + n, m)
        a, b = rng.normal(0, 1, m), rng.normal(1, 1, n)
        u = int(sps.mannwhitneyu(a, b, method="exact").statistic)
        u = min(u, m * n - u)
        p = min(1.0, 2 * sum(counts[: u + 1]) / math.comb(m + n, m))
        assert p == pytest.approx(sps.mannwhitneyu(a, b, method="exact").pvalue, rel=1e-9)


def test_moses_interval_level_is_exact_and_dual_to_the_test():
    # m = n = 10 at 95 %: the table value is [D(24), D(77)] at 1 - 2 P(U <= 23) = 0.9567
    k, level = stats._shift_rank(10, 10, 0.95)
    assert k == 24 and level == pytest.approx(1 - 2 * sum(stats.u_null_counts(10, 10)[:24]) / math.comb(20, 10))
    assert level == pytest.approx(0.95674, abs=1e-4)
    # large samples: the normal approximation's level stays close to the one asked for
    assert stats._shift_rank(60, 60, 0.95)[1] == pytest.approx(0.95, abs=0.005)


@pytest.mark.parametrize("m,n", [(3, 3), (4, 7), (8, 8), (12, 5), (20, 30)])
def test_kolmogorov_smirnov_matches_scipy(m, n):
    rng = np.random.default_rng(m * 100 + n)
    a, b = rng.normal(0, 1, m), rng.normal(0.3, 2.0, n)
    d, p = stats.ks_p_value(a, b)
    ref = sps.ks_2samp(a, b, method="exact")
    assert d == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-12)


def test_kolmogorov_smirnov_with_ties_matches_scipy():
    a, b = [1, 1, 2, 2, 3, 3, 3], [2, 2, 3, 4, 4, 5]
    d, p = stats.ks_p_value(a, b)
    ref = sps.ks_2samp(a, b, method="exact")
    assert d == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue, rel=1e-8)


def test_kolmogorov_smirnov_sees_a_change_of_spread_the_rank_test_misses():
    """Pinpoint's example: range(10, 30) against range(10) + range(30, 40)."""
    a, b = list(range(10, 30)), [*range(10), *range(30, 40)]
    assert stats.mann_whitney_p(a, b) > 0.4 and stats.ks_p_value(a, b)[1] < 0.05
    d = cmp.decide(a, b, "samples_per_s")
    assert d.verdict == cmp.DIFFERENT and d.spread_only and d.text == "DIFFERENT (spread)"


def test_holm_known_answer():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5]) == [0.5] and stats.holm([0.9, 0.8]) == [1.0, 1.0]
    assert stats.holm([0.02, 0.5]) == pytest.approx([0.04, 0.5])


# --- verdicts and gates ---------------------------------------------------------------------


def _export(values: list[float], env: dict | None = None) -> dict:
    trials = [{"spec": {"workload": {"name": "cnn", "batch_size": 64, "seed": 0}, "framework": "torch",
                        "repeat": i, "policy": {"mode": "compiled"}, "precision": "fp32"},
               "status": "ok", "metrics": {"samples_per_s": {"value": v, "unit": "1/s"}}}
              for i, v in enumerate(values)]
    return {"schema_version": 1, "runs": [{"id": 1, "environment": env or {"cpu_model": "x"}, "trials": trials}]}


def _compare_files(tmp_path, base: list[float], new: list[float], *args: str) -> int:
    (tmp_path / "a.json").write_text(json.dumps(_export(base)))
    (tmp_path / "b.json").write_text(json.dumps(_export(new)))
    return main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), *args])


def test_reproducer_65x_apart_with_three_repeats_is_undecided_not_same(tmp_path, capsys):
    """Issue 26: medians 65x apart (ratio 0.015) printed "same" and exited 0."""
    code = _compare_files(tmp_path, [1000.0, 1010.0, 990.0], [15.0, 15.2, 14.9])
    out = capsys.readouterr().out
    assert code == 4
    assert "UNDECIDED (+1 repeat)" in out and "SAME" not in out
    assert "0.015 [" in out  # the Hodges-Lehmann ratio with its interval
    assert "about 1 more repeats per side would likely decide it" in out


def test_reproducer_fail_rule_with_three_repeats_cannot_pass_silently(tmp_path, capsys):
    """Issue 26: with --repeats 3 the exact p never goes below 0.1, so --fail median:5% could
    never fail: a 30 % slowdown exited 0. Now: 4 (undecided), and 4 + 4 repeats decide it."""
    assert _compare_files(tmp_path, [100.0, 101.0, 99.0], [70.0, 71.0, 69.0], "--fail", "median:5%") == 4
    assert "UNDECIDED median:5%" in capsys.readouterr().out
    assert _compare_files(tmp_path, [100.0, 101.0, 99.0, 100.5], [70.0, 71.0, 69.0, 70.5], "--fail", "median:5%") == 1
    assert "REGRESSION median:5%" in capsys.readouterr().out


def test_gate_passes_only_when_shown_within_and_prints_both_tests(tmp_path, capsys):
    base = [100.0, 101.0, 99.0, 100.5, 99.5]
    assert _compare_files(tmp_path, base, [100.2, 100.1, 99.8, 100.4, 99.9], "--fail", "median:5%") == 0
    out = capsys.readouterr().out
    for text in ("Hodges-Lehmann", "p (Mann-Whitney)", "p (KS)", "SAME", "PASS median:5%"):
        assert text in out
    # the same numbers against a 0.1 % threshold cannot be shown within it
    assert _compare_files(tmp_path, base, [100.2, 100.1, 99.8, 100.4, 99.9], "--fail", "median:0.1%") == 4


def test_absolute_and_bound_rules():
    base, new = [100.0, 101.0, 99.0, 100.5, 99.5], [80.0, 81.0, 79.0, 82.0, 80.5]
    r = cmp.compare_metric("x", "samples_per_s", base, new)
    assert cmp.gate(r, cmp.parse_fail("samples_per_s:10")).outcome == "regression"
    assert cmp.gate(r, cmp.parse_fail("samples_per_s:30")).outcome == "pass"
    assert cmp.gate(r, cmp.parse_fail("samples_per_s:<90")).outcome == "regression"
    assert cmp.gate(r, cmp.parse_fail("samples_per_s:<70")).outcome == "pass"
    assert cmp.gate(r, cmp.parse_fail("samples_per_s:<80.8")).outcome == "undecided"
    # three values cannot give a 90 % interval of the median: undecided, 2 more would
    short = cmp.compare_metric("x", "samples_per_s", base[:3], new[:3])
    g = cmp.gate(short, cmp.parse_fail("samples_per_s:<90"))
    assert g.outcome == "undecided" and g.more_repeats == 2
    # times: step_s_median got 3 ms slower
    slow = cmp.compare_metric("x", "step_s_median", [0.010, 0.0101, 0.0099, 0.01, 0.0100],
                              [0.013, 0.0131, 0.0129, 0.0130, 0.0131])
    assert cmp.gate(slow, cmp.parse_fail("step_s_median:2ms")).outcome == "regression"
    assert cmp.gate(slow, cmp.parse_fail("step_s_median:5ms")).outcome == "pass"


@pytest.mark.parametrize(("text", "message"), [
    ("median:50ms", "samples_per_s is in 1/s; unit 'ms' is not one of /s"),
    ("rss_peak_bytes:2G", "unit 'G' is not one of B, kB, MB"),
    ("median:<5%", "a bound takes a value in samples_per_s's unit"),
    ("median:fast", "is not METRIC:PCT%"),
])
def test_bad_rules_are_one_line(text, message):
    with pytest.raises(cmp.CompareError, match=message):
        cmp.parse_fail(text)
    assert cmp.parse_fail("rss_peak_bytes:>4GiB") == cmp.FailRule("rss_peak_bytes", 4 * 2.0**30, "bound", ">",
                                                                   "rss_peak_bytes:>4GiB")


def test_more_repeats_follows_the_spread():
    rng = np.random.default_rng(0)
    base = (100 * np.exp(rng.normal(0, 0.05, 5))).tolist()
    near = cmp.decide(base, (103 * np.exp(rng.normal(0, 0.05, 5))).tolist())
    wide = cmp.decide(base, (103 * np.exp(rng.normal(0, 0.15, 5))).tolist())
    assert near.verdict == wide.verdict == cmp.UNDECIDED
    assert near.more_repeats is not None and wide.more_repeats is not None
    assert wide.more_repeats > near.more_repeats


def test_ranking_orders_and_decides_each_adjacent_pair():
    ranking = cmp.rank([("slow", [99, 100, 101, 100.5, 99.5]), ("fast", [190, 200, 210, 195, 205]),
                        ("also-slow", [100.2, 100.1, 99.8, 100.4, 99.9]), ("none", [])])
    assert [r.name for r in ranking] == ["fast", "also-slow", "slow"]
    first, second, last = ranking
    assert first.decision is not None and first.decision.verdict == cmp.DIFFERENT
    assert first.decision.shift.estimate == pytest.approx(2.0, rel=0.02)
    # two pairs: the interval at the Bonferroni level 1 - 0.1 / 2, for 5 + 5 [D(3), D(23)] at
    # 1 - 2 P(U <= 2) = 1 - 2 (1 + 1 + 2) / 252
    assert first.decision.shift.level == pytest.approx(1 - 8 / 252)
    assert second.decision is not None and second.decision.verdict == cmp.SAME
    assert last.decision is None and cmp.all_decided(ranking)
    # times: lower is better
    times = cmp.rank([("a", [2.0, 2.1, 1.9]), ("b", [1.0, 1.1, 0.9])], "time_to_target_s")
    assert [r.name for r in times] == ["b", "a"]


# --- the --repeats auto rule ----------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (3, repeats.RepeatRule(False, 3, text="3")),
    ("auto", repeats.RepeatRule(True, 3, 0.05, 20, None, "auto")),
    ("auto:3%,max=12", repeats.RepeatRule(True, 3, 0.03, 12, None, "auto:3%,max=12")),
    ("auto:2.5%,min=4,time=30min", repeats.RepeatRule(True, 4, 0.025, 20, 1800.0, "auto:2.5%,min=4,time=30min")),
])
def test_repeat_rules_parse(value, expected):
    assert repeats.parse(value) == expected


@pytest.mark.parametrize(("value", "message"), [
    ("auto:3", "the target ':3' is not :PCT%"), ("auto,max=2", "max=2 is below min=3"),
    ("auto,time=3d", "time=3d is not a duration"), ("auto,max=3,max=4", "each at most once"),
    ("sometimes", "is not an integer from 1 to 1000, or auto"), (0, "repeats must be an integer >= 1"),
    ("auto,max=5000", "over the maximum of 1000"),
])
def test_bad_repeat_rules_are_named(value, message):
    with pytest.raises(repeats.RepeatsError, match=message):
        repeats.parse(value)


def _interval(rel: float | None, n: int = 6) -> repeats.Interval:
    level = None if rel is None else stats.median_ci(list(range(n)))[2]
    return repeats.Interval("cnn/x", n, rel, level)


def test_auto_rule_stops_for_each_of_its_reasons():
    rule = repeats.parse("auto:3%,max=8,time=10min")
    narrow, wide = _interval(0.02), _interval(0.08)
    assert repeats.judge(rule, 2, 0, 0, [narrow], [("a vs b", True)]).stop is None  # before min
    assert repeats.judge(rule, 6, 0, 0, [narrow], [("a vs b", False)]).stop == "intervals"
    # 5 repeats: [min, max] has only 94 %: not a 95 % interval however narrow
    assert repeats.judge(rule, 5, 0, 0, [_interval(0.01, 5)], []).stop is None
    assert repeats.judge(rule, 4, 0, 0, [wide], [("a vs b", True)]).stop == "decided"
    assert repeats.judge(rule, 4, 0, 0, [wide], []).stop is None  # nothing to compare: no "decided"
    assert repeats.judge(rule, 8, 0, 0, [wide], [("a vs b", False)]).stop == "budget"
    timed = repeats.judge(rule, 4, 500.0, 120.0, [wide], [])
    assert timed.stop == "budget" and "time budget of 10.0 min" in timed.text
    assert repeats.judge(rule, 4, 0, 0, [], []).stop == "no-data"
    going = repeats.judge(rule, 4, 0, 0, [wide, narrow], [("a vs b", False)])
    assert going.stop is None and "±8.0% at 97%" in going.text and "1 of 1 comparison(s) undecided" in going.text


def test_bad_threshold_is_one_line(tmp_path, capsys):
    assert _compare_files(tmp_path, [1.0, 2.0], [1.0, 2.0], "--threshold", "five") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--threshold 'five' is not a percentage" in err


def _ranked_store(path) -> None:
    """One run: torch about 2x the others, jax and tensorflow alike, keras failing parity."""
    from dlbench.results.records import TrialResult
    from dlbench.results.store import Store
    from dlbench.spec import Policy, TrialSpec, WorkloadSpec

    values = {"torch": [190, 200, 210, 195, 205], "jax": [100, 101, 99, 100.5, 99.5],
              "tensorflow": [100.2, 100.1, 99.8, 100.4, 99.9], "keras": [400, 401, 402, 399, 398]}
    store = Store(path)
    run = store.create_run("dlbench run", {}, False)
    seq = 0
    for repeat in range(5):
        for framework, vs in values.items():
            parity = {"verdict": "fail" if framework == "keras" else "pass", "worst_rel_err": 1e-7}
            spec = TrialSpec(workload=WorkloadSpec(), framework=framework, policy=Policy(mode="compiled"), repeat=repeat)
            store.finish_trial(store.add_trial(run, seq, spec),
                               TrialResult(status="ok", metrics={"samples_per_s": vs[repeat]}, parity=parity))
            seq += 1
    store.close()


def test_report_opens_with_the_ranking(tmp_path, capsys):
    from dlbench.report import model
    from dlbench.report.html import render
    from dlbench.report.tables import report_tables
    from dlbench.results.store import Store

    path = tmp_path / "s.sqlite"
    _ranked_store(path)
    assert main(["report", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.index("ranking (best first)") < out.index("dlbench results")
    assert re.search(r"1\s+torch\s+[\d.]+\s+2\.00x \[1\.90, 2\.10\]\s+faster \(p = ", out)
    with Store(path) as store:
        report = model.load(store, [1])
    table = report_tables(report)[0]
    assert table.id == "ranking"
    assert [c.text for c in table.column("framework")] == ["torch", "tensorflow", "jax"]
    verdicts = [c.text for c in table.column("verdict")]
    assert verdicts[0].startswith("faster (p = ") and table.column("vs next [interval]")[0].text == "2.00x [1.90, 2.10]"
    assert verdicts[1] == "the same (±5%)"
    assert "not ranked: " in " ".join(table.notes) and "Holm" in " ".join(table.notes)
    page = render(report, [], None)
    assert page.index("id='table-ranking'") < page.index("id='table-results'")


def test_gate_states_the_change_in_the_direction_of_its_ratio(tmp_path, capsys):
    """Issue 38: NEW/BASE = 1.936 was printed "change -93.6%" and 0.548 "change 45.2%" (the gate's
    worse-direction, unsaid). The change now carries the ratio's sign and says what it means."""
    base = [10000.0, 10100.0, 9900.0, 10050.0, 9950.0]
    faster = [v * 1.936 for v in base]
    assert _compare_files(tmp_path, base, faster) == 0
    out = capsys.readouterr().out
    assert "NEW/BASE 1.936 (+93.6%, better)" in out and "-93.6%" not in out
    slower = [v * 0.548 for v in base]
    assert _compare_files(tmp_path, base, slower) == 1
    out = capsys.readouterr().out
    assert "NEW/BASE 0.548 (-45.2%, worse): worse by 45.2%" in out and "+45.2%" not in out
    # an amount: step time 3 ms longer is a positive difference, and worse
    r = cmp.compare_metric("x", "step_s_median", [0.010, 0.0101, 0.0099], [0.013, 0.0131, 0.0129])
    assert cmp.gate(r, cmp.parse_fail("step_s_median:1ms")).text.startswith("NEW - BASE +0.003 s (worse)")
    # medians in one fixed notation: no 1.015e+04 beside 5568
    assert "e+04" not in out and "5480" in out and "10000" in out
