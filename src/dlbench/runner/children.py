"""The parent's one way to start, watch and stop a child process (pyperf's `_manager.py` keeps
one `spawn_worker` and one killer; so does dlbench). Every Python child the parent starts goes
through here: a trial's worker (runner/spawn.py), the numerical probe (runner/probe_client.py),
the untimed warm import (runner/warm.py), the matmul-ceiling measurement (runner/ceiling.py) and
the contract's program child (testing/program.py).

A child is started by processes.start_child (on the spec floor, so that a backend's own helpers
start the same way): its own session and process group, PR_SET_PDEATHSIG, a cookie its
descendants inherit, its output to a log file of which only the tail is read (processes.py says
why each). Here it is watched under a timeout and a memory limit and, however it ends, killed
with its group and every cookie holder.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlbench.monitors.memory import ProcessTree
from dlbench.processes import Child, start_child

POLL_S = 0.1
# The watchdog re-lists the child's descendants once a second (a /proc walk: 2.8 ms with 117
# processes here); each poll between reads the known processes' RSS only (18 us). Together
# about 0.3 % of one core beside a trial's timed window, as much as the worker's own sampler.
TREE_REFRESH_S = 1.0

# Called every poll while a child runs; True means "progress": the timeout starts again (the
# probe's limit applies to each workload it probes, not to all of them together).
PollCallback = Callable[[], bool]


@dataclass
class Watched:
    """What the parent saw while the child ran."""

    killed_for: str | None = None  # "timeout", "oom" or "interrupted": the parent killed it
    rss_peak_bytes: int = 0  # the child's process tree, sampled every POLL_S
    signal_name: str = "SIGINT"  # what interrupted the parent, for "interrupted"


def watch(child: Child, watched: Watched, timeout_s: float, memory_limit_bytes: int | None = None,
          on_poll: PollCallback | None = None) -> None:
    """Poll until the child exits; kill it past the timeout (counted from the start, or from the
    last poll that reported progress) or when its process tree's RSS passes the memory limit.
    Whatever it left behind (its group, cookie holders) is killed when it ends, either way."""
    deadline = time.monotonic() + timeout_s
    tree = ProcessTree(psutil.Process(child.pid), refresh_s=TREE_REFRESH_S)
    try:
        while True:
            done = child.exited()
            if not done:
                watched.rss_peak_bytes = max(watched.rss_peak_bytes, _rss(tree))
            if on_poll is not None and on_poll():
                deadline = time.monotonic() + timeout_s
            if done:
                return
            if memory_limit_bytes is not None and watched.rss_peak_bytes > memory_limit_bytes:
                watched.killed_for = "oom"
            elif time.monotonic() > deadline:
                watched.killed_for = "timeout"
            if watched.killed_for is not None:
                return
            time.sleep(POLL_S)
    finally:
        child.kill()


def run_child(module: str, args: Sequence[str], log_path: Path, timeout_s: float,
              env: dict[str, str] | None = None, cpus: Sequence[int] | None = None,
              memory_limit_bytes: int | None = None) -> tuple[Child, Watched]:
    """Start a child and wait for it under the limits; it and its descendants are gone when
    this returns or raises (Ctrl-C included)."""
    child = start_child(module, args, log_path, env=env, cpus=cpus)
    watched = Watched()
    watch(child, watched, timeout_s, memory_limit_bytes)
    return child, watched


def why_not_ok(child: Child, watched: Watched, timeout_s: float, memory_limit_bytes: int | None = None) -> str | None:
    """None when the child exited with 0, else a phrase for "the probe ...": killed for what,
    or how it exited and the last line of its output."""
    if watched.killed_for == "timeout":
        return f"did not finish within {timeout_s:g} s (killed)"
    if watched.killed_for == "oom":
        return (f"reached {gib(watched.rss_peak_bytes)} RSS, over the memory limit of"
                f" {gib(memory_limit_bytes or 0)} (killed)")
    rc = child.returncode
    if rc == 0:
        return None
    why = f"was killed by signal {signal.Signals(-rc).name}" if rc is not None and rc < 0 else f"exited with code {rc}"
    last = (child.tail().splitlines() or ["(no output)"])[-1]
    return f"{why} ({last})"


def gib(n: float) -> str:
    """GiB with enough digits that a peak just over a limit reads as more than it."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _rss(tree: ProcessTree) -> int:
    try:
        return tree.rss_bytes()
    except psutil.Error:
        return 0
