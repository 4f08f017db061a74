"""The Ray executor (`dlbench run --executor ray [--address ADDR]`): each trial a Ray task.
Opened by runner/executors.py, the one module that imports this one (and only for a Ray sweep).

A task runs `spawn.run_trial` on its node, so the trial is still a fresh worker process with the
watchdog, timeout and process-group kill of a local trial; it returns the TrialResult as JSON
with the fixed-batch gradients file and the node's matmul ceiling and memory bandwidth. This
(driver) process alone writes the store, one transaction per trial as each task finishes
(`ray.wait`), so a long sweep shows progress and a driver that dies keeps every finished trial.

What runs where, and why:
- Resources: a task asks for `num_cpus` = the trial's `--threads` (1 without), `num_gpus` = its
  devices when the cluster has GPUs, and one unit of the custom resource `dlbench_node`, which
  every node offers once: timed trials never overlap on a node, as the local executor runs them
  one at a time. Every trial is timed (every scenario), so none shares a node by
  default; with `--allow-concurrent` a trial with `--threads N` asks for its N cores only and
  may share a node (recorded with the run, as locally). A trial without `--threads` uses every
  core of its node, so it always takes the whole node.
- No retries (`max_retries=0`): a retried trial would be a second timing silently replacing the
  first; a lost worker or node is that trial's failure, with the cause.
- The float64 parity reference is computed (or read from the cache) on the driver, once per
  sweep: it does not depend on the node, and every trial is judged against the same numbers.
  The driver needs the reference framework (JAX or torch) installed; without it, parity is
  n/a with that reason, as locally.
- The matmul ceiling and the memory bandwidth are properties of a machine: each task reads its
  node's cache (measuring them once per node and thread count) after its trial, while it still
  holds the node.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlbench.results.records import TrialResult
from dlbench.results.store import Store
from dlbench.runner import bandwidth, ceiling, spawn
from dlbench.runner.executor import Outcome, Progress, finish, references, settled, warm_import, warm_marker
from dlbench.runner.plan import PlannedTrial, with_ids
from dlbench.runner.protocol import parity_path
from dlbench.runner.verdicts import Ceilings
from dlbench.spec import TrialSpec, to_dict, trial_from_dict

# Every node offers one unit; a trial that must not share its node asks for it.
NODE_RESOURCE = "dlbench_node"
# The local instance's shared-memory object store: results and gradient files only (a full
# ResNet-18's float32 gradients are 45 MB); 512 MiB, not Ray's default of 30 % of the RAM.
LOCAL_OBJECT_STORE_BYTES = 2**29
# After Ctrl-C, how long cancelled tasks get to kill their workers' process groups.
CANCEL_WAIT_S = 10.0
ERROR_TEXT_CHARS = 2000

# Ray's exceptions by class name, most specific first: the mapping stays importable (and
# testable) where Ray is not installed. (status, what happened to the trial)
FAILURES: tuple[tuple[str, str, str], ...] = (
    ("TaskCancelledError", "interrupted", "its Ray task was cancelled"),
    ("OutOfMemoryError", "oom", "Ray's memory monitor killed the task's worker (node memory over"
                                " its threshold)"),
    ("NodeDiedError", "crashed", "the Ray node running it died"),
    ("OwnerDiedError", "crashed", "the driver that owned its Ray task died"),
    ("WorkerCrashedError", "crashed", "the Ray worker process running it died"),
    ("ObjectLostError", "crashed", "its result was lost with the node that held it"),
    ("RayTaskError", "failed", "its Ray task raised"),
    ("RayError", "failed", "Ray failed"),
)


Tasks = dict[Any, tuple[int, PlannedTrial, TrialSpec]]  # Ray ObjectRef -> the trial it runs


class ClusterError(Exception):
    """Ray cannot be started or reached; the message is one line saying why."""


@dataclass(frozen=True)
class Cluster:
    """Where trials go: a local Ray instance (address None) or an existing cluster."""

    address: str | None = None  # "auto", "ray://HOST:10001", "HOST:6379"
    share_nodes: bool = False  # --allow-concurrent: trials with --threads may share a node


def task_options(trial: TrialSpec, cluster: Cluster, cluster_gpus: float) -> dict[str, Any]:
    """What one trial asks of the cluster (see the module docstring)."""
    options: dict[str, Any] = {
        "num_cpus": trial.policy.threads or 1,
        "num_gpus": trial.devices if cluster_gpus > 0 else 0,
        "max_retries": 0,
        "retry_exceptions": False,
    }
    if not (cluster.share_nodes and trial.policy.threads is not None):
        options["resources"] = {NODE_RESOURCE: 1}
    return options


def infeasible(options: dict[str, Any], nodes: list[dict[str, Any]]) -> str | None:
    """Why no live node can ever run a task with these options, or None when one can."""
    wanted = {"CPU": options["num_cpus"], "GPU": options["num_gpus"], **options.get("resources", {})}
    wanted = {k: v for k, v in wanted.items() if v}
    for node in nodes:
        have = node.get("Resources", {})
        if node.get("Alive") and all(have.get(k, 0) >= v for k, v in wanted.items()):
            return None
    hint = (f" (start every node with `ray start ... --resources '{{\"{NODE_RESOURCE}\": 1}}'`)"
            if NODE_RESOURCE in wanted else "")
    asked = ", ".join(f"{k} {v:g}" for k, v in wanted.items())
    return f"no live node of the Ray cluster offers {asked}{hint}"


def failure_result(exc: BaseException) -> TrialResult:
    """A trial whose task did not return: its status and cause from what Ray raised."""
    names = {c.__name__ for c in type(exc).__mro__}
    status, why = next(((s, w) for name, s, w in FAILURES if name in names),
                       ("failed", "the Ray executor failed"))
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    # A task's own exception ends its text (after the remote traceback); Ray's errors open theirs.
    detail = (lines[-1] if "RayTaskError" in names else lines[0]) if lines else type(exc).__name__
    result = TrialResult(status=status, error=f"{why}: {detail}")
    if len(lines) > 1:
        result.notes["ray_error"] = "\n".join(lines)[-ERROR_TEXT_CHARS:]
    return result


# --- on the node -------------------------------------------------------------------------


def run_on_node(trial_json: str) -> dict[str, Any]:
    """The Ray task: the trial in a fresh worker process on this node. Returns the result as
    JSON, the fixed-batch gradients file's bytes (the driver judges parity) and this node's
    matmul ceiling and memory bandwidth for the trial's thread count."""
    trial = trial_from_dict(json.loads(trial_json))
    started_at = time.time()
    if not warm_marker(trial.framework).exists():
        warm_import(trial.framework, lambda _: None)
    workdir = Path(tempfile.mkdtemp(prefix="dlbench-ray-"))
    try:
        result = spawn.run_trial(trial, workdir)
        grads = parity_path(spawn.out_path_for(trial, workdir))
        grads_bytes = grads.read_bytes() if grads.exists() else None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    threads = len(result.policy_effective.get("cores") or []) or len(os.sched_getaffinity(0))
    ceilings = (Ceilings({threads: ceiling.ceiling(threads)}, {threads: bandwidth.bandwidth(threads)})
                if result.status == "ok" else Ceilings())
    return {"result": result.to_json(), "grads": grads_bytes, "ceilings": ceilings,
            "host": socket.gethostname(), "node_id": _node_id(), "started_at": started_at}


