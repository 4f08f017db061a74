"""resnet: two architectures, one per model size (docs/workloads.md#resnet). ResNet-18, CIFAR
variant (3x3 stride-1 stem, no max-pool, four stages of two BasicBlocks) at 32x32 for the
tiny/cpu/gpu presets; ResNet-50 v1.5 (7x7 stride-2 stem and 3x3 stride-2 max-pool, stages of 3,
4, 6, 3 bottleneck blocks with the stride on the 3x3 convolution, as torchvision's and MLPerf's)
at 224x224 for `published`, and the same at width 8 and 64x64 for `published-tiny`. Both end in
a global average pool and a linear head; BatchNorm in training mode inside the train step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

import numpy as np

from dlbench.spec import Numerics, WorkloadSpec
import dlbench.workloads.cnn as cnn
import dlbench.workloads.reference_ops as ops
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, SUPERVISED_SCENARIOS, Preset, accuracy, layer_flops
from dlbench.workloads.data import Dataset, dataset_makers
from dlbench.workloads.params import ONES, ZEROS, Init, dense_inits, draw_params, fan_in_uniform

NAME = "resnet"
SCENARIOS = SUPERVISED_SCENARIOS
QUALITY = "accuracy"
score = accuracy
INPUT_SHAPE = cnn.INPUT_SHAPE


BASIC, BOTTLENECK = "basic", "bottleneck"
CIFAR, IMAGENET = "cifar", "imagenet"


@final
@dataclass(frozen=True)
class Size:
    width: int  # W: the stages' inner widths are W, 2W, 4W, 8W channels
    block: str = BASIC  # BasicBlock (two 3x3) or bottleneck (1x1, 3x3, 1x1 x4 expansion)
    depths: tuple[int, int, int, int] = (2, 2, 2, 2)  # blocks per stage
    stem: str = CIFAR  # 3x3 stride 1; or "imagenet": 7x7 stride 2 then a 3x3 stride-2 max-pool
    image: int = 32  # input height = width

    @property
    def expansion(self) -> int:
        """A block's output channels over its inner width (torchvision's `expansion`)."""
        return 4 if self.block == BOTTLENECK else 1

    @property
    def features(self) -> int:
        """Channels into the head."""
        return 8 * self.width * self.expansion


def _resnet50(width: int, image: int) -> Size:
    return Size(width=width, block=BOTTLENECK, depths=(3, 4, 6, 3), stem=IMAGENET, image=image)


MODEL_SIZES = {
    "tiny": Size(width=8),
    "full": Size(width=64),
    # ResNet-50 v1.5 at its published shape, and at width 8 on 64x64 images for CI.
    "resnet50": _resnet50(64, 224),
    "resnet50-tiny": _resnet50(8, 64),
}

# `full` costs 3.3 GFLOP per training sample (~1.2 s per torch eager step of 32 on two cores):
# 16 steps of 32 images fit in the minute a cpu trial should take.
PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=64, batch_size=16, epochs=1, warmup_epochs=1,
                   eval_size=32),
    "cpu": Preset(model_size="full", dataset_size=256, batch_size=32, epochs=1, warmup_epochs=1,
                  eval_size=64),
    "gpu": Preset(model_size="full", dataset_size=50000, batch_size=128, epochs=3,
                  warmup_epochs=1, eval_size=10000),
    # Published shapes (issue 34): 24.3 GFLOP per training image at 224, so a CPU runs the five
    # steps of 4 that a timed window needs (analysis/window.py); a GPU user raises -b and
    # --dataset-size (docs/workloads.md#published-shapes).
    "published": Preset(model_size="resnet50", dataset_size=20, batch_size=4, epochs=1,
                        warmup_epochs=1, eval_size=8, num_classes=1000),
    "published-tiny": Preset(model_size="resnet50-tiny", dataset_size=64, batch_size=16, epochs=1,
                             warmup_epochs=1, eval_size=32),
}

# What a published architecture's size is, as a report names it (workloads.published): the model
# and the figure a table quotes for it (docs/workloads.md#published-shapes).
PUBLISHED = {
    "resnet50": "ResNet-50 v1.5 at 224x224, 1000 classes (model tables quote 4.09 G forward multiply-adds)",
    "resnet50-tiny": "ResNet-50 v1.5's architecture at width 8 on 64x64 images (no published figure to compare)",
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


@final
@dataclass(frozen=True)
class Block:
    """One residual block: its convolutions in order (ReLU after each but the last), then the
    shortcut (a 1x1 projection where the shape changes, else the identity), add, ReLU."""

    name: str  # e.g. "layer2.block0"
    convs: tuple[Conv, ...]
    shortcut: Conv | None


def stem(spec: WorkloadSpec) -> Conv:
    """The first convolution, fed by the data (its input needs no gradient)."""
    s, c = _size(spec), INPUT_SHAPE[2]
    if s.stem == IMAGENET:
        return Conv("stem.conv", "stem.bn", 7, 2, c, s.width, s.image // 2, False)
    return Conv("stem.conv", "stem.bn", 3, 1, c, s.width, s.image, False)


def max_pool(spec: WorkloadSpec) -> bool:
    """Whether a 3x3 stride-2 max-pool (one pixel of padding) follows the stem's ReLU."""
    return _size(spec).stem == IMAGENET


