"""Findings in plain words from profiled trials: each from a stated rule with its threshold, and
the numbers behind it. Pure functions over seconds per step by category (backends/profiling.py's
vocabulary) per framework, plus the timed trials' own metrics.

Rules (docs/methodology.md, findings):
  - ratio: a category costs one framework at least RATIO times what it costs the cheapest other
    framework that traces any time in it, and at least MIN_SHARE of the first framework's traced
    step and MIN_GAP_S more;
  - input-bound: the input pipeline takes at least INPUT_SHARE of the traced step (or of the
    timed window, measured as the loop's wait for its next batch);
  - host-bound: host overhead and idle gaps take at least HOST_SHARE of the traced step;
  - recompiles: a timed trial recompiled inside its timed window;
  - unmapped: at least UNMAPPED_SHARE of a traced step maps to no category (the breakdown is then
    incomplete, and says so);
  - profiler overhead: the profiled trial's median step is at least OVERHEAD slower than the
    timed trials' (its shares, not its milliseconds, are the evidence);
  - ledgered gap: two measured configurations of one workload whose speed ratio lies in the range
    of a row of the gap ledger (analysis/gaps.py, docs/gaps.md) for their frameworks and modes:
    the finding points to that row (its cause and status), profiled or not;
  - memory-bound hint: the compiled program that took most of the profiled window does fewer
    than INTENSITY flops per byte it accesses (XLA's cost analysis: JAX, Keras on JAX). A CPU
    core's roofline ridge lies near there (AVX-512: 64 fp32 flops a cycle against roughly 8
    bytes a cycle from memory); XLA counts every op's operands and results, cached or not, so it
    is a hint that the program moves much data per flop, not a measured bandwidth. Torch's and
    TensorFlow's CPU profilers count no bytes accessed: no hint for them, and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from dlbench.analysis import gaps
from dlbench.analysis.categories import HOST, INPUT, OTHER
from dlbench.analysis.tune import MeasuredVariant

RATIO = 2.0
MIN_SHARE = 0.10
MIN_GAP_S = 1e-3
INPUT_SHARE = 0.20
HOST_SHARE = 0.30
UNMAPPED_SHARE = 0.25
OVERHEAD = 0.25
INTENSITY = 8.0  # flops per byte accessed



@dataclass(frozen=True)
class Finding:
    rule: str  # ratio, input-bound, host-bound, recompiles, unmapped, profiler-overhead, memory-bound, ledgered gap
    subject: str  # the framework (configuration label) it is about
    text: str
    category: str | None = None  # the profile category a ratio finding is about


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def ratio_findings(by_framework: Mapping[str, Mapping[str, float]],
                   backward: Mapping[str, Mapping[str, float]] | None = None) -> list[Finding]:
    """Categories that cost one framework at least RATIO x the cheapest other one's; where the
    trace tells the backward pass apart (`backward`: seconds by category and framework), the
    finding says how much of it the backward pass took."""
    out = []
    for name, cats in by_framework.items():
        total = sum(cats.values())
        for category, s in cats.items():
            if category in (HOST, OTHER) or total <= 0 or s < MIN_SHARE * total:
                continue
            # a framework that traces nothing in the category (its compiler fused it elsewhere) is no base
            others = {n: v for n, c in by_framework.items() if n != name and (v := c.get(category, 0.0)) > 0}
            if not others:
                continue
            cheapest = min(others, key=lambda n: others[n])
            base = others[cheapest]
            if s >= RATIO * base and s - base >= MIN_GAP_S:
                back = (backward or {}).get(name, {}).get(category)
                part = f" ({back / s:.0%} of it backward)" if back else ""
                out.append(Finding("ratio", name, f"{name}: {category} {_ms(s)}/step{part}, {cheapest} {_ms(base)}"
                                   f" ({s / base:.1f}x; {s / total:.0%} of {name}'s traced step)", category))
    return out


def share_findings(name: str, cats: Mapping[str, float],
                   other_top: list[tuple[str, float]] | None = None) -> list[Finding]:
    """Input-bound, host-bound and unmapped, from one framework's breakdown."""
    total = sum(cats.values())
    if total <= 0:
        return []
    out = []
    share = {c: s / total for c, s in cats.items()}
    if share.get(INPUT, 0.0) >= INPUT_SHARE:
        out.append(Finding("input-bound", name, f"{name}: input-bound: the input pipeline takes {share[INPUT]:.0%}"
                           f" of the traced step ({_ms(cats[INPUT])}/step; rule: >= {INPUT_SHARE:.0%})", INPUT))
    if share.get(HOST, 0.0) >= HOST_SHARE:
        out.append(Finding("host-bound", name, f"{name}: host-bound: {share[HOST]:.0%} of the traced step is host"
                           f" overhead and idle gaps, where no traced op runs ({_ms(cats[HOST])}/step;"
                           f" rule: >= {HOST_SHARE:.0%})", HOST))
    if share.get(OTHER, 0.0) >= UNMAPPED_SHARE:
        top = ", ".join(f"{n} {_ms(s)}" for n, s in (other_top or [])[:3])
        out.append(Finding("unmapped", name, f"{name}: {share[OTHER]:.0%} of the traced step maps to no category"
                           f" (rule: >= {UNMAPPED_SHARE:.0%}; largest: {top or 'none named'})"))
    return out