def _node_id() -> str:
    import ray

    node_id: str = ray.get_runtime_context().get_node_id()
    return node_id


# --- on the driver -----------------------------------------------------------------------


@contextlib.contextmanager
def connected(cluster: Cluster) -> Iterator[None]:
    """Ray for the length of a sweep: a local instance (dashboard off, this machine's cores,
    logs quiet) shut down at the end, or the cluster at `address`. A session
    this process already has (an embedding caller's, a test's) is used and left running."""
    import ray

    if ray.is_initialized():
        yield
        return
    # Offline machines: no usage-statistics upload attempt.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
    if cluster.address is None:
        # No `_node_ip_address="127.0.0.1"`: Ray 2.60 on Linux replaces a loopback address with
        # the machine's (services.resolve_ip_for_localhost) and its gRPC servers listen on every
        # interface whatever it is given (seen with `ss -ltnp`); its token authentication, on by
        # default, is what guards those ports (docs/cluster.md).
        kwargs.update(num_cpus=len(os.sched_getaffinity(0)), resources={NODE_RESOURCE: 1},
                      include_dashboard=False, object_store_memory=LOCAL_OBJECT_STORE_BYTES)
    else:
        kwargs["address"] = cluster.address
    try:
        ray.init(**kwargs)
    except Exception as e:  # Ray raises ConnectionError, RuntimeError, ValueError, ...
        where = f"the Ray cluster at {cluster.address}" if cluster.address else "a local Ray instance"
        first = next((line for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise ClusterError(f"cannot connect to {where}: {first}") from None
    try:
        yield
    finally:
        ray.shutdown()


def execute(store: Store, run_id: int, trials: list[tuple[int, PlannedTrial]],
            progress: Progress, cluster: Cluster) -> Outcome:
    """Run the pending trials as Ray tasks (inside `connected`); store each as it finishes."""
    import ray

    outcome, pending = settled(trials)
    if not pending:
        return outcome
    refs = references([p.spec for _, p in pending], progress.message)
    tasks = _submit(store, run_id, pending, cluster, progress, outcome)
    tmp = Path(tempfile.mkdtemp(prefix="dlbench-run-"))
    done = 0
    try:
        while tasks:
            [ref], _ = ray.wait(list(tasks), num_returns=1)
            tid, planned, spec = tasks.pop(ref)
            result, grads, ceilings = _collect(store, tid, ref, tmp)
            finish(store, tid, spec, result, grads, refs, ceilings, outcome)
            progress.trial_started(done, len(pending), planned)
            progress.trial_finished(done, len(pending), planned, result)
            done += 1
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP made one by the CLI
        _interrupt(store, tasks, str(e) or "SIGINT", outcome)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return outcome



def _submit(store: Store, run_id: int, pending: list[tuple[int, PlannedTrial]], cluster: Cluster,
            progress: Progress, outcome: Outcome) -> Tasks:
    """Every pending trial a task, in the plan's order; one no node can run fails now."""
    import ray

    remote = ray.remote(run_on_node)
    nodes = ray.nodes()
    gpus = float(ray.cluster_resources().get("GPU", 0))
    tasks: Tasks = {}
    for tid, planned in pending:
        spec = with_ids(planned.spec, run_id, tid)
        options = task_options(spec, cluster, gpus)
        why = infeasible(options, nodes)
        if why is not None:
            store.finish_trial(tid, TrialResult(status="failed", error=why))
            outcome.count("failed")
            continue
        tasks[remote.options(**options).remote(json.dumps(to_dict(spec)))] = (tid, planned, spec)
    alive = [n for n in nodes if n.get("Alive")]
    progress.message(f"submitted {len(tasks)} trial(s) to the Ray cluster: {len(alive)} node(s),"
                     f" {sum(n['Resources'].get('CPU', 0) for n in alive):g} CPUs, {gpus:g} GPUs")
    return tasks


def _collect(store: Store, tid: int, ref: Any, tmp: Path) -> tuple[TrialResult, Path, Ceilings]:
    """The finished task's result (or its failure), the gradients file written where the
    driver's parity judge reads it, the node's ceilings. The worker's pid is the node's: it goes
    into the notes with the node, never into the pid column `--resume` would kill."""
    import ray

    grads_path = tmp / f"trial-{tid}.grads.npz"
    try:
        out = ray.get(ref)
    except Exception as e:  # every way a task fails: mapped to the trial's status and cause
        return failure_result(e), grads_path, Ceilings()
    result = TrialResult.from_dict(json.loads(out["result"]))
    address = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == out["node_id"]), "?")
    result.notes["ray_node"] = f"{out['host']} ({address}, node {out['node_id'][:12]})"
    if result.pid is not None:
        result.notes["node_worker_pid"] = str(result.pid)
    result.pid = None
    store.mark_running(tid, started_at=out["started_at"])
    if out["grads"] is not None:
        grads_path.write_bytes(out["grads"])
    return result, grads_path, out["ceilings"]


def _interrupt(store: Store, tasks: Tasks, signal_name: str, outcome: Outcome) -> None:
    """Ctrl-C: cancel every task (a running one gets KeyboardInterrupt, so spawn kills its
    worker's group), give them a moment, mark every unfinished trial `interrupted`."""
    import ray

    for ref in tasks:
        ray.cancel(ref)
    with contextlib.suppress(Exception):
        ray.wait(list(tasks), num_returns=len(tasks), timeout=CANCEL_WAIT_S)
    for tid, _, _ in tasks.values():
        store.finish_trial(tid, TrialResult(status="interrupted", error=f"interrupted by {signal_name}"
                                            " to dlbench; its Ray task was cancelled"))
        outcome.count("interrupted")
    outcome.interrupted = True

