#!/usr/bin/env python3
"""A worker that does not import dlbench: proof that the worker protocol is language-neutral.
Started as `foreign_worker.py -m dlbench.runner.worker SPEC OUT` (it is the trial's
`interpreter`), it reads the TrialSpec JSON, appends events and writes a TrialResult, as a Julia
or C++ worker would. Only the standard library."""

import json
import os
import sys
import time


def main() -> int:
    spec_path, out_path = sys.argv[-2], sys.argv[-1]
    with open(spec_path) as f:
        spec = json.load(f)
    events = open(out_path + ".events", "a", buffering=1)

    def emit(event: str, **fields: object) -> None:
        events.write(json.dumps({"v": 1, "t": time.monotonic(), "event": event, **fields}) + "\n")

    emit("start", pid=os.getpid())
    emit("phase", name="import", state="start")
    emit("phase", name="import", state="end", seconds=0.0)
    steps = spec["workload"]["dataset_size"] // spec["workload"]["batch_size"]
    t0 = time.perf_counter()
    for epoch in range(spec["epochs"]):
        time.sleep(0.01)
        emit("chunk", epoch=epoch, steps=steps, seconds=0.01)
    train_s = time.perf_counter() - t0
    samples = spec["epochs"] * steps * spec["workload"]["batch_size"]
    result = {"schema_version": 1, "status": "ok", "error": None,
              "metrics": {"train_s": train_s, "samples_per_s": samples / train_s, "vram_peak_bytes": None},
              "series": {"loss": [[0, 2.3], [1, 2.2]]}, "notes": {"vram_peak_bytes": "no GPU"},
              "warnings": [], "policy_effective": {}, "framework_info": {"language": "any"},
              "numerics": {}, "events": [], "pid": os.getpid()}
    with open(out_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out_path + ".tmp", out_path)
    emit("end", status="ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
