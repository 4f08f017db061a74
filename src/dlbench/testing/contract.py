"""`python -m dlbench.testing.contract WORKLOAD [-f FRAMEWORKS] [--mode MODES] [--no-parity]`:
the whole contract of one workload, built-in or a plugin's, as dlbench's own tests hold it.

1. the neutral module (workloads/contract.py): interface, shapes, behaviour;
2. each framework that implements it (its BUILDERS, or dlbench's own modules) and is installed:
   the Program contract in a process of its own (testing/program.py), in each mode asked for
   (default: every mode the backend runs);
3. parity: `dlbench check` of those frameworks, each in the first of --mode it runs (default:
   compiled), against the float64 reference and pairwise; every one must pass (a numerics
   read-back that differs from the spec, which `check` shows as unsupported, fails here).
Prints one line per finding; exit 0 when the contract holds, 1 when not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from dlbench import backends, workloads
from dlbench.backends import get_backend, registered, support
from dlbench.cli import main as cli
from dlbench.spec import MODES, SpecError
from dlbench.testing import program
from dlbench.workloads import contract


def neutral_problems(name: str) -> list[str]:
    """The neutral module against the interface, the parameter shapes and the behaviour the
    built-in workloads' tests assert."""
    module = workloads.check(name)
    found = contract.interface(module, name, plugin=not workloads.origin(name).builtin)
    return found or contract.shapes(module) or contract.behaviour(module)


def implementing(name: str) -> dict[str, str | None]:
    """Every registered framework -> None where it implements `name` and is installed, else
    why it is left out."""
    out: dict[str, str | None] = {}
    for f in registered():
        backend = get_backend(f)
        ok, detail = backend.available()
        lacks = support.workload_unsupported(f, backend, name)
        if lacks is not None:
            out[f] = lacks
        elif not ok:
            out[f] = f"not installed ({detail})"
        else:
            out[f] = None
    return out


def unknown_families(name: str) -> list[str]:
    """BUILDERS keys that no registered backend answers to (a typo leaves a framework out)."""
    declared = workloads.builders(name) or {}
    families = {type(get_backend(f)).__module__.removeprefix("dlbench.backends.") for f in registered()}
    return [f"BUILDERS key {k!r} is no backend family (they are: {', '.join(sorted(families))})"
            for k in declared if k not in families]


def parity_problems(name: str, frameworks: list[str], modes: list[str] | None) -> list[str]:
    """`dlbench check` of these frameworks, each in the first of `modes` it runs (default:
    compiled), one check per mode; every cell must pass, and every pair checked together."""
    by_mode: dict[str, list[str]] = {}
    for f in frameworks:
        supported = [m for m, why in get_backend(f).modes().items() if why is None]
        mode = next((m for m in modes or ["compiled"] if m in supported), None)
        if mode is not None:
            by_mode.setdefault(mode, []).append(f)
    out = []
    for mode, group in by_mode.items():
        out += _check(name, group, mode)
    return out


def _check(name: str, frameworks: list[str], mode: str) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="dlbench-contract-check-") as tmp:
        report = Path(tmp) / "check.json"
        cli.main(["check", "-w", name, "-f", ",".join(frameworks), "--mode", mode, "--json", str(report)])
        if not report.exists():
            return [f"dlbench check ({mode}) wrote no result"]
        found = json.loads(report.read_text())
    out = [f"parity {c['framework']} {mode}: {c['status']}" + (f": {c['error']}" if c["error"] else "")
           for c in found["cells"] if not c["passed"]]
    out += [f"parity {p['a']} vs {p['b']} ({mode}): gradients differ by {p['rel_err']:.1e}"
            for p in found["pairs"] if not p["passed"]]
    return out


def run(name: str, frameworks: list[str] | None, modes: list[str] | None, parity: bool, say: object = print) -> list[str]:
    """Every check of the contract; returns the problems (also printed through `say`)."""
    emit = say if callable(say) else print
    found = neutral_problems(name) + unknown_families(name)
    emit(f"neutral module: {'ok' if not found else f'{len(found)} problem(s)'}")
    wanted = implementing(name)
    chosen = [f for f in (frameworks or wanted) if wanted.get(f, "not registered") is None]
    # A framework asked for by name must implement the workload; the default takes those that do.
    found += [f"{f}: {wanted.get(f, 'not registered')}" for f in frameworks or () if f not in chosen]
    for f in chosen:
        supported = [m for m, why in get_backend(f).modes().items() if why is None]
        asked = [m for m in modes or supported if m in supported]
        emit(f"{f}: Program contract in {', '.join(asked) or 'no mode'}")
        problems, _ = program.problems(f, name, asked)
        found += [f"{f} {p}" for p in problems]
    if parity and chosen:
        emit(f"parity: dlbench check of {', '.join(chosen)}")
        found += parity_problems(name, chosen, modes)
    for p in found:
        emit(f"FAIL {p}")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.testing.contract", description=__doc__.split("\n\n")[0])
    p.add_argument("workload")
    p.add_argument("-f", "--framework", help="comma list (default: every installed framework that implements it)")
    p.add_argument("--mode", help=f"comma list of {', '.join(MODES)} (default: every mode each framework runs;"
                                  " parity in the first of them it runs, default compiled)")
    p.add_argument("--no-parity", action="store_true", help="skip `dlbench check`")
    args = p.parse_args(argv)
    try:
        for f in (args.framework or "").split(",") if args.framework else []:
            backends.check(f)
        found = run(args.workload, args.framework.split(",") if args.framework else None,
                    args.mode.split(",") if args.mode else None, not args.no_parity)
    except SpecError as e:
        print(f"dlbench.testing.contract: error: {cli.one_line(str(e))}", file=sys.stderr)
        return 2
    print("contract holds" if not found else f"contract broken: {len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
