"""`dlbench list`: the workloads (built-in or from which plugin), then which framework x workload
x mode can run here, and why not.

By default a matrix that fits a screen: frameworks as rows, workloads as columns, the modes each
pair supports in its cell, each framework's version once, every reason for a "no" listed once
below; the precisions likewise. `--long` prints one row per framework x workload x mode, `--json`
everything as data.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from dataclasses import dataclass

from dlbench import backends, problems, scenarios, subjects, workloads
from dlbench.backends import get_backend, precision, registered
from dlbench.backends.base import Option, Variant
from dlbench.backends.support import scenario_unsupported, workload_unsupported
from dlbench.cli.common import add_store_argument
from dlbench.machine import bf16_on_cpu
from dlbench.monitors.nvml import device_kind
from dlbench.report.tabledata import MISSING, Cell, Column, Table
from dlbench.report.terminal import make_console, print_table
from dlbench.spec import MODES, PRECISIONS, SCENARIOS, SolveOptions
from dlbench.text import printable
from dlbench.workloads.base import Preset

from rich.text import Text

# A cell's modes, shortest first letter: e = eager, g = graph, c = compiled.
MODE_CODES = {mode: mode[0] for mode in MODES}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("list", help="which framework x workload x mode pairs can run here, and why not")
    p.add_argument("workload", nargs="?", metavar="WORKLOAD",
                   help="one workload (or ODE problem): its presets, and each framework's modes with every reason")
    add_store_argument(p, unused="list reads what is installed here, not a store")
    p.add_argument("--long", action="store_true", help="one row per framework x workload x mode, with its reason")
    p.add_argument("--json", action="store_true", help="everything as JSON")
    p.add_argument("--wide", action="store_true", help="tables at their full width, whatever the terminal's")


@dataclass(frozen=True)
class Support:
    """What one framework can run here: `None` for yes, else the reason."""

    framework: str
    installed: bool
    detail: str  # the version, or why it is not installed
    distributions: dict[str, str]
    scenarios: dict[str, str | None]
    modes: dict[str, dict[str, str | None]]  # workload -> mode -> reason
    mode_reasons: dict[str, str | None]  # mode -> reason, the framework's own (Backend.modes)
    precisions: dict[str, dict[str, str | None]]  # device -> precision -> reason

    def version(self) -> str:
        """The framework's own distribution and version, in few characters: `2.13.0+cpu`,
        `tensorflow-cpu 2.21.0`, `keras 3.15.1` (the rest in --long and --json)."""
        if not self.installed:
            return "not installed"
        name, version = next(iter(self.distributions.items()), ("", MISSING))
        return version if name == self.framework else f"{name} {version}"


def support(name: str) -> Support:
    """One framework's answers, from its backend (the same ones plan and worker use)."""
    backend = get_backend(name)
    ok, detail = backend.available()
    modes = backend.modes()
    table: dict[str, dict[str, str | None]] = {}
    for w in workloads.usable():
        lacks = workload_unsupported(name, backend, w)
        for mode in MODES:
            reason = modes.get(mode)
            if lacks is not None:
                reason = lacks
            elif not ok:
                reason = f"not installed: pip install 'dlbench[{name}]'"
            table.setdefault(w, {})[mode] = reason
    row = backend.precisions
    # Each precision asked of the scenario it applies to: int8 of generation, the others of training.
    precisions = {d: {p: precision.unsupported(row, d, p, precision.scenario_of(p)) for p in PRECISIONS}
                  for d in precision.DEVICES}
    return Support(name, ok, detail, backend.distributions() if ok else {},
                   {s: scenario_unsupported(name, backend.capabilities, s, _first_record(s)) for s in SCENARIOS},
                   table, modes,
                   precisions)


def _first_record(scenario: str) -> scenarios.Scenario | None:
    """The runner scenario the first built-in workload that has `--scenario scenario` runs it
    with (rollout: ppo's rl_rollout); None where none has it."""
    return next((workloads.scenario(w, scenario) for w, m in workloads.WORKLOADS.items() if scenario in m.SCENARIOS),
                None)


