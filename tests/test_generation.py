"""Generation: the token-latency metrics and the parity rule (analysis/generate.py), and each
framework's KV-cache decoder against recomputing the whole sequence with the float64 reference
(torch eager in CI, in this process; every framework and mode in one child each under `slow`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlbench.analysis.generate import LOGITS_RTOL, judge_generation, token_latencies, top2_margin
from dlbench.runner.plan import workload_spec
from dlbench.workloads import lm

SPEC = workload_spec("lm", "tiny")
CHECK = Path(__file__).with_name("generation_check.py")


def test_token_latencies_from_known_times():
    m = token_latencies([0.5, 0.7], [[0.1, 0.1, 0.1], [0.2, 0.2, 0.2]], batch=4)
    assert m["ttft_p50_s"] == pytest.approx(0.6)
    assert m["ttft_p99_s"] == pytest.approx(0.5 + 0.99 * 0.2)
    assert m["tpot_p50_s"] == pytest.approx(0.15)
    assert m["tpot_p99_s"] == pytest.approx(0.2)
    # end to end: 0.8 s and 1.3 s for 4 tokens each -> 5.0 and 3.08 tokens/s, median 4.04
    assert m["output_tokens_per_s_per_stream"] == pytest.approx((4 / 0.8 + 4 / 1.3) / 2)
    assert m["output_tokens_per_s"] == pytest.approx(4 * m["output_tokens_per_s_per_stream"])


def test_token_latencies_refuse_mismatched_lists():
    with pytest.raises(ValueError):
        token_latencies([0.5], [[0.1], [0.2]], batch=1)


def _reference(prompt: np.ndarray, new: int) -> tuple[np.ndarray, np.ndarray]:
    return lm.reference_generate(SPEC, lm.init_params(SPEC), prompt, new)


def test_parity_passes_the_reference_itself_and_fails_a_wrong_token():
    prompt = lm.fixed_batch(SPEC, 3).x[:, :6]
    ids, logits = _reference(prompt, 6)
    verdict = judge_generation(ids, logits.astype(np.float32), logits, ids, logits)
    assert verdict.ok and verdict.divergence_step == -1 and verdict.logits_error < 1e-6
    wrong = ids.copy()
    wrong[1, 2] = (wrong[1, 2] + 1) % 64
    margins = top2_margin(logits)
    assert margins[: 3, 1].min() > 10 * LOGITS_RTOL  # steps 0-2 of row 1 are unambiguous
    verdict = judge_generation(wrong, logits, logits, ids, logits)
    assert not verdict.ok and verdict.divergence_step == 2 and "step 2" in verdict.reason


def test_parity_forgives_a_divergence_at_an_ambiguous_step_but_not_logits_off():
    prompt = lm.fixed_batch(SPEC, 2).x[:, :6]
    ids, logits = _reference(prompt, 5)
    tied = logits.copy()
    tied[3, 0, ids[0, 3]] = tied[3, 0].max()
    second = np.argsort(tied[3, 0])[-2]
    tied[3, 0, second] = tied[3, 0].max() - 1e-9  # a near-tie at step 3 of row 0
    flipped = ids.copy()
    flipped[0, 3:] = second
    verdict = judge_generation(flipped, tied, tied, ids, tied)
    assert verdict.ok and verdict.ambiguous_step == 3 and verdict.divergence_step == 3
    off = logits * (1 + 10 * LOGITS_RTOL)
    assert not judge_generation(ids, off, logits, ids, logits).ok


def test_torch_eager_decoding_with_the_cache_equals_recomputing_the_sequence():
    pytest.importorskip("torch")
    from dlbench.backends.generate import greedy_run
    from dlbench.backends.torch.lm import Decoder, decoder

    params = lm.init_params(SPEC)
    model = Decoder(lm.MODEL_SIZES["tiny"], SPEC.numerics)
    import torch

    with torch.no_grad():
        for name, tensor in model.named_parameters():
            canonical = name.replace("weight", "scale" if "norm" in name else "kernel")
            value = params[canonical]
            tensor.copy_(torch.from_numpy(value.T.copy() if value.ndim == 2 and "embed" not in name else value))
    prompt = lm.fixed_batch(SPEC, 3).x[:, :5]
    d = decoder(model, 3, 16, compiled=False)
    ids, logits = greedy_run(d, prompt, 8)
    whole = lm.reference_logits(SPEC, params, np.concatenate([prompt, ids[:, :-1]], axis=1))
    np.testing.assert_allclose(logits, whole[:, 4:].transpose(1, 0, 2), atol=1e-5)
    assert d.cache_bytes() == 2 * 2 * 3 * 2 * 16 * 16 * 4
    # a second generation starts from an empty cache
    again, _ = greedy_run(d, prompt, 8)
    assert np.array_equal(ids, again)


@pytest.mark.slow
@pytest.mark.parametrize("framework,mode,option", [
    ("torch", "compiled", ""), ("jax", "compiled", ""), ("tensorflow", "eager", ""), ("tensorflow", "graph", ""),
    ("tensorflow", "compiled", ""), ("keras-jax", "compiled", ""), ("keras-torch", "eager", ""),
    ("keras-tensorflow", "compiled", ""),
    # JAX's whole decode, one jitted lax.while_loop (--option jax.decode=while_loop)
    ("jax", "compiled", "decode=while_loop"),
])
def test_every_decoder_matches_recomputing_the_sequence(tmp_path, framework, mode, option):
    out = tmp_path / "facts.json"
    subprocess.run([sys.executable, str(CHECK), framework, mode, str(out), option], check=True, timeout=900)
    facts = json.loads(out.read_text())
    assert facts["max_abs_error"] < 1e-5, facts
    assert facts["same_ids_twice"] and facts["cache_bytes"] > 0
    if option:
        assert "while_loop" in facts["how"] and facts["compilations"] == 1  # one compiled call for every token


@pytest.mark.parametrize("args,message", [
    (["--prompt-len", "0"], "prompt length must be an integer >= 1, got 0"),
    (["--new-tokens", "-3"], "new tokens must be an integer >= 1, got -3"),
    (["--gen-batch", "0"], "generation batch must be an integer >= 1, got 0"),
    (["--prompt-len", "60000", "--new-tokens", "6000"], "over the most a cache holds here: 65536"),
])
def test_bad_generation_settings_are_one_line_and_exit_2(tmp_path, capsys, args, message):
    from dlbench.cli.main import main

    code = main(["run", "-w", "lm", "-f", "torch", "--scenario", "generate", "--preset", "tiny", "--repeats", "1",
                 "--allow-concurrent", "--store", str(tmp_path / "s.sqlite"), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_a_generate_trial_carries_its_options_and_a_train_trial_the_defaults():
    from dlbench.runner.plan import Sweep, make_plan
    from dlbench.spec import GenerateOptions, NoOptions

    plan = make_plan(Sweep(workloads=("lm",), frameworks=("torch",), modes=("eager",), repeats=1, preset="tiny",
                           scenarios=("train", "generate"), scenario_options=(GenerateOptions(prompt_len=5, new_tokens=7),)))
    by = {t.spec.scenario: t.spec for t in plan.trials}
    assert by["generate"].options_of(GenerateOptions) == GenerateOptions(prompt_len=5, new_tokens=7, gen_batch=1)
    assert by["train"].options == NoOptions()
    assert by["generate"].config_key() != by["train"].config_key()
    # at their defaults the options stay out of the serialised spec (old keys unchanged)
    from dlbench.spec import to_dict

    assert "prompt_len" not in to_dict(by["train"]) and to_dict(by["generate"])["prompt_len"] == 5


def test_a_generate_run_on_the_fake_backend_prints_the_generation_table(tmp_path, capsys, fake_env):
    """The scenario end to end without a framework: the fake decoder is the NumPy reference in
    float32, so parity passes; the table, the progress line, the metrics and their units."""
    from dlbench.cli.main import main

    store = str(tmp_path / "g.sqlite")
    args = ["run", "-w", "lm", "-f", "fake", "--mode", "eager", "--scenario", "generate", "--preset", "tiny",
            "--prompt-len", "4", "--new-tokens", "3", "--gen-batch", "2", "--repeats", "1", "--store", store]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "generation with a KV cache" in out and "TTFT" in out and "p50 ms" in out and "fake: the NumPy" in out
    assert "ok: TTFT p50" in out
    # issue 47: the title says what one generation was (never the workload's training batch), the
    # untimed generations at other prompt lengths are a phase and a column of their own (a torch
    # trial spent 195 s there, shown nowhere), and the Server's columns go silently without --load server
    joined = " ".join(out.split())
    assert "· prompt 4 · new tokens 3 · gen batch 2 ·" in joined and "batch 8" not in joined
    assert "other prompt lengths s" in joined and "not shown" not in joined
    assert main(["export", "latest", "--store", store, "-o", str(tmp_path / "e.json")]) == 0
    trial = json.loads((tmp_path / "e.json").read_text())["runs"][0]["trials"][0]
    m = trial["metrics"]
    assert trial["parity"]["verdict"] == "pass", trial["parity"]
    assert "first divergence step -1 of 3" in trial["parity"]["reason"]
    assert m["generations"]["value"] == 10 and m["tpot_p50_s"]["unit"] == "s"
    assert m["recompiles_per_prompt_length"]["value"] == 1.0  # P - 1 and P + 1: one new length each
    assert m["other_prompt_lengths_s"]["value"] > 0 and m["other_prompt_lengths_s"]["unit"] == "s"
    assert m["output_tokens_per_s"]["value"] == pytest.approx(2 * m["output_tokens_per_s_per_stream"]["value"])


def test_a_generate_trial_stored_before_the_phase_shows_the_gap_before_parity():
    """Issue 47: a torch trial spent 195 s between "generation" and "parity" (the generations at
    other prompt lengths, compiling) outside any shown phase; a store written before that phase
    was recorded shows the gap its events leave."""
    from dlbench.report.generate import other_lengths_s
    from dlbench.report.model import Trial

    def phase(name: str, state: str, t: float) -> dict[str, object]:
        return {"event": "phase", "name": name, "state": state, "t": t}

    events = [phase("first_generation", "start", 0.0), phase("first_generation", "end", 5.0),
              phase("generation", "start", 5.0), phase("generation", "end", 10.0),
              phase("parity", "start", 205.0), phase("parity", "end", 206.0)]
    old = Trial(1, 1, {"framework": "torch"}, "ok", None, {}, {}, events, {})
    assert other_lengths_s(old) == pytest.approx(195.0)
    new = Trial(2, 1, {"framework": "torch"}, "ok", None, {"other_prompt_lengths_s": 190.0}, {}, events, {})
    assert other_lengths_s(new) == 190.0  # the phase's own time where the trial measured it
