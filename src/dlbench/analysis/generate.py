"""Generation's numbers as pure functions: token latencies (time to first token, time per
output token, tokens/s) and the parity rule of greedy generation against the float64 reference.

Latencies (as vLLM's benchmark_serving and LLMPerf name them): one generation is a batch of B
prompts of P tokens and G new tokens; its **TTFT** is prefill plus the first token's fetch, the
same for the B streams; each later token's **TPOT** is one decode step plus its fetch. Output
tokens/s per stream is G over the generation's end-to-end time (TTFT + the G - 1 TPOTs), the
median over generations; in total, B times that. Percentiles: NumPy's linear interpolation
between order statistics (with fewer than 100 samples p99 lies between the two largest).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Generation logits against the float64 reference, normwise relative per step and row. The
# tiny lm's float32 error measured 2.4e-7 for every framework (loaded two-core machine): the
# bound leaves 400x for larger models and other kernels.
LOGITS_RTOL = 1e-4
# The same for int8 decoding (--precision int8: int8 weights, activations quantised per call).
# Symmetric int8 with one scale per output channel rounds each weight by at most half a step of
# max|w| / 127; for Gaussian weights max|w| is about 3.5 sigma, so each matmul's output carries a
# relative error of about 3.5 / 127 / sqrt(12) = 0.8 %, quantising its input per tensor adds as
# much again (more where activations have outliers, and twice as much for torch's 7-bit
# activations on x86), and the errors of successive blocks add up. Measured on the canonical
# weights over the parity prompts (docs/workloads.md#lm), worst normwise error of a step: tiny
# preset (2 blocks) 1.0e-2 ONNX Runtime, 1.4-1.8e-2 torch and LiteRT; cpu preset (10 blocks)
# 3.2e-2 ONNX Runtime and LiteRT, 5.3e-2 torch. The bound, 0.1, is twice the worst of them;
# what int8 gets wrong by mistake (a wrong or missing scale, a layer left in int8 codes, a
# transposed kernel) errs by O(1). The ids are held to the reference up to the first step whose
# top-2 margin is within twice the bound of the largest logit (the float32 rule, this bound):
# on the untrained canonical weights the float64 decoder's margins are small (median 9 % of the
# largest logit at the cpu preset), so that is early and the verdict rests on the logit error;
# the token agreement is measured and shown beside it, never assumed.
INT8_LOGITS_RTOL = 1e-1


def logits_bound(precision: str) -> float:
    """The normwise bound of a generation's logits against the float64 reference."""
    return INT8_LOGITS_RTOL if precision == "int8" else LOGITS_RTOL


def token_latencies(ttft_s: list[float], tpot_s: list[list[float]], batch: int) -> dict[str, float]:
    """Metrics of timed generations: ttft_s[i] and the decode steps tpot_s[i] of generation i."""
    if not ttft_s or len(ttft_s) != len(tpot_s):
        raise ValueError("token_latencies needs one TTFT and one list of TPOTs per generation")
    steps = np.array([t for gen in tpot_s for t in gen], dtype=np.float64)
    end_to_end = np.array([first + sum(rest) for first, rest in zip(ttft_s, tpot_s)])
    tokens = np.array([1 + len(rest) for rest in tpot_s], dtype=np.float64)
    per_stream = float(np.median(tokens / end_to_end))
    out = {
        "ttft_p50_s": float(np.percentile(ttft_s, 50)),
        "ttft_p99_s": float(np.percentile(ttft_s, 99)),
        "output_tokens_per_s_per_stream": per_stream,
        "output_tokens_per_s": per_stream * batch,
        "generations": float(len(ttft_s)),
    }
    if steps.size:
        out.update(tpot_p50_s=float(np.percentile(steps, 50)), tpot_p99_s=float(np.percentile(steps, 99)))
    return out


