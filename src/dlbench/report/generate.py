"""The generation table (`--scenario generate`: runner/scenarios/generate.py): time to first
token and time per output token (p50, p99), output tokens/s per stream and in total, the first
generation's time (it compiles), the KV cache's size and the compilations a new prompt length
causes, per framework x mode; the decoder each framework used, parity and status as in the
headline table; the chart of the token latencies against the offered load (served_tokens)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlbench.analysis.generate import INT8_LOGITS_RTOL, LOGITS_RTOL
from dlbench.report import model
from dlbench.analysis.summary import summarize
from dlbench.report.cells import STATUS, label_cells, label_columns, metric_cell, parity_cell, status_cell, summary_cell
from dlbench.report.columns import GENERATE, Column
from dlbench.report.model import Config, Report, Trial
from dlbench.report.scenarios import GENERATE_TABLE, configs_in
from dlbench.report.tabledata import MISSING, Cell, Table
from dlbench.results.records import PHASE, PHASE_END, PHASE_NAME, PHASE_START, PHASE_STATE, TIME_KEY, event_kind
from dlbench.report.tabledata import Column as TableColumn

if TYPE_CHECKING:  # its chart functions import plotly when called (report/plot.py)
    from dlbench.report.plot import Chart

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
         " first call, compiles included; compiles per new prompt length: measured at P - 1 and P + 1, in the"
         " untimed generations of other prompt lengths s (their compiles included)."
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


def other_lengths_s(trial: Trial) -> float | None:
    """The untimed generations at other prompt lengths (their compiles included): the trial's
    metric, or, stored before it was one, the gap its phase events leave before parity (no
    other phase ran there)."""
    stored = trial.metrics.get("other_prompt_lengths_s")
    if stored is not None:
        return stored
    phases = [e for e in trial.events if event_kind(e) == PHASE]
    parity = next((float(e[TIME_KEY]) for e in phases if e.get(PHASE_NAME) == "parity"
                   and e.get(PHASE_STATE) == PHASE_START), None)
    if parity is None:
        return None
    ends = [float(e[TIME_KEY]) for e in phases if e.get(PHASE_STATE) == PHASE_END and float(e[TIME_KEY]) <= parity]
    return parity - max(ends) if ends else None


def _cell(col: Column, config: Config) -> Cell:
    if col.key != "gen_other_lengths":
        return metric_cell(col, config)
    made = summary_cell(col, summarize(other_lengths_s(t) for t in config.counted))
    return made.with_flags("busy") if config.interference.busy and made.text != MISSING else made


# What one generation is (GenerateOptions, stored flat in the spec): columns of their own, in the
# title where one value holds; the workload's batch (training's) is no generation's.
SHAPE = (("prompt_len", "prompt"), ("new_tokens", "new tokens"), ("gen_batch", "gen batch"))
# Columns only `--load server` fills: left out silently without it.
SERVER_KEYS = ("gen_server_max_qps", "gen_server_ttft_p99", "gen_server_tpot_p99")


def _row(report: Report, config: Config, axes: tuple[str, ...]) -> list[Cell]:
    numbers = [_cell(col, config) for col in (*GENERATE, *ACCURACY)]
    decoder = next((t.notes["decoder"] for t in config.trials if t.notes.get("decoder")), None)
    shape = [Cell(str(config.spec.get(key, MISSING))) for key, _ in SHAPE]
    return [*label_cells(report, config, axes), *shape, *numbers, Cell(str(decoder or "–")),
            parity_cell(config.trials), status_cell(config.trials)]


def generation_table(report: Report) -> Table | None:
    """One row per generation configuration; None when the runs have none."""
    configs = configs_in(report, GENERATE_TABLE)
    if not configs:
        return None
    axes = report.varying(configs, AXES, hidden=("batch",))
    columns = [*label_columns(report, axes), *(TableColumn(h, "right", key=True, lift=True) for _, h in SHAPE),
               *(TableColumn(c.header, "right", quiet=c.key in SERVER_KEYS) for c in (*GENERATE, *ACCURACY)),
               TableColumn("decoder"), TableColumn("parity"), STATUS]
    notes = [*NOTES, *model.notes(report, configs, {})]
    return Table(GENERATE_TABLE, "Generation", "generation with a KV cache: token latencies and throughput (medians over"
                 " repeats)", tuple(columns), tuple(tuple(_row(report, c, axes)) for c in configs), tuple(notes))


def served_tokens(report: Report) -> Chart | None:
    """Generation under LoadGen's Server with token latencies (`--scenario generate --load
    server`): TTFT p99 and TPOT p99 against the offered load, side by side, each with its bound."""
    from plotly.subplots import make_subplots

    from dlbench.report import infer, plot

    lines = [(c, t) for c in report.configs for t in c.trials if t.series.get("server_ttft_p99_s")]
    if not lines:
        return None
    fig = make_subplots(rows=1, cols=2, subplot_titles=["time to first token, p99", "time per output token, p99"])
    for col, (series, bound, name) in enumerate((("server_ttft_p99_s", "server_ttft_bound_s", "TTFT p99"),
                                                 ("server_tpot_p99_s", "server_tpot_bound_s", "TPOT p99")), start=1):
        infer.offered_load_lines(fig, report, [(c, t) for c, t in lines if t.series.get(series)], series, bound, name,
                            row=1, col=col)
        fig.update_xaxes(title_text="offered load (target QPS, Poisson arrivals)", type="log", row=1, col=col)
        fig.update_yaxes(title_text="ms", type="log", row=1, col=col)
    return plot.Chart("served-tokens", "Token latencies against offered load (LoadGen Server)", plot.layout(fig),
                      "Each marker one LoadGen Server test of a generate process under token latencies (the sweep, or"
                      " --qps): LoadGen's TTFT p99 (issue to the first token, queueing included) and TPOT p99 (per query,"
                      " the rest of its generation over its tokens after the first); filled: VALID, both p99s within their"
                      " bounds (dotted; early stopping included), open: INVALID.")
