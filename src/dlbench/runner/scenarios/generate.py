"""The generate scenario (`--scenario generate` on lm), run by the worker process: greedy decoding
with each framework's KV-cache decoder (backends/generate.py: Decoder) from the canonical
parameters.

One generation is a batch of `gen_batch` prompts of `prompt_len` tokens (drawn from the
workload's chain) and `new_tokens` greedy tokens, driven token by token so that each is timed:
prefill plus the first token's fetch is the time to first token, each later decode step plus its
fetch a time per output token (analysis/generate.py). Continuous batching is a serving
engine's job, not a framework's: out of scope.

Order: the first generation apart (it compiles: `first_generation_s`, and
`first_generation_compile_estimate_s` over the median generation), one warm-up, then timed
generations until GENERATIONS are timed or BUDGET_S is spent; compilations inside that
window are counted. Then, untimed: one generation at each of two other prompt lengths (P - 1
and P + 1 where they fit), counting the compilations they cause (`recompiles_per_prompt_length`:
measured, not assumed; the phase's time is `other_prompt_lengths_s`), and the parity generation, whose ids and per-step logits the parent
judges against the float64 NumPy reference (runner/verdicts.py: generate_verdict).

Under `--load server`, after the timed generations: MLPerf LoadGen's Server with token latencies
(runner/scenarios/loadgen.py: token_server; the sweep of served.run_server). The system under
test serves one static batch at a time (up to `gen_batch` queued queries, padded to the batch the
decoder was built for, nothing joining a generation under way); each query's first token is
reported when it is fetched, its completion with its token count; LoadGen's own log gives the
TTFT and TPOT percentiles and its verdict against `--ttft-bound-ms` and `--tpot-bound-ms`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from dlbench.analysis.generate import token_latencies
from dlbench.backends import support
from dlbench.backends.base import Unsupported
from dlbench.backends.generate import Decoder
from dlbench.runner import protocol
from dlbench.runner.context import TrialContext
from dlbench.runner.scenarios import loadgen, served
from dlbench.runner.scenarios.served import Capacity
from dlbench.spec import GenerateOptions, TrialSpec
from dlbench.workloads import lm

GENERATIONS = 10
WARMUP_GENERATIONS = 1
# Timed generations stop at GENERATIONS or after this many seconds, whichever comes first.
BUDGET_S = 30.0
# Parity keeps the logits of the first rows and steps only (the reference recomputes them in
# float64 NumPy in the parent; at the gpu preset a row of logits is 32000 floats).
PARITY_ROWS = 4
PARITY_STEPS = 16
# Under --load server: the prompts LoadGen's queries index, and the seconds below which a sweep
# never tries a rate (its ~1,100 generations would take longer: served.run_server's floor).
SERVER_PROMPTS = 64
SERVER_BUDGET_S = 120.0


def prompts(trial: TrialSpec, length: int, batch: int) -> np.ndarray:
    """The prompts every framework decodes from: chain streams from their own random stream."""
    rng = np.random.default_rng((trial.workload.seed, lm.STREAM_PROMPTS))
    return lm.sequences(trial.workload, batch, length, rng)


def generate_timed(decoder: Decoder, prompt: np.ndarray, new_tokens: int,
                   first_token: Callable[[], None] | None = None) -> tuple[float, list[float], np.ndarray]:
    """(TTFT, TPOTs, ids (B, G)) of one greedy generation, each token ended by its fetch;
    `first_token()` is called once the first token is fetched (a server streams it then)."""
    t0 = time.perf_counter()
    logits = decoder.prefill(prompt)
    ids = [decoder.tokens(logits)]
    t = time.perf_counter()
    if first_token is not None:
        first_token()
    ttft, tpots = t - t0, []
    for _ in range(new_tokens - 1):
        logits = decoder.decode(logits)
        ids.append(decoder.tokens(logits))
        now = time.perf_counter()
        tpots.append(now - t)
        t = now
    return ttft, tpots, np.stack(ids, axis=1)


def run(ctx: TrialContext) -> None:
    trial, phases, m, result = ctx.trial, ctx.phases, ctx.metrics, ctx.result
    o = trial.options_of(GenerateOptions)
    t = phases.start("build")
    program = support.build_generator(trial, ctx.backend)
    state = support.init(trial, ctx.workload, program)
    # Room for the longest prompt tried (P + 1) and its tokens.
    decoder: Decoder = program.decoder(state, o.gen_batch, o.prompt_len + 1 + o.new_tokens)
    m["build_s"] = phases.end("build", t)
    result.numerics = program.numerics()
    result.framework_info = ctx.backend.info()
    result.notes["decoder"] = decoder.how
    m["kv_cache_bytes"] = float(decoder.cache_bytes())
    prompt = prompts(trial, o.prompt_len, o.gen_batch)
    m["rss_initial_bytes"], m["vram_initial_bytes"] = ctx.sampler.sample()
    t = phases.start("first_generation")
    generate_timed(decoder, prompt, o.new_tokens)
    first_s = m["first_generation_s"] = phases.end("first_generation", t)
    m["time_to_first_step_s"] = time.monotonic() - ctx.created
    t = phases.start("warmup")
    for _ in range(WARMUP_GENERATIONS):
        generate_timed(decoder, prompt, o.new_tokens)
    m["warmup_s"] = phases.end("warmup", t)
    compiles = decoder.compilations()
    ctx.sampler.begin_window()
    t = phases.start("generation")
    ttfts, tpots = _timed(decoder, prompt, o.new_tokens, BUDGET_S)
    m["generation_window_s"] = phases.end("generation", t)
    window = ctx.sampler.end_window()
    m["recompiles_in_window"] = float(decoder.compilations() - compiles)
    m["rss_window_peak_bytes"], m["vram_window_peak_bytes"] = window["rss"], window["vram"]
    median_s = _generation_metrics(ctx, o, first_s, ttfts, tpots)
    if o.gen_load == "server":  # after the timed generations, whose pace is the sweep's first estimate
        _server(ctx, decoder, o, Capacity(o.gen_batch / median_s, "generation batch / the median timed generation's s"))
    t = phases.start("other_prompt_lengths")  # a phase of its own: a compiling framework spends minutes here
    m["recompiles_per_prompt_length"] = _other_lengths(trial, decoder, o)
    m["other_prompt_lengths_s"] = phases.end("other_prompt_lengths", t)
    _parity(trial, decoder, prompt, o, ctx)


def _generation_metrics(ctx: TrialContext, o: GenerateOptions, first_s: float, ttfts: list[float],
                        tpots: list[list[float]]) -> float:
    """The timed generations' metrics, series and warnings, and the decode step's
    (_decode_step_metrics); returns the median generation's seconds."""
    m, result = ctx.metrics, ctx.result
    m.update(token_latencies(ttfts, tpots, o.gen_batch))
    median_s = float(np.median([a + sum(b) for a, b in zip(ttfts, tpots)]))
    m["first_generation_compile_estimate_s"] = max(first_s - median_s, 0.0)
    m.update(prompt_len=float(o.prompt_len), new_tokens=float(o.new_tokens), gen_batch=float(o.gen_batch))
    _decode_step_metrics(ctx.trial, o, ctx)
    result.series["ttft_s"] = [(float(i), s) for i, s in enumerate(ttfts)]
    result.series["tpot_s"] = [(float(i), s) for i, s in enumerate(x for gen in tpots for x in gen)]
    if len(ttfts) < GENERATIONS:
        result.warnings.append(f"generation: the {BUDGET_S:g} s budget ran out after {len(ttfts)} of"
                               f" {GENERATIONS} generations")
    if m["recompiles_in_window"]:
        result.warnings.append(f"recompiled {m['recompiles_in_window']:g} time(s) while generation was timed")
    return median_s


