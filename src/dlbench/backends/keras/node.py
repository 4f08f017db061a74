"""The neural ODE classifier as a Keras functional model (docs/workloads.md#node): Dense `inp`,
an RK4Block integrating f(h) = dense2(tanh(dense1(h))) over [0, 1] in S fixed steps (unrolled,
gradients through the solver), Dense `head`."""

from __future__ import annotations

import keras
from keras import layers

from dlbench.backends.keras import program
from dlbench.backends.keras.layers import RK4Block
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import node as workload


def build(trial: TrialSpec) -> program.KerasProgram:
    return program.build(trial, net)


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    s = workload.MODEL_SIZES[spec.model_size]
    x = keras.Input(shape=(2,), dtype="float32", name="points")
    inp = layers.Dense(s.hidden, **program.ZEROS, name="inp")
    field = RK4Block(s.hidden, s.field_hidden, s.steps, name="field")
    head = layers.Dense(spec.num_classes, **program.ZEROS, name="head")
    model = model_class(inputs=x, outputs=head(field(inp(x))), name="node")
    params = {**program.dense_params("inp", inp), **program.dense_params("field.dense1", field.dense1),
              **program.dense_params("field.dense2", field.dense2), **program.dense_params("head", head)}
    return program.Net(model, params, buffers={}, initial_buffers={},
                       numerics={"ode_solver": field.solver})
