"""Generation under load (issue 46): MLPerf LoadGen's Server with token latencies
(runner/scenarios/loadgen.py: token_server) with pure-Python systems under test, the generate
scenario's `--load server` through the worker on the fake backend, and the new options' bad input
(`--ttft-bound-ms`, `--tpot-bound-ms`: one line, exit 2)."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from dlbench.cli.main import main
from dlbench.runner import spawn
from dlbench.runner.plan import workload_spec
from dlbench.runner.scenarios import loadgen
from dlbench.spec import GenerateOptions, Policy, SpecError, TrialSpec, to_dict

pytest.importorskip("mlperf_loadgen", reason="mlcommons-loadgen is not installed (pip install 'dlbench[loadgen]')")


def _sut(first_s: float, rest_s: float, tokens: int, batches: list[int]):  # type: ignore[no-untyped-def]
    """A generation that takes `first_s` to its first token and `rest_s` for the rest."""
    def generate(indices: list[int], first_token) -> int:  # type: ignore[no-untyped-def]
        batches.append(len(indices))
        time.sleep(first_s)
        first_token()
        time.sleep(rest_s)
        return tokens
    return generate


def test_token_latencies_come_from_loadgen_and_are_judged_against_both_bounds():
    batches: list[int] = []
    ok = loadgen.token_server(_sut(2e-4, 6e-4, 4, batches), batch=1, pool=16, target_qps=300.0, ttft_bound_s=0.5,
                              tpot_bound_s=0.1, min_duration_s=0.2, min_queries=600)
    assert ok.valid and ok.settings["use_token_latencies"] and ok.settings["tpot_latency"] == 100_000_000
    ttft, tpot = ok.ttft_s("99.00"), ok.tpot_s("99.00")
    assert ttft is not None and tpot is not None
    assert ttft >= 2e-4 and ok.ttft_s("50.00") <= ttft  # type: ignore[operator]
    # LoadGen's TPOT: (completion - first token) / (tokens - 1), at least 6e-4 / 3 here
    assert tpot >= 2e-4 and ok.results["result_completed_tokens_per_second"] > 0
    assert sum(batches) == ok.results["result_query_count"] >= 600 and set(batches) == {1}
    # the same system under a TPOT bound it cannot meet: INVALID, whatever the TTFT does
    tight = loadgen.token_server(_sut(2e-4, 6e-4, 4, []), batch=1, pool=16, target_qps=300.0, ttft_bound_s=0.5,
                                 tpot_bound_s=1e-5, min_duration_s=0.2, min_queries=600)
    assert not tight.valid and "TPOT" in tight.summary


def test_static_batches_take_what_is_queued_up_to_the_batch():
    batches: list[int] = []
    run = loadgen.token_server(_sut(1e-3, 2e-3, 3, batches), batch=4, pool=16, target_qps=2000.0, ttft_bound_s=1.0,
                               tpot_bound_s=1.0, min_duration_s=0.1, min_queries=400)
    assert sum(batches) == run.results["result_query_count"]
    assert max(batches) == 4 and min(batches) >= 1  # arrivals faster than a generation: full batches


def test_a_failing_system_under_test_ends_the_test_and_raises():
    calls = []

    def fails(indices: list[int], first_token) -> int:  # type: ignore[no-untyped-def]
        calls.append(indices)
        raise ValueError("decoder broke")

    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loadgen.token_server(fails, batch=1, pool=8, target_qps=500.0, ttft_bound_s=0.1, tpot_bound_s=0.1,
                                 min_duration_s=0.1, min_queries=200)
        except RuntimeError as e:
            errors.append(e)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(60), "LoadGen kept waiting for queries the failed system never answered"
    assert len(calls) == 1 and "decoder broke" in str(errors[0])


# --- spec and command line --------------------------------------------------------------------------


def _generate(**kw: object) -> TrialSpec:
    return TrialSpec(workload=workload_spec("lm", "tiny"), framework="fake", policy=Policy(mode="eager"),
                     scenario="generate", timeout_s=300.0, trial_id=1,
                     options=GenerateOptions(**kw))  # type: ignore[arg-type]


def test_the_new_fields_leave_existing_keys_alone_and_name_the_load():
    base = _generate()
    assert not {"gen_load", "gen_qps", "ttft_bound_ms", "tpot_bound_ms"} & set(to_dict(base))
    served = base.with_options(gen_load="server", ttft_bound_ms=500.0, tpot_bound_ms=50.0)
    assert served.config_key() != base.config_key() and to_dict(served)["ttft_bound_ms"] == 500.0
    assert "server" in served.label() and "server" not in base.label()
    assert served.options_of(GenerateOptions).gen_load == "server"


@pytest.mark.parametrize("kw, message", [
    ({"gen_load": "loop"}, "load 'loop' is not one of: standard, server"),
    ({"ttft_bound_ms": 5.0}, r"TTFT bound \(ms\) 5.0 applies to --load server only, not 'standard'"),
    ({"gen_qps": 3.0}, "qps 3.0 applies to --load server only"),
    ({"gen_load": "server", "ttft_bound_ms": -1.0, "tpot_bound_ms": 5.0}, r"TTFT bound \(ms\) must be a finite number > 0, got -1.0"),
    ({"gen_load": "server", "ttft_bound_ms": 5.0, "tpot_bound_ms": float("inf")}, "must be a finite number > 0, got inf"),
    ({"gen_load": "server", "ttft_bound_ms": 5.0, "tpot_bound_ms": "5"}, "must be a finite number > 0, got '5'"),
    ({"gen_load": "server", "ttft_bound_ms": 5.0, "tpot_bound_ms": 5.0, "new_tokens": 1}, "needs new tokens >= 2"),
])
def test_bad_server_settings_are_one_line(kw, message):
    with pytest.raises(SpecError, match=message):
        _generate(**kw).validate()


def test_server_bounds_default_to_mlperfs_for_llama2_70b_and_belong_to_generate():
    """Without bounds, LoadGen judges by MLPerf's own Server constraints for llama2-70b
    (loadgen/mlperf.conf: ttft_latency 2000 ms, tpot_latency 200 ms); server options on a trial of
    another scenario are refused."""
    served = _generate(gen_load="server")
    served.validate()
    o = served.options_of(GenerateOptions)
    assert (o.ttft_bound_ms, o.tpot_bound_ms) == (2000.0, 200.0)
    with pytest.raises(SpecError, match="generate"):
        replace(served, scenario="train").validate()


BASE = ["run", "-w", "lm", "-f", "fake", "--mode", "eager", "--preset", "tiny", "--repeats", "1"]


SERVED = ["--scenario", "generate", "--load", "server"]
NOT_ASCII = "is not a number in ASCII digits"
NOT_POSITIVE = "must be a finite number > 0"


def _bad(flag: str, value: str, why: str) -> tuple[list[str], str]:
    """A bad value of one bound with a good other one, and the line that names it."""
    other = "--tpot-bound-ms" if flag == "--ttft-bound-ms" else "--ttft-bound-ms"
    return [*SERVED, flag, value, other, "5"], (f"argument {flag}: {value!r} {why}" if why == NOT_ASCII else why)


@pytest.mark.usefixtures("fake_env")
@pytest.mark.parametrize("args, message", [
    *(_bad("--ttft-bound-ms", v, NOT_POSITIVE) for v in ("-5", "0", "1e999")),
    *(_bad("--ttft-bound-ms", v, NOT_ASCII) for v in ("inf", "nan", "\u0665\u0660", "５", "")),
    *(_bad("--tpot-bound-ms", v, NOT_ASCII) for v in ("fast", "1,5")),
    _bad("--tpot-bound-ms", "-0.0", NOT_POSITIVE),
    (["--scenario", "generate", "--ttft-bound-ms", "500", "--tpot-bound-ms", "50"],
     "TTFT bound (ms) 500.0 applies to --load server only, not 'standard'"),
    (["--scenario", "train", "--load", "server", "--ttft-bound-ms", "500", "--tpot-bound-ms", "50"],
     "TTFT bound (ms) 500.0 applies to --scenario generate with --load server only, not --scenario train"),
])
def test_bad_bounds_on_the_command_line_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    code = main([*BASE, *args, "--store", str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "s.sqlite").exists()  # refused before a run was stored


@pytest.mark.usefixtures("fake_env")
def test_good_bounds_reach_the_trial():
    from dlbench.cli import run as run_command
    from dlbench.cli.main import build_parser

    args = build_parser().parse_args(
        [*BASE, "--scenario", "generate", "--load", "server", "--ttft-bound-ms", " 2.5e2 ", "--tpot-bound-ms", ".5",
         "--qps", "7"])
    [trial] = [t.spec for t in run_command.plan_from_args(args).trials]
    assert trial.options_of(GenerateOptions) == GenerateOptions(gen_load="server", gen_qps=7.0, ttft_bound_ms=250.0,
                                                       tpot_bound_ms=0.5)


# --- through the worker, on the fake backend ------------------------------------------------------------


@pytest.mark.usefixtures("fake_env")
def test_a_generate_trial_under_loadgen_reports_its_token_latencies(tmp_path):
    trial = _generate(prompt_len=4, new_tokens=3, gen_batch=2, gen_load="server", gen_qps=150.0,
                      ttft_bound_ms=2000.0, tpot_bound_ms=1000.0)
    r = spawn.run_trial(trial, tmp_path)
    assert r.status == "ok", (r.error, r.notes.get("traceback"))
    m = r.metrics
    assert m["server_tests"] == 1 and m["server_target_qps"] == 150.0  # --qps: one test
    assert m["server_ttft_bound_s"] == 2.0 and m["server_tpot_bound_s"] == 1.0
    assert 0 < m["server_ttft_p50_s"] <= m["server_ttft_p99_s"] and 0 < m["server_tpot_p50_s"] <= m["server_tpot_p99_s"]
    assert m["server_output_tokens_per_s"] > 0 and m["server_achieved_qps"] > 0
    assert m["server_valid"] in (0.0, 1.0) and (m["server_max_qps"] == 150.0) == (m["server_valid"] == 1.0)
    lg = r.policy_effective["loadgen"]
    [settings] = lg["server"]
    assert lg["token_latencies"] and settings["use_token_latencies"] and settings["ttft_latency"] == 2_000_000_000
    assert "first token" in r.notes["loadgen_server_summary"]
    assert [q for q, _ in r.series["server_ttft_p99_s"]] == [150.0]
    assert m["ttft_p50_s"] > 0 and m["parity_s"] > 0  # the timed generations and the parity phase still ran


# --- the report: token latencies against offered load ------------------------------------------------


def test_html_report_draws_token_latencies_against_offered_load(tmp_path):
    pytest.importorskip("plotly")
    from dlbench.results.records import TrialResult
    from dlbench.results.store import Store

    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("dlbench run --scenario generate --load server", {}, False)
    for seq, (framework, knee) in enumerate((("alpha", 40.0), ("beta", 160.0))):
        spec = replace(_generate(gen_load="server", ttft_bound_ms=500.0, tpot_bound_ms=50.0), framework=framework,
                       trial_id=None)
        offered = [knee / 4, knee, knee * 2]
        result = TrialResult(status="ok", metrics={"ttft_p50_s": 0.01, "server_max_qps": knee, "server_valid": 1.0,
                                                   "server_ttft_bound_s": 0.5, "server_tpot_bound_s": 0.05,
                                                   "server_ttft_p99_s": 0.3, "server_tpot_p99_s": 0.02})
        result.series["server_ttft_p99_s"] = list(zip(offered, [0.05, 0.3, 4.0]))
        result.series["server_tpot_p99_s"] = list(zip(offered, [0.01, 0.02, 0.2]))
        result.series["server_valid"] = [(q, 1.0 if q <= knee else 0.0) for q in offered]
        store.finish_trial(store.add_trial(run, seq, spec), result)
    out = tmp_path / "r.html"
    assert main(["report", "--store", str(tmp_path / "s.sqlite"), "--html", str(out)]) == 0
    html = out.read_text()
    assert "id='chart-served-tokens'" in html and "chart-served-load" not in html
    chart = html.split("id='chart-served-tokens'", 1)[1]
    assert "alpha" in chart and "beta" in chart and "circle-open" in chart
    assert "TTFT p99 bound 500 ms" in chart and "TPOT p99 bound 50 ms" in chart
    assert "max QPS within p99 bound" in html  # the generation table's column