def _server(ctx: TrialContext, decoder: Decoder, o: GenerateOptions, capacity: Capacity) -> None:
    """LoadGen's Server with token latencies (loadgen.token_server) at --qps, or the sweep for the
    highest QPS whose TTFT p99 and TPOT p99 meet their bounds (served.run_server, the inference
    scenario's sweep). The system under test: one serving thread, static batches of up to
    `gen_batch` queued queries (a partial batch padded with its own prompts, only its real queries
    answered), each a greedy generation of `new_tokens` from a pool of SERVER_PROMPTS prompts."""
    why = loadgen.missing()
    if why is not None:
        raise Unsupported(why)
    pool = prompts(ctx.trial, o.prompt_len, SERVER_PROMPTS)
    recorded: dict[str, Any] = {"version": loadgen.version(), "mode": "PerformanceOnly", "token_latencies": True}
    ctx.result.policy_effective["loadgen"] = recorded

    def generate(indices: list[int], first_token: Callable[[], None]) -> int:
        generate_timed(decoder, pool[np.resize(np.asarray(indices), o.gen_batch)], o.new_tokens, first_token)
        return o.new_tokens

    ttft_s, tpot_s = float(o.ttft_bound_ms or 0.0) * 1e-3, float(o.tpot_bound_ms or 0.0) * 1e-3

    def run_at(qps: float) -> loadgen.LoadgenRun:
        return loadgen.token_server(generate, o.gen_batch, len(pool), qps, ttft_s, tpot_s, served.SERVER_MIN_RUN_S,
                                    served.SERVER_MIN_QUERIES)

    m = ctx.metrics
    m["server_ttft_bound_s"], m["server_tpot_bound_s"] = ttft_s, tpot_s
    per_test = {"server_ttft_p99_s": lambda r: r.ttft_s("99.00"), "server_tpot_p99_s": lambda r: r.tpot_s("99.00"),
                "server_ttft_p50_s": lambda r: r.ttft_s("50.00"), "server_tpot_p50_s": lambda r: r.tpot_s("50.00"),
                "server_output_tokens_per_s": lambda r: served.number(r.results.get("result_completed_tokens_per_second"))}
    served.run_server(ctx, run_at, capacity, o.gen_qps, SERVER_BUDGET_S, recorded, per_test,
                      ("generate_server_window_s",
                       f"the TTFT p99 bound of {o.ttft_bound_ms:g} ms and the TPOT p99 bound of {o.tpot_bound_ms:g} ms"))


