"""resnet: ResNet-18, CIFAR variant (3x3 stride-1 stem, no max-pool, four stages of two
BasicBlocks, global average pool, linear head), BatchNorm in training mode inside the train
step. Definition: docs/workloads.md#resnet."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import final

import numpy as np

from dlbench.spec import Numerics, WorkloadSpec
import dlbench.workloads.cnn as cnn
import dlbench.workloads.reference_ops as ops
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, SUPERVISED_SCENARIOS, Preset, accuracy
from dlbench.workloads.data import (
    Dataset,
    dataset_makers,
    labelled_samples,
)
from dlbench.workloads.params import ONES, ZEROS, Init, dense_inits, draw_params, fan_in_uniform

NAME = "resnet"
SCENARIOS = SUPERVISED_SCENARIOS
QUALITY = "accuracy"
score = accuracy
INPUT_SHAPE = cnn.INPUT_SHAPE


@final
@dataclass(frozen=True)
class Size:
    width: int  # W: the stages have W, 2W, 4W, 8W channels


MODEL_SIZES = {"tiny": Size(width=8), "full": Size(width=64)}

# `full` costs 3.3 GFLOP per training sample (~1.2 s per torch eager step of 32 on two cores):
# 16 steps of 32 images fit in the minute a cpu trial should take.
PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=64, batch_size=16, epochs=1, warmup_epochs=1,
                   eval_size=32),
    "cpu": Preset(model_size="full", dataset_size=256, batch_size=32, epochs=1, warmup_epochs=1,
                  eval_size=64),
    "gpu": Preset(model_size="full", dataset_size=50000, batch_size=128, epochs=3,
                  warmup_epochs=1, eval_size=10000),
}

NUMERICS = Numerics(padding="SYMMETRIC")
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "padding", "bn_momentum", "bn_eps", "bn_running_var")

MARGIN = cnn.MARGIN


@final
@dataclass(frozen=True)
class Conv:
    """One convolution (no bias) and the BatchNorm after it."""

    name: str  # e.g. "layer2.block0.conv1"; its BatchNorm is `bn`
    bn: str
    size: int  # kernel height = width
    stride: int
    in_ch: int
    out_ch: int
    out_hw: int  # output height = width (square inputs)
    needs_input_grad: bool


def _blocks(spec: WorkloadSpec) -> Iterator[tuple[str, int, int, int, int]]:
    """(block prefix, in channels, out channels, stride, output height = width)."""
    w, hw = _size(spec).width, INPUT_SHAPE[0]
    in_ch = w
    for stage in range(4):
        out_ch = w * 2**stage
        for j in range(2):
            stride = 2 if stage > 0 and j == 0 else 1
            hw //= stride
            yield f"layer{stage + 1}.block{j}", in_ch, out_ch, stride, hw
            in_ch = out_ch


def convs(spec: WorkloadSpec) -> list[Conv]:
    """Every convolution in forward order (a block's shortcut after its conv2)."""
    w, hw, c = _size(spec).width, INPUT_SHAPE[0], INPUT_SHAPE[2]
    out = [Conv("stem.conv", "stem.bn", 3, 1, c, w, hw, False)]  # fed by the data
    for b, in_ch, out_ch, stride, hw in _blocks(spec):
        out.append(Conv(f"{b}.conv1", f"{b}.bn1", 3, stride, in_ch, out_ch, hw, True))
        out.append(Conv(f"{b}.conv2", f"{b}.bn2", 3, 1, out_ch, out_ch, hw, True))
        if stride != 1 or in_ch != out_ch:
            out.append(Conv(f"{b}.shortcut.conv", f"{b}.shortcut.bn", 1, stride, in_ch, out_ch,
                            hw, True))
    return out


def _size(spec: WorkloadSpec) -> Size:
    size: Size = MODEL_SIZES[spec.model_size]
    return size


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    return INPUT_SHAPE, "float32"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for conv in convs(spec):
        shapes[f"{conv.name}.kernel"] = (conv.size, conv.size, conv.in_ch, conv.out_ch)
        shapes[f"{conv.bn}.scale"] = (conv.out_ch,)
        shapes[f"{conv.bn}.bias"] = (conv.out_ch,)
    width = 8 * _size(spec).width
    shapes.update({"head.kernel": (width, spec.num_classes), "head.bias": (spec.num_classes,)})
    return shapes


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    """BatchNorm running statistics, not trained: `<bn>.mean` starts at 0, `<bn>.var` at 1."""
    shapes: dict[str, tuple[int, ...]] = {}
    for conv in convs(spec):
        shapes[f"{conv.bn}.mean"] = (conv.out_ch,)
        shapes[f"{conv.bn}.var"] = (conv.out_ch,)
    return shapes


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    inits: dict[str, Init] = {}
    for conv in convs(spec):
        inits[f"{conv.name}.kernel"] = fan_in_uniform(conv.size * conv.size * conv.in_ch)
        inits.update({f"{conv.bn}.scale": ONES, f"{conv.bn}.bias": ZEROS})
    inits.update(dense_inits("head", 8 * _size(spec).width))
    return draw_params(spec.seed, param_shapes(spec), inits)


def teacher_features(spec: WorkloadSpec, x: np.ndarray) -> np.ndarray:
    """As cnn: the 8x8 block averages of the image."""
    return cnn.teacher_features(spec, x)


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    # The cnn's images and teacher (docs: "Teacher features: as cnn").
    return labelled_samples(spec, n, stream, cnn.draw_block_means, cnn.latent_features,
                            cnn.render_images, MARGIN)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Convolutions (2 x output pixels x out channels x kernel area x in channels) and the head;
    pooling and BatchNorm count 0. Training adds weight gradients (as the forward) and input
    gradients for everything but the stem convolution."""
    layers = [(2 * c.out_hw**2 * c.out_ch * c.size**2 * c.in_ch, c.needs_input_grad)
              for c in convs(spec)]
    layers.append((2 * 8 * _size(spec).width * spec.num_classes, True))
    if not train:
        return sum(fwd for fwd, _ in layers)
    return sum(2 * fwd + (fwd if needs else 0) for fwd, needs in layers)


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> float:
    """Training mode: every BatchNorm normalises with its batch statistics."""
    p, eps = ops.as_float64(params), spec.numerics.bn_eps

    def conv_bn(conv: Conv, h: np.ndarray) -> np.ndarray:
        z = ops.conv2d(h, p[f"{conv.name}.kernel"], conv.stride, pad=conv.size // 2)
        return ops.batch_norm_train(z, p[f"{conv.bn}.scale"], p[f"{conv.bn}.bias"], eps)

    by_name = {c.name: c for c in convs(spec)}
    h = ops.relu(conv_bn(by_name["stem.conv"], x.astype(np.float64)))
    for b, *_ in _blocks(spec):
        z = ops.relu(conv_bn(by_name[f"{b}.conv1"], h))
        z = conv_bn(by_name[f"{b}.conv2"], z)
        shortcut = by_name.get(f"{b}.shortcut.conv")
        h = ops.relu(z + (h if shortcut is None else conv_bn(shortcut, h)))
    return ops.cross_entropy(h.mean(axis=(1, 2)) @ p["head.kernel"] + p["head.bias"], y)
