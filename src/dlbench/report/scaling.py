"""The data-parallel scaling table: throughput per device count, scaling_efficiency against the
paired one-device trial and the gradient communication time, each row labelled with what its
number means here (`measured` on accelerators, `functional (CPU, ...)` where the devices share
the same cores). Shown only when a run has a trial with devices > 1."""

from __future__ import annotations

from dlbench.report.model import Config, Report
from dlbench.report.tabledata import Cell, Column, Table, cells

HEADERS = ("devices", "scaling", "global batch", "samples/s", "scaling efficiency", "grad comm ms/step", "kind")
NOTE = ("scaling efficiency = samples/s on N devices / (N x samples/s of the paired one-device trial:"
        " per-device batch under weak scaling, same global batch under strong); functional = the N"
        " devices share this machine's cores, so the run checks data parallelism, it does not"
        " measure scaling")


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _kind(config: Config) -> str:
    kinds = {str(t.data["notes"]["scaling_kind"]) for t in config.trials
             if "scaling_kind" in (t.data.get("notes") or {})}
    return ", ".join(sorted(kinds)) or "–"


def _row(report: Report, c: Config) -> tuple[Cell, ...]:
    spec = c.spec
    devices = int(spec.get("devices", 1))
    several = devices > 1
    comm = c.summary("grad_comm_s_per_step").median
    return tuple(cells(
        report.label(c), devices, spec.get("scaling", "weak") if several else "–", spec["workload"]["batch_size"],
        _fmt(c.summary("samples_per_s").median, ".1f"),
        (_fmt(c.summary("scaling_efficiency").median, ".2f") + (" (!)" if _above_one_on_shared_cores(c) else ""))
        if several else "1 (baseline)",
        _fmt(None if comm is None else comm * 1e3, ".2f") if several else "–",
        _kind(c) if several else "–"))


def _above_one_on_shared_cores(c: Config) -> bool:
    """An efficiency above 1 where the devices share this machine's cores: not a speed-up."""
    eff = c.summary("scaling_efficiency").median
    return eff is not None and eff > 1 and _kind(c).startswith("functional")


def _notes(report: Report, configs: list[Config]) -> list[str]:
    """The definition, then efficiencies above 1 on shared cores, then why an efficiency or a
    communication time is missing."""
    notes = [NOTE]
    for c in configs:
        if _above_one_on_shared_cores(c):
            notes.append(f"{report.label(c)}: (!) scaling efficiency above 1 with the devices sharing the same"
                         " cores is not a speed-up: the one-device baseline used those cores less well (threads"
                         " per process, per-process overheads); on this machine the run checks data parallelism"
                         " only")
    for c in configs:
        for t in c.trials:
            for key in ("scaling_efficiency", "grad_comm_s_per_step"):
                why = (t.data.get("notes") or {}).get(key)
                if why and t.metrics.get(key) is None:
                    notes.append(f"{report.label(c)}: {key}: {why}")
    return notes


def scaling_table(report: Report) -> Table | None:
    """Every train configuration, when any of them ran on several devices; else None."""
    train = [c for c in report.configs if c.record.data_parallel]
    if not any(int(c.spec.get("devices", 1)) > 1 for c in train):
        return None
    columns = [Column("configuration", key=True),
               *(Column(h, "left" if h in ("scaling", "kind") else "right") for h in HEADERS)]
    return Table("scaling", "Data-parallel scaling", "data-parallel scaling (medians over repeats)",
                 tuple(columns), tuple(_row(report, c) for c in train), tuple(_notes(report, train)))