def blocks(spec: WorkloadSpec) -> list[Block]:
    """Every residual block in forward order. The stride of a stage's first block sits on its
    3x3 convolution (ResNet v1.5; v1 put it on the first 1x1) and on its shortcut."""
    s = _size(spec)
    first = stem(spec)
    hw = first.out_hw // 2 if max_pool(spec) else first.out_hw
    in_ch, out = first.out_ch, list[Block]()
    for stage, depth in enumerate(s.depths):
        inner = s.width * 2**stage
        out_ch = inner * s.expansion
        for j in range(depth):
            b, stride = f"layer{stage + 1}.block{j}", 2 if stage > 0 and j == 0 else 1
            hw //= stride
            convs: tuple[Conv, ...]
            if s.block == BOTTLENECK:
                convs = (Conv(f"{b}.conv1", f"{b}.bn1", 1, 1, in_ch, inner, hw * stride, True),
                         Conv(f"{b}.conv2", f"{b}.bn2", 3, stride, inner, inner, hw, True),
                         Conv(f"{b}.conv3", f"{b}.bn3", 1, 1, inner, out_ch, hw, True))
            else:
                convs = (Conv(f"{b}.conv1", f"{b}.bn1", 3, stride, in_ch, out_ch, hw, True),
                         Conv(f"{b}.conv2", f"{b}.bn2", 3, 1, out_ch, out_ch, hw, True))
            shortcut = None
            if stride != 1 or in_ch != out_ch:
                shortcut = Conv(f"{b}.shortcut.conv", f"{b}.shortcut.bn", 1, stride, in_ch, out_ch, hw, True)
            out.append(Block(b, convs, shortcut))
            in_ch = out_ch
    return out


def convs(spec: WorkloadSpec) -> list[Conv]:
    """Every convolution in forward order (a block's shortcut after its last conv)."""
    out = [stem(spec)]
    for block in blocks(spec):
        out.extend(block.convs)
        if block.shortcut is not None:
            out.append(block.shortcut)
    return out


def _size(spec: WorkloadSpec) -> Size:
    size: Size = MODEL_SIZES[spec.model_size]
    return size


def input_shape(spec: WorkloadSpec) -> tuple[int, int, int]:
    """HWC: 32x32x3 for the CIFAR ResNet-18, 224x224x3 for ResNet-50 (64x64x3 tiny)."""
    image = _size(spec).image
    return image, image, INPUT_SHAPE[2]


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    return input_shape(spec), "float32"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for conv in convs(spec):
        shapes[f"{conv.name}.kernel"] = (conv.size, conv.size, conv.in_ch, conv.out_ch)
        shapes[f"{conv.bn}.scale"] = (conv.out_ch,)
        shapes[f"{conv.bn}.bias"] = (conv.out_ch,)
    width = _size(spec).features
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
    inits.update(dense_inits("head", _size(spec).features))
    return draw_params(spec.seed, param_shapes(spec), inits)


def teacher_features(spec: WorkloadSpec, x: np.ndarray) -> np.ndarray:
    """As cnn: the block averages of the image (8x8 blocks at 32x32, 56x56 at 224x224)."""
    return cnn.teacher_features(spec, x)


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    # The cnn's images and teacher at this size's resolution (docs: "Teacher features: as cnn").
    return cnn.image_samples(spec, n, stream, _size(spec).image)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Convolutions (2 x output pixels x out channels x kernel area x in channels) and the head;
    pooling and BatchNorm count 0. Training adds weight gradients (as the forward) and input
    gradients for everything but the stem convolution."""
    layers = [(c.name, 2 * c.out_hw**2 * c.out_ch * c.size**2 * c.in_ch, c.needs_input_grad)
              for c in convs(spec)]
    layers.append(("head", 2 * _size(spec).features * spec.num_classes, True))
    return layer_flops(layers, train)


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> float:
    """Training mode: every BatchNorm normalises with its batch statistics."""
    p, eps = ops.as_float64(params), spec.numerics.bn_eps

    def conv_bn(conv: Conv, h: np.ndarray) -> np.ndarray:
        z = ops.conv2d(h, p[f"{conv.name}.kernel"], conv.stride, pad=conv.size // 2)
        return ops.batch_norm_train(z, p[f"{conv.bn}.scale"], p[f"{conv.bn}.bias"], eps)

    h = ops.relu(conv_bn(stem(spec), x.astype(np.float64)))
    if max_pool(spec):
        h = ops.max_pool(h, 3, 2, pad=1)
    for block in blocks(spec):
        z = h
        for i, conv in enumerate(block.convs):
            z = conv_bn(conv, z)
            z = ops.relu(z) if i < len(block.convs) - 1 else z
        h = ops.relu(z + (h if block.shortcut is None else conv_bn(block.shortcut, h)))
    return ops.cross_entropy(h.mean(axis=(1, 2)) @ p["head.kernel"] + p["head.bias"], y)
