"""`dlbench compare BASE NEW [--fail median:5%]...`: the CI regression gate.

BASE and NEW are run ids (or `latest`) in --store, or JSON files from `dlbench export`. Trials
pair by configuration; the policy must match unless --force, and a hardware change needs --force.
Exit 0 pass, 1 regression, 2 usage error, 3 failed trials (DESIGN §4).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from dlbench.analysis import compare as cmp
from dlbench.cli.common import (
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_TRIALS_FAILED,
    UsageError,
    add_store_argument,
    open_store,
)
from dlbench.cli.export import export_json
from dlbench.report.comparison import compare_table, markdown
from dlbench.report.terminal import make_console, print_table

FORMATS = ("text", "markdown")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("compare", help="compare two runs (CI gate): ratio, CI, Mann-Whitney p, verdict")
    p.add_argument("base", metavar="BASE", help="run id, 'latest', or an exported JSON file")
    p.add_argument("new", metavar="NEW", help="run id, 'latest', or an exported JSON file")
    p.add_argument("--fail", action="append", default=[], metavar="METRIC:PCT%",
                   help="fail (exit 1) when METRIC gets worse by more than PCT and significantly;"
                        " 'median' is samples/s; repeatable, e.g. --fail median:5%% --fail rss_peak_bytes:10%%")
    p.add_argument("--metric", action="append", default=[], help="also compare this metric")
    p.add_argument("--force", action="store_true", help="compare despite a policy or hardware difference")
    p.add_argument("--format", default="text", help="text or markdown (for a CI comment)")
    p.add_argument("--wide", action="store_true", help="the table at its full width, whatever the terminal's")
    add_store_argument(p)


def load_side(ref: str, store_path: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(trials, environment of the first run) from an exported JSON file or the store."""
    path = Path(ref)
    if ref.endswith(".json") or path.is_file():
        if not path.is_file():
            raise UsageError(f"{ref}: no such file")
        try:
            data = json.loads(path.read_text())
            runs = data["runs"]
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"{ref} is not a dlbench export (dlbench export RUN -o FILE.json)") from None
    else:
        store = open_store(store_path, must_exist=True)
        runs = export_json(store, store.resolve_runs(ref))["runs"]
    if not runs:
        raise UsageError(f"{ref} holds no runs")
    return [t for r in runs for t in r["trials"]], runs[0]["environment"]


def main(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"format {args.format!r} is not one of: {', '.join(FORMATS)}")
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
    table = compare_table(results, notes)
    if args.format == "markdown":
        print(markdown(table))
    else:
        print_table(console, table, args.wide)
    if bad:
        return EXIT_REGRESSION
    return EXIT_TRIALS_FAILED if failed else EXIT_OK