def input_wait_finding(name: str, wait_share: float | None) -> list[Finding]:
    """Input-bound from the timed trials' measured wait for the next batch."""
    if wait_share is None or wait_share < INPUT_SHARE:
        return []
    return [Finding("input-bound", name, f"{name}: input-bound: the training loop waited for its next batch"
                    f" {wait_share:.0%} of the timed window (rule: >= {INPUT_SHARE:.0%})", INPUT)]


def recompile_finding(name: str, recompiles: float | None) -> list[Finding]:
    if not recompiles:
        return []
    return [Finding("recompiles", name, f"{name}: recompiled {recompiles:g} time(s) inside the timed window:"
                    " its step times include compiles")]


def overhead_finding(name: str, profiled_step_s: float | None, timed_step_s: float | None) -> list[Finding]:
    if not profiled_step_s or not timed_step_s or profiled_step_s < (1 + OVERHEAD) * timed_step_s:
        return []
    return [Finding("profiler-overhead", name, f"{name}: the profiler slowed the step to {_ms(profiled_step_s)}"
                    f" from {_ms(timed_step_s)} ({profiled_step_s / timed_step_s - 1:+.0%}; rule: >= +{OVERHEAD:.0%}):"
                    " read its shares, not its milliseconds")]


def memory_finding(name: str, flops: float | None, accessed: float | None) -> list[Finding]:
    """The memory-bound hint from a compiled program's flops and bytes accessed."""
    if not flops or not accessed or flops / accessed >= INTENSITY:
        return []
    return [Finding("memory-bound", name, f"{name}: memory-bound hint: the compiled step does {flops / accessed:.2g}"
                    f" flops per byte it accesses ({flops / 1e9:.3g} GFLOP, {accessed / 1e6:.4g} MB per call, XLA's"
                    f" cost analysis; rule: < {INTENSITY:g} flop/B)")]


@dataclass(frozen=True)
class Measured:
    """One side of a pair the gap rule compares: its label in the report, framework, mode and
    speed (samples/s, or tokens per second of decode for generation)."""

    label: str
    framework: str
    mode: str
    speed: float
    # the speed median's confidence interval (None with one process): a pair's ratio counts as a
    # ledgered gap only where its whole range, from the two intervals, lies in the row's range (a
    # side of one process is not tested, as in the ranking)
    low: float | None = None
    high: float | None = None


def gap_findings(workload: str, model_size: str | None, scenario: str, measured: Sequence[Measured],
                 ledger: Sequence[gaps.Gap]) -> list[Finding]:
    """Ledgered gap: for each slower configuration, the ledger row its ratio to a faster one
    shows (against the fastest such configuration, once per row)."""
    found: dict[tuple[str, str], tuple[float, Finding]] = {}
    for slow in measured:
        for fast in measured:
            if slow is fast or not 0 < slow.speed < fast.speed:
                continue
            ratio = slow.speed / fast.speed
            sides = ((slow.framework, slow.mode), (fast.framework, fast.mode))
            row = gaps.match(ledger, workload, model_size, scenario, *sides, ratio)
            if row is None or slow.low is None or slow.high is None or fast.low is None or not fast.high:
                continue
            extremes = (slow.low / fast.high, slow.high / fast.low) if fast.low > 0 else (math.inf,)
            if any(gaps.match((row,), workload, model_size, scenario, *sides, r) is None for r in extremes):
                continue  # not this row, or the ratio's range reaches past the row's: not shown to be the gap
            if found.get((row.anchor, slow.label), (2.0,))[0] <= ratio:
                continue
            text = (f"{slow.label}: {ratio:.2f}x the speed of {fast.label}, a ledgered gap ({row.status}; the"
                    f" row's range {row.low:.2f}-{row.high:.2f}): {row.cause} ({row.link()})")
            found[(row.anchor, slow.label)] = (ratio, Finding("ledgered gap", slow.label, text))
    return [f for _, f in found.values()]


def with_variant(finding: Finding, workload: str, framework: str, measured: Sequence[MeasuredVariant]) -> Finding:
    """A finding about a category with, where a `dlbench tune` run measured a variant of the
    same workload and framework that addresses that category (Variant.addresses), the variant
    and its measured speed-up appended (the fastest such; the latest run on a tie):
    "jax: pooling 99.6 ms/step ...; `jax.pool=reshape` measured 1.80x the default's samples/s
    (faster; tune run 7)"."""
    if finding.category is None:
        return finding
    found = [m for m in measured if m.workload == workload and m.framework == framework
             and finding.category in m.addresses]
    if not found:
        return finding
    m = max(found, key=lambda m: (m.speedup, m.run_id))
    return replace(finding, text=f"{finding.text}; `{m.settings}` measured {m.speedup:.2f}x the default's"
                                 f" headline ({m.verdict}; tune run {m.run_id})")
