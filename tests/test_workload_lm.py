"""The lm workload's definition (workloads/lm.py, NumPy only): the Markov chain and its entropy
rate, the data, the score, the float64 reference with and without its KV cache, and the FLOP rule
against torch's counter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlbench.runner.plan import workload_spec
from dlbench.workloads import lm

SPEC = workload_spec("lm", "tiny")


def test_the_chain_is_a_stochastic_matrix_with_a_stationary_start():
    c = lm.chain(SPEC)
    v = lm.MODEL_SIZES["tiny"].vocab
    assert c.successors.shape == c.probs.shape == (v, lm.MODEL_SIZES["tiny"].successors)
    assert np.allclose(c.probs.sum(axis=1), 1.0)
    assert all(len(set(row)) == len(row) for row in c.successors)  # distinct successors
    moved = np.bincount(c.successors.ravel(), weights=(c.stationary[:, None] * c.probs).ravel(), minlength=v)
    assert np.allclose(moved, c.stationary, atol=1e-12)


def test_sequences_follow_the_chain_and_their_mean_surprise_is_the_entropy_rate():
    c = lm.chain(SPEC)
    tokens = lm.sequences(SPEC, 2000, 33, np.random.default_rng(1))
    prev, nxt = tokens[:, :-1].ravel(), tokens[:, 1:].ravel()
    where = c.successors[prev] == nxt[:, None]
    assert where.any(axis=1).all()  # every transition is one of the token's successors
    surprise = -np.log(c.probs[prev][where])
    h = c.entropy_rate_nats()
    assert 0.5 < h < math.log(lm.MODEL_SIZES["tiny"].successors)
    # 64000 transitions: the standard error of the mean surprise is ~0.004 nats
    assert surprise.mean() == pytest.approx(h, abs=0.03)


def test_data_is_the_stream_shifted_by_one_and_the_splits_differ():
    train, held_out = lm.make_dataset(SPEC), lm.make_eval_dataset(SPEC)
    assert train.x.shape == train.y.shape == (SPEC.dataset_size, lm.MODEL_SIZES["tiny"].seq_len)
    assert train.x.dtype == train.y.dtype == np.int32
    assert np.array_equal(train.x[:, 1:], train.y[:, :-1])
    assert not np.array_equal(train.x[: len(held_out)], held_out.x)


def test_score_is_agreement_with_the_chains_most_likely_next_token():
    data = lm.make_eval_dataset(SPEC)
    best = lm.chain(SPEC).most_likely_next()
    perfect = np.eye(64, dtype=np.float32)[best[data.x]]
    assert lm.score(SPEC, perfect, data) == 1.0
    # the labels themselves are draws: a model that predicts them exactly is not "perfect"
    assert lm.score(SPEC, np.eye(64, dtype=np.float32)[data.y], data) < 1.0


def test_parameters_are_canonical_and_seeded():
    p = lm.init_params(SPEC)
    assert list(p) == list(lm.param_shapes(SPEC))
    assert p["head.kernel"].shape == (32, 64) and "head.bias" not in p
    assert np.all(p["block0.attn_norm.scale"] == 1.0)
    # residual-stream projections start smaller: 0.02 / sqrt(2 depth) = 0.01 at depth 2
    assert np.std(p["block1.mlp.down.kernel"]) == pytest.approx(0.01, rel=0.15)
    assert np.std(p["block1.mlp.up.kernel"]) == pytest.approx(0.02, rel=0.15)
    assert all(np.array_equal(a, b) for a, b in zip(p.values(), lm.init_params(SPEC).values()))


def test_the_initial_loss_is_near_log_vocab_and_the_chain_can_do_better():
    batch = lm.fixed_batch(SPEC, 8)
    loss = lm.reference_loss(SPEC, lm.init_params(SPEC), batch.x, batch.y)
    assert loss == pytest.approx(math.log(64), rel=0.02)
    assert lm.entropy_rate_nats(SPEC) < loss / 2


def test_the_reference_attends_causally():
    p, x = lm.init_params(SPEC), lm.fixed_batch(SPEC, 2).x
    changed = x.copy()
    changed[:, 9:] = (changed[:, 9:] + 1) % 64
    a, b = lm.reference_logits(SPEC, p, x), lm.reference_logits(SPEC, p, changed)
    assert np.array_equal(a[:, :9], b[:, :9])
    assert not np.allclose(a[:, 9:], b[:, 9:])


def test_decoding_with_the_cache_equals_recomputing_the_whole_sequence():
    p, prompt = lm.init_params(SPEC), lm.fixed_batch(SPEC, 3).x[:, :5]
    ids, steps = lm.reference_generate(SPEC, p, prompt, 7)
    assert ids.shape == (3, 7) and steps.shape == (7, 3, 64)
    assert np.array_equal(ids, steps.argmax(axis=-1).T)
    full = lm.reference_logits(SPEC, p, np.concatenate([prompt, ids[:, :-1]], axis=1))
    np.testing.assert_allclose(full[:, 4:].transpose(1, 0, 2), steps, rtol=0, atol=1e-12)


def test_rope_rotates_pairs_half_a_head_apart_and_keeps_norms():
    cos, sin = lm.rope_angles(SPEC, np.arange(16))
    x = np.random.default_rng(0).standard_normal((1, 1, 16, 16))
    r = lm.rope(x, cos, sin)
    np.testing.assert_allclose(np.linalg.norm(r, axis=-1), np.linalg.norm(x, axis=-1))
    np.testing.assert_allclose(r[..., 0, :], x[..., 0, :])  # position 0: no rotation
    # relative positions: <rope(q, m), rope(k, n)> depends on m - n only
    q, k = x[0, 0, 0], x[0, 0, 1]
    dot = [float(lm.rope(q, cos[m], sin[m]) @ lm.rope(k, cos[m - 3], sin[m - 3])) for m in (3, 7, 12)]
    assert np.allclose(dot, dot[0])


def test_the_flop_rule_is_6n_per_token_plus_attention():
    s = lm.MODEL_SIZES["tiny"]
    n = s.depth * (4 * s.dim**2 + 3 * s.dim * s.mlp_dim) + s.dim * s.vocab
    attention = 12 * s.depth * s.seq_len**2 * s.dim
    assert lm.flops_per_sample(SPEC) == 6 * n * s.seq_len + attention
    assert lm.flops_per_sample(SPEC, train=False) * 3 == lm.flops_per_sample(SPEC)


def test_the_flop_rule_equals_torchs_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.backends.torch.lm import Decoder

    model = Decoder(lm.MODEL_SIZES["tiny"], SPEC.numerics)
    for param in model.parameters():
        torch.nn.init.normal_(param, std=0.02)
    x = torch.from_numpy(lm.fixed_batch(SPEC, 2).x.astype(np.int64))
    # The counter has no formula for the fused CPU attention kernel; the math backend runs the
    # same two matmuls as bmm (over the whole T x T square, causal or not).
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as forward:
            model(x)
        with FlopCounterMode(display=False) as train:
            model(x).sum().backward()
    assert forward.get_total_flops() == 2 * lm.flops_per_sample(SPEC, train=False)
    assert train.get_total_flops() == 2 * lm.flops_per_sample(SPEC, train=True)


def test_presets_have_the_stated_sizes():
    def count(preset: str) -> int:
        return sum(int(np.prod(s)) for s in lm.param_shapes(workload_spec("lm", preset)).values())

    assert 9e6 < count("cpu") < 11e6 and lm.MODEL_SIZES["small"].seq_len == 256
    large = lm.MODEL_SIZES["large"]
    assert (large.dim, large.depth, large.heads, large.seq_len) == (768, 12, 12, 1024)
    assert 120e6 < count("gpu") < 140e6


def test_extra_scores_give_perplexity_and_its_ratio_to_the_entropy_rate():
    data = lm.make_eval_dataset(SPEC)
    c = lm.chain(SPEC)
    # the chain's own log-probabilities as logits: the perplexity of the best possible model
    rows = np.full((64, 64), -1e9)
    for t in range(64):
        rows[t, c.successors[t]] = np.log(c.probs[t])
    logits = rows[data.x]
    scores = lm.extra_scores(SPEC, logits, data)
    # 16 x 16 draws: the sample's mean surprise is within ~0.1 nats of the entropy rate
    assert scores["perplexity_ratio"] == pytest.approx(1.0, abs=0.12)
    uniform = lm.extra_scores(SPEC, np.zeros((*data.x.shape, 64)), data)
    assert uniform["eval_perplexity"] == pytest.approx(64.0)
