"""DistributedDataParallel for a trial with devices > 1, launched the way torchrun does.

The trial's worker is rank 0. It starts ranks 1..N-1 as copies of itself (`python -m
dlbench.runner.worker SPEC OUT` on the same trial, each with its own throwaway OUT) with
MASTER_ADDR=127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK set, through
processes.start_child in the worker's own process group and with its cookie: the parent's group
kill ends them with the trial, and PR_SET_PDEATHSIG ends them if rank 0 dies. Every rank runs the same worker code, so every collective (DDP's parameter
broadcast at construction, the gradient all-reduce of each backward, the loss mean of each chunk)
is met by every rank in the same order; rank 0 alone reports. Gloo on CPU, NCCL on GPU (one GPU
per rank); each rank gets cores/N threads.
"""

# No `from __future__ import annotations`: DDP's register_comm_hook checks the hook's
# annotations at runtime (the bucket must be annotated dist.GradBucket, not a string).
import atexit
import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import typing
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from dlbench import processes
from dlbench.spec import TrialSpec, to_dict

# Set by rank 0 for the ranks it starts: a worker that finds it joins instead of launching.
RANK_VAR = "DLBENCH_TORCH_RANK"
RANK_POLL_S = 0.5


@typing.final
class CommTimer:
    """Seconds from each gradient bucket's all-reduce launch to its completion, summed: time
    spent communicating (on CPU gloo's threads; it overlaps the rest of the backward pass)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def hook(self, process_group: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        start = time.perf_counter()

        def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            self.seconds += time.perf_counter() - start
            return fut.value()

        return default_hooks.allreduce_hook(process_group, bucket).then(done)


COMM = CommTimer()


def launch(trial: TrialSpec) -> dict[str, Any]:
    """Join (ranks 1..N-1) or start (rank 0) the process group of the trial's ranks."""
    world = trial.devices
    cores = len(os.sched_getaffinity(0))
    threads = max(1, cores // world)
    joined = os.environ.get(RANK_VAR)
    rank = int(joined) if joined is not None else 0
    if joined is None:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                          WORLD_SIZE=str(world), RANK="0", LOCAL_RANK="0")
        _watch(_start_ranks(trial, world, threads))
    gpu = torch.cuda.is_available() and torch.cuda.device_count() >= world
    if gpu:
        torch.cuda.set_device(rank)
    backend = "nccl" if gpu else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=trial.timeout_s))
    torch.set_num_threads(threads)
    return {"mechanism": "torch DistributedDataParallel", "process_group": backend,
            "rank_processes": world, "threads_per_rank": torch.get_num_threads(),
            "platform": "gpu" if gpu else "cpu", "master_port": int(os.environ["MASTER_PORT"])}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_ranks(trial: TrialSpec, world: int, threads: int) -> list[tuple[int, processes.Child, Path]]:
    workdir = Path(tempfile.mkdtemp(prefix="dlbench-ranks-"))
    atexit.register(shutil.rmtree, workdir, ignore_errors=True)
    spec = workdir / "spec.json"
    spec.write_text(json.dumps(to_dict(trial)))
    started = []
    for rank in range(1, world):
        out = workdir / f"rank{rank}.result.json"
        env = {RANK_VAR: str(rank), "RANK": str(rank), "LOCAL_RANK": str(rank),
               **{var: str(threads) for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}}
        # In this worker's process group, its output in the worker's log: the parent's group kill
        # reaches them, and a rank's traceback is in the trial's error tail.
        child = processes.start_child("dlbench.runner.worker", [str(spec), str(out)], None, env=env,
                                      own_group=False)
        started.append((rank, child, out))
    return started


def _watch(ranks: list[tuple[int, processes.Child, Path]]) -> None:
    """A rank that ends without an ok result leaves rank 0 waiting in a collective until the
    process group's timeout: end the trial at once instead, with the rank's error."""

    def watch() -> None:
        while ranks:
            for item in list(ranks):
                rank, child, out = item
                if child.proc.poll() is None:
                    continue
                ranks.remove(item)
                status, error = _rank_result(out)
                if status != "ok":
                    print(f"dlbench: torch rank {rank} ended ({status}): {error}; ending the trial",
                          file=sys.stderr, flush=True)
                    os._exit(1)
            time.sleep(RANK_POLL_S)

    threading.Thread(target=watch, name="dlbench-rank-watch", daemon=True).start()


def _rank_result(out: Path) -> tuple[str, str]:
    try:
        result = json.loads(out.read_text())
        return str(result.get("status")), str(result.get("error"))
    except (OSError, ValueError):
        return "crashed", "no result"


def rank_and_world() -> tuple[int, int]:
    if not dist.is_initialized():
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def wrap(module: nn.Module) -> nn.Module:
    """The module under DDP (its parameters broadcast from rank 0), gradient all-reduce timed."""
    ids = [torch.cuda.current_device()] if torch.cuda.is_available() and dist.get_backend() == "nccl" else None
    ddp = DistributedDataParallel(module, device_ids=ids)
    ddp.register_comm_hook(None, COMM.hook)
    return ddp


def mean_over_ranks(t: torch.Tensor) -> torch.Tensor:
    """The mean of each rank's shard means: the global batch's mean loss (equal shards)."""
    t = t.clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()
