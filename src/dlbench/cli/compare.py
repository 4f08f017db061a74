"""`dlbench compare BASE NEW [--fail median:5%]...`: the CI regression gate.

BASE and NEW are run ids (or `latest`) in --store, or JSON files from `dlbench export`. Trials
pair by configuration; the policy must match unless --force, and a hardware change needs --force.
Each paired configuration and metric gets the Hodges-Lehmann shift with its interval, the
Mann-Whitney and Kolmogorov-Smirnov p-values and a verdict (SAME, DIFFERENT, UNDECIDED:
analysis/compare.py); each --fail rule (default: the headline metric at --threshold) passes,
fails or stays undecided. Exit 0 every rule shown to pass, 1 a regression, 2 usage error,
3 failed trials in NEW, 4 undecided (not enough evidence either way). Busy trials
(analysis/busy.py) are left out: a rule the other trials cannot settle is undecided and says the
machine was busy (exit 4), never a regression judged on a busy machine, never a silent pass.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

from dlbench.analysis import compare as cmp
from dlbench.cli.common import (
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_TRIALS_FAILED,
    EXIT_UNDECIDED,
    UsageError,
    add_store_argument,
    open_store,
    run_or_export,
)
from dlbench.cli.export import export_json
from dlbench.report.comparison import compare_table, markdown
from dlbench.report.terminal import make_console, print_table
from dlbench.text import printable, shown

HOW_TO_EXPORT = "write one with: dlbench export RUN -o FILE.json"

FORMATS = ("text", "markdown")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compare", help="compare two runs (CI gate): shift and interval, Mann-Whitney and KS p, verdict")
    p.add_argument("base", metavar="BASE", type=run_or_export, help="run id, 'latest', or an exported JSON file")
    p.add_argument("new", metavar="NEW", type=run_or_export, help="run id, 'latest', or an exported JSON file")
    p.add_argument("--fail", action="append", default=[], metavar="RULE",
                   help="exit 1 when METRIC is significantly worse by more than allowed, 4 when neither"
                        " that nor a pass can be shown; RULE is METRIC:PCT%%, METRIC:AMOUNT[UNIT]"
                        " (e.g. step_s_median:2ms) or METRIC:<BOUND / METRIC:>BOUND (e.g."
                        " samples_per_s:<1200); 'median' is samples/s; repeatable (default:"
                        " median:THRESHOLD)")
    p.add_argument("--threshold", default=f"{cmp.DEFAULT_THRESHOLD:.0%}", metavar="PCT%",
                   help="the change that matters: SAME means shown within it (default %(default)s)")
    p.add_argument("--metric", action="append", default=[], help="also compare this metric")
    p.add_argument("--force", action="store_true", help="compare despite a policy or hardware difference")
    p.add_argument("--format", default="text", help="text or markdown (for a CI comment)")
    p.add_argument("--wide", action="store_true", help="the table at its full width, whatever the terminal's")
    add_store_argument(p)


def load_side(ref: str, store_path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(trials, environment of the first run) from an exported JSON file or the store."""
    if ref.endswith(".json") or os.path.isfile(ref):
        runs = _export_runs(ref)
    else:
        store = open_store(store_path, readonly=True)
        runs = export_json(store, store.resolve_runs(ref))["runs"]
    if not runs:
        raise UsageError(f"{shown(ref)} holds no runs")
    return [t for r in runs for t in r["trials"]], runs[0]["environment"]


def _export_runs(ref: str) -> list[dict[str, Any]]:
    """The runs of an export file, every field the comparison reads checked for its type, so
    that any other JSON (a list, a string, trials of another shape) is one line saying where."""
    if os.path.isdir(ref):
        raise UsageError(f"{shown(ref)} is a directory, not an exported JSON file; {HOW_TO_EXPORT}")
    if not os.path.isfile(ref):
        raise UsageError(f"{shown(ref)}: no such file")
    try:
        data = json.loads(Path(ref).read_bytes())
    except OSError as e:
        raise UsageError(f"{shown(ref)} cannot be read: {e.strerror}") from None
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past Python's stack
        raise UsageError(f"{shown(ref)} is not a dlbench export (not JSON); {HOW_TO_EXPORT}") from None
    runs = _field(ref, data, "runs", list, "the file")
    for i, run in enumerate(runs):
        where = f"runs[{i}]"
        _typed(ref, run, dict, where)
        _field(ref, run, "environment", dict, where)
        for j, trial in enumerate(_field(ref, run, "trials", list, where)):
            _check_trial(ref, trial, f"{where}.trials[{j}]")
    return runs


def _check_trial(ref: str, trial: Any, where: str) -> None:
    _typed(ref, trial, dict, where)
    _field(ref, trial, "status", str, where)
    spec = _field(ref, trial, "spec", dict, where)
    _field(ref, _field(ref, spec, "policy", dict, f"{where}.spec"), "mode", object, f"{where}.spec.policy")
    _field(ref, spec, "framework", object, f"{where}.spec")
    workload = _field(ref, spec, "workload", dict, f"{where}.spec")
    for key in ("name", "batch_size", "seed"):
        _field(ref, workload, key, object, f"{where}.spec.workload")
    for name, metric in _field(ref, trial, "metrics", dict, where).items():
        at = f"{where}.metrics[{name!r}]"
        if metric is None:
            continue
        value = _typed(ref, metric, dict, at).get("value")
        if value is None:
            continue
        try:
            if isinstance(value, bool):
                raise TypeError
            float(value)
        except (TypeError, ValueError, OverflowError):
            _bad(ref, f"{at}.value is {shown(value)}, not a number")


