"""The ddpm U-Net as a Keras functional model (docs/workloads.md#ddpm): keras.layers where Keras
ships the layer (Conv2D after ZeroPadding2D for the spec's symmetric pads, GroupNormalization with
the spec's groups and epsilon passed explicitly, Keras's default being 1e-3; UpSampling2D
nearest; Dense), keras.ops on the symbolic tensors for the rest (slicing out the timestep, the
sinusoidal embedding, the broadcast add of each block's time projection, concatenation)."""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import layers, ops

from dlbench.backends.base import Unsupported
from dlbench.backends.keras import program
from dlbench.spec import TrialSpec, WorkloadSpec
from dlbench.workloads import ddpm as workload

DATA_FORMAT = "channels_last"
IMPLEMENTED = {"time_embedding": "sin_cos_period_10000", "upsample": "nearest_x2", "activation": "silu"}


def build(trial: TrialSpec) -> program.KerasProgram:
    n = trial.workload.numerics
    for name, value in IMPLEMENTED.items():
        if n.value(name) != value:
            raise Unsupported(f"the Keras ddpm implements {name} {value!r}, not {n.value(name)!r}")
    return program.build(trial, net)


def time_embedding(t: Any, dim: int) -> Any:
    half = dim // 2
    freqs = ops.exp(ops.arange(half, dtype="float32") * (-math.log(workload.MAX_PERIOD) / half))
    args = ops.expand_dims(t, 1) * ops.expand_dims(ops.cast(freqs, t.dtype), 0)
    return ops.concatenate([ops.sin(args), ops.cos(args)], axis=1)


class _Builder:
    """Creates the layers in the workload's order, keeping them by canonical name."""

    def __init__(self, spec: WorkloadSpec) -> None:
        n = spec.numerics
        self.groups = int(n.value("group_norm_groups"))
        self.eps = float(n.value("group_norm_eps"))
        self.convs: dict[str, tuple[layers.ZeroPadding2D | None, layers.Conv2D]] = {}
        self.norms: dict[str, layers.GroupNormalization] = {}
        self.denses: dict[str, layers.Dense] = {}
        self.upsample: layers.UpSampling2D | None = None

    def conv(self, name: str, h: Any, filters: int, size: int = 3, stride: int = 1) -> Any:
        pad = None
        if size // 2:
            pad = layers.ZeroPadding2D(size // 2, data_format=DATA_FORMAT, name=program.layer_name(f"{name}.pad"))
            h = pad(h)
        layer = layers.Conv2D(filters, size, strides=stride, padding="valid", use_bias=True,
                              data_format=DATA_FORMAT, **program.ZEROS, name=program.layer_name(name))
        self.convs[name] = (pad, layer)
        return layer(h)

    def norm(self, name: str, h: Any) -> Any:
        layer = layers.GroupNormalization(groups=self.groups, axis=-1, epsilon=self.eps, center=True,
                                          scale=True, name=program.layer_name(name))
        self.norms[name] = layer
        return layer(h)

    def dense(self, name: str, h: Any, units: int) -> Any:
        layer = layers.Dense(units, **program.ZEROS, name=program.layer_name(name))
        self.denses[name] = layer
        return layer(h)

    def block(self, name: str, x: Any, temb: Any, out_ch: int) -> Any:
        h = self.conv(f"{name}.conv1", ops.silu(self.norm(f"{name}.gn1", x)), out_ch)
        proj = self.dense(f"{name}.time", ops.silu(temb), out_ch)
        h = h + ops.expand_dims(ops.expand_dims(proj, 1), 1)
        h = self.conv(f"{name}.conv2", ops.silu(self.norm(f"{name}.gn2", h)), out_ch)
        skip = self.conv(f"{name}.skip", x, out_ch, size=1) if x.shape[-1] != out_ch else x
        return h + skip


def net(spec: WorkloadSpec, model_class: type) -> program.Net:
    s = workload.MODEL_SIZES[spec.model_size]
    c = workload.CHANNELS
    b = _Builder(spec)
    shape, _ = workload.input_spec(spec)
    x = keras.Input(shape=shape, dtype="float32", name="noised")
    img, t = x[..., :c], x[:, 0, 0, c]
    temb = b.dense("time.dense1", time_embedding(t, s.embed), s.time_dim)
    temb = b.dense("time.dense2", ops.silu(temb), s.time_dim)
    skip = b.block("down.block", b.conv("stem", img, s.ch1), temb, s.ch1)
    h = b.block("mid.block", b.conv("down.conv", skip, s.ch1, stride=2), temb, s.ch2)
    b.upsample = layers.UpSampling2D(2, data_format=DATA_FORMAT, interpolation="nearest", name="up_sample")
    h = b.conv("up.conv", b.upsample(h), s.ch2)
    h = b.block("up.block", ops.concatenate([h, skip], axis=-1), temb, s.ch1)
    out = b.conv("out.conv", ops.silu(b.norm("out.gn", h)), c)
    model = model_class(inputs=x, outputs=layers.Flatten(data_format=DATA_FORMAT)(out), name="ddpm")
    params: dict[str, Any] = {}
    for name, (_, conv) in b.convs.items():
        params.update({f"{name}.kernel": conv.kernel, f"{name}.bias": conv.bias})
    for name, norm in b.norms.items():
        params.update({f"{name}.scale": norm.gamma, f"{name}.bias": norm.beta})
    for name, dense in b.denses.items():
        params.update(program.dense_params(name, dense))
    return program.Net(model, params, buffers={}, initial_buffers={}, numerics=_numerics(b))


def _numerics(b: _Builder) -> dict[str, Any]:
    """Read back from the layers: symmetric pads of k//2 before VALID convolutions; the norms'
    groups and epsilon; nearest-neighbour x2 upsampling."""
    symmetric = all(
        conv.padding == "valid"
        and (pad.padding if pad is not None else ((0, 0), (0, 0))) == ((k // 2, k // 2), (k // 2, k // 2))
        for pad, conv in b.convs.values()
        for k in [conv.kernel_size[0]]
    )
    groups = {norm.groups for norm in b.norms.values()}
    eps = {norm.epsilon for norm in b.norms.values()}
    up = b.upsample
    nearest = up is not None and up.interpolation == "nearest" and tuple(up.size) == (2, 2)
    return {
        "padding": "SYMMETRIC" if symmetric else "not symmetric",
        "group_norm_groups": groups.pop() if len(groups) == 1 else sorted(groups),
        "group_norm_eps": eps.pop() if len(eps) == 1 else sorted(eps),
        "time_embedding": IMPLEMENTED["time_embedding"],  # written in time_embedding() above
        "upsample": "nearest_x2" if nearest else repr(up),
        "activation": IMPLEMENTED["activation"],  # ops.silu, written above
    }
