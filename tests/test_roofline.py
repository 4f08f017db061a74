"""The memory-bandwidth bound of decoding and the roofline's numbers: lm's decode step counted by
hand (workloads/lm.py: decode_step), the roofline's arithmetic (analysis/roofline.py), and a
generate trial of the fake backend carrying the bound and its share into the store and the
export (the parent's judge: runner/verdicts.py: judge_bandwidth)."""

from __future__ import annotations

import json

import pytest

from dlbench.analysis import roofline
from dlbench.cli.main import main
from dlbench.runner.plan import workload_spec
from dlbench.workloads import lm

TINY = workload_spec("lm", "tiny")  # V 64, D 32, heads 2, depth 2, F 96


def test_the_tiny_decode_step_counted_by_hand():
    # per block: q k v o 4 x 32 x 32 = 4096, gate up down 3 x 32 x 96 = 9216, two norms 64
    # -> 13,376; two blocks 26,752; final norm 32; head 32 x 64 = 2048; one embedding row 32
    step = lm.decode_step(TINY, batch=1, prompt_len=32, new_tokens=32, weight_itemsize=4, kv_itemsize=4)
    assert step.weight_bytes == (26_752 + 32 + 2048 + 32) * 4 == 115_456
    # the 31 decode steps attend to 33..63 positions: mean 48 = 32 + 32 / 2
    assert step.mean_positions == 48
    assert step.kv_cache_bytes == 2 * 2 * 1 * 48 * 32 * 4 == 24_576  # keys and values, 2 blocks
    assert step.bytes == 140_032
    # 2 x (2 blocks x 13,312 matmul weights + 2048) + 2 blocks x 4 x 48 x 32
    assert step.flops == 2 * (2 * 13_312 + 2048) + 2 * 4 * 48 * 32 == 69_632
    # batch 8: the weights are read once for all rows; the cache and the FLOPs grow with B
    eight = lm.decode_step(TINY, batch=8, prompt_len=32, new_tokens=32, weight_itemsize=4, kv_itemsize=4)
    assert eight.weight_bytes == step.weight_bytes + 7 * 32 * 4
    assert eight.kv_cache_bytes == 8 * step.kv_cache_bytes and eight.flops == 8 * step.flops
    # an int8 weight path (1 byte a weight) with a float32 cache reads a quarter of the weights
    int8 = lm.decode_step(TINY, batch=1, prompt_len=32, new_tokens=32, weight_itemsize=1, kv_itemsize=4)
    assert int8.weight_bytes * 4 == step.weight_bytes and int8.kv_cache_bytes == step.kv_cache_bytes
    # int8 decoding as the runtimes do it: the matmul weights (2 x 13,312 + the head's 2048) at one
    # byte, the norms (2 x 64 + 32) and the embedding row (32) at four
    dynamic = lm.decode_step(TINY, batch=1, prompt_len=32, new_tokens=32, weight_itemsize=4, kv_itemsize=4,
                             matmul_itemsize=1)
    assert dynamic.weight_bytes == (2 * 13_312 + 2048) * 1 + (2 * 64 + 32 + 32) * 4 == 29_440
    assert dynamic.kv_cache_bytes == step.kv_cache_bytes and dynamic.flops == step.flops


def test_decode_flops_agree_with_the_whole_sequence_count():
    """One token at L positions costs what flops_per_sample charges a token of a T = L sequence
    on average plus the attention's difference: at L = T the per-token matmul part is equal."""
    t = lm.size(TINY).seq_len
    step = lm.decode_step(TINY, batch=1, prompt_len=t - 1, new_tokens=2, weight_itemsize=4, kv_itemsize=4)
    per_token = lm.flops_per_sample(TINY, train=False) / t
    attention_gap = 4 * 2 * 32 * (step.mean_positions - t)  # the sequence count's attention uses T keys
    assert step.flops == pytest.approx(per_token + attention_gap)


def test_roofline_arithmetic():
    assert roofline.ridge_flops_per_byte(200e9, 20e9) == 10.0
    assert roofline.attainable_flops_per_s(0.5, 200e9, 20e9) == 10e9  # left of the ridge: memory
    assert roofline.attainable_flops_per_s(50.0, 200e9, 20e9) == 200e9  # right of it: compute
    assert roofline.memory_bound_s(140_032, 14.0032e9) == pytest.approx(1e-5)
    assert roofline.bound_share(1e-5, 4e-5) == 0.25 and roofline.bound_share(1e-5, None) is None
    # Adam streams weight, gradient and two moments, writes three back: 7 x 4 B a parameter
    assert roofline.train_step_min_bytes(1000, 4, "adam") == 28_000
    assert roofline.train_step_min_bytes(1000, 4, "lion") is None


