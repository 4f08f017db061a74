"""Every gap reproducer of docs/gaps.md and dlbench's overhead against the plain tutorial loops,
one after another, for the quiet window: each reproducer's JSON line appended to OUT.jsonl, a
markdown table of the ratios to OUT.md. About 17 minutes for the reproducers and 12 for the
overhead comparison (18 fresh trials, torch's compiling) on 2 quiet cores, the estimate of each step
printed before it runs; `--only` runs a subset. `--quick` runs every script at its tiny size
(about 6 minutes): a check that everything runs, no measurement.

    python benchmarks/gaps/run_all.py --out gaps-quiet
    python benchmarks/gaps/run_all.py --quick --out /tmp/gaps-check
    python benchmarks/gaps/run_all.py --only lm_train,vit_train --out gaps-quiet

The overhead step needs dlbench importable (PYTHONPATH=src, or the installed package); the
reproducers need only the frameworks. keras_decode.py's keras-hub configuration reports an error
where keras-hub does not import (`pip install --no-deps keras-hub regex tokenizers sentencepiece`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Step:
    name: str
    argv: tuple[str, ...]  # the script (relative to benchmarks/) and its arguments
    minutes: float  # the estimate on 2 quiet cores at full size
    quick: tuple[str, ...] = ("--quick",)  # what --quick adds


LM = "jax,torch-compiled,torch,tensorflow,jax-no-attention,torch-no-attention,jax-multi-output-fusion,jax-blocked," \
     "jax-blocked-multi-output,jax-formula"
VIT = "jax,torch,tensorflow,torch-compiled,jax-no-attention,torch-no-attention,jax-multi-output-fusion,jax-eigen-dots"
STEPS = (
    Step("lm_train", ("gaps/lm_train.py", "--only", LM), 4.0),
    Step("vit_train", ("gaps/vit_train.py", "--only", VIT), 6.0),
    Step("attention_lm", ("gaps/attention.py", "--case", "lm"), 0.7),
    Step("attention_vit", ("gaps/attention.py", "--case", "vit"), 0.5),
    Step("kernels_vit", ("gaps/kernels.py", "--case", "vit"), 0.5),
    Step("kernels_resnet50", ("gaps/kernels.py", "--case", "resnet50", "--steps", "5"), 2.0),
    Step("kernels_resnet50_1thread", ("gaps/kernels.py", "--case", "resnet50", "--steps", "5", "--threads", "1"), 2.0),
    Step("kernels_cnn", ("gaps/kernels.py", "--case", "cnn"), 0.5),
    Step("keras_decode", ("gaps/keras_decode.py",), 1.0),
    Step("overhead", ("overhead.py", "--frameworks", "torch,tensorflow,jax", "--modes", "compiled", "--plain",
                      "--repeats", "2", "--epochs", "2", "--threads", "2"), 12.0,
         quick=("--repeats", "1", "--epochs", "1", "--dataset-size", "512")),
)


def run(step: Step, quick: bool) -> dict[str, object]:
    argv = [sys.executable, str(HERE.parent / step.argv[0]), *step.argv[1:], *(step.quick if quick else ())]
    start, load = time.perf_counter(), os.getloadavg()[0]
    done = subprocess.run(argv, capture_output=True, text=True)
    record: dict[str, object] = {"step": step.name, "command": " ".join(argv[1:]), "exit": done.returncode,
                                 "wall_s": round(time.perf_counter() - start, 1), "load_1m_start": load,
                                 "load_1m_end": os.getloadavg()[0]}
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if step.name == "overhead":  # its table is text: the lines after its header
        text = done.stdout.strip().splitlines()
        header = next((i for i, x in enumerate(text) if x.startswith("framework/mode")), len(text))
        record["table"] = text[header + 1:]
    elif lines:
        record["result"] = json.loads(lines[-1])
    if done.returncode != 0:
        record["error"] = (done.stderr.strip().splitlines() or ["no output"])[-1][-300:]
    return record


RATIOS = ("ratio", "ratio_to_tensorflow_xla", "ratio_to_torch_eager", "ratio_without_attention",
          "ratio_multi_output_fusion", "ratio_blocked_multi_output", "multi_output_fusion_speedup",
          "blocked_speedup", "jax_blocked_speedup", "torch_compiled_over_eager", "keras_hub_over_keras", "ratio_cpu")


def markdown(records: list[dict[str, object]]) -> str:
    out = ["| step | exit | load (start-end) | ratios | minutes |", "|---|---|---|---|---|"]
    for r in records:
        result = r.get("result") or {}
        assert isinstance(result, dict)
        ratios = ", ".join(f"{k} {v:.3f}" for k in RATIOS if isinstance(v := result.get(k), (int, float)))
        if r["step"] == "overhead":
            ratios = "; ".join(" ".join(str(x).split()) for x in r.get("table", []))
        out.append(f"| {r['step']} | {r['exit']} | {r['load_1m_start']:.2f}-{r['load_1m_end']:.2f} | "
                   f"{ratios or r.get('error', '')} | {float(r['wall_s']) / 60:.1f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="OUT.jsonl and OUT.md are written")
    p.add_argument("--quick", action="store_true", help="every script at its tiny size: a check, no measurement")
    p.add_argument("--only", default="", help=f"comma list of steps: {', '.join(s.name for s in STEPS)}")
    args = p.parse_args()
    wanted = [x for x in args.only.split(",") if x]
    unknown = set(wanted) - {s.name for s in STEPS}
    if unknown:
        p.error(f"--only {','.join(sorted(unknown))}: no such step; one of {', '.join(s.name for s in STEPS)}")
    steps = [s for s in STEPS if not wanted or s.name in wanted]
    print(f"{len(steps)} steps, about {sum(s.minutes for s in steps):.0f} min at full size on 2 quiet cores", flush=True)
    records = []
    with open(f"{args.out}.jsonl", "a") as jsonl:
        for s in steps:
            print(f"{s.name}: about {s.minutes:g} min ...", flush=True)
            record = run(s, args.quick)
            jsonl.write(json.dumps(record) + "\n")
            jsonl.flush()
            records.append(record)
            print(f"{s.name}: exit {record['exit']} in {record['wall_s']} s", flush=True)
    Path(f"{args.out}.md").write_text(markdown(records))
    print(markdown(records))
    return 0 if all(r["exit"] == 0 for r in records) else 3


if __name__ == "__main__":
    sys.exit(main())
