"""keras-torch's compiled resnet: fit()'s step time with dynamo's recompile limit as shipped
(LIMIT 0: torch's default, 8) or raised, dynamo's graphs, and the frames over the limit (dynamo
runs those uncompiled). MODE=eager in the environment times the eager step instead. One process
per reading: run the variants interleaved on a quiet machine.

    python benchmarks/keras_torch_recompile.py LIMIT PRESET STEPS

Measured: docs/workloads.md, "ReLU kinks" (its last paragraph).
"""

from __future__ import annotations

import logging
import os
import sys
import time

import numpy as np

from dlbench import workloads
from dlbench.backends import get_backend
from dlbench.runner.child import setup_environment
from dlbench.spec import Policy, TrialSpec, WorkloadSpec
from dlbench.workloads.data import batch_indices, epoch_order


class LimitHits(logging.Handler):
    """The functions dynamo names when it stops recompiling them."""

    def __init__(self) -> None:
        super().__init__()
        self.functions: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "recompile_limit" in message:
            self.functions.append(message.splitlines()[1].strip())


def main() -> None:
    limit, preset, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    mode = os.environ.get("MODE", "compiled")
    wl = workloads.get("resnet")
    p = wl.PRESETS[preset]
    spec = WorkloadSpec(name="resnet", model_size=p.model_size, batch_size=p.batch_size,
                        dataset_size=2048, eval_size=32, numerics=wl.NUMERICS)
    trial = TrialSpec(workload=spec, framework="keras-torch", policy=Policy(mode=mode))
    backend = get_backend("keras-torch")
    setup_environment(trial, backend)
    backend.import_framework()
    backend.configure(Policy())
    import torch._dynamo

    if limit:
        torch._dynamo.config.recompile_limit = limit
    hits = LimitHits()
    logging.getLogger("torch._dynamo.convert_frame").addHandler(hits)
    program = backend.build(trial)
    program.load(wl.make_dataset(spec))
    state = program.init(wl.init_params(spec))
    order = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    batches = program.batches(np.concatenate([order] * ((3 + 2 * steps) // len(order) + 1)))
    started = time.perf_counter()
    state, _ = program.train_chunk(state, batches, 3)
    warmup = time.perf_counter() - started
    ms = []
    for _ in range(2):
        started = time.perf_counter()
        state, _ = program.train_chunk(state, batches, steps)
        ms.append(round(1000 * (time.perf_counter() - started) / steps, 1))
    print(f"{mode} limit {torch._dynamo.config.recompile_limit} preset {preset} batch {spec.batch_size} "
          f"warm-up {warmup:.1f} s, step ms {ms}, graphs {program.compilations()}, "
          f"over the limit {len(hits.functions)}: {hits.functions}, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