@pytest.mark.usefixtures("fake_env")
def test_a_generate_trial_stores_the_bound_and_its_share_and_the_export_carries_them(tmp_path, capsys):
    store = str(tmp_path / "g.sqlite")
    args = ["run", "-w", "lm", "-f", "fake", "--mode", "eager", "--scenario", "generate", "--preset", "tiny",
            "--prompt-len", "6", "--new-tokens", "4", "--gen-batch", "2", "--repeats", "1", "--threads", "1",
            "--store", store]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert main(["export", "latest", "--store", store, "-o", str(tmp_path / "e.json")]) == 0
    trial = json.loads((tmp_path / "e.json").read_text())["runs"][0]["trials"][0]
    m = {k: v["value"] for k, v in trial["metrics"].items()}
    units = {k: v["unit"] for k, v in trial["metrics"].items()}
    step = lm.decode_step(TINY, batch=2, prompt_len=6, new_tokens=4, weight_itemsize=4, kv_itemsize=4)
    assert m["decode_bytes_per_step"] == step.bytes and m["decode_flops_per_step"] == step.flops
    assert m["tpot_bound_s"] == pytest.approx(step.bytes / m["memory_bandwidth_bytes_per_s"])
    assert m["tpot_bound_share"] == pytest.approx(m["tpot_bound_s"] / m["tpot_p50_s"])
    assert 0 < m["tpot_bound_share"] < 1  # the float64 NumPy decoder is far from the memory's limit
    assert m["decode_flops_per_s"] == pytest.approx(step.flops / m["tpot_p50_s"])
    assert units["memory_bandwidth_bytes_per_s"] == "B/s" and units["tpot_bound_s"] == "s"
    assert "GB/s" in trial["notes"]["memory_bandwidth"] and "thread(s)" in trial["notes"]["memory_bandwidth"]
    assert "positions" in trial["notes"]["decode_bytes"]
    assert f" {m['tpot_bound_share']:.1%} " in out  # the generation table's share column


def test_the_roofline_chart_puts_each_step_on_its_side_of_the_ridge(tmp_path):
    pytest.importorskip("plotly")
    from dlbench.report import figures, model
    from dlbench.results.records import TrialResult
    from dlbench.results.store import Store
    from dlbench.spec import Policy, TrialSpec

    ceilings = {"matmul_ceiling_flops_per_s": 200e9, "memory_bandwidth_bytes_per_s": 20e9}  # ridge 10 FLOP/B
    store = Store(tmp_path / "s.sqlite")
    run = store.create_run("dlbench run -w lm --scenario train,generate", {}, False)
    trials = {
        "generate": {"decode_flops_per_step": 1e6, "decode_bytes_per_step": 2e6, "decode_flops_per_s": 4e9},
        "train": {"flops_per_sample": 1e6, "min_step_bytes": 4e5, "achieved_flops_per_s": 50e9},  # 8 x 1e6 / 4e5 = 20
    }
    for seq, (scenario, metrics) in enumerate(trials.items()):
        spec = TrialSpec(workload=TINY, framework="alpha", policy=Policy(mode="eager"), scenario=scenario)
        store.finish_trial(store.add_trial(run, seq, spec), TrialResult(status="ok", metrics={**metrics, **ceilings}))
    chart = figures.roofline(model.load(store, [run]))
    assert chart is not None and chart.id == "roofline"
    traces = {t.name: t for t in chart.figure.data}
    roof = next(t for name, t in traces.items() if name.startswith("roof:"))
    assert 10.0 in roof.x and max(roof.y) == 200.0  # GFLOP/s
    assert all(y == pytest.approx(min(200.0, x * 20.0)) for x, y in zip(roof.x, roof.y))
    assert "ridge 10 FLOP/B" in traces
    decode, train = traces["alpha decode steps"], traces["alpha training steps"]
    assert decode.x == (0.5,) and decode.y == (4.0,) and decode.marker.symbol == "diamond"
    assert "memory-bound side" in decode.hovertext and "40.0% of the roof" in decode.hovertext  # roof 10 GFLOP/s
    assert train.x == (20.0,) and train.y == (50.0,) and train.marker.symbol == "circle"
    assert "compute-bound side" in train.hovertext
    assert chart.figure.layout.xaxis.type == "log" and chart.figure.layout.yaxis.type == "log"


def test_the_parent_divides_by_the_bandwidth_of_the_trials_threads_and_not_on_an_accelerator():
    from dlbench.results.records import TrialResult
    from dlbench.runner import verdicts
    from dlbench.spec import Policy, TrialSpec

    trial = TrialSpec(workload=TINY, framework="fake", policy=Policy(mode="eager", threads=2), scenario="generate")
    measured = {"bytes_per_s": 10e9, "kernel": "read", "read_bytes_per_s": 10e9, "triad_bytes_per_s": 6e9,
                "threads": 2, "array_bytes": 2**27, "busy": False}
    limits = verdicts.Ceilings(bandwidth={2: (measured, ""), 1: ({**measured, "bytes_per_s": 1.0}, "")})
    cpu = TrialResult(status="ok", metrics={"decode_bytes_per_step": 140_032.0, "tpot_p50_s": 5e-5})
    verdicts.judge_bandwidth(trial, cpu, limits)
    assert cpu.metrics["memory_bandwidth_bytes_per_s"] == 10e9  # the 2-thread measurement, not the 1-thread one
    assert cpu.metrics["tpot_bound_s"] == pytest.approx(140_032 / 10e9)
    assert cpu.metrics["tpot_bound_share"] == pytest.approx(140_032 / 10e9 / 5e-5)
    assert "10.0 GB/s (read" in cpu.notes["memory_bandwidth"]
    gpu = TrialResult(status="ok", metrics={"decode_bytes_per_step": 140_032.0, "tpot_p50_s": 5e-5},
                      framework_info={"gpus": [{"name": "NVIDIA H100 80GB HBM3"}]})
    verdicts.judge_bandwidth(trial, gpu, limits)
    assert gpu.metrics["tpot_bound_s"] is None and gpu.metrics["tpot_bound_share"] is None
    assert "accelerator" in gpu.notes["memory_bandwidth"]
    untimed = TrialResult(status="ok", metrics={"samples_per_s": 1.0})  # neither FLOP/s nor decode steps
    verdicts.judge_bandwidth(trial, untimed, limits)
    assert "memory_bandwidth_bytes_per_s" not in untimed.metrics
