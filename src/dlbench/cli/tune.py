"""`dlbench tune`: the headroom search (runner/tune.py, analysis/tune.py): for each workload x
framework of the sweep, the default against each declared variant alone, then the best ones
combined, within a stated budget; one stored run, reported like any run plus its headroom tables."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
from typing import Any

from rich.console import Console

from dlbench import processes
from dlbench.analysis import repeats, stats
from dlbench.analysis import tune as tuning
from dlbench.backends import installed
from dlbench.cli import quiet, run
from dlbench.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PARITY_FAILED,
    EXIT_TRIALS_FAILED,
    EXIT_UNDECIDED,
    UsageError,
    add_store_argument,
    ascii_number,
    comma_list,
    int_list,
    open_store,
    order_seed,
    size_argument,
)
from dlbench.report.terminal import make_console, print_run_tables
from dlbench.results import environment
from dlbench.results.records import FAILURE_STATUSES
from dlbench.results.store import Store
from dlbench.runner import resume, tune
from dlbench.runner.executor import execute, finish_run, warm_imports
from dlbench.runner.plan import Costs, Sweep, learn
from dlbench.spec import TrialSpec
from dlbench.text import printable, shown

DEFAULT_BUDGET = "60min"
# The fewest repeats per side at which the exact Mann-Whitney test can reach p < 0.05 (4 + 4:
# p = 0.029; 3 + 3 reach 0.1 at best): with fewer, no candidate can ever be decided faster.
DEFAULT_REPEATS = stats.min_repeats_for_p()
# The sweep options tune takes (the others keep run's defaults): parsed and checked as run's.
TUNE_OPTIONS = ("workload", "framework", "batch_size", "mode", "precision", "preset", "dataset_size", "epochs",
                "warmup_epochs", "chunk_steps", "threads", "timeout", "quiet_wait", "memory_limit", "order_seed",
                "allow_concurrent")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tune", help="search each framework's declared variants for its best setting, within a budget")
    p.add_argument("-w", "--workload", type=comma_list("workload"), help="workloads, or all (default: cnn)")
    p.add_argument("-f", "--framework", type=comma_list("framework"),
                   help="frameworks, or all (default: torch,tensorflow,jax; missing ones are skipped with a note)")
    p.add_argument("-b", "--batch-size", type=int_list("batch size"), help="default: the preset's")
    p.add_argument("--mode", type=comma_list("mode"),
                   help="the default's mode (default: compiled); the framework's other modes are searched as a factor")
    p.add_argument("--precision", type=comma_list("precision"), help="fp32, tf32, bf16, fp16 (default fp32)")
    p.add_argument("--preset", help="workload size preset: tiny, cpu, gpu, ... (default: cpu)")
    p.add_argument("--repeats", metavar="N",
                   help=f"fresh processes per candidate and phase, interleaved in rounds (default: {DEFAULT_REPEATS},"
                        f" the fewest at which a candidate can be decided faster)")
    p.add_argument("--budget", metavar="DURATION",
                   help=f"wall time the search may take, e.g. 90s, 30min, 2h (default: {DEFAULT_BUDGET}): no round"
                        " starts that would end past it")
    p.add_argument("--order-seed", type=order_seed, help="seed of the shuffle within each round (default: drawn and recorded)")
    p.add_argument("--dataset-size", type=ascii_number(int), help="training samples per epoch (default: the preset's)")
    p.add_argument("--epochs", type=ascii_number(int), help="timed epochs (default: preset's)")
    p.add_argument("--warmup-epochs", type=ascii_number(int), help="untimed epochs (default: preset's)")
    p.add_argument("--chunk-steps", type=ascii_number(int), help="steps between syncs in the timed window (default: 16)")
    p.add_argument("--threads", type=ascii_number(int), help="pin each trial to N cores")
    p.add_argument("--timeout", type=ascii_number(float), help="seconds per trial (default: 1800)")
    quiet.add_argument(p)
    p.add_argument("--memory-limit", type=size_argument, metavar="SIZE", help="kill a trial whose RSS exceeds this")
    p.add_argument("--allow-concurrent", action="store_true", default=None,
                   help="do not wait for another dlbench run on this machine (recorded)")
    p.add_argument("--resume", nargs="?", const="", metavar="RUN", type=run.resume_selector,
                   help="finish an interrupted search (default: the latest one): the rest of the round it was in,"
                        " then the search, within what is left of its budget")
    p.add_argument("--wide", action="store_true", help="the final tables at their full width")
    add_store_argument(p)


def _repeats(text: str | None) -> int:
    """--repeats: a whole number (no auto rule: the search's budget is --budget)."""
    if text is None:
        return DEFAULT_REPEATS
    value = text.strip()
    if not (value.isascii() and value.isdigit() and 1 <= int(value) <= repeats.MAX_REPEATS):
        raise UsageError(f"tune --repeats {text!r} is not a whole number from 1 to {repeats.MAX_REPEATS}"
                         " (tune has no auto rule: its budget is --budget)")
    return int(value)


def _budget_s(text: str) -> float:
    seconds = repeats.duration_s(text)
    if seconds is None:
        raise UsageError(f"tune --budget {shown(text)} is not a duration such as 90s, 30min or 2h, up to a week")
    return seconds


def sweep(args: argparse.Namespace) -> tuple[Sweep, dict[str, Any]]:
    """The sweep of the defaults, parsed and checked as `run` does (one line, exit 2)."""
    given = {k: getattr(args, k) for k in TUNE_OPTIONS if getattr(args, k) is not None}
    options = {**run.SWEEP_DEFAULTS, **given, "repeats": 1}
    if len(options["mode"]) != 1:
        raise UsageError(f"tune --mode {','.join(options['mode'])}: give one mode, the default's (tune tries the"
                         " framework's other modes itself)")
    return run.sweep_from_options(options), options


def _run_args(options: dict[str, Any]) -> Any:
    """The arguments that name a cell in a `dlbench run` command (without --mode and --option)."""
    def make(spec: TrialSpec) -> tuple[str, ...]:
        args = ["-w", spec.workload.name, "-f", spec.framework, "--preset", str(options["preset"])]
        if options["batch_size"]:
            args += ["-b", str(spec.workload.batch_size)]
        if spec.precision != "fp32":
            args += ["--precision", spec.precision]
        for key in ("dataset_size", "epochs", "warmup_epochs", "threads"):
            if options[key] is not None:
                args += [f"--{key.replace('_', '-')}", str(options[key])]
        return tuple(args)
    return make


def main(args: argparse.Namespace) -> int:
    if args.resume is not None:
        return resume_main(args)
    measuring = quiet.measure()  # other processes' CPU, measured while the search is planned
    repeat_count = _repeats(args.repeats)
    budget_s = _budget_s(args.budget if args.budget is not None else DEFAULT_BUDGET)
    made, options = sweep(args)
    console = make_console()
    # Everything is checked before the store is opened for writing: a refused search creates no
    # store and migrates none (an older dlbench could no longer read it).
    costs = _costs(args.store)
    loaded = run.busy_machine()
    search = tune.prepare(made, repeat_count, budget_s, costs, _run_args(options), run.SWEEP_DEFAULTS["mode"][0],
                          load=loaded[0] if loaded else 1.0)
    print_search(console, search, costs, loaded[1] if loaded else None)
    if search.state.cells and not search.trials_phase_one:
        least = min(tune.estimate_default_s(search, costs))
        raise UsageError(f"tune --budget {args.budget or DEFAULT_BUDGET} admits no trial: a default alone needs about"
                         f" {repeat_count * least:.0f} s ({repeat_count} repeats, by the estimate above)")
    if not search.state.cells:
        console.print("dlbench tune: nothing to search (every configuration above is skipped or unsupported)",
                      highlight=False)
        return EXIT_OK
    with contextlib.closing(open_store(args.store)) as store, processes.stop_signals_interrupt():
        machine = environment.capture(installed())  # while other processes' CPU is measured
        machine["preflight"] = quiet.record_preflight(console, measuring, options["threads"])
        allow_concurrent = bool(options["allow_concurrent"])
        progress = run.ConsoleProgress(console, tune.candidates_plan(search))
        with run.held_machine_lock(allow_concurrent, console):
            command = printable("dlbench " + shlex.join(args.argv))
            run_id = store.create_run(command, machine, allow_concurrent,
                                      order_seed=made.order_seed, tune=search.state.to_dict())
            try:
                warm_imports(tune.warm_plan(search), progress)
                outcome = tune.run_search(store, run_id, search, execute, progress)
            except KeyboardInterrupt as e:  # between trials: warm imports, the reference
                outcome = run.interrupted_between_trials(console, e)
                search.state.stop = "interrupted"
                store.set_run_tune(run_id, search.state.to_dict())
            finish_run(store, run_id, outcome.interrupted)
        return _report(console, store, run_id, args, outcome.interrupted)


def resume_main(args: argparse.Namespace) -> int:
    """`tune --resume [RUN]`: the search's own settings, nothing else; its unfinished trials
    reset (runner/resume.py), then the search goes on (runner/tune.py: resume_search)."""
    given = [k for k in (*TUNE_OPTIONS, "repeats", "budget") if k != "allow_concurrent" and getattr(args, k) is not None]
    if given:
        raise UsageError(f"--resume goes on with a stored search's own settings; it takes no sweep option"
                         f" (got --{given[0].replace('_', '-')})")
    console = make_console()
    with contextlib.closing(open_store(args.store, readonly=True)) as peek:  # refused: nothing written, no migration
        run_id = _resumed_run(peek, args.resume)
        if run_id is not None:
            tune.rebuild(peek, run_id, Costs())
    if run_id is None:
        console.print(printable(f"dlbench tune: nothing to resume: no search in {args.store} was interrupted"),
                      highlight=False)
        return EXIT_OK
    with contextlib.closing(open_store(args.store, must_exist=True)) as store, processes.stop_signals_interrupt():
        with run.held_machine_lock(bool(args.allow_concurrent), console):
            loaded = run.busy_machine()
            search = tune.rebuild(store, run_id, learn(store.trial_costs()), loaded[0] if loaded else 1.0)
            resumption = resume.prepare(store, run_id, retry_failed=False, search=True)
            state = search.state
            console.print(f"dlbench tune: resuming the search of run {run_id}: {state.spent_s / 60:.1f} of"
                          f" {state.budget_s / 60:g} min spent, {len(resumption.trials)} unfinished trial(s) to run"
                          " again", highlight=False, soft_wrap=True)
            progress = run.ConsoleProgress(console, tune.candidates_plan(search))
            try:
                warm_imports(tune.warm_plan(search), progress)
                outcome = tune.resume_search(store, run_id, search, execute, progress)
            except KeyboardInterrupt as e:  # between trials: warm imports, the reference
                outcome = run.interrupted_between_trials(console, e)
                state.stop = "interrupted"
                store.set_run_tune(run_id, state.to_dict())
            finish_run(store, run_id, outcome.interrupted)
        return _report(console, store, run_id, args, outcome.interrupted)


def _resumed_run(store: Store, selector: str) -> int | None:
    """The run `tune --resume` names (one line where it is not a tune search), or the newest
    search that did not end (None: none)."""
    if not selector:
        found = tune.resumable_runs(store)
        return found[0] if found else None
    run_ids = store.resolve_runs(selector)
    if len(run_ids) != 1:
        raise UsageError(f"run {selector!r}: --resume takes one run id or 'latest'")
    if store.run(run_ids[0])["tune"] is None:
        raise UsageError(f"run {run_ids[0]} is not a tune search; finish a run with: dlbench run --resume {run_ids[0]}")
    return run_ids[0]


def _costs(path: str) -> Costs:
    """What the store's earlier trials say of run times, read without writing (none where the
    store does not exist yet)."""
    if not os.path.exists(path):
        return learn([])
    with contextlib.closing(open_store(path, readonly=True)) as store:
        return learn(store.trial_costs())


def print_search(console: Console, search: tune.Search, costs: Costs, load: str | None = None) -> None:
    """Before anything runs: the candidates per cell, the trials, the estimate (at the present
    `load`, as `run` corrects its own: first guesses only) and the budget."""
    state = search.state
    seconds, sources = tune.estimate_phase_one_s(search, costs)
    source = ("from earlier trials in the store" if sources == {"store"} else
              "from the store's trials of the same kinds" if sources <= {"store", "similar"} else
              "rough: start-up and compile guesses per framework; later runs learn from the store")
    if load is not None and "rough" in sources:
        source += f"; the guesses stretched {search.load:.1f}x for the present load ({load})"
    tried = sum(1 for c in state.cells for e in c.entries if e.status == "tried")
    console.print(f"dlbench tune: {len(state.cells)} cell(s), {tried} candidate(s) in phase 1,"
                  f" {search.trials_phase_one} trial(s) ({state.repeats} repeats each), estimated"
                  f" {seconds / 60:.1f} min ({source}); budget {state.budget_s / 60:g} min", highlight=False,
                  soft_wrap=True)
    for cell in state.cells:
        by_status: dict[str, list[str]] = {}
        for e in cell.entries:
            name = e.candidate.name + (f" ({e.reason})" if e.reason else "")
            by_status.setdefault(e.status, []).append(name)
        parts = [", ".join(by_status.pop("tried", [])) or "nothing"]
        parts += [f"{status}: {', '.join(names)}" for status, names in by_status.items()]
        console.print(printable(f"  {cell.label} {cell.mode}: {'; '.join(parts)}"), highlight=False, soft_wrap=True)
    console.print(f"  then phase 2 where two or more factors are decided faster: their combination, the default"
                  f" and the best single candidate again, {state.repeats} repeats each, only within the budget",
                  highlight=False, soft_wrap=True)
    if state.repeats < DEFAULT_REPEATS:
        console.print(f"  note: with {state.repeats} repeat(s) per candidate no candidate can be decided faster"
                      f" (Mann-Whitney needs {DEFAULT_REPEATS} + {DEFAULT_REPEATS} to reach p < 0.05):"
                      " every verdict will be undecided or same", highlight=False, soft_wrap=True)
    for note in search.skipped:
        console.print(printable(f"  note: {note}"), highlight=False, soft_wrap=True)


def _report(console: Console, store: Store, run_id: int, args: argparse.Namespace, interrupted: bool) -> int:
    """The tables (the headline of the defaults, the headroom and candidates tables with the
    re-run commands); the exit code: 130 interrupted, 3 where a default's trial failed, 1 where a
    default failed parity (a variant failing either is a finding of the search, not an error), 4
    where the search stopped because the machine stayed busy (verdicts withheld)."""
    print_run_tables(console, store, [run_id], args.wide)
    store.check_present()
    console.print(printable(f"stored as run {run_id} in {args.store}"), highlight=False)
    if interrupted:
        console.print(printable(f"interrupted: the search of run {run_id} stopped; its trials so far are stored;"
                                f" finish it with: dlbench tune --resume {run_id} --store {shlex.quote(args.store)}"),
                      highlight=False, soft_wrap=True)
        return EXIT_INTERRUPTED
    state = tuning.SearchState.from_dict(store.run(run_id)["tune"])
    defaults = tuning.default_trial_ids(state.cells)
    rows = [t for t in store.trials(run_id) if t.id in defaults]
    if any(t.status in FAILURE_STATUSES for t in rows):
        return EXIT_TRIALS_FAILED
    if any((t.data.get("parity") or {}).get("verdict") == "fail" for t in rows):
        return EXIT_PARITY_FAILED
    # the machine stayed busy: the verdicts it held back were never judged (never a green exit)
    return EXIT_UNDECIDED if state.stop == "busy" else EXIT_OK
