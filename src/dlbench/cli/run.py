"""`dlbench run`: plan a sweep, run each trial in a fresh process, store, print the tables."""

from __future__ import annotations

import argparse
import os
import random
import shlex
import time
from typing import Any

from rich.console import Console

from dlbench import workloads
from dlbench.backends import registered
from dlbench.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARITY_FAILED,
    EXIT_TRIALS_FAILED,
    UsageError,
    add_store_argument,
    comma_list,
    int_list,
    open_store,
)
from dlbench.report.table import make_console, print_run_tables
from dlbench.results import environment
from dlbench.results.records import TrialResult
from dlbench.results.store import machine_lock
from dlbench.runner.executor import Progress, execute, register, warm_imports
from dlbench.runner.plan import Plan, PlannedTrial, Sweep, estimate_s, make_plan


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run a sweep (default: cnn x torch,tensorflow,jax, compiled)")
    p.add_argument("suite", nargs="?", help="a suite file (not supported yet)")
    p.add_argument("-w", "--workload", type=comma_list("workload"), default=("cnn",),
                   help="workloads, or all (default: cnn)")
    p.add_argument("-f", "--framework", type=comma_list("framework"), default=None,
                   help="frameworks, or all (default: torch,tensorflow,jax; missing ones are skipped"
                        " with a note)")
    p.add_argument("-b", "--batch-size", type=int_list("batch size"), default=())
    p.add_argument("--mode", type=comma_list("mode"), default=("compiled",),
                   help="eager, graph, compiled (default: compiled)")
    p.add_argument("--precision", type=comma_list("precision"), default=("fp32",))
    p.add_argument("--scenario", type=comma_list("scenario"), default=("train",),
                   help="train, infer, converge (default: train)")
    p.add_argument("--devices", type=int_list("devices"), default=(1,))
    p.add_argument("--seed", type=int_list("seed"), default=(0,))
    p.add_argument("--repeats", type=int, default=3,
                   help="fresh processes per configuration, interleaved in rounds (default 3)")
    p.add_argument("--order-seed", type=int, default=None,
                   help="seed of the shuffle within each round (default: drawn and recorded with the run)")
    p.add_argument("--preset", default="cpu", help="workload size preset: tiny, cpu, gpu")
    p.add_argument("--epochs", type=int, default=None, help="timed epochs (default: preset's)")
    p.add_argument("--warmup-epochs", type=int, default=None, help="untimed epochs (default: preset's)")
    p.add_argument("--dataset-size", type=int, default=None)
    p.add_argument("--chunk-steps", type=int, default=16, help="steps between syncs in the timed window")
    p.add_argument("--threads", type=int, default=None, help="pin each trial to N cores")
    p.add_argument("--compile-cache", default="cold", help="cold (fresh per trial) or warm")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per trial")
    p.add_argument("--infer-requests", type=int, default=1000,
                   help="infer: batch-1 requests timed, unless the budget runs out first (default 1000)")
    p.add_argument("--infer-budget-s", type=float, default=20.0,
                   help="infer: seconds each timed loop (latency, throughput) may take (default 20)")
    p.add_argument("--ort-optimization", default="all",
                   help="ONNX Runtime graph optimisation: disable, basic, extended, all (default: all)")
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="converge: held-out accuracy to reach (required by --scenario converge)")
    p.add_argument("--eval-every", type=int, default=32,
                   help="converge: steps between evaluations, K (default 32)")
    p.add_argument("--max-steps", type=int, default=2000, help="converge: step budget (default 2000)")
    p.add_argument("--max-time-s", type=float, default=600.0,
                   help="converge: training-time budget in seconds, evaluation excluded (default 600)")
    p.add_argument("--data", type=comma_list("data placement"), default=("pipeline",),
                   help="pipeline (the framework's loader), device (whole dataset on the device), or both")
    p.add_argument("--loader-workers", type=int, default=0,
                   help="input pipeline workers: DataLoader num_workers, tf.data parallel calls,"
                        " a thread pool for JAX (default 0: the training thread)")
    p.add_argument("--augment", default="none",
                   help="none or crop_flip (pad-4 random crop + flip; image workloads)")
    p.add_argument("--allow-concurrent", action="store_true",
                   help="do not wait for another dlbench run on this machine (recorded)")
    add_store_argument(p)


