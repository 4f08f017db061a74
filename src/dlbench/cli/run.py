"""`dlbench run`: plan a sweep (options, a suite file, or both), run each trial in a fresh
process, store, print the tables; `--resume` finishes a stored run."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import random
import shlex
import time
import typing
from collections.abc import Iterator
from typing import Any

from rich.console import Console

from dlbench import backends, processes
from dlbench.analysis import repeats
from dlbench.backends import installed, registered
from dlbench.cli import quiet, suite
from dlbench.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARITY_FAILED,
    EXIT_TRIALS_FAILED,
    UsageError,
    add_store_argument,
    ascii_number,
    comma_list,
    int_list,
    open_store,
    order_seed,
    run_selector,
    size_argument,
    workload_names,
)
from dlbench.report.model import spec_label, varying_axes
from dlbench.report.scenarios import progress_line
from dlbench.report.terminal import make_console, print_run_tables
from dlbench.results import environment
from dlbench.results.records import FAILURE_STATUSES, TrialResult
from dlbench.results.store import Store, StoreError, lock_path, machine_lock
from dlbench.runner import executors, resume, rounds, tune
from dlbench.runner.executor import Outcome, Progress, RunTrials, finish_run, register, warm_imports
from dlbench.runner.executors import EXECUTORS
from dlbench.runner.protocol import CHUNK, PHASE_NAME, STEPS, event_kind
from dlbench.runner.plan import Costs, Plan, PlannedTrial, Sweep, at_load, estimates, learn, make_plan
from dlbench.spec import OPTIONS, SCENARIOS, ScenarioOptions, SolveOptions, SpecError, to_dict
from dlbench.text import printable

# The scenario options' command-line destinations -> (options dataclass, its field), built from
# the fields' own flags (spec.option): `--load` is `load`, InferOptions.infer_load. Their
# defaults and help are the dataclasses', declared nowhere else. A field whose flag another
# options type declares (`shared`: generate's `--load` and `--qps`) takes the same value
# (_scenario_options) and is not listed here.
SCENARIO_OPTION_FLAGS: dict[str, tuple[type[ScenarioOptions], str]] = {
    f.metadata["flag"].removeprefix("--").replace("-", "_"): (kind, f.name)
    for kind in OPTIONS.values() for f in dataclasses.fields(kind) if not f.metadata.get("shared")}
# Every sweep option's default. The parser's defaults are None, so that an option given on the
# command line can be told from one left out: command line > suite file > these.
SWEEP_DEFAULTS: dict[str, Any] = {
    "workload": ("cnn",), "framework": None, "batch_size": (), "mode": ("compiled",),
    "precision": ("fp32",), "scenario": ("train",), "devices": (1,), "scaling": "weak", "seed": (0,), "repeats": 3,
    "preset": "cpu", "epochs": None, "warmup_epochs": None, "dataset_size": None,
    "chunk_steps": 16, "threads": None, "compile_cache": "cold", "timeout": 1800.0, "quiet_wait": None,
    "memory_limit": None, "allow_concurrent": False, "order_seed": None, "option": (),
    **{dest: getattr(kind(), name) for dest, (kind, name) in SCENARIO_OPTION_FLAGS.items()},
    "data": ("pipeline",), "rollout": ("default",), "loader_workers": 0, "augment": "none",
    "executor": "local", "address": None, "profile": False,
}
# Options that say how to run, not what: --resume takes them too.
HOW_OPTIONS = ("allow_concurrent", "executor", "address")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run a sweep (default: cnn x torch,tensorflow,jax, compiled)")
    p.add_argument("suite", nargs="?", metavar="SUITE",
                   help="a suite file (TOML, keys as these options; given options override it)")
    _add_sweep_arguments(p)
    p.add_argument("--option", type=comma_list("option"), action="append", metavar="FRAMEWORK.NAME=VALUE",
                   help="a framework's own option, e.g. onnxruntime.optimization=basic (dlbench list"
                        " shows each framework's options; repeatable, or a comma list); part of that framework's"
                        " policy")
    for kind in OPTIONS.values():  # each scenario's options, flag and help beside their fields
        hints = typing.get_type_hints(kind)
        for f in dataclasses.fields(kind):
            if not f.metadata.get("shared"):  # a shared flag is declared by its other options type
                p.add_argument(f.metadata["flag"], type=_flag_type(hints[f.name]),
                               help=f.metadata["help"].format(default=_shown(f.default)))
    _add_run_arguments(p)
    add_store_argument(p)


def _flag_type(hint: Any) -> Any:
    """argparse's type for an option field's annotation: its type less None (a str: none); a
    number in ASCII digits only (Python's int() and float() read other scripts' digits, and
    float() "inf" and "nan": the options' own validation says what range is allowed)."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    return None if kinds[0] is str else ascii_number(kinds[0])


def _shown(default: Any) -> str:
    """A default as help shows it: 20 and 0.001 for 20.0 and 1e-3."""
    return f"{default:g}" if isinstance(default, float) else str(default)


def _add_sweep_arguments(p: argparse.ArgumentParser) -> None:
    """The sweep's axes, sizes and limits."""
    p.add_argument("-w", "--workload", type=comma_list("workload"), help="workloads, or all (default: cnn)")
    p.add_argument("-f", "--framework", type=comma_list("framework"),
                   help="frameworks, or all (default: torch,tensorflow,jax; missing ones are skipped"
                        " with a note)")
    p.add_argument("-b", "--batch-size", type=int_list("batch size"), help="default: the preset's")
    p.add_argument("--mode", type=comma_list("mode"), help="eager, graph, compiled (default: compiled)")
    p.add_argument("--precision", type=comma_list("precision"),
                   help="fp32, tf32, bf16, fp16, int8 (generate only) (comma list; default fp32; dlbench list shows"
                        " what runs here)")
    p.add_argument("--scenario", type=comma_list("scenario"), help=f"{', '.join(SCENARIOS)} (rollout: RL"
                   f" workloads; {SolveOptions.SCENARIO}: ODE problems) (default: train)")
    p.add_argument("--devices", type=int_list("devices"),
                   help="data-parallel devices per trial, e.g. 1,2,4 (default: 1)")
    p.add_argument("--scaling", help="with --devices: weak (batch per device, the default) or strong"
                                     " (the batch is the global batch)")
    p.add_argument("--seed", type=int_list("seed"), help="default: 0")
    p.add_argument("--repeats", metavar="N|auto[:PCT%][,min=N][,max=N][,time=T]",
                   help="fresh processes per configuration, interleaved in rounds (default: 3); auto:"
                        " rounds until every headline interval is within PCT (default 5%%), the"
                        " comparisons between frameworks are decided, or the budget (max=20 repeats,"
                        " time=30min) is spent, e.g. auto:3%%,max=20")
    p.add_argument("--order-seed", type=order_seed,
                   help="seed of the shuffle within each round (default: drawn and recorded with the run)")
    p.add_argument("--preset", help="workload size preset: tiny, cpu, gpu, or a workload's own such as"
                                    " published and published-tiny (dlbench list; default: cpu)")
    p.add_argument("--epochs", type=ascii_number(int), help="timed epochs (default: preset's)")
    p.add_argument("--warmup-epochs", type=ascii_number(int), help="untimed epochs (default: preset's)")
    p.add_argument("--dataset-size", type=ascii_number(int),
                   help="training samples per epoch (default: the preset's; incomplete last batches are dropped)")
    p.add_argument("--chunk-steps", type=ascii_number(int), help="steps between syncs in the timed window (default: 16)")
    p.add_argument("--threads", type=ascii_number(int), help="pin each trial to N cores")
    p.add_argument("--compile-cache", help="cold (fresh per trial, the default) or warm")
    p.add_argument("--timeout", type=ascii_number(float), help="seconds per trial (default: 1800)")
    quiet.add_argument(p)
    p.add_argument("--memory-limit", type=size_argument, metavar="SIZE",
                   help="kill a trial whose process tree RSS exceeds this (e.g. 8GiB): status oom")


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The input pipeline and rollout axes, the profiled trials, and how and where to run."""
    p.add_argument("--rollout", type=comma_list("rollout"),
                   help="RL workloads: where the rollout runs: host (a Python loop of steps), fused (one compiled"
                        " program), default (fused where the mode compiles and the framework can), or several")
    p.add_argument("--data", type=comma_list("data placement"),
                   help="pipeline (the framework's loader), device (whole dataset on the device), or both")
    p.add_argument("--loader-workers", type=ascii_number(int),
                   help="input pipeline workers: DataLoader num_workers, tf.data parallel calls,"
                        " a thread pool for JAX (default 0: the training thread)")
    p.add_argument("--augment", help="none or crop_flip (pad-4 random crop + flip; image workloads)")
    p.add_argument("--profile", action="store_true", default=None,
                   help="add one profiled trial per train or infer configuration (the framework's own profiler;"
                        " never in the statistics; traces kept in <store>.profiles/)")
    p.add_argument("--allow-concurrent", action="store_true", default=None,
                   help="do not wait for another dlbench run on this machine (recorded)")
    p.add_argument("--executor", choices=EXECUTORS,
                   help="local (one trial at a time, the default) or ray (each trial a Ray task;"
                        " docs/cluster.md)")
    p.add_argument("--address", metavar="ADDR",
                   help="with --executor ray: the cluster (auto, ray://HOST:10001); default: a"
                        " local Ray instance for this run")
    p.add_argument("--resume", nargs="?", const="", metavar="RUN", type=resume_selector,
                   help="finish a stored run (default: the latest unfinished one): re-run its"
                        " pending, running and interrupted trials")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: re-run failed, crashed, timed-out and oom trials too")
    p.add_argument("--wide", action="store_true",
                   help="print the final tables at their full width, whatever the terminal's")


def resume_selector(text: str) -> str:
    """--resume's RUN; "" (argparse passes the const through the type too) is the default: the
    newest run with something to re-run."""
    return text if text == "" else run_selector(text)


def sweep_options(args: argparse.Namespace) -> dict[str, Any]:
    """Command line over suite file over defaults."""
    given = {k: getattr(args, k) for k in SWEEP_DEFAULTS if getattr(args, k) is not None}
    if "option" in given:  # --option is repeatable, each a comma list: one list of them all
        given["option"] = tuple(text for texts in given["option"] for text in texts)
    from_file = suite.load(args.suite) if args.suite is not None else {}
    return {**SWEEP_DEFAULTS, **from_file, **given}


def parse_option(text: str) -> tuple[str, str, str]:
    """`FRAMEWORK.NAME=VALUE` -> (framework, name, value); the framework checks name and value."""
    target, sep, value = text.partition("=")
    framework, dot, name = target.rpartition(".")
    if not sep or not dot or not framework or not name or not value:
        raise UsageError(f"option {text!r} is not of the form FRAMEWORK.NAME=VALUE"
                         " (e.g. onnxruntime.optimization=basic)")
    return framework.strip(), name.strip(), value.strip()


def repeat_rule(o: dict[str, Any]) -> repeats.RepeatRule:
    """--repeats (or the suite's `repeats`): a count or the auto rule; one line when bad."""
    try:
        return repeats.parse(o["repeats"])
    except repeats.RepeatsError as e:
        raise UsageError(str(e)) from None


def _scenario_options(o: dict[str, Any], kind: type[ScenarioOptions]) -> dict[str, Any]:
    """The options of one scenario options type, by its field names: each field takes its
    flag's value (a shared flag's too)."""
    return {f.name: o[f.metadata["flag"].removeprefix("--").replace("-", "_")] for f in dataclasses.fields(kind)}


def sweep_from_options(o: dict[str, Any]) -> Sweep:
    cores = len(os.sched_getaffinity(0))
    if o["threads"] is not None and not 1 <= o["threads"] <= cores:
        raise UsageError(f"threads {o['threads']} is not between 1 and the {cores} cores available")
    every_framework = o["framework"] == ("all",)
    for name in () if every_framework else o["framework"] or ():
        backends.check(name)  # a plugin's framework that is broken or clashes: one line, exit 2
    return Sweep(
        workloads=workload_names(o["workload"]),
        frameworks=tuple(registered()) if every_framework else o["framework"] or Sweep.frameworks,
        # `-f all`: every registered framework, the ones not installed skipped with a note
        frameworks_explicit=o["framework"] is not None and not every_framework,
        workloads_explicit=o["workload"] != ("all",),
        modes=o["mode"], batch_sizes=o["batch_size"], seeds=o["seed"],
        precisions=o["precision"], scenarios=o["scenario"], devices=o["devices"], scaling=o["scaling"],
        repeats=repeat_rule(o).first, preset=o["preset"], dataset_size=o["dataset_size"],
        epochs=o["epochs"], warmup_epochs=o["warmup_epochs"], chunk_steps=o["chunk_steps"],
        threads=o["threads"], compile_cache=o["compile_cache"], timeout_s=o["timeout"],
        memory_limit_bytes=o["memory_limit"], quiet_wait_s=quiet.wait_s(o["quiet_wait"]),
        scenario_options=tuple(kind(**_scenario_options(o, kind)) for kind in OPTIONS.values()),
        options=tuple(parse_option(text) for text in o["option"]),
        data=o["data"], rollouts=o["rollout"], loader_workers=o["loader_workers"], augment=o["augment"],
        profile=bool(o["profile"]),
        order_seed=o["order_seed"] if o["order_seed"] is not None else random.randrange(2**31),

    )


def plan_from_options(options: dict[str, Any], suite_path: str | None) -> Plan:
    """The validated plan; an error the suite file's own checks cannot see (a batch larger than
    the data set, a framework not installed) names the file too."""
    sweep = sweep_from_options(options)
    try:
        return make_plan(sweep)
    except SpecError as e:
        if suite_path is None:
            raise
        raise SpecError(f"{suite_path}: {e}") from None


def plan_from_args(args: argparse.Namespace) -> Plan:
    return plan_from_options(sweep_options(args), args.suite)


class ConsoleProgress(Progress):
    """One line per trial start and end, and the current phase redrawn at most once a second
    on a terminal."""

    def __init__(self, console: Console, plan: Plan) -> None:
        self.console = console
        self.live = console.is_terminal
        self._last_draw = 0.0
        self._label = ""
        self._steps = 0
        self._drawn = 0  # characters of the last live line, blanked by the next
        self._axes = varying_axes([to_dict(p.spec) for p in plan.trials])

    def message(self, text: str) -> None:
        self.console.print(printable(text), style="dim")

    def trial_started(self, index: int, total: int, planned: PlannedTrial) -> None:
        self._label = f"[{index + 1}/{total}] {spec_label(to_dict(planned.spec), self._axes)}"
        self._steps = 0
        self.console.print(printable(f"{self._label} ..."), highlight=False)

    def event(self, event: dict[str, Any]) -> None:
        if event_kind(event) == CHUNK:
            self._steps += int(event.get(STEPS, 0))
        if not self.live or time.monotonic() - self._last_draw < 1.0:
            return
        self._last_draw = time.monotonic()
        phase = event.get(PHASE_NAME, event_kind(event))
        line = printable(f"  {phase} {'(' + str(self._steps) + ' timed steps)' if self._steps else ''}")
        # padded over the last line: a shorter phase must not leave the end of a longer one
        self.console.print(line.ljust(self._drawn), end="\r", highlight=False)
        self._drawn = len(line)

    def trial_finished(self, index: int, total: int, planned: PlannedTrial, result: TrialResult) -> None:
        if result.status == "ok":
            text = progress_line(to_dict(planned.spec), result.metrics)
        else:
            text = f"{result.status}: {result.error}"
        self.console.print(printable(f"{self._label} {text}"), highlight=False)  # errors echo the environment


def busy_machine(load: float | None = None, cores: int | None = None) -> tuple[float, str] | None:
    """(how much longer trials will take, why) where more processes want the CPU than it has
    cores: the trials then share it, and their wall time stretches by about the load average
    over the cores (a tiny run estimated 1.9 min took 11.3 at a load of 12 on 2 cores); None on
    a machine with cores to spare."""
    load = os.getloadavg()[0] if load is None else load
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    if load <= cores:
        return None
    return load / cores, f"load average {load:.1f} on {cores} cores"


def print_plan(console: Console, plan: Plan, costs: Costs) -> None:
    pending = plan.pending
    estimated = estimates([t.spec for t in pending], costs)
    total = sum(s for s, _ in estimated)
    sources = {src for _, src in estimated}
    source = ("from earlier trials in the store" if sources == {"store"} else
              "from the store's trials of the same kinds" if sources <= {"store", "similar"} else
              "rough: start-up and compile guesses per framework, compute from FLOPs; later runs learn from the store")
    others = len(plan.trials) - len(pending)
    loaded = busy_machine()
    # only first guesses stretch with the load: the store's times already hold theirs (at_load)
    at_present = sum(at_load(s, src, loaded[0]) for s, src in estimated) if loaded else total
    console.print(f"dlbench: {len(pending)} trial(s) to run"
                  + (f" ({others} unsupported or skipped)" if others else "")
                  + f", estimated {total / 60:.1f} min ({source})"
                  + (f"; at the present load ({loaded[1]}) about {at_present / 60:.1f} min"
                     if loaded and at_present != total else ""),
                  highlight=False)
    for note in plan.notes:
        console.print(printable(f"  note: {note}"), highlight=False)
    for line in not_run_lines(plan):
        console.print(printable(f"  {line}"), highlight=False)


def not_run_lines(plan: Plan) -> list[str]:
    """`cnn/onnxruntime/compiled: unsupported: why` once per configuration, not per repeat
    (with how many trials it stands for)."""
    axes = varying_axes([to_dict(t.spec) for t in plan.trials])
    said: dict[str, int] = {}
    for t in plan.trials:
        if t.status != "pending":
            label = spec_label(to_dict(t.spec), axes).rsplit(" #", 1)[0]
            key = f"{label}: {t.status}: {t.reason}"
            said[key] = said.get(key, 0) + 1
    return [key if n == 1 else f"{key} ({n} trials)" for key, n in said.items()]


def main(args: argparse.Namespace) -> int:
    if args.resume is not None:
        return resume_main(args)
    if args.retry_failed:
        raise UsageError("--retry-failed goes with --resume [RUN]: it re-runs a stored run's failed trials")
    measuring = quiet.measure()  # other processes' CPU, measured while the sweep is planned
    options = sweep_options(args)
    plan = plan_from_options(options, args.suite)
    try:
        check_executor(options)
    except UsageError as e:  # named like plan_from_options's errors: the value may be the file's
        if args.suite is None:
            raise
        raise UsageError(f"{args.suite}: {e}") from None
    allow_concurrent = bool(options["allow_concurrent"])
    console = make_console()
    # Closed on every way out: a SIGTERM while waiting for the lock leaves no -wal/-shm behind.
    with contextlib.closing(open_store(args.store)) as store, processes.stop_signals_interrupt():
        print_plan(console, plan, learn(store.trial_costs()))
        machine = environment.capture(installed())  # while other processes' CPU is measured
        machine["preflight"] = quiet.record_preflight(console, measuring, options["threads"])
        progress = ConsoleProgress(console, plan)
        rule = repeat_rule(options)
        if rule.auto:
            budget = f"{rule.max_repeats} rounds" + (f" or {rule.max_time_s / 60:g} min" if rule.max_time_s else "")
            console.print(f"  repeats {rule.label}: the first {rule.first} round(s), then one round at a time until every"
                          f" headline interval is within ±{rule.target:.0%}, the frameworks' comparisons are decided,"
                          f" or {budget}", highlight=False, soft_wrap=True)
        with held_machine_lock(allow_concurrent, console), executor(options, bool(plan.pending)) as run_trials:
            # as text SQLite can hold: bytes that were not UTF-8 are kept as visible escapes
            command = printable("dlbench " + shlex.join(args.argv))
            state = rounds.AutoState(rule.label)
            run_id = store.create_run(command, machine, allow_concurrent,
                                      order_seed=plan.order_seed, repeats=state.to_dict())
            try:
                planned = register(store, run_id, plan)
                if plan.pending:
                    warm_imports(plan, progress)
                if rule.auto:
                    outcome = rounds.run_rounds(store, run_id, rule, state, planned, run_trials, progress)
                else:
                    outcome = run_trials(store, run_id, planned, progress)
            except KeyboardInterrupt as e:  # before a trial ran: warm imports, reference, floor, ceiling
                outcome = interrupted_between_trials(console, e)
            finish_run(store, run_id, outcome.interrupted)
        return _report(console, store, run_id, args, outcome)


def resume_main(args: argparse.Namespace) -> int:
    given = [k for k in SWEEP_DEFAULTS if k not in HOW_OPTIONS and getattr(args, k) is not None]
    if args.suite is not None or given:
        what = args.suite if args.suite is not None else "--" + given[0].replace("_", "-")
        raise UsageError(f"--resume runs a stored run's own trials; it takes no suite file or sweep"
                         f" option (got {what})")
    how = {k: SWEEP_DEFAULTS[k] if getattr(args, k) is None else getattr(args, k) for k in HOW_OPTIONS}
    check_executor(how)
    with contextlib.closing(open_store(args.store, readonly=True)) as peek:  # refused: nothing written, no migration
        searches = _check_resumed(peek, args.resume, args.store)
    console = make_console()
    with contextlib.closing(open_store(args.store, must_exist=True)) as store, processes.stop_signals_interrupt():
        with held_machine_lock(bool(args.allow_concurrent), console):
            run_id = resume.select_run(store, args.resume, args.retry_failed)
            if run_id is None:
                console.print(printable(f"dlbench: nothing to resume: no run in {args.store} has"
                                        f" {_resumable_words(args.retry_failed)} trials{searches}"), highlight=False,
                              soft_wrap=True)
                return EXIT_OK
            resumption = resume.prepare(store, run_id, args.retry_failed)
            auto = rounds.state_of(store, run_id)
            going_on = auto is not None and auto[1].stop is None
            if not resumption.trials and not going_on:
                console.print(f"dlbench: run {run_id} has no {_resumable_words(args.retry_failed)}"
                              " trials; nothing to resume", highlight=False)
                return EXIT_OK
            _print_resumption(console, resumption)
            plan = Plan(trials=[p for _, p in resumption.trials])
            print_plan(console, plan, learn(store.trial_costs()))
            progress = ConsoleProgress(console, plan)
            try:
                warm_imports(_first_round(store, run_id) if going_on else plan, progress)
                with executor(how, True) as run_trials:
                    if auto is not None and going_on:
                        console.print(f"  repeats {auto[0].label}: continuing after round {auto[1].rounds}",
                                      highlight=False)
                        outcome = rounds.run_rounds(store, run_id, *auto, resumption.trials, run_trials, progress)
                    else:
                        outcome = run_trials(store, run_id, resumption.trials, progress)
            except KeyboardInterrupt as e:  # before a trial ran: warm imports, reference, floor, ceiling
                outcome = interrupted_between_trials(console, e)
            finish_run(store, run_id, outcome.interrupted)
        return _report(console, store, run_id, args, outcome)


def _check_resumed(store: Store, selector: str, path: str) -> str:
    """The run `--resume` names, checked before the store is opened for writing: one line where
    it is not one run or is a tune search (`tune --resume` finishes that: its rounds, budget and
    verdicts are the search's); for the default (the newest), what it leaves to `tune --resume`."""
    searches = tune.resumable_runs(store)
    if not selector:
        return (f"; the search of run {searches[0]} was interrupted: finish it with: dlbench tune --resume"
                f" {searches[0]} --store {shlex.quote(path)}") if searches else ""
    run_ids = store.resolve_runs(selector)
    if len(run_ids) != 1:
        raise StoreError(f"run {selector!r}: --resume takes one run id or 'latest'")
    if store.run(run_ids[0])["tune"] is not None:
        raise UsageError(f"run {run_ids[0]} is a tune search; finish it with: dlbench tune --resume {run_ids[0]}"
                         f" --store {shlex.quote(path)}")
    return ""


def interrupted_between_trials(console: Console, e: KeyboardInterrupt) -> Outcome:
    """Interrupted where no trial runs (each running trial's own interruption is stored by the
    executor): the run is `interrupted`, its unfinished trials resumable."""
    console.print(f"interrupted by {e or 'SIGINT'} before the next trial started", highlight=False)
    return Outcome(interrupted=True)


@contextlib.contextmanager
def held_machine_lock(allow_concurrent: bool, console: Console) -> Iterator[None]:
    """The machine lock; a stop signal while waiting for it ends the command with a message
    (and exit 130), nothing having run."""
    held = False
    try:
        with machine_lock(allow_concurrent, on_wait=lambda: _waiting(console)):
            held = True
            yield
    except KeyboardInterrupt as e:
        if not held:
            console.print(f"dlbench: interrupted by {e or 'SIGINT'} while waiting for another dlbench run on"
                          f" this machine ({lock_path()}) to finish; nothing ran", highlight=False, soft_wrap=True)
        raise


def _first_round(store: Store, run_id: int) -> Plan:
    """A resumed auto run's frameworks, for the untimed warm imports of its next rounds."""
    return Plan(trials=[PlannedTrial(spec) for spec in rounds.first_round(store, run_id)])


def check_executor(options: dict[str, Any]) -> None:
    """Executor options that cannot work: one line each, before anything starts."""
    if options["executor"] == "local" and options["address"] is not None:
        raise UsageError(f"--address {options['address']} goes with --executor ray (the Ray cluster"
                         " to send trials to); the executor is local")
    if options["executor"] == "ray" and not executors.ray_installed():
        raise UsageError("--executor ray needs Ray, which is not installed: pip install 'dlbench[ray]'")


@contextlib.contextmanager
def executor(options: dict[str, Any], pending: bool) -> Iterator[RunTrials]:
    """The chosen executor's `execute`; Ray's connected to its cluster for the sweep (not when
    nothing is left to run)."""
    name = options["executor"] if pending else "local"
    try:
        with executors.opened(name, options["address"], share_nodes=bool(options["allow_concurrent"])) as run_trials:
            yield run_trials
    except executors.ExecutorError as e:
        raise UsageError(str(e)) from None


def _resumable_words(retry_failed: bool) -> str:
    return ", ".join(resume.statuses(retry_failed))


def _waiting(console: Console) -> None:
    """Who holds the machine-wide lock, and how not to wait (a run beside another times both)."""
    pid = processes.flock_holder(lock_path())
    holder = processes.describe(pid) if pid is not None else "another process"
    console.print(printable(f"waiting for another dlbench run on this machine to finish: {holder} holds"
                            f" {lock_path()}; --allow-concurrent runs now (its timings then share the"
                            " machine, and the run records that)"), highlight=False, soft_wrap=True)


def _print_resumption(console: Console, r: resume.Resumption) -> None:
    if not r.trials:  # an auto run between rounds: its next round is what runs
        console.print(f"dlbench: resuming run {r.run_id}", highlight=False)
        return
    before = ", ".join(f"{n} {status}" for status, n in r.previous.items())
    console.print(printable(f"dlbench: resuming run {r.run_id}: {len(r.trials)} trial(s) to run again"
                            f" ({before})"), highlight=False, soft_wrap=True)
    if r.killed:
        console.print(f"  killed {len(r.killed)} process(es) left by workers of the dead run:"
                      f" {', '.join(map(str, r.killed))}", highlight=False, soft_wrap=True)


def _report(console: Console, store: Store, run_id: int, args: argparse.Namespace, outcome: Outcome) -> int:
    print_run_tables(console, store, [run_id], args.wide)
    store_path = args.store
    store.check_present()  # never "stored" in a file that is gone
    console.print(printable(f"stored as run {run_id} in {store_path}"), highlight=False)
    if outcome.interrupted:
        console.print(printable(f"interrupted: the unfinished trials of run {run_id} are stored; finish"
                                f" them with: dlbench run --resume {run_id} --store {shlex.quote(store_path)}"),
                      highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    if any(s in FAILURE_STATUSES for s in store.statuses(run_id)):
        return EXIT_TRIALS_FAILED
    parity_failed = any((t.data.get("parity") or {}).get("verdict") == "fail" for t in store.trials(run_id))
    return EXIT_PARITY_FAILED if parity_failed else EXIT_OK
