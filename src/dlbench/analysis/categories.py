"""The one vocabulary of where a step's time goes (profiled trials, issue 21), shared by every
backend's mapping (backends/<fw>/profile.py), the worker's metrics and the report. Data only."""

from __future__ import annotations

import re

# In the order tables and bars show them.
CATEGORIES = (
    "convolution", "matmul", "pooling", "normalisation", "elementwise and activation",
    "loss and reductions", "optimizer update", "copies and layout", "input pipeline",
    "host overhead and idle", "other",
)
HOST = "host overhead and idle"
OTHER = "other"
INPUT = "input pipeline"
# An ancestor event in one of these categories wins over its descendants' own names
# (backends/profiling.py: attribute).
STICKY = ("optimizer update", "input pipeline")
# A profiled trial's metrics: profile_<slug>_s_per_step.
METRIC_PREFIX = "profile_"
METRIC_SUFFIX = "_s_per_step"


def slug(category: str) -> str:
    """`elementwise and activation` -> `elementwise_and_activation` (a metric name's part)."""
    return re.sub(r"\W+", "_", category).strip("_")


def metric_name(category: str) -> str:
    return f"{METRIC_PREFIX}{slug(category)}{METRIC_SUFFIX}"


CATEGORY_BY_METRIC = {metric_name(c): c for c in CATEGORIES}
# Of a category's time, the backward pass's (where the trace tells it apart): profile_backward_<slug>_s_per_step.
BACKWARD_PREFIX = "profile_backward_"


def backward_metric_name(category: str) -> str:
    return f"{BACKWARD_PREFIX}{slug(category)}{METRIC_SUFFIX}"


CATEGORY_BY_BACKWARD_METRIC = {backward_metric_name(c): c for c in CATEGORIES}
# What the compiler says of the program that took most of the profiled window (XLA's cost
# analysis, per call of that program): the memory-bound hint's evidence (analysis/findings.py).
FLOPS_METRIC = "profile_program_flops"
BYTES_METRIC = "profile_program_bytes_accessed"
INTENSITY_METRIC = "profile_arithmetic_intensity"