class _Reasons:
    """Reasons for a "no", numbered in the order they first appear, each listed once with what
    it applies to: (framework, choice, place) triples, written short where they form a full
    product ("tf32 on cpu (every framework)")."""

    def __init__(self, frameworks: list[str]) -> None:
        self.frameworks = frameworks
        self.texts: dict[str, list[tuple[str, str, str]]] = {}

    def ref(self, reason: str, framework: str, choice: str, place: str = "") -> str:
        applies = self.texts.setdefault(reason, [])
        if (framework, choice, place) not in applies:
            applies.append((framework, choice, place))
        return f"[{list(self.texts).index(reason) + 1}]"

    def _what(self, applies: list[tuple[str, str, str]]) -> str:
        frameworks, choices, places = (list(dict.fromkeys(t[i] for t in applies)) for i in range(3))
        if len(applies) != len(frameworks) * len(choices) * len(places):
            by_framework: dict[str, list[str]] = {}
            for f, c, p in applies:
                by_framework.setdefault(f, []).append(" ".join(x for x in (c, p) if x))
            return "; ".join(f"{f} {', '.join(cs)}" for f, cs in by_framework.items())
        who = "every framework" if frameworks == self.frameworks else ", ".join(frameworks)
        where = f" {' and '.join(places)}" if any(places) else ""
        return f"{who}: {', '.join(choices)}{where}"

    def notes(self) -> list[str]:
        return [f"{ref} {self._what(applies)}: {reason}"
                for ref, (reason, applies) in zip((f"[{i}]" for i in range(1, len(self.texts) + 1)),
                                                  self.texts.items(), strict=True)]


def _allowed(choices: dict[str, str | None], codes: dict[str, str]) -> str:
    """The codes of the choices allowed (`e c`), `no` where none is."""
    return " ".join(codes[k] for k, r in choices.items() if r is None) or "no"


# The presets every workload has (--preset); the others are named in the workloads table.
DEVICE_PRESETS = ("tiny", "cpu", "gpu")


def other_presets(presets: dict[str, Preset]) -> str:
    """A workload's presets beyond tiny/cpu/gpu and the model size each runs (the published
    architectures: `published=resnet50, published-tiny=resnet50-tiny`), or "–"."""
    named = [f"{p}={v.model_size}" for p, v in presets.items() if p not in DEVICE_PRESETS]
    return ", ".join(named) or MISSING


def _builtin_workloads() -> tuple[str, ...]:
    """The built-in workloads: the training suite's, then the problem registry's (the solver
    scenario's ODE problems, which the frameworks x workloads matrix leaves out: a line below it
    says who runs them)."""
    return (*workloads.WORKLOADS, *problems.names())


def _described(name: str) -> tuple[str, str, str]:
    """A built-in workload's or problem's scenarios, quality and presets beyond tiny/cpu/gpu."""
    return ", ".join(subjects.runs(name)), subjects.quality(name), other_presets(subjects.presets(name))


def workload_table() -> Table:
    """Every workload, built-in or from which plugin (distribution and version), with its
    scenarios, quality metric and extra presets (the published architectures), or why a plugin
    cannot be used."""
    body = []
    for name in _builtin_workloads():
        body.append((name, "built-in", *_described(name), "yes"))
    for name, origin, reason in workloads.plugin_status():
        if reason is None:
            module = workloads.get(name)
            body.append((name, origin.text(), ", ".join(module.SCENARIOS), module.QUALITY,
                         other_presets(module.PRESETS), "yes"))
        else:
            body.append((name, origin.text(), MISSING, MISSING, MISSING, f"no: {reason}"))
    # "name", not "workload": a column of that header splits a table into one per workload.
    columns = (Column("name", key=True), Column("from"), Column("scenarios"), Column("quality"),
               Column("presets beyond tiny/cpu/gpu"), Column("usable"))
    rows = tuple(tuple(Cell(printable(v)) for v in row) for row in body)  # a plugin's names and errors
    return Table("workloads", "Workloads", "workloads (built-in, or from an installed plugin: docs/plugins.md)",
                 columns, rows)


