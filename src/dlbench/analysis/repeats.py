"""How many repeats: a fixed count, or `auto` (DESIGN §2.9): interleaved rounds go on until
every headline interval is narrow enough, or until the comparisons between frameworks are
decided, or until the budget is spent. Pure: the rule's syntax and the decision after a round.

`--repeats auto[:TARGET%][,min=N][,max=N][,time=DURATION]` (the same string in a suite file):
  TARGET  the relative half-width every headline median's 95 % interval must reach (default 5 %,
          the `unstable` threshold); a 95 % order-statistic interval exists from 6 repeats on
  min     rounds before any decision (default 3; no exact test decides anything below 3)
  max     the budget in repeats per configuration (default 20)
  time    a budget in wall time (`90s`, `30min`, `2h`): no round starts that would end past it,
          judged by the last round's duration
  wait    how long the run may wait, in all, for a quiet machine before it retakes trials that
          ran on a busy one (default 10min; analysis/busy.py): a round with busy trials is
          followed by one more repeat of their configurations once the machine is quiet; where
          the wait runs out (or the budget), the run stops and says the machine was busy
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from dlbench.analysis import stats
from dlbench.spec import MAX_TIMEOUT_S
from dlbench.text import shown

AUTO_MIN = 3
AUTO_MAX = 20
# More fresh processes per configuration than any CI spread needs (runner/plan.py's limit too).
MAX_REPEATS = 1000
DURATION_UNITS = {"s": 1.0, "min": 60.0, "h": 3600.0}
# The longest duration any of them takes: a week, as a trial's timeout (spec.MAX_TIMEOUT_S).
MAX_DURATION_S = MAX_TIMEOUT_S
_DURATION = re.compile(r"^(?P<n>[0-9]+(\.[0-9]*)?)(?P<unit>s|min|h)$")
_TARGET = re.compile(r"^(?P<pct>[0-9]+(\.[0-9]*)?)%$")
# How long an auto run may wait, in all, for a quiet machine before retaking busy trials: a
# hog that outlasts it (a CI neighbour's build, a training job) will not end soon, and the run
# then says so rather than wait on.
QUIET_WAIT_S = 600.0
SYNTAX = (f"an integer from 1 to {MAX_REPEATS}, or auto[:TARGET%][,min=N][,max=N][,time=DURATION][,wait=DURATION]"
          " (e.g. auto:3%,max=20 or auto,time=30min)")

StopReason = Literal["intervals", "decided", "budget", "no-data", "busy"]


class RepeatsError(ValueError):
    """A --repeats value that is not one of SYNTAX; one line naming it."""


@dataclass(frozen=True)
class RepeatRule:
    """A fixed number of repeats (`auto` False: `first` rounds) or the auto rule."""

    auto: bool
    first: int  # rounds planned up front: the count, or auto's min
    target: float = stats.UNSTABLE_REL_HALF_WIDTH
    max_repeats: int = AUTO_MAX
    max_time_s: float | None = None
    text: str = ""
    wait_s: float = QUIET_WAIT_S  # the wait for a quiet machine before retakes, over the whole run

    @property
    def label(self) -> str:
        return self.text or str(self.first)


def parse(value: int | str) -> RepeatRule:
    """An integer (a fixed count) or the auto rule (module docstring); RepeatsError otherwise."""
    if isinstance(value, bool):
        raise RepeatsError(f"repeats {value!r} is not {SYNTAX}")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()):
        n = int(value)
        _check_count("repeats", n, value)
        return RepeatRule(False, n, text=str(n))
    if not isinstance(value, str) or not value.strip().startswith("auto"):
        raise RepeatsError(f"repeats {value!r} is not {SYNTAX}")
    text = value.strip()
    head, *items = text.split(",")
    target = stats.UNSTABLE_REL_HALF_WIDTH
    if head != "auto":
        m = _TARGET.match(head.removeprefix("auto:")) if head.startswith("auto:") else None
        if m is None or not 0 < float(m["pct"]) < 100:
            raise RepeatsError(f"repeats {value!r}: the target {head.removeprefix('auto')!r} is not :PCT% with"
                               f" 0 < PCT < 100; {SYNTAX}")
        target = float(m["pct"]) / 100
    options = _options(value, items)
    first = options.get("min", AUTO_MIN)
    most = options.get("max", max(AUTO_MAX, int(first)))
    _check_count("min", int(first), value)
    _check_count("max", int(most), value)
    if most < first:
        raise RepeatsError(f"repeats {value!r}: max={most:g} is below min={first:g}")
    return RepeatRule(True, int(first), target, int(most), options.get("time"), text,
                      options.get("wait", QUIET_WAIT_S))


def _options(value: str, items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, v = item.strip().partition("=")
        if not sep or key not in ("min", "max", "time", "wait") or key in out:
            raise RepeatsError(f"repeats {value!r}: {item.strip()!r} is not min=N, max=N, time=DURATION or"
                               " wait=DURATION (each at most once)")
        if key in ("time", "wait"):
            seconds = duration_s(v)
            if seconds is None:
                given = v if len(v) <= 20 else shown(v)  # a 400-digit time= is cut, its length said
                raise RepeatsError(f"repeats {shown(value)}: {key}={given} is not a duration such as 90s, 30min or"
                                   " 2h, up to a week")
            out[key] = seconds
        elif not (v.strip().isascii() and v.strip().isdigit()):
            raise RepeatsError(f"repeats {value!r}: {key}={v} is not an integer")
        else:
            out[key] = int(v)
    return out


def duration_s(text: str) -> float | None:
    """`90s`, `30min`, `2h` in seconds (the syntax of `time=` here, of `--quiet-wait` and of
    `dlbench tune --budget`); None for anything else: zero, and more than a week (MAX_DURATION_S:
    a 400-digit budget was once `budget inf min`)."""
    m = _DURATION.match(text.strip())
    if m is None:
        return None
    seconds = float(m["n"]) * DURATION_UNITS[m["unit"]]
    return seconds if 0 < seconds <= MAX_DURATION_S else None


def _check_count(name: str, n: int, value: object) -> None:
    if n < 1:
        raise RepeatsError(f"repeats must be an integer >= 1, got {value!r}" if name == "repeats"
                           else f"repeats {value!r}: {name}={n} is not >= 1")
    if n > MAX_REPEATS:
        raise RepeatsError(f"repeats {value!r} is over the maximum of {MAX_REPEATS}")


@dataclass(frozen=True)
class Interval:
    """One configuration's headline median after a round: its interval relative to the median
    (None with fewer than two values) and the interval's true level."""

    label: str
    n: int
    rel_half_width: float | None
    level: float | None

    def within(self, target: float) -> bool:
        """A 95 % interval (the level reached, not merely claimed) no wider than +-target."""
        return (self.rel_half_width is not None and self.level is not None
                and self.level >= stats.CONFIDENCE - 1e-9 and self.rel_half_width <= target)

    def text(self) -> str:
        if self.rel_half_width is None or self.level is None:
            return f"{self.label}: no interval yet ({self.n} value{'s' if self.n != 1 else ''})"
        return f"{self.label} ±{self.rel_half_width:.1%} at {self.level:.0%}"