def _field(ref: str, obj: Any, key: str, kind: type, where: str) -> Any:
    _typed(ref, obj, dict, where)
    if key not in obj:
        _bad(ref, f"{where} has no {key!r}")
    return _typed(ref, obj[key], kind, f"{where}.{key}" if where != "the file" else key)


def _typed(ref: str, value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        _bad(ref, f"{where} is {_json_type(value)}, not {_json_type(kind())}")
    return value


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number"}
    return names.get(type(value), "null")


def _bad(ref: str, what: str) -> None:
    raise UsageError(f"{shown(ref)} is not a dlbench export: {what}; {HOW_TO_EXPORT}")


def _threshold(text: str) -> float:
    """--threshold PCT% -> a share in (0, 1)."""
    m = re.fullmatch(r"([0-9]+(\.[0-9]*)?)%", text.strip())
    if m is None or not 0 < float(m[1]) < 100:
        raise UsageError(f"--threshold {text!r} is not a percentage between 0% and 100%, e.g. 5%")
    return float(m[1]) / 100


def main(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"format {shown(args.format)} is not one of: {', '.join(FORMATS)}")
    threshold = _threshold(args.threshold)
    try:
        rules = [cmp.parse_fail(f) for f in args.fail]
    except cmp.CompareError as e:
        raise UsageError(str(e)) from None
    # No rule: the gate is the headline metric at the threshold (a CI gate that says nothing
    # would pass a 65x slowdown measured with too few repeats).
    rules = rules or [cmp.FailRule(cmp.HEADLINE_METRIC, threshold, text=f"median:{threshold * 100:g}%")]
    base, base_env = load_side(args.base, args.store)
    new, new_env = load_side(args.new, args.store)
    (base, base_profiled), (new, new_profiled) = cmp.timed_only(base), cmp.timed_only(new)
    console = make_console()
    env_lines, hardware = cmp.environment_differences(base_env, new_env)
    policy_lines = cmp.policy_differences(base, new)
    if hardware and not args.force:
        raise UsageError("the hardware differs between BASE and NEW (" + "; ".join(
            line for line in env_lines if line.split(":")[0] in cmp.HARDWARE_KEYS) + "); add --force to compare anyway")
    if policy_lines and not args.force:
        raise UsageError(f"the policy differs: {policy_lines[0]}"
                         + (f" (and {len(policy_lines) - 1} more)" if len(policy_lines) > 1 else "")
                         + "; add --force to compare anyway")
    metrics = list(dict.fromkeys([cmp.HEADLINE_METRIC, *args.metric, *(r.metric for r in rules)]))
    thresholds = {r.metric: r.threshold for r in reversed(rules) if r.kind == "relative"}
    results, unpaired = cmp.compare(base, new, metrics, {m: thresholds.get(m, threshold) for m in metrics})
    if not results:
        raise UsageError("BASE and NEW share no configuration with ok trials to compare")
    outcomes = cmp.gates(results, rules)
    failed = cmp.failed_trials(new)
    notes = [*(f"environment: {line}" for line in env_lines), *(f"forced: {line}" for line in policy_lines),
             *unpaired, *(f"failed trial in NEW: {f}" for f in failed),
             *([f"profiled trials left out (never compared: the profiler perturbs timing): {base_profiled} in"
                f" BASE, {new_profiled} in NEW"] if base_profiled or new_profiled else []),
             *(_decision_note(r) for r in results
               if r.verdict == cmp.UNDECIDED and all(rule.metric != r.metric for rule in rules)),
             *(_gate_note(r, rule, g) for r, rule, g in outcomes)]
    table = compare_table(results, notes)
    if args.format == "markdown":
        print(printable(markdown(table)))  # labels and environments come from the files compared
    else:
        print_table(console, table, args.wide)
    kinds = {g.outcome for _, _, g in outcomes}
    if "regression" in kinds:
        return EXIT_REGRESSION
    if failed:
        return EXIT_TRIALS_FAILED
    return EXIT_UNDECIDED if "undecided" in kinds else EXIT_OK


def _decision_note(r: cmp.PairResult) -> str:
    d = r.decision
    if d.busy:  # more repeats on the machine as it is would not help: retake them when it is quiet
        return f"UNDECIDED {r.label} {r.metric}: {d.reason}"
    return (f"UNDECIDED {r.label} {r.metric}: {d.reason}; about {d.more_repeats} more repeats per side"
            " would likely decide it")


def _gate_note(r: cmp.PairResult, rule: cmp.FailRule, g: cmp.Gate) -> str:
    """`PASS median:5%: cnn/torch/... shown within ...`, `REGRESSION ...`, `UNDECIDED ...`."""
    more = f"; about {g.more_repeats} more repeats per side would likely decide it" if g.more_repeats else ""
    return f"{g.outcome.upper()} {rule.label}: {r.label}: {g.text}{more}"
