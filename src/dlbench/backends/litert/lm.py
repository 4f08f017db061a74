"""The lm workload in LiteRT: the TensorFlow implementation, converted (program.py)."""

from __future__ import annotations

from dlbench.backends.litert import program
from dlbench.spec import TrialSpec


def build(trial: TrialSpec) -> program.LiteRTProgram:
    return program.build(trial)
