"""The lm workload in ONNX Runtime: the torch implementation, exported (program.py)."""

from __future__ import annotations

from dlbench.backends.onnxruntime import program
from dlbench.spec import TrialSpec


def build(trial: TrialSpec) -> program.OrtProgram:
    return program.build(trial)
