"""ResNet-18 (CIFAR variant) and ResNet-50 v1.5 as a Keras functional model (docs/workloads.md#resnet).

SYMMETRIC padding is written out: ZeroPadding2D(k//2) then a VALID convolution (Keras's
"same" would pad a stride-2 convolution (0, 1), as TensorFlow does). BatchNormalization gets
momentum = 1 - bn_momentum (Keras's momentum is the weight of the old value) and eps passed
explicitly, and updates its moving variance with the unbiased batch variance
(UnbiasedBatchNormalization), as the spec and torch do.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import layers

from dlbench.backends.keras import program
from dlbench.backends.keras.layers import UnbiasedBatchNormalization
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import resnet as workload

DATA_FORMAT = "channels_last"


def build(trial: TrialSpec) -> program.KerasProgram:
    return program.build(trial, net)


class _Builder:
    """Creates the conv-BN pairs in the workload's order and keeps them by canonical name."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.numerics = spec.numerics
        self.convs: dict[str, tuple[layers.ZeroPadding2D | None, layers.Conv2D]] = {}
        self.norms: dict[str, UnbiasedBatchNormalization] = {}

    def conv_bn(self, conv: workload.Conv, h: Any) -> Any:
        pad = None
        if conv.size // 2:
            pad = layers.ZeroPadding2D(conv.size // 2, data_format=DATA_FORMAT, name=program.layer_name(f"{conv.name}.pad"))
            h = pad(h)
        layer = layers.Conv2D(conv.out_ch, conv.size, strides=conv.stride, padding="valid",
                              use_bias=False, data_format=DATA_FORMAT, **program.ZEROS,
                              name=program.layer_name(conv.name))
        norm = UnbiasedBatchNormalization(axis=-1, momentum=1.0 - self.numerics.bn_momentum,
                                          epsilon=self.numerics.bn_eps, center=True, scale=True,
                                          name=program.layer_name(conv.bn))
        self.convs[conv.name], self.norms[conv.bn] = (pad, layer), norm
        return norm(layer(h))


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    b = _Builder(spec)
    x = keras.Input(shape=workload.input_shape(spec), dtype="float32", name="images")
    h = layers.ReLU()(b.conv_bn(workload.stem(spec), x))
    if workload.max_pool(spec):
        # 3x3 stride 2 with one pixel of padding: zeros equal torch's -inf here because the
        # input is a ReLU's output (>= 0) and every window holds a real pixel.
        h = layers.ZeroPadding2D(1, data_format=DATA_FORMAT, name="stem_pool_pad")(h)
        h = layers.MaxPooling2D(3, strides=2, padding="valid", data_format=DATA_FORMAT, name="stem_pool")(h)
    for block in workload.blocks(spec):  # conv-BN pairs, a ReLU after all but the last
        z = h
        for i, conv in enumerate(block.convs):
            z = b.conv_bn(conv, z)
            z = layers.ReLU()(z) if i < len(block.convs) - 1 else z
        shortcut = b.conv_bn(block.shortcut, h) if block.shortcut is not None else h
        h = layers.ReLU()(layers.Add()([z, shortcut]))
    head = layers.Dense(spec.num_classes, **program.ZEROS, name="head")
    logits = head(layers.GlobalAveragePooling2D(data_format=DATA_FORMAT)(h))
    model = model_class(inputs=x, outputs=logits, name="resnet")
    params: dict[str, Any] = {f"{name}.kernel": conv.kernel for name, (_, conv) in b.convs.items()}
    buffers: dict[str, Any] = {}
    initial: dict[str, np.ndarray] = {}
    for name, norm in b.norms.items():
        params.update({f"{name}.scale": norm.gamma, f"{name}.bias": norm.beta})
        buffers.update({f"{name}.mean": norm.moving_mean, f"{name}.var": norm.moving_variance})
        initial.update({f"{name}.mean": np.zeros(norm.moving_mean.shape, np.float32),
                        f"{name}.var": np.ones(norm.moving_variance.shape, np.float32)})
    params.update(program.dense_params("head", head))
    return program.Net(model, params, buffers, initial, _numerics(b))


def _numerics(b: _Builder) -> dict[str, Any]:
    """Read back from the layers: each 3x3 convolution VALID after a (1, 1) zero padding on
    both sides, 1x1 convolutions unpadded; every BatchNorm's momentum, eps and variance rule."""
    symmetric = all(
        conv.padding == "valid"
        and (pad.padding if pad is not None else ((0, 0), (0, 0))) == ((k // 2, k // 2), (k // 2, k // 2))
        for pad, conv in b.convs.values()
        for k in [conv.kernel_size[0]]
    )
    momenta = {round(1.0 - norm.momentum, 12) for norm in b.norms.values()}
    eps = {norm.epsilon for norm in b.norms.values()}
    running = {norm.running_var for norm in b.norms.values()}
    return {
        "padding": "SYMMETRIC" if symmetric else "not symmetric",
        "bn_momentum": momenta.pop() if len(momenta) == 1 else sorted(momenta),
        "bn_eps": eps.pop() if len(eps) == 1 else sorted(eps),
        "bn_running_var": running.pop() if len(running) == 1 else sorted(running),
    }
