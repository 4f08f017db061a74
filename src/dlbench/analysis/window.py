"""When a timed window is too short to mean anything.

A throughput from a window of a few steps, or of a fraction of a second, is dominated by what
does not scale with the work: the chunk syncs, the first calls into a fresh pipeline, a
scheduler tick or a garbage collection. pyperf warns likewise when a benchmark's values are too
short to time. The train scenario checks its timed window with `too_short`; the trial carries
a warning and the flag metric `timed_window_short` (1.0, else 0.0), which the report reads to
mark the window's values `~`. docs/methodology.md states the rule.

The time bound is what matters for noise (a 4 ms scheduler tick is 0.4 % of 1 s); the step bound
keeps the per-epoch costs (a fresh pipeline, the first call after the warm-up) amortised and
gives the chunk times a spread worth reading. The cpu presets pass both (the full resnet's 8
steps take seconds each); the tiny presets, made to check that everything runs, do not.
"""

from __future__ import annotations

# A window shorter than either bound is flagged.
MIN_TIMED_STEPS = 5
MIN_TIMED_WINDOW_S = 1.0
FLAG_METRIC = "timed_window_short"
ADVICE = "use a larger preset (--preset cpu, or more --epochs / --dataset-size)"
# The start of the trial's warning: a table that marks the values `~` says it once instead.
WARNING = "timed window too short to time"


def too_short(steps: int, seconds: float) -> str | None:
    """The warning for a window of `steps` steps lasting `seconds`, or None when it is long
    enough."""
    if steps >= MIN_TIMED_STEPS and seconds >= MIN_TIMED_WINDOW_S:
        return None
    return (f"{WARNING}: {steps} step(s) in {seconds:.2f} s (needs at least"
            f" {MIN_TIMED_STEPS} steps and {MIN_TIMED_WINDOW_S:g} s); its numbers are indicative only:"
            f" {ADVICE}")