def compact_workload_table() -> Table:
    """The workloads grouped by what they run and how they are scored, one row per group (a
    plugin's distribution beside its name), and the plugins that cannot be used as notes: a
    100x40 screen holds it whatever the number of workloads."""
    groups: dict[tuple[str, str], list[str]] = {}
    notes = []
    for name in _builtin_workloads():
        scenarios_run, quality, _ = _described(name)
        groups.setdefault((scenarios_run, quality), []).append(name)
    for name, origin, reason in workloads.plugin_status():
        if reason is None:
            module = workloads.get(name)
            groups.setdefault((", ".join(module.SCENARIOS), module.QUALITY), []).append(f"{name} ({origin.text()})")
        else:
            notes.append(f"{name} ({origin.text()}) usable: no: {reason}")
    columns = (Column("scenarios", key=True), Column("quality"), Column("workloads"))
    rows = tuple((Cell(printable(k[0])), Cell(printable(k[1])), Cell(printable(" ".join(v)))) for k, v in groups.items())
    return Table("workloads", "Workloads", "workloads (built-in, or from an installed plugin: docs/plugins.md; "
                 "--long: one row each, presets)", columns, rows, tuple(notes))


def backend_plugin_notes() -> list[str]:
    """Frameworks from plugins (their distribution) and broken framework plugins (why)."""
    out = []
    for name in registered():
        origin = backends.origin(name)
        if not origin.builtin:
            out.append(f"{name} ({origin.text()})")
    out += [f"{name} ({origin.text()}): broken plugin: {reason}" for name, origin, reason in backends.plugin_status()
            if reason is not None]
    return [printable(n) for n in out]


def _framework_cell(s: Support, reasons: _Reasons) -> Cell:
    """The framework's name with the reasons for the modes it lacks everywhere: `torch [1]`
    (a mode's reason belongs to the framework, not to each workload)."""
    modes = {m: r for w in s.modes.values() for m, r in w.items() if r is not None and r == s.mode_reasons.get(m)}
    return Cell(" ".join([s.framework, *dict.fromkeys(reasons.ref(r, s.framework, m) for m, r in modes.items())]))


def _scenarios_cell(s: Support, reasons: _Reasons) -> Cell:
    """`all`, or the scenarios the framework runs and the reasons for the others."""
    allowed = [k for k, r in s.scenarios.items() if r is None]
    if len(allowed) == len(s.scenarios):
        return Cell("all")
    refs = dict.fromkeys(reasons.ref(r, s.framework, k) for k, r in s.scenarios.items() if r is not None)
    return Cell(" ".join([*allowed, *refs]) if allowed else " ".join(["none", *refs]))


def _pair_cell(s: Support, workload: str, reasons: _Reasons) -> Cell:
    """The modes the pair runs; a reason of its own (declined, no implementation, none of its
    scenarios, not installed) as `–` and its number."""
    own = {r for m, r in s.modes[workload].items() if r is not None and r != s.mode_reasons.get(m)}
    if own:
        return Cell(" ".join([MISSING, *(reasons.ref(r, s.framework, workload) for r in sorted(own))]))
    return Cell(_allowed(s.modes[workload], MODE_CODES))


def _general(reason: str, framework: str, choice: str) -> str:
    """A reason without the framework and choice it names, so that the same reason for several
    frameworks is one note: `onnxruntime cannot run the train scenario: it lacks ...` -> `it
    lacks ...`, `litert has no implementation of 'ppo'` -> `no implementation`."""
    if reason == f"{framework} has no implementation of {choice!r}":
        return "no implementation"
    reason = reason.removeprefix(f"{framework} cannot run the {choice} scenario: ")
    # Every capability an inference-only backend lacks is one note: `it lacks the train
    # capability (has: infer)` and `... the generate capability ...` -> `it has infer only`.
    lacking = re.fullmatch(r"it lacks the \w+ capability \(has: (.*)\)", reason)
    if lacking:
        has = lacking[1].split(", ")
        return f"it has the {' and '.join(has)} {'capability' if len(has) == 1 else 'capabilities'} only"
    # A closing aside goes to --long: `... updates (a Keras PPO would be ...)` -> `... updates`.
    return re.sub(r" \([^()]*\)$", "", reason) if not reason.endswith("(has: infer)") else reason


def _lacking_modes(rows: list[Support]) -> str:
    """`modes a framework lacks everywhere: torch graph; jax eager, graph; ...` (their reasons
    are the frameworks' design, in --long)."""
    parts = []
    for s in rows:
        lacking = [m for m, r in s.mode_reasons.items() if r is not None]
        if lacking:
            parts.append(f"{s.framework} {', '.join(lacking)}")
    return "lacking by design (--long says why): " + "; ".join(parts) if parts else ""


