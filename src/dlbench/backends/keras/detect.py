"""The detect workload as a Keras functional model (docs/workloads.md#detect). SYMMETRIC padding
is written out: ZeroPadding2D(1) then a VALID 3x3 convolution (Keras's "same" pads a stride-2
convolution of an even input (0, 1)); the heads' concatenation is the canonical (N, G, G, C + 4)."""

from __future__ import annotations

import keras
from keras import layers

from dlbench.backends.keras import program
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import detect as workload

# Passed to every layer that has it: a user's keras.json could say channels_first.
DATA_FORMAT = "channels_last"


def build(trial: TrialSpec) -> program.KerasProgram:
    return program.build(trial, net)


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    shape, _ = workload.input_spec(spec)
    x = keras.Input(shape=shape, dtype="float32", name="images")
    pads: list[layers.ZeroPadding2D] = []
    convs: list[layers.Conv2D] = []

    def conv(h: keras.KerasTensor, name: str, width: int, stride: int, activation: str | None) -> keras.KerasTensor:
        pads.append(layers.ZeroPadding2D(1, data_format=DATA_FORMAT, name=f"{name}_pad"))
        convs.append(layers.Conv2D(width, 3, strides=stride, padding="valid", activation=activation,
                                   data_format=DATA_FORMAT, **program.ZEROS, name=name))
        return convs[-1](pads[-1](h))

    h = x
    for name, width, stride in workload.BACKBONE:
        h = conv(h, name, width, stride, "relu")
    heads = [conv(h, f"{name}_head", width, 1, None) for name, width in workload.HEADS]
    out = layers.Concatenate(axis=-1)(heads)
    model = model_class(inputs=x, outputs=out, name="detect")
    params = {f"{c.name}.{w}": getattr(c, w) for c in convs for w in ("kernel", "bias")}
    symmetric = all(c.padding == "valid" for c in convs) and all(p.padding == ((1, 1), (1, 1)) for p in pads)
    numerics = {"padding": "SYMMETRIC" if symmetric else "not symmetric"}
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=numerics)
