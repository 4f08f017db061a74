"""`dlbench compare BASE NEW [--fail median:5%]...`: the CI regression gate.

BASE and NEW are run ids (or `latest`) in --store, or JSON files from `dlbench export`. Trials
pair by configuration; the policy must match unless --force, and a hardware change needs --force.
Exit 0 pass, 1 regression, 2 usage error, 3 failed trials (DESIGN §4).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from rich.table import Table

from dlbench.analysis import compare as cmp
from dlbench.cli.common import (
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_TRIALS_FAILED,
    UsageError,
    add_store_argument,
    open_store,
    run_or_export,
)
from dlbench.cli.export import export_json
from dlbench.report.terminal import make_console
from dlbench.text import printable, shown

HOW_TO_EXPORT = "write one with: dlbench export RUN -o FILE.json"

FORMATS = ("text", "markdown")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compare", help="compare two runs (CI gate): ratio, CI, Mann-Whitney p, verdict")
    p.add_argument("base", metavar="BASE", type=run_or_export, help="run id, 'latest', or an exported JSON file")
    p.add_argument("new", metavar="NEW", type=run_or_export, help="run id, 'latest', or an exported JSON file")
    p.add_argument("--fail", action="append", default=[], metavar="METRIC:PCT%",
                   help="fail (exit 1) when METRIC gets worse by more than PCT and significantly;"
                        " 'median' is samples/s; repeatable, e.g. --fail median:5%% --fail rss_peak_bytes:10%%")
    p.add_argument("--metric", action="append", default=[], help="also compare this metric")
    p.add_argument("--force", action="store_true", help="compare despite a policy or hardware difference")
    p.add_argument("--format", default="text", help="text or markdown (for a CI comment)")
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


def main(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"format {shown(args.format)} is not one of: {', '.join(FORMATS)}")
    try:
        rules = [cmp.parse_fail(f) for f in args.fail]
    except cmp.CompareError as e:
        raise UsageError(str(e)) from None
    base, base_env = load_side(args.base, args.store)
    new, new_env = load_side(args.new, args.store)
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
    results, unpaired = cmp.compare(base, new, metrics)
    if not results:
        raise UsageError("BASE and NEW share no configuration with ok trials to compare")
    bad = cmp.regressions(results, rules)
    failed = cmp.failed_trials(new)
    notes = [*(f"environment: {line}" for line in env_lines), *(f"forced: {line}" for line in policy_lines),
             *unpaired, *(f"failed trial in NEW: {f}" for f in failed),
             *dict.fromkeys(r.warning for r in results if r.warning)]
    notes += [f"REGRESSION {rule.label}: {r.label} {r.metric} {r.change * 100:.1f}% worse"
              f" (median {r.base.median:.4g} -> {r.new.median:.4g}, p={r.p_value:.3g})"
              for r, rule in bad]
    if args.format == "markdown":
        print(printable(markdown(results, notes)))
    else:
        console.print(table(results))
        for n in notes:  # labels and environments come from the files compared: no escapes
            console.print(printable(f"  {n}"), soft_wrap=True, highlight=False)
    if bad:
        return EXIT_REGRESSION
    return EXIT_TRIALS_FAILED if failed else EXIT_OK


def _row(r: cmp.PairResult) -> list[str]:
    fmt = "{:.4g}"
    verdict = {"worse": "slower", "better": "faster"}.get(r.verdict, r.verdict) if r.metric == cmp.HEADLINE_METRIC else r.verdict
    return [printable(r.label), printable(r.metric), f"{fmt.format(r.base.median)} (n={r.base.n})", f"{fmt.format(r.new.median)} (n={r.new.n})",
            f"{r.ratio:.3f} [{r.ratio_low:.3f}, {r.ratio_high:.3f}] ≥{r.ratio_level:.0%}", f"{r.p_value:.3g}", verdict]


HEADERS = ["configuration", "metric", "BASE median", "NEW median", "ratio NEW/BASE [CI, level]", "p (Mann-Whitney)", "verdict"]


def table(results: list[cmp.PairResult]) -> Table:
    t = Table(title="dlbench compare")
    for h in HEADERS:
        t.add_column(h)
    for r in results:
        t.add_row(*map(printable, _row(r)))
    return t


def markdown(results: list[cmp.PairResult], notes: list[str]) -> str:
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _row(r)) + " |" for r in results]
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)