def compact_modes_table(rows: list[Support]) -> Table:
    """Frameworks x workloads as `modes_table`, short enough for a 40-line screen: no version
    column (one line of versions below), a framework's own missing modes as one line, and a
    reason shared by several frameworks (no implementation, an inference-only backend's
    scenarios) numbered once."""
    reasons = _Reasons([s.framework for s in rows])
    shown = _matrix_scenarios()
    body = []
    for s in rows:
        allowed = [k for k, r in s.scenarios.items() if r is None and k in shown]
        refs = dict.fromkeys(reasons.ref(_general(r, s.framework, k), s.framework, k)
                             for k, r in s.scenarios.items() if r is not None and k in shown)
        scen = "all" if not refs else " ".join(allowed or ["none"])
        cells = []
        for w in workloads.usable():
            own = {r for m, r in s.modes[w].items() if r is not None and r != s.mode_reasons.get(m)}
            if own:
                cells.append(Cell("".join([MISSING, *dict.fromkeys(reasons.ref(_general(r, s.framework, w), s.framework, w)
                                                                for r in sorted(own))])))
            else:  # `egc`, not `e g c`: ten workloads and more fit a 100-column screen unwrapped
                cells.append(Cell(_allowed(s.modes[w], MODE_CODES).replace(" ", "")))
        # the reasons for the scenarios it lacks beside its name (`onnxruntime [2]`): a scenarios
        # cell of `infer generate [2]` took three lines at 100 columns
        body.append((Cell(" ".join([s.framework, *refs])), Cell(scen), *cells))
    columns = (Column("framework", key=True), Column("scenarios"), *(Column(w) for w in workloads.usable()))
    versions = "versions: " + ", ".join(dict.fromkeys(
        s.version() if s.version().startswith(s.framework.split("-")[0]) or " " in s.version()
        else f"{s.framework} {s.version()}" for s in rows))
    legend = (f"{', '.join(f'{c} = {m}' for m, c in MODE_CODES.items())}; all = {', '.join(shown)};"
              " [n]: why not, below")
    notes = [legend, *filter(None, [_lacking_modes(rows)]), *reasons.notes(), *_outside_matrix_lines(rows, shown),
             versions, *backend_plugin_notes()]
    return Table("list", "Frameworks", "frameworks x workloads: the modes each pair runs (--mode)", columns,
                 tuple(body), tuple(notes))


def _matrix_scenarios() -> list[str]:
    """The `--scenario` choices some workload of the matrix (`-w all`'s) takes."""
    taken = {k for w in workloads.usable() for k in workloads.get(w).SCENARIOS}
    return [k for k in SCENARIOS if k in taken]


def _outside_matrix_lines(rows: list[Support], shown: list[str]) -> list[str]:
    """A scenario only workloads outside the matrix take (the solver scenario's ODE problems,
    grouped in the workloads table above): the frameworks that run it, one line (why not the
    others: --long)."""
    out = []
    for k in SCENARIOS:
        if k not in shown:
            runs = _keras_star([s.framework for s in rows if s.scenarios.get(k) is None]) or ["none here"]
            out.append(f"{k} (its workloads above): {', '.join(runs)}; why not the others: --long")
    return out


def _keras_star(frameworks: list[str]) -> list[str]:
    """`keras-jax, keras-torch, keras-tensorflow` -> `keras-*` where all three are there."""
    keras = [f for f in frameworks if f.startswith("keras-")]
    if len(keras) < 3:
        return frameworks
    return ["keras-*" if f == keras[0] else f for f in frameworks if f not in keras[1:]]


def precision_lines(rows: list[Support]) -> list[str]:
    """The precisions each framework trains in, per device, frameworks with the same set named
    together: `on cpu (here): fp32 bf16: torch, jax, ...; fp32: onnxruntime, litert` (why not:
    --long)."""
    here = device_kind()
    out = []
    for d in sorted(precision.DEVICES, key=lambda d: d != here):
        groups: dict[str, list[str]] = {}
        for s in rows:
            groups.setdefault(_allowed(s.precisions[d], {p: p for p in PRECISIONS}), []).append(s.framework)
        where = f"{d} (here; bf16 {bf16_on_cpu()})" if d == here else d
        out.append(f"{where}: " + "; ".join(f"{k}: {', '.join(_keras_star(v))}" for k, v in groups.items()))
    return [f"precisions for training, int8 for generation (--precision; why not: --long) on {' · on '.join(out)}"]


