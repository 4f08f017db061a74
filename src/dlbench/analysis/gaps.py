"""The gap ledger's rows (docs/gaps.md): the cross-framework gaps of 1.5x and more that were
traced to their cause, each with the workloads and frameworks it holds for, the range of ratios a
trial pair must show to be that gap, and its row in docs/gaps.md. `match` says which row a pair
of measured configurations shows; the report's findings ("why is it slower") point to it. Pure.

A ratio here is always slow / fast in speed (samples per second for training; for generation the
inverse of the time per output token), so below 1. A row matches a pair when the workload, the
model size (where the row names one), the scenario, the two frameworks (and modes, where named)
are the row's and the pair's ratio lies in the row's [low, high]. Keep the rows in step with
docs/gaps.md (tests/test_gaps.py reads both).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

LEDGER_DOC = "docs/gaps.md"
# Statuses of a row (docs/gaps.md): what became of the gap.
CLOSED_DEFAULT, CLOSED_VARIANT, ATTRIBUTED, OPEN = "closed by a default", "closed by a variant", "attributed", "open"
STATUSES = (CLOSED_DEFAULT, CLOSED_VARIANT, ATTRIBUTED, OPEN)


@dataclass(frozen=True)
class Side:
    """One side of a gap: the frameworks it holds for (any of them) and the mode, where the row
    is about one mode only."""

    frameworks: tuple[str, ...]
    mode: str | None = None

    def holds(self, framework: str, mode: str) -> bool:
        return framework in self.frameworks and (self.mode is None or self.mode == mode)


@dataclass(frozen=True)
class Gap:
    anchor: str  # the row's anchor in docs/gaps.md
    workloads: tuple[str, ...]
    scenario: str  # the user's --scenario: train, generate
    slow: Side
    fast: Side
    low: float  # the range of slow / fast speed ratios that is this gap
    high: float
    cause: str  # one line; the row says the rest
    status: str
    model_sizes: tuple[str, ...] = ()  # the workloads' model sizes, where the gap is about those only

    def link(self) -> str:
        return f"{LEDGER_DOC}#{self.anchor}"


# A gap of 1.5x or more is a ratio of at most 1 / 1.5.
GAP = 1 / 1.5

# The rows. They name frameworks, as data: which frameworks a gap holds for (no code here branches
# on a framework; layers-check lists this file among those naming frameworks outside backends/).
LEDGER: tuple[Gap, ...] = (
    Gap("lm-train-jax", ("lm",), "train", Side(("jax", "keras-jax")), Side(("torch", "tensorflow")), 0.15, GAP,
        "XLA:CPU has no fused attention: jax.nn.dot_product_attention(is_causal=True) lowers to a"
        " composite that runs single-threaded at about 4x torch's flash-attention kernel; variants"
        " jax.attention=blocked|formula and jax.multi_output_fusion=on (the two together: 0.72 of"
        " torch.compile, quiet)", CLOSED_VARIANT, ("small",)),
    Gap("vit-published-jax", ("vit",), "train", Side(("jax", "keras-jax")), Side(("torch", "tensorflow")), 0.25, GAP,
        "XLA:CPU's fusion duplicates the residual-gradient chain into every weight-gradient fusion"
        " (26 % of the step on one core); variant jax.multi_output_fusion=on (0.96 of torch eager, quiet)",
        CLOSED_VARIANT, ("b16",)),
    Gap("resnet50-published-xla", ("resnet",), "train", Side(("jax", "tensorflow", "keras-jax", "keras-tensorflow")),
        Side(("torch",)), 0.2, GAP,
        "XLA:CPU's convolution weight gradients (over transposed activations; 1x1 ones at 10-40"
        " GFLOP/s a core against oneDNN's 45-90); variants jax.conv1x1=dot, jax.multi_output_fusion=on",
        ATTRIBUTED, ("resnet50",)),
    Gap("cnn-jax-tensorflow", ("cnn",), "train", Side(("jax", "keras-jax")), Side(("tensorflow", "torch")), 0.25, GAP,
        "max-pool's gradient as XLA:CPU expands lax.reduce_window, then YNNPACK's convolutions at 3-64"
        " channels; variants jax.pool=reshape and jax.conv_library=eigen", CLOSED_VARIANT),
    Gap("lm-generate-keras-torch", ("lm",), "generate", Side(("keras-torch",)), Side(("torch",)), 0.02, GAP,
        "Keras on torch decodes eagerly, op by op through Keras's dispatch, as keras-hub's torch"
        " generation does; torch's decoder is one compiled step", ATTRIBUTED),
    # Not between frameworks: torch.compile no faster than eager at the published shapes.
    Gap("published-torch-compiled", ("resnet", "transformer", "vit"), "train", Side(("torch",), "compiled"),
        Side(("torch",), "eager"), 0.5, 1.0,
        "at batch 4 the step is the matrix products and convolutions that Inductor leaves to oneDNN"
        " and MKL; what it fuses is the small rest", ATTRIBUTED, ("resnet50", "bert-base", "b16")),
)


def match(ledger: Iterable[Gap], workload: str, model_size: str | None, scenario: str,
          slow: tuple[str, str], fast: tuple[str, str], ratio: float) -> Gap | None:
    """The ledger row a measured pair shows: `slow` and `fast` are (framework, mode), `ratio`
    the slow side's speed over the fast side's. None where no row holds."""
    for gap in ledger:
        if (workload in gap.workloads and gap.scenario == scenario
                and (not gap.model_sizes or model_size in gap.model_sizes)
                and gap.slow.holds(*slow) and gap.fast.holds(*fast) and gap.low <= ratio <= gap.high):
            return gap
    return None
