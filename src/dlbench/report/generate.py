"""The generation table (`--scenario generate`: runner/scenarios/generate.py): time to first
token and time per output token (p50, p99), output tokens/s per stream and in total, the first
generation's time (it compiles), the KV cache's size and the compilations a new prompt length
causes, per framework x mode; the decoder each framework used, parity and status as in the
headline table."""

from __future__ import annotations

from dlbench.analysis.generate import INT8_LOGITS_RTOL, LOGITS_RTOL
from dlbench.report import model
from dlbench.report.cells import STATUS, label_cells, label_columns, metric_cell, parity_cell, status_cell
from dlbench.report.columns import GENERATE, Column
from dlbench.report.model import Config, Report
from dlbench.report.scenarios import GENERATE_TABLE, configs_in
from dlbench.report.tabledata import Cell, Table
from dlbench.report.tabledata import Column as TableColumn

AXES = ("workload", "framework", "mode", "precision")
# What the decoder kept of the float64 decoder's choices (its worst logit error is the parity
# cell's number, against the bound of its precision): int8 rows' accuracy cost beside float32's.
ACCURACY = [
    Column("gen_token_agreement", "token agree", "gen_token_agreement", lambda v: f"{v:.0%}"),
    Column("gen_forced_agreement", "forced agree", "gen_forced_agreement", lambda v: f"{v:.0%}"),
]
NOTES = ("TTFT: prefill of the prompt plus the first token's fetch; TPOT: one decode step plus its token's fetch"
         " (each token is fetched to the host, as a streaming server hands it out); tokens/s per stream: G"
         " tokens over a generation's end-to-end time (median over generations), total: B times that;"
         " p99 interpolates between order statistics (few samples: near the largest); first generation: the"
         " first call, compiles included; compiles per new prompt length: measured at P - 1 and P + 1."
         " Greedy decoding, batch B, no continuous batching (a serving engine's job).",
         "of bandwidth bound: the least time a decode step can take, the bytes it must read (every weight once,"
         " the KV cache at the generation's mean position) over the memory bandwidth measured here with the"
         " trial's threads (tpot_bound_s), over the TPOT p50 (100 %: at the memory's limit; docs/methodology.md)",
         "parity (generate): every step's logits against the float64 NumPy decoder fed the same tokens, and"
         " the ids against its own greedy ids up to the first step whose top-2 margin is within twice the"
         f" bound (float32 {LOGITS_RTOL:.0e}, int8 {INT8_LOGITS_RTOL:.0e}: docs/workloads.md#lm); token agree: the parity rows' ids equal to"
         " the float64 decoder's own (a divergence counts to the end); forced agree: steps whose greedy token"
         " is the float64 decoder's fed the same tokens; the parity cell's number: the worst normwise logit"
         " error of a step")


def _row(report: Report, config: Config, axes: tuple[str, ...]) -> list[Cell]:
    numbers = [metric_cell(col, config) for col in (*GENERATE, *ACCURACY)]
    decoder = next((t.notes["decoder"] for t in config.trials if t.notes.get("decoder")), None)
    return [*label_cells(report, config, axes), *numbers, Cell(str(decoder or "–")),
            parity_cell(config.trials), status_cell(config.trials)]


def generation_table(report: Report) -> Table | None:
    """One row per generation configuration; None when the runs have none."""
    configs = configs_in(report, GENERATE_TABLE)
    if not configs:
        return None
    axes = report.varying(configs, AXES)
    columns = [*label_columns(report, axes), *(TableColumn(c.header, "right") for c in (*GENERATE, *ACCURACY)),
               TableColumn("decoder"), TableColumn("parity"), STATUS]
    notes = [*NOTES, *model.notes(report, configs, {})]
    return Table(GENERATE_TABLE, "Generation", "generation with a KV cache: token latencies and throughput (medians over"
                 " repeats)", tuple(columns), tuple(tuple(_row(report, c, axes)) for c in configs), tuple(notes))