def modes_table(rows: list[Support]) -> Table:
    """Frameworks x workloads, each cell the modes the pair can run."""
    reasons = _Reasons([s.framework for s in rows])
    body = []
    for s in rows:
        body.append((_framework_cell(s, reasons), Cell(s.version()), _scenarios_cell(s, reasons),
                     *(_pair_cell(s, w, reasons) for w in workloads.usable())))
    columns = (Column("framework", key=True), Column("version"), Column("scenarios"),
               *(Column(w) for w in workloads.usable()))
    legend = (f"modes: {', '.join(f'{c} = {m}' for m, c in MODE_CODES.items())}; scenarios: all = {', '.join(SCENARIOS)};"
              " [n]: why not, below (dlbench list --long: every pair)")
    return Table("list", "Frameworks", "frameworks x workloads: the modes each pair runs (--mode)", columns,
                 tuple(body), (legend, *reasons.notes(), *backend_plugin_notes()))


def precision_table(rows: list[Support]) -> Table:
    """Frameworks x devices, each cell the precisions the framework trains in there; this
    machine's device first."""
    here = device_kind()
    devices = sorted(precision.DEVICES, key=lambda d: d != here)
    reasons = _Reasons([s.framework for s in rows])
    body = []
    for s in rows:
        cells = []
        for d in devices:
            refs = dict.fromkeys(reasons.ref(r, s.framework, p, f"on {d}") for p, r in s.precisions[d].items() if r)
            cells.append(Cell(" ".join([_allowed(s.precisions[d], {p: p for p in PRECISIONS}), *refs])))
        body.append((Cell(s.framework), *cells))
    columns = (Column("framework", key=True), *(Column(d + (" (here)" if d == here else "")) for d in devices))
    return Table("precisions", "Precisions", f"precisions for training, int8 for generation (--precision); this machine: {here}",
                 columns, tuple(body), ("[n]: why not, below", f"bf16 on this CPU: {bf16_on_cpu()}", *reasons.notes()))


def long_table(rows: list[Support]) -> Table:
    """One row per framework x workload x mode, with its reason: what `list` printed before
    the matrix, behind --long."""
    body = []
    for s in rows:
        scenarios = ", ".join(k for k, r in s.scenarios.items() if r is None) or "none"
        version = ", ".join(f"{k} {v}" for k, v in s.distributions.items()) or MISSING
        for w, modes in s.modes.items():
            for mode, reason in modes.items():
                body.append(tuple(Cell(v) for v in (s.framework, "yes" if s.installed else f"no ({s.detail})", version,
                                                     scenarios, w, mode, "yes" if reason is None else f"no: {reason}")))
    headers = ("framework", "installed", "version", "scenarios", "workload", "mode", "supported")
    return Table("list-long", "Frameworks", "frameworks x workloads x modes",
                 tuple(Column(h, key=h in ("framework", "workload", "mode")) for h in headers), tuple(body))


def compact_option_lines() -> list[str]:
    """Every framework's own options as one line (how many per framework; values, defaults and
    variants are --long's): a line per option would not fit a 40-line screen."""
    counts = [(name, len(get_backend(name).options)) for name in registered()]
    texts = [f"{name} {n}" for name, n in counts if n]
    if not texts:
        return []
    variants = sum(o.variant is not None for name in registered() for o in get_backend(name).options.values())
    return [f"--option: {', '.join(texts)} ({variants} variants: --long)"]


def _variant_text(variant: Variant) -> str:
    """Where a variant applies and why, in one clause: `variant: tries off (cpu only; ...)`."""
    where = [f"{what} {', '.join(values)}" for what, values in (
        ("workloads", variant.workloads), ("modes", variant.modes), ("devices", variant.devices),
        ("GPU only:", variant.gpu_only)) if values]
    same = [f"{v} on {w}" for w, v in variant.same_as_default]
    if same:
        where.append(f"the default already runs {', '.join(same)}")
    if variant.together:
        where.append("tried with " + ", ".join(f"{n}={v}" for n, v in variant.together))
    applies = f" ({'; '.join(where)})" if where else ""
    return f"variant: tries {', '.join(variant.tried)}{applies}. Why: {variant.why}. Source: {variant.source}"