@dataclass(frozen=True)
class Judgement:
    """After a round: stop (and why) or go on, in words for the progress line and the table."""

    rounds: int
    stop: StopReason | None
    text: str


def judge(rule: RepeatRule, rounds: int, spent_s: float, round_s: float, intervals: Sequence[Interval],
          comparisons: Sequence[tuple[str, bool]], busy: str | None = None) -> Judgement:
    """Whether the auto rule stops after `rounds` rounds: every interval within the target
    (`intervals`), or every comparison between frameworks decided (`comparisons`: label,
    decided?; there must be at least one), or the budget spent (`max` rounds, or `time` that
    the next round, as long as the last, would pass); and, since no round can help then, when
    no configuration has a value at all. Never before `min` rounds. Intervals and comparisons
    are over the trials that were not busy; `busy` (the busy summary, where busy trials held
    an interval or a comparison back) is what a budget's stop says is left undecided."""
    widest = _widest(intervals)
    state = ", ".join(filter(None, [
        f"widest interval {widest.text()}" if widest else "no headline interval",
        f"{sum(not d for _, d in comparisons)} of {len(comparisons)} comparison(s) undecided" if comparisons else "",
    ]))
    if rounds < rule.first:
        return Judgement(rounds, None, f"round {rounds}: {state}")
    if not intervals:
        return Judgement(rounds, "no-data", f"stopped after {rounds} rounds: no configuration has an ok trial,"
                                           " so more rounds cannot narrow anything")
    if all(i.within(rule.target) for i in intervals):
        return Judgement(rounds, "intervals", f"stopped after {rounds} rounds: every headline interval is within"
                                              f" ±{rule.target:.0%} at 95% ({state})")
    if comparisons and all(d for _, d in comparisons):
        return Judgement(rounds, "decided", f"stopped after {rounds} rounds: every comparison between frameworks"
                                            f" is decided ({state})")
    left = f"; undecided: {busy}" if busy else ""
    if rounds >= rule.max_repeats:
        return Judgement(rounds, "budget", f"stopped after {rounds} rounds: the budget of {rule.max_repeats}"
                                           f" repeats is spent ({state}){left}")
    if rule.max_time_s is not None and spent_s + round_s > rule.max_time_s:
        return Judgement(rounds, "budget", f"stopped after {rounds} rounds: the time budget of"
                                           f" {_duration(rule.max_time_s)} would be passed by another round"
                                           f" ({_duration(spent_s)} spent; {state}){left}")
    return Judgement(rounds, None, f"round {rounds}: {state}; target ±{rule.target:.0%}, another round")


def retake_wait_s(rule: RepeatRule, waited_s: float, spent_s: float, retake_s: float) -> float:
    """How long the run may still wait for a quiet machine before retaking busy trials: what is
    left of `wait` (waited_s so far), and within the time budget, what leaves room for the
    retakes (`retake_s`, expected); 0 where nothing is left (then it says the machine was busy)."""
    left = rule.wait_s - waited_s
    if rule.max_time_s is not None:
        left = min(left, rule.max_time_s - spent_s - retake_s)
    return max(0.0, left)


def busy_stop(rounds: int, busy: str, why: str) -> Judgement:
    """The stop of a run whose busy trials could not be retaken: `undecided: the machine was
    busy: ...` and why (the wait ran out, the budget), never a call for more repeats."""
    return Judgement(rounds, "busy", f"stopped after {rounds} rounds: undecided: {busy}; {why}")


def _widest(intervals: Sequence[Interval]) -> Interval | None:
    """The interval furthest from done: none yet, then a level below 95 %, then the widest."""
    def how_far(i: Interval) -> tuple[int, float]:
        if i.rel_half_width is None or i.level is None:
            return (2, 0.0)
        return (1 if i.level < stats.CONFIDENCE - 1e-9 else 0, i.rel_half_width)
    return max(intervals, key=how_far, default=None)


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"