def _decode_step_metrics(trial: TrialSpec, o: GenerateOptions, ctx: TrialContext) -> None:
    """What one decode step must read and compute at the generation's mean position
    (lm.decode_step; weights and cache at the workload's dtype, float32, except the matmul
    weights under --precision int8 at 1 B), and the FLOP/s the median TPOT achieved; the parent
    divides the bytes by the measured memory bandwidth (runner/verdicts.py: tpot_bound_s)."""
    m = ctx.metrics
    itemsize = np.dtype(trial.workload.numerics.dtype).itemsize
    matmul = 1 if trial.precision == "int8" else itemsize
    step = lm.decode_step(trial.workload, o.gen_batch, o.prompt_len, o.new_tokens, itemsize, itemsize, matmul)
    m["decode_bytes_per_step"], m["decode_flops_per_step"] = step.bytes, step.flops
    tpot = m.get("tpot_p50_s")
    m["decode_flops_per_s"] = step.flops / tpot if tpot else None
    weights = f"{itemsize} B a value" if matmul == itemsize else f"{matmul} B a matmul weight, {itemsize} B the rest"
    ctx.result.notes["decode_bytes"] = (f"{step.weight_bytes:,} B of weights + {step.kv_cache_bytes:,.0f} B of KV"
                                        f" cache ({step.mean_positions:g} positions, the mean over the decode"
                                        f" steps) at {weights}")


def _timed(decoder: Decoder, prompt: np.ndarray, new_tokens: int, budget_s: float) -> tuple[list[float], list[list[float]]]:
    ttfts: list[float] = []
    tpots: list[list[float]] = []
    start = time.perf_counter()
    while len(ttfts) < GENERATIONS and (not ttfts or time.perf_counter() - start < budget_s):
        ttft, steps, _ = generate_timed(decoder, prompt, new_tokens)
        ttfts.append(ttft)
        tpots.append(steps)
    return ttfts, tpots


def _other_lengths(trial: TrialSpec, decoder: Decoder, o: GenerateOptions) -> float:
    """Compilations per new prompt length, over P - 1 and P + 1 (where P - 1 >= 1)."""
    lengths = [n for n in (o.prompt_len - 1, o.prompt_len + 1) if n >= 1]
    before = decoder.compilations()
    for n in lengths:
        generate_timed(decoder, prompts(trial, n, o.gen_batch), o.new_tokens)
    return (decoder.compilations() - before) / len(lengths)


def _parity(trial: TrialSpec, decoder: Decoder, prompt: np.ndarray, o: GenerateOptions, ctx: TrialContext) -> None:
    """The parity generation (untimed): ids and per-step logits of the first rows and steps."""
    t = ctx.phases.start("parity")
    logits = decoder.prefill(prompt)
    steps: list[np.ndarray] = [decoder.to_numpy(logits)[:PARITY_ROWS]]
    ids: list[Any] = [decoder.tokens(logits)[:PARITY_ROWS]]
    for _ in range(min(o.new_tokens, PARITY_STEPS) - 1):
        logits = decoder.decode(logits)
        steps.append(decoder.to_numpy(logits)[:PARITY_ROWS])
        ids.append(decoder.tokens(logits)[:PARITY_ROWS])
    protocol.save_generation(ctx.parity_file, prompt[:PARITY_ROWS], np.stack(ids, axis=1), np.stack(steps))
    ctx.metrics["parity_s"] = ctx.phases.end("parity", t)