def sweep_from_args(args: argparse.Namespace) -> Sweep:
    if args.suite is not None:
        raise UsageError(f"suite file {args.suite!r}: suite files are not supported yet; use the options")
    cores = len(os.sched_getaffinity(0))
    if args.threads is not None and not 1 <= args.threads <= cores:
        raise UsageError(f"threads {args.threads} is not between 1 and the {cores} cores available")
    every_framework = args.framework == ("all",)
    return Sweep(
        workloads=tuple(workloads.WORKLOADS) if args.workload == ("all",) else args.workload,
        frameworks=tuple(registered()) if every_framework else args.framework or Sweep.frameworks,
        # `-f all`: every registered framework, the ones not installed skipped with a note
        frameworks_explicit=args.framework is not None and not every_framework,
        modes=args.mode, batch_sizes=args.batch_size, seeds=args.seed,
        precisions=args.precision, scenarios=args.scenario, devices=args.devices,
        repeats=args.repeats, preset=args.preset, dataset_size=args.dataset_size,
        epochs=args.epochs, warmup_epochs=args.warmup_epochs, chunk_steps=args.chunk_steps,
        threads=args.threads, compile_cache=args.compile_cache, timeout_s=args.timeout,
        infer_requests=args.infer_requests, infer_budget_s=args.infer_budget_s,
        ort_optimization=args.ort_optimization,
        data=args.data, loader_workers=args.loader_workers, augment=args.augment,
        target_accuracy=args.target_accuracy, eval_every=args.eval_every, max_steps=args.max_steps,
        max_time_s=args.max_time_s,
        order_seed=args.order_seed if args.order_seed is not None else random.randrange(2**31),
    )


class ConsoleProgress(Progress):
    """One line per trial start and end, and the current phase redrawn at most once a second
    on a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self._last_draw = 0.0
        self._label = ""
        self._steps = 0

    def message(self, text: str) -> None:
        self.console.print(f"[dim]{text}[/dim]")

    def trial_started(self, index: int, total: int, planned: PlannedTrial) -> None:
        self._label = f"[{index + 1}/{total}] {planned.spec.label()}"
        self._steps = 0
        self.console.print(f"{self._label} ...", highlight=False)

    def event(self, event: dict[str, Any]) -> None:
        if event.get("event") == "chunk":
            self._steps += int(event.get("steps", 0))
        if not self.live or time.monotonic() - self._last_draw < 1.0:
            return
        self._last_draw = time.monotonic()
        phase = event.get("name", event.get("event"))
        self.console.print(f"  {phase} {'(' + str(self._steps) + ' timed steps)' if self._steps else ''}",
                           end="\r", highlight=False)

    def trial_finished(self, index: int, total: int, planned: PlannedTrial, result: TrialResult) -> None:
        m = result.metrics
        if result.status == "ok" and planned.spec.scenario == "infer":
            p50_ms, p99_ms = (1e3 * (m[k] or 0.0) for k in ("latency_p50_s", "latency_p99_s"))
            text = (f"ok: p50 {p50_ms:.3f} ms, p99 {p99_ms:.3f} ms at batch 1,"
                    f" {m['infer_samples_per_s']:.1f} samples/s at batch {m['infer_batch_size']:g}")
        elif result.status == "ok" and planned.spec.scenario == "converge":
            text = (f"ok: {m['accuracy']:.3f} after {m['steps']:.0f} steps, "
                    + (f"target in {m['time_to_target_s']:.1f} s" if m.get("reached_target") else "target not reached")
                    + f" (evaluation {m['eval_s']:.1f} s, not counted)")
        elif result.status == "ok":
            text = (f"ok: {m['samples_per_s']:.1f} samples/s, time to first step "
                    f"{m['time_to_first_step_s']:.1f} s")
        else:
            text = f"{result.status}: {result.error}"
        self.console.print(f"{self._label} {text}", highlight=False)


def print_plan(console: Console, plan: Plan, history: dict[str, float]) -> None:
    pending = plan.pending
    estimates = [estimate_s(t.spec, history) for t in pending]
    total = sum(s for s, _ in estimates)
    source = "from earlier trials in the store" if estimates and all(h for _, h in estimates) else "rough"
    others = len(plan.trials) - len(pending)
    console.print(f"dlbench: {len(pending)} trial(s) to run"
                  + (f" ({others} unsupported or skipped)" if others else "")
                  + f", estimated {total / 60:.1f} min ({source})", highlight=False)
    for note in plan.notes:
        console.print(f"  note: {note}", highlight=False)
    for t in plan.trials:
        if t.status != "pending":
            console.print(f"  {t.spec.label()}: {t.status}: {t.reason}", highlight=False)


def main(args: argparse.Namespace) -> int:
    console = make_console()
    plan = make_plan(sweep_from_args(args))
    store = open_store(args.store)
    print_plan(console, plan, store.durations_by_config())
    progress = ConsoleProgress(console)
    with machine_lock(args.allow_concurrent,
                      on_wait=lambda: console.print("waiting for another dlbench run on this machine to finish")):
        if plan.pending:
            warm_imports(plan, progress)
        command = "dlbench " + shlex.join(args.argv)
        run_id = store.create_run(command, environment.capture(), args.allow_concurrent,
                                  order_seed=plan.order_seed)
        outcome = execute(store, run_id, register(store, run_id, plan), progress)
        status = "interrupted" if outcome.interrupted else ("failed" if outcome.failed else "ok")
        store.finish_run(run_id, status)
    print_run_tables(console, store, [run_id])
    console.print(f"stored as run {run_id} in {args.store}", highlight=False)
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    if outcome.failed:
        return EXIT_TRIALS_FAILED
    return EXIT_PARITY_FAILED if outcome.parity_failures else EXIT_OK
