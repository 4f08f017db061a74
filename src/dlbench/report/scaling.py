"""The data-parallel scaling table: throughput per device count, scaling_efficiency against the
paired one-device trial and the gradient communication time, each row labelled with what its
number means here (`measured` on accelerators, `functional (CPU, ...)` where the devices share
the same cores). Shown only when a run has a trial with devices > 1; the terminal table and the
HTML report read the same rows."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from dlbench.report.model import Config, Report

HEADERS = ("devices", "scaling", "global batch", "samples/s", "scaling efficiency", "grad comm ms/step", "kind")
NOTE = ("scaling efficiency = samples/s on N devices / (N x samples/s of the paired one-device trial:"
        " per-device batch under weak scaling, same global batch under strong); functional = the N"
        " devices share this machine's cores, so the run checks data parallelism, it does not"
        " measure scaling")


@dataclass(frozen=True)
class Row:
    config: Config
    cells: tuple[str, ...]


def _fmt(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _kind(config: Config) -> str:
    kinds = {str(t.data["notes"]["scaling_kind"]) for t in config.trials
             if "scaling_kind" in (t.data.get("notes") or {})}
    return ", ".join(sorted(kinds)) or "–"


def rows(report: Report) -> list[Row]:
    """Every train configuration, when any of them ran on several devices; else none."""
    train = [c for c in report.configs if c.trials[0].spec.get("scenario", "train") == "train"]
    if not any(int(c.trials[0].spec.get("devices", 1)) > 1 for c in train):
        return []
    out = []
    for c in train:
        spec = c.trials[0].spec
        devices = int(spec.get("devices", 1))
        comm = c.summary("grad_comm_s_per_step").median
        out.append(Row(c, (
            str(devices), str(spec.get("scaling", "weak")) if devices > 1 else "–",
            str(spec["workload"]["batch_size"]),
            _fmt(c.summary("samples_per_s").median, ".1f"),
            _fmt(c.summary("scaling_efficiency").median, ".2f") if devices > 1 else "1 (baseline)",
            _fmt(None if comm is None else comm * 1e3, ".2f") if devices > 1 else "–",
            _kind(c) if devices > 1 else "–",
        )))
    return out


def scaling_table(report: Report) -> tuple[Table | None, list[str]]:
    found = rows(report)
    if not found:
        return None, []
    table = Table(title="data-parallel scaling (medians over repeats)")
    table.add_column("configuration")
    for h in HEADERS:
        table.add_column(h, justify="left" if h in ("scaling", "kind") else "right")
    for r in found:
        table.add_row(Text(report.label(r.config)), *(Text(c) for c in r.cells))
    notes = [NOTE]
    for r in found:
        for t in r.config.trials:
            for key in ("scaling_efficiency", "grad_comm_s_per_step"):
                why = (t.data.get("notes") or {}).get(key)
                if why and t.metrics.get(key) is None:
                    notes.append(f"{report.label(r.config)}: {key}: {why}")
    return table, list(dict.fromkeys(notes))
