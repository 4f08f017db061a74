"""The one-line outcome of a finished ok trial that `dlbench run` prints, one function per kind of
runner scenario (registered per scenario in report/scenarios.py): the CLI knows no metric name."""

from __future__ import annotations

from typing import Any

from dlbench.analysis import metrics, window

Metrics = dict[str, Any]


def headline_line(headline: str, m: Metrics) -> str:
    """The line of a scenario that registers none of its own: its record's headline metric (by its
    label, or by its name, whose suffix says its unit)."""
    value = m.get(headline)
    return f"ok: {metrics.label(headline)} " + ("not measured" if value is None else f"{value:.4g}")


def train_line(m: Metrics) -> str:
    short = "~" if m.get(window.FLAG_METRIC) else ""  # marked as the tables mark it
    return (f"ok: {short}{m['samples_per_s']:.1f} samples/s, time to first step "
            f"{m['time_to_first_step_s']:.1f} s" + (f" ({window.WARNING})" if short else ""))


def served_text(m: Metrics) -> str:
    """A Server test's line: the highest QPS that met the p99 bound (LoadGen's verdict)."""
    best = m.get("server_max_qps")
    bound_ms = 1e3 * (m.get("server_p99_bound_s") or 0.0)
    if best is None:
        return f"server: no QPS met p99 <= {bound_ms:g} ms (LoadGen INVALID)"
    return (f"server: {m['server_achieved_qps']:.1f} QPS achieved at target {best:.1f}, p99"
            f" {1e3 * (m['server_latency_p99_s'] or 0.0):.3f} ms <= {bound_ms:g} ms (LoadGen VALID)")


def infer_line(m: Metrics) -> str:
    p50_ms, p99_ms = (1e3 * (m[k] or 0.0) for k in ("latency_p50_s", "latency_p99_s"))
    text = f"ok: p50 {p50_ms:.3f} ms, p99 {p99_ms:.3f} ms at batch 1, " + (
        f"{m['infer_samples_per_s']:.1f} samples/s at batch {m['infer_batch_size']:g}"
        if m.get("infer_samples_per_s") is not None else served_text(m))
    if m.get("infer_accuracy_change") is not None:
        text += f", held-out accuracy {m['infer_accuracy_change']:+.4f} against float32"
    return text


def sample_line(m: Metrics) -> str:
    """A diffusion workload's sampling (runner/scenarios/sample.py)."""
    return (f"ok: {m['sample_images_per_s']:.1f} images/s sampling ({m['sample_steps']:g} steps of"
            f" {1e3 * (m['sample_step_s'] or 0.0):.2f} ms at batch {m['sample_batch_size']:g})")


def converge_line(m: Metrics) -> str:
    """Time to target: the quality (and lm's held-out perplexity, where it was the target's
    metric) after the last evaluation."""
    perplexity = f", perplexity {m['eval_perplexity']:.4g}" if m.get("eval_perplexity") is not None else ""
    return (f"ok: {m['accuracy']:.3f}{perplexity} after {m['steps']:.0f} steps, "
            + (f"target in {m['time_to_target_s']:.1f} s" if m.get("reached_target") else "target not reached")
            + f" (evaluation {m['eval_s']:.1f} s, not counted)")


def rl_line(m: Metrics) -> str:
    """An RL rollout or training trial (runner/scenarios/rl.py)."""
    parts = [f"{m['env_steps_per_s'] or 0.0:.0f} env steps/s"]
    if m.get("update_samples_per_s") is not None:
        parts.append(f"{m['update_samples_per_s']:.0f} update samples/s, {1e3 * (m.get('iteration_s_median') or 0.0):.1f}"
                     " ms per iteration")
    return "ok: " + ", ".join(parts)


def rl_converge_line(m: Metrics) -> str:
    return (f"ok: mean return {m.get('final_return') or 0.0:.1f} after {m.get('episodes') or 0:.0f} episodes, "
            + (f"target in {m['steps_to_target']:.0f} env steps, {m['time_to_target_s']:.1f} s"
               if m.get("reached_target") else "target not reached"))


def generate_line(m: Metrics) -> str:
    """Greedy generation with a KV cache (runner/scenarios/generate.py)."""
    return (f"ok: TTFT p50 {1e3 * (m.get('ttft_p50_s') or 0.0):.2f} ms, TPOT p50 {1e3 * (m.get('tpot_p50_s') or 0.0):.2f} ms,"
            f" {m.get('output_tokens_per_s') or 0.0:.1f} tokens/s at batch {m.get('gen_batch') or 0:g}"
            f" (first generation {m.get('first_generation_s') or 0.0:.1f} s)")


def solve_line(m: Metrics) -> str:
    """The solver scenario (runner/scenarios/solve.py): its points and the cheapest rtol 1e-6."""
    at = m.get("solve_1e-6_s")
    best = (f"fastest float64 solve at rtol 1e-6 {1e3 * at:.2f} ms, error {m.get('solve_1e-6_error') or 0.0:.1e}"
            if at is not None else "no float64 solve met rtol 1e-6")
    return f"ok: {m.get('solve_points') or 0:.0f} points, {m.get('solve_failures') or 0:.0f} failed; {best}"
