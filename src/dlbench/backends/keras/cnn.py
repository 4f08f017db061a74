"""The seed CNN as a Keras functional model (docs/workloads.md#cnn). Keras's layouts are the
canonical ones: NHWC images, HWIO kernels, and Flatten of an NHWC map gives the HWC order of
dense1's rows, so nothing is permuted."""

from __future__ import annotations

import keras
from keras import layers

from dlbench.backends.keras import program
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import cnn as workload

# Passed to every layer that has it: a user's keras.json could say channels_first.
DATA_FORMAT = "channels_last"


def build(trial: TrialSpec) -> program.KerasProgram:
    return program.build(trial, net)


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    size = workload.MODEL_SIZES[spec.model_size]
    x = keras.Input(shape=workload.INPUT_SHAPE, dtype="float32", name="images")
    convs = [layers.Conv2D(ch, 3, padding="valid", activation="relu", data_format=DATA_FORMAT,
                           **program.ZEROS, name=name)
             for name, ch in (("conv1", size.conv1_ch), ("conv2", size.conv2_ch))]
    # VALID pooling drops the odd last row and column (13 -> 6), as the reference does.
    pools = [layers.MaxPooling2D(2, strides=2, padding="valid", data_format=DATA_FORMAT)
             for _ in convs]
    flatten = layers.Flatten(data_format=DATA_FORMAT)
    dense1 = layers.Dense(size.hidden, activation="relu", **program.ZEROS, name="dense1")
    dense2 = layers.Dense(spec.num_classes, **program.ZEROS, name="dense2")
    h = x
    for conv, pool in zip(convs, pools):
        h = pool(conv(h))
    model = model_class(inputs=x, outputs=dense2(dense1(flatten(h))), name="cnn")
    params = {f"{c.name}.{w}": getattr(c, w) for c in convs for w in ("kernel", "bias")}
    params.update({**program.dense_params("dense1", dense1), **program.dense_params("dense2", dense2)})
    paddings = {layer.padding for layer in (*convs, *pools)}
    numerics = {
        "padding": "VALID" if paddings == {"valid"} else ",".join(sorted(paddings)),
        # Flatten of channels_last is the HWC order; channels_first would be CHW.
        "flatten_order": "HWC" if flatten.data_format == "channels_last" else "CHW",
    }
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=numerics)