@dataclass(frozen=True)
class GenerationParity:
    """The verdict of one framework's greedy generation against the float64 reference.

    `logits_error`: the worst normwise relative error of any step's logits (per row) against
    the reference teacher-forced on the framework's own tokens (so every step compares like
    with like, even after a legitimate divergence). `ambiguous_step`: the first step where, in
    some row, the free-running reference's top-2 margin is within twice the float32 error bound
    of a logit (each of the two may move by the bound), -1 when none. `divergence_step`: the
    first step where the framework's ids differ from the free-running reference's, -1 when
    none. The ids must agree before the ambiguous step (row by row)."""

    logits_error: float
    ambiguous_step: int
    divergence_step: int
    ok: bool
    reason: str


def _first(steps: np.ndarray) -> int:
    hits = np.flatnonzero(steps)
    return int(hits[0]) if hits.size else -1


def margin_tolerance(logits: np.ndarray, rtol: float = LOGITS_RTOL) -> np.ndarray:
    """The float32 error bound of one logit, per row: rtol x the row's largest |logit|."""
    return rtol * np.abs(logits).max(axis=-1)


def top2_margin(logits: np.ndarray) -> np.ndarray:
    """Largest minus second-largest logit, over the last axis."""
    top = np.sort(logits, axis=-1)
    return np.asarray(top[..., -1] - top[..., -2])


def agreement(ids: np.ndarray, logits: np.ndarray, forced_logits: np.ndarray, free_ids: np.ndarray,
              free_logits: np.ndarray, rtol: float) -> dict[str, float]:
    """What a generation keeps of the reference's choices (arguments as judge_generation's):
    `gen_token_agreement`, the share of (row, step) ids equal to the free-running reference's
    (a sequence that diverges keeps disagreeing after it: this is what a user reads);
    `gen_forced_agreement`, the share of steps whose greedy token equals the reference's fed the
    same tokens (each step judged on the same context); `gen_ambiguous_share`, the share of the
    reference's own steps whose top-2 margin is within twice the bound `rtol` of a logit (where
    a rounding of that size may flip the token, so disagreement there is allowed)."""
    forced_top = forced_logits.argmax(axis=-1)  # (G, B)
    ambiguous = top2_margin(free_logits) <= 2 * margin_tolerance(free_logits, rtol)
    return {"gen_token_agreement": float(np.mean(ids == free_ids)),
            "gen_forced_agreement": float(np.mean(logits.argmax(axis=-1) == forced_top)),
            "gen_ambiguous_share": float(np.mean(ambiguous))}


def judge_generation(ids: np.ndarray, logits: np.ndarray, forced_logits: np.ndarray,
                     free_ids: np.ndarray, free_logits: np.ndarray, rtol: float = LOGITS_RTOL) -> GenerationParity:
    """ids (B, G) and logits (G, B, V) of the framework; forced_logits (G, B, V) of the reference
    teacher-forced on `ids`; free_ids (B, G) and free_logits (G, B, V) of the reference's own
    greedy run."""
    diff = np.linalg.norm(logits.astype(np.float64) - forced_logits, axis=-1)
    error = float((diff / np.maximum(np.linalg.norm(forced_logits, axis=-1), 1e-300)).max())
    ambiguous = top2_margin(free_logits) <= 2 * margin_tolerance(free_logits, rtol)  # (G, B)
    differs = ids.T != free_ids.T  # (G, B)
    # per row: a difference counts only before that row's first ambiguous step
    before = np.cumsum(ambiguous, axis=0) == 0
    early = (differs & before).any(axis=1)
    amb, div = _first(np.asarray(ambiguous.any(axis=1))), _first(np.asarray(differs.any(axis=1)))
    if error > rtol:
        return GenerationParity(error, amb, div, False, f"logits error {error:.1e} over the bound {rtol:.0e}")
    if early.any():
        step = _first(early)
        return GenerationParity(error, amb, div, False,
                                f"token ids differ from the reference at step {step}, before any ambiguous step")
    return GenerationParity(error, amb, div, True, "")
