"""The executors by name (`dlbench run --executor NAME`, a suite file's `executor`): `local`, one
trial at a time in this process's children (runner/executor.py), and `ray`, each trial a Ray task
(runner/ray_executor.py). Each opens as the one `execute` its callers take (executor.RunTrials):
the CLI, the rounds of `--repeats auto` and the headroom search never know which runs.

The Ray module is imported here only, and only when a sweep asks for Ray: a local run, `dlbench
list` and a suite file's validation never load the driver's half of a cluster executor.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Iterator

from dlbench.runner.executor import RunTrials, execute

EXECUTORS = ("local", "ray")


class ExecutorError(Exception):
    """The chosen executor cannot start (Ray cannot be started or reached); one line why."""


def ray_installed() -> bool:
    """Whether Ray is installed, without importing it."""
    return importlib.util.find_spec("ray") is not None


@contextlib.contextmanager
def opened(name: str, address: str | None = None, share_nodes: bool = False) -> Iterator[RunTrials]:
    """Executor `name`'s `execute` for the length of a sweep: the local one as it is; Ray's
    connected to the cluster at `address` (None: a local instance), whose trials with --threads
    may share a node when `share_nodes` (--allow-concurrent)."""
    if name == "local":
        yield execute
        return
    if name != "ray":
        raise ExecutorError(f"executor {name!r} is not one of: {', '.join(EXECUTORS)}")
    from dlbench.runner import ray_executor

    cluster = ray_executor.Cluster(address, share_nodes=share_nodes)
    try:
        with ray_executor.connected(cluster):
            yield functools.partial(ray_executor.execute, cluster=cluster)
    except ray_executor.ClusterError as e:
        raise ExecutorError(str(e)) from None
