"""The lstm in JAX, on dlbench's JAX program machinery (dlbench.backends.jax.program): the
canonical layout is JAX's own (kernels (in, 4H), one bias), so nothing is converted. The input
projection of all L steps is one matmul; the recurrence is a lax.scan over time, its step one
(N, H) x (H, 4H) matmul and the gates."""

from __future__ import annotations

import typing
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dlbench.backends.jax import program
from dlbench.backends.jax.layers import Params, dense
from dlbench.spec import TrialSpec

# spec numerics name -> the JAX function it selects (the read-back inverts these tables).
GATE_ACTIVATIONS = {"sigmoid": jax.nn.sigmoid, "hard_sigmoid": jax.nn.hard_sigmoid}
CELL_ACTIVATIONS = {"tanh": jnp.tanh}


def build(trial: TrialSpec) -> program.JaxProgram:
    return program.build(trial, LstmModel(trial))


@typing.final
class LstmModel:
    def __init__(self, trial: TrialSpec) -> None:
        n = trial.workload.numerics
        gate, cell = n.value("lstm_gate_activation"), n.value("lstm_cell_activation")
        if gate not in GATE_ACTIVATIONS:
            raise program.refuse("lstm", "lstm_gate_activation", gate, GATE_ACTIVATIONS)
        if cell not in CELL_ACTIVATIONS:
            raise program.refuse("lstm", "lstm_cell_activation", cell, CELL_ACTIVATIONS)
        self._gate, self._cell = GATE_ACTIVATIONS[gate], CELL_ACTIVATIONS[cell]
        # A Python float (weakly typed): float32 stays float32, the float64 reference float64.
        self._forget_bias = float(n.value("lstm_forget_bias"))

    def initial_buffers(self) -> dict[str, np.ndarray]:
        return {}

    def apply(self, params: Params, buffers: Params, x: jax.Array, train: bool) -> tuple[jax.Array, Params]:
        e = jnp.take(params["embed.tokens"], x, axis=0)  # (N, L, E)
        projected = e @ params["lstm.kernel"] + params["lstm.bias"]  # (N, L, 4H): every step at once
        recurrent = params["lstm.recurrent_kernel"]
        h0 = jnp.zeros((x.shape[0], recurrent.shape[0]), projected.dtype)

        def step(carry: tuple[jax.Array, jax.Array], z_in: jax.Array) -> tuple[tuple[jax.Array, jax.Array], None]:
            h, c = carry
            i, f, g, o = jnp.split(z_in + h @ recurrent, 4, axis=-1)  # canonical order i, f, g, o
            c = self._gate(f + self._forget_bias) * c + self._gate(i) * self._cell(g)
            return (self._gate(o) * self._cell(c), c), None

        (h, _), _ = lax.scan(step, (h0, h0), jnp.swapaxes(projected, 0, 1))
        return dense(params, "head", h), buffers

    def numerics(self) -> dict[str, Any]:
        gates = {v: k for k, v in GATE_ACTIVATIONS.items()}
        cells = {v: k for k, v in CELL_ACTIVATIONS.items()}
        return {"lstm_gate_activation": gates[self._gate], "lstm_cell_activation": cells[self._cell],
                "lstm_forget_bias": self._forget_bias}
