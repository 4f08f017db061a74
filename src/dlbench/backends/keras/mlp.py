"""mlp as a Keras functional model: Dense-relu, Dense-relu, Dense (docs/workloads.md#mlp)."""

from __future__ import annotations

import keras
from keras import layers

from dlbench.backends.keras import program
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import mlp as workload


def build(trial: TrialSpec) -> program.KerasProgram:
    return program.build(trial, net)


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    size = workload.MODEL_SIZES[spec.model_size]
    x = keras.Input(shape=(size.inputs,), dtype="float32", name="x")
    dense1 = layers.Dense(size.hidden, activation="relu", **program.ZEROS, name="dense1")
    dense2 = layers.Dense(size.hidden, activation="relu", **program.ZEROS, name="dense2")
    dense3 = layers.Dense(spec.num_classes, **program.ZEROS, name="dense3")
    model = model_class(inputs=x, outputs=dense3(dense2(dense1(x))), name="mlp")
    params = {**program.dense_params("dense1", dense1), **program.dense_params("dense2", dense2),
              **program.dense_params("dense3", dense3)}
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics={})
