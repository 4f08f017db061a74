"""The lstm in TensorFlow itself, on dlbench's TF program machinery
(dlbench.backends.tensorflow.program): the canonical layout is TF's own (kernels (in, 4H), one
bias), so nothing is converted. TF has no fused LSTM kernel for the CPU outside Keras (the
BlockLSTM ops have no XLA kernel, and their gates are ordered i,c,f,o with a forget_bias of
their own), so the cell is written out: one matmul for the input projection of all L steps,
then the recurrence as a Python loop over time, unrolled when tf.function traces it (what
Keras's unroll=True does): graph and XLA see L steps of straight-line code."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from dlbench.backends.base import Program, Unsupported
from dlbench.backends.tensorflow import program
from dlbench.backends.tensorflow.program import SameLayout, Tensors, dense
from dlbench.spec import TrialSpec

from dlbench_lstm import workload

GATE_ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {"sigmoid": tf.sigmoid}
CELL_ACTIVATIONS: dict[str, Callable[[tf.Tensor], tf.Tensor]] = {"tanh": tf.tanh}


def _pick(table: dict[str, Callable[[tf.Tensor], tf.Tensor]], name: str, value: str) -> Callable[[tf.Tensor], tf.Tensor]:
    if value not in table:
        raise Unsupported(f"the TensorFlow lstm implements {name} {' or '.join(map(repr, table))}, not {value!r}")
    return table[value]


@typing.final
class Lstm:
    layout = SameLayout()

    def __init__(self, gate: str, cell: str, forget_bias: float) -> None:
        self.gate_name, self.cell_name = gate, cell
        self.gate = _pick(GATE_ACTIVATIONS, "lstm_gate_activation", gate)
        self.cell = _pick(CELL_ACTIVATIONS, "lstm_cell_activation", cell)
        self.forget_bias = forget_bias

    def forward(self, params: Tensors, buffers: Tensors, x: tf.Tensor, training: bool) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        p = params
        embed, four_h = p["lstm.kernel"].shape
        length = x.shape[1]
        e = tf.reshape(tf.gather(p["embed.tokens"], x), [-1, embed])  # (N L, E)
        projected = tf.reshape(tf.matmul(e, p["lstm.kernel"]) + p["lstm.bias"], [-1, length, four_h])
        h = c = tf.zeros([tf.shape(x)[0], four_h // 4], projected.dtype)
        for t in range(length):
            i, f, g, o = self.gates(projected[:, t] + tf.matmul(h, p["lstm.recurrent_kernel"]))
            c = self.gate(f + self.forget_bias) * c + self.gate(i) * self.cell(g)
            h = self.gate(o) * self.cell(c)
        return dense(h, p, "head"), {}

    def gates(self, z: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """The four blocks of the (N, 4H) pre-activations in the canonical order i, f, g, o."""
        i, f, g, o = tf.split(z, 4, axis=-1)
        return i, f, g, o

    def numerics(self) -> dict[str, Any]:
        return {"lstm_gate_activation": self.gate_name, "lstm_cell_activation": self.cell_name,
                "lstm_forget_bias": self.forget_bias}


def build(trial: TrialSpec) -> Program:
    n = trial.workload.numerics
    model = Lstm(n.value("lstm_gate_activation"), n.value("lstm_cell_activation"), float(n.value("lstm_forget_bias")))
    return program.build(trial, workload, model)
