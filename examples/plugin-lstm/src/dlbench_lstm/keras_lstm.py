"""The lstm as a Keras functional model, on dlbench's Keras program machinery
(dlbench.backends.keras.program): Embedding, keras.layers.LSTM, Dense; one definition for
keras-jax, keras-torch and keras-tensorflow. Keras's LSTM keeps kernel (in, 4H),
recurrent_kernel (H, 4H) and one bias (4H,) in the gate order i,f,c,o: the canonical layout, so
the variables map one to one. What differs from the canonical cell is pinned: activations
passed explicitly (Keras 2 defaulted recurrent_activation to hard_sigmoid), unit_forget_bias off
(it only initialises; the canonical parameters carry the forget-gate bias of 1), no dropout."""

from __future__ import annotations

from typing import Any

import keras
from keras import layers

from dlbench.backends.base import Unsupported
from dlbench.backends.keras import program
from dlbench.spec import TrialSpec, WorkloadSpec

from dlbench_lstm import workload

FORGET_BIAS = 0.0  # Keras's LSTM adds nothing to the forget gate at run time


def build(trial: TrialSpec) -> program.KerasProgram:
    forget_bias = trial.workload.numerics.value("lstm_forget_bias")
    if forget_bias != FORGET_BIAS:
        raise Unsupported(f"Keras's LSTM computes lstm_forget_bias {FORGET_BIAS!r}, not {forget_bias!r}")
    return program.build(trial, net)


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    s = workload.MODEL_SIZES[spec.model_size]
    n = spec.numerics
    ids = keras.Input(shape=(s.seq_len,), dtype="int32", name="ids")
    tokens = layers.Embedding(s.vocab, s.embed, embeddings_initializer="zeros", name="embed_tokens")
    lstm = layers.LSTM(
        s.hidden, activation=n.value("lstm_cell_activation"), recurrent_activation=n.value("lstm_gate_activation"),
        use_bias=True, unit_forget_bias=False, kernel_initializer="zeros", recurrent_initializer="zeros",
        bias_initializer="zeros", dropout=0.0, recurrent_dropout=0.0, return_sequences=False, name="lstm")
    head = layers.Dense(spec.num_classes, **program.ZEROS, name="head")
    model = model_class(inputs=ids, outputs=head(lstm(tokens(ids))), name="lstm_classifier")
    cell = lstm.cell
    params: dict[str, Any] = {"embed.tokens": tokens.embeddings, "lstm.kernel": cell.kernel,
                              "lstm.recurrent_kernel": cell.recurrent_kernel, "lstm.bias": cell.bias,
                              **program.dense_params("head", head)}
    numerics = {"lstm_gate_activation": cell.recurrent_activation.__name__,
                "lstm_cell_activation": cell.activation.__name__, "lstm_forget_bias": FORGET_BIAS}
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=numerics)