def option_lines() -> list[str]:
    """Each framework's own options (`--option FRAMEWORK.NAME=VALUE`), one paragraph each: the
    values, the default, what it does and, for a variant, what the headroom search tries, where
    and why."""
    out = []
    for name in registered():
        for opt, o in get_backend(name).options.items():
            line = f"--option {name}.{opt}={'|'.join(o.allowed)} (default {o.default}): {o.help}"
            out.append(line if o.variant is None else f"{line}; {_variant_text(o.variant)}")
    return out


def option_json(o: Option) -> dict[str, object]:
    """An option as data: values, default, help, the environment variables its values set and
    its variant (None where it is none)."""
    variant = None if o.variant is None else dataclasses.asdict(o.variant)  # tuples: JSON arrays
    return {"allowed": list(o.allowed), "default": o.default, "help": o.help, "environment": o.environment,
            "variant": variant}


def as_json(rows: list[Support]) -> list[dict[str, object]]:
    return [{"framework": s.framework, "installed": s.installed, "detail": s.detail,
             "distributions": s.distributions, "scenarios": s.scenarios, "modes": s.modes,
             "precisions": s.precisions,
             "options": {k: option_json(o) for k, o in get_backend(s.framework).options.items()}} for s in rows]


def workload_lines(name: str) -> list[str]:
    """One workload (or problem) in words: where it comes from, its scenarios, quality metric and
    every preset with the model size it runs (the published architectures named)."""
    presets = ", ".join(f"{p}={v.model_size}" for p, v in subjects.presets(name).items())
    lines = [f"{name} ({subjects.origin(name).text()}): scenarios {', '.join(subjects.runs(name))}; quality"
             f" {subjects.quality(name)}; presets (model size): {presets}"]
    sizes = dict.fromkeys(v.model_size for v in subjects.presets(name).values())
    lines += [f"  {size}: {said}" for size in sizes if not subjects.is_problem(name)
              and (said := workloads.published(name, size)) is not None]
    return lines


def workload_modes_table(name: str, rows: list[Support]) -> Table:
    """Frameworks x modes for one workload: yes, or `no [n]` with every reason below (what
    --long says of it, without the other workloads' rows)."""
    reasons = _Reasons([s.framework for s in rows])
    body = []
    for s in rows:
        if subjects.is_problem(name):  # a problem's trials solve: the framework's solve scenario decides
            why = s.scenarios.get(SolveOptions.SCENARIO)
            cells = [Cell("yes" if why is None else f"no {reasons.ref(why, s.framework, SolveOptions.SCENARIO)}")]
        else:
            cells = [Cell("yes" if r is None else f"no {reasons.ref(r, s.framework, m)}")
                     for m, r in s.modes[name].items()]
        body.append((Cell(s.framework), Cell(s.version()), *cells))
    heads = [SolveOptions.SCENARIO] if subjects.is_problem(name) else list(MODES)
    columns = (Column("framework", key=True), Column("version"), *(Column(h) for h in heads))
    return Table("list-workload", "Frameworks", f"frameworks on {name}: " + (
        "the solver scenario" if subjects.is_problem(name) else "the modes each runs (--mode)"),
        columns, tuple(body), tuple(reasons.notes()))


def main(args: argparse.Namespace) -> int:
    if args.workload is not None:  # before asking every framework: a bad name is one line, exit 2
        subjects.check(args.workload)
    rows = [support(name) for name in registered()]
    if args.json:
        print(json.dumps({"frameworks": as_json(rows), "workloads": [
            {"workload": r[0].text, "from": r[1].text, "scenarios": r[2].text, "quality": r[3].text,
             "presets": r[4].text, "usable": r[5].text}
            for r in workload_table().rows]}, indent=2))
        return 0
    console = make_console()
    if args.workload is not None:
        for line in workload_lines(args.workload):
            console.print(Text(printable(line)), highlight=False, overflow="fold")
        print_table(console, workload_modes_table(args.workload, rows), args.wide)
        return 0
    if args.long:
        tables = [workload_table(), long_table(rows), modes_table(rows), precision_table(rows)]
        lines = option_lines()
    else:  # a 100x40 screen (`dlbench list WORKLOAD`: one workload's every reason): the matrix, its reasons grouped, precisions and options as lines
        tables = [compact_workload_table(), compact_modes_table(rows)]
        lines = [*precision_lines(rows), *compact_option_lines()]
    for table in tables:
        print_table(console, table, args.wide)
    for line in lines:
        console.print(Text(printable(line)), highlight=False, overflow="fold")
    return 0
