"""The vit workload as a Keras functional model (docs/workloads.md#vit): the patch embedding as
one stride-P Conv2D (VALID, with bias) reshaped to (T, D) rows in row-major order, the class
token prepended (ClassToken), learned positions (PositionEmbedding), the transformer workload's
pre-LN blocks (transformer.py's Encoder: MultiHeadAttention, exact GELU), a final
LayerNormalization and the head on the class token."""

from __future__ import annotations

from typing import Any

import keras
from keras import layers

from dlbench.backends.keras import program
from dlbench.backends.keras.layers import ClassToken, PositionEmbedding
from dlbench.backends.keras.transformer import Encoder
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import vit as workload

DATA_FORMAT = "channels_last"


def build(trial: TrialSpec) -> program.KerasProgram:
    return program.build(trial, net)


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    s = workload.MODEL_SIZES[spec.model_size]
    x = keras.Input(shape=(s.image, s.image, workload.CHANNELS), dtype="float32", name="images")
    patch = layers.Conv2D(s.dim, s.patch, strides=s.patch, padding="valid", use_bias=True,
                          data_format=DATA_FORMAT, **program.ZEROS, name="embed_patch")
    cls = ClassToken(s.dim, name="embed_cls")
    positions = PositionEmbedding(s.patches + 1, s.dim, name="embed_positions")
    h = positions(cls(layers.Reshape((s.patches, s.dim))(patch(x))))
    encoder = Encoder(spec, s.encoder)
    h = encoder(h)
    token = h[:, 0]  # the class token
    head = layers.Dense(spec.num_classes, **program.ZEROS, name="head")
    logits = head(encoder.norm("final_ln", token))
    model = model_class(inputs=x, outputs=logits, name="vit")
    params: dict[str, Any] = {"embed.patch.kernel": patch.kernel, "embed.patch.bias": patch.bias,
                              "embed.cls": cls.token, "embed.positions": positions.positions,
                              **encoder.params(), **program.dense_params("head", head)}
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=encoder.numerics())
