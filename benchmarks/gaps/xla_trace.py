"""Where an XLA:CPU step's time goes, from a reproducer's `--jax-trace DIR` output: each
executed HLO instruction's time per step (its thunk's events in the trace), grouped by the
instruction's kind (ynn_fusion: YNNPACK dots; dot: Eigen dots; *_fusion: loop fusions; copy) and
by the framework op it was made from (its metadata op_name), with each instruction's shape.
Imports no framework.

    python benchmarks/gaps/lm_train.py --only jax --jax-trace /tmp/t
    python benchmarks/gaps/xla_trace.py /tmp/t/jax --steps 5
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from pathlib import Path

_INSTRUCTION = re.compile(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ([\w-]+)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def instructions(hlo: str) -> dict[str, tuple[str, str, str]]:
    """Name -> (shape, opcode, framework op) of every instruction in the HLO text."""
    out = {}
    for line in hlo.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            op = _OP_NAME.search(line)
            out[m.group(1)] = (m.group(2), m.group(3), re.sub(r"jit\([^)]*\)/", "", op.group(1)) if op else "")
    return out


def durations(trace: Path) -> collections.Counter[str]:
    """Event name -> total microseconds, over every thread."""
    doc = json.loads(gzip.open(trace).read() if trace.suffix == ".gz" else trace.read_text())
    total: collections.Counter[str] = collections.Counter()
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
        if e.get("ph") == "X":
            total[e["name"]] += e.get("dur", 0)
    return total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="one configuration's --jax-trace directory")
    p.add_argument("--steps", type=int, required=True, help="the timed steps the trace holds")
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    traces = sorted(args.dir.glob("plugins/profile/*/*.trace.json.gz"))
    if not traces or not (args.dir / "step.hlo.txt").exists():
        p.error(f"{args.dir}: no trace (plugins/profile/*/*.trace.json.gz) or step.hlo.txt in it")
    hlo = instructions((args.dir / "step.hlo.txt").read_text())
    ms = {n: us / 1e3 / args.steps for n, us in durations(traces[-1]).items() if n in hlo}
    total = sum(ms.values())
    print(f"traced instructions: {total:.1f} ms per step (self times on every thread)")
    for title, key in (("by kind", lambda n: n.rsplit(".", 1)[0]), ("by framework op", lambda n: hlo[n][2])):
        grouped: collections.Counter[str] = collections.Counter()
        for name, t in ms.items():
            grouped[key(name)] += t
        print(title)
        for k, t in grouped.most_common(args.top):
            print(f"  {t:9.1f} ms {t / total:5.1%}  {k[:100]}")
    print("instructions")
    for name, t in sorted(ms.items(), key=lambda kv: -kv[1])[:args.top]:
        shape, opcode, op = hlo[name]
        print(f"  {t:9.1f} ms  {name:28} {opcode:8} {shape[:36]:36} {op[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
