"""The detect workload: a single-stage, anchor-free detector (FCOS/CenterNet-like) on synthetic
canvases with 1-3 textured objects of 3 classes. Backbone of 3x3 convolutions, three of stride 2
(down to a stride-8 grid) and one of stride 1, each padding 1 on every side (`SYMMETRIC`), relu;
then a class head and a box head (3x3, stride 1), concatenated into ONE output (N, G, G, C + 4):
C class logits, then (l, t, r, b) box distances. Loss: sigmoid focal loss over every cell and
class plus L1 on the positive cells' boxes, both divided by max(1, positives in the batch).
Targets are computed here, once, in NumPy. Definition: docs/workloads.md#detect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

import numpy as np

import dlbench.workloads.boxes as boxes
import dlbench.workloads.reference_ops as ops
from dlbench.spec import Numerics, WorkloadSpec
from dlbench.workloads.base import (
    COMMON_NUMERICS_FIELDS,
    SUPERVISED_SCENARIOS,
    Preset,
    layer_flops,
)
from dlbench.workloads.data import Dataset, dataset_makers
from dlbench.workloads.params import Init, draw_params, fan_in_uniform

NAME = "detect"
SCENARIOS = SUPERVISED_SCENARIOS
# The held-out quality: mAP@0.5 with COCO-style matching (a detection takes the highest-IoU
# *unmatched* box), all-point interpolated (workloads/boxes.py). extra_scores adds `map_voc`,
# the PASCAL VOC devkit's matching rule, from the same outputs.
QUALITY = "map"
# The detector's classes: three textures (_texture). Fixed: the spec's num_classes is this
# (NUM_CLASSES, an optional workload member) and workloads.validate refuses another value.
CLASSES = 3
NUM_CLASSES = CLASSES
STRIDE = 8
CHANNELS = 3
# Backbone: (name, output channels, stride); every kernel 3x3, pad 1 on every side, relu.
BACKBONE = (("conv1", 16, 2), ("conv2", 32, 2), ("conv3", 64, 2), ("conv4", 64, 1))
HEADS = (("cls", CLASSES), ("box", 4))
# RetinaNet's prior: the class head's bias starts at -log((1 - pi) / pi), pi = 0.01, so every
# cell starts with a 1 % foreground score and the focal loss of the many negatives stays small.
PRIOR = 0.01
PRIOR_BIAS = -math.log((1.0 - PRIOR) / PRIOR)
LOSS = "focal_l1_detection"
FOCAL_ALPHA = 0.25
FOCAL_GAMMA = 2.0
# Target layout per cell: C one-hot classes (zeros for a negative cell), 4 box distances
# (zeros for a negative cell), 1 positive mask.
TARGET_CHANNELS = CLASSES + 4 + 1
# Objects per canvas and their side as a share of the canvas (width and height drawn apart).
MIN_OBJECTS, MAX_OBJECTS = 1, 3
MIN_SIDE, MAX_SIDE = 0.25, 0.5
# A new object is redrawn when it overlaps an earlier one by more than this IoU or its centre
# falls in an earlier object's cell (one object per positive cell: targets are lossless);
# after PLACEMENT_TRIES failed draws the canvas keeps the objects it has.
MAX_OVERLAP = 0.2
PLACEMENT_TRIES = 50
NOISE_STD = 0.5
Detections = boxes.Detections


@final
@dataclass(frozen=True)
class Size:
    canvas: int  # input height = width, pixels

    @property
    def grid(self) -> int:
        return self.canvas // STRIDE


MODEL_SIZES = {"tiny": Size(32), "default": Size(64), "large": Size(128)}

PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=128, batch_size=16, epochs=1, warmup_epochs=1, eval_size=32),
    "cpu": Preset(model_size="default", dataset_size=2048, batch_size=64, epochs=3, warmup_epochs=1, eval_size=256),
    "gpu": Preset(model_size="large", dataset_size=16384, batch_size=128, epochs=5, warmup_epochs=1,
                  eval_size=2048),
}

NUMERICS = Numerics(padding="SYMMETRIC", loss=LOSS,
                    extra={"focal_alpha": FOCAL_ALPHA, "focal_gamma": FOCAL_GAMMA})
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "padding", "focal_alpha", "focal_gamma")


def size(spec: WorkloadSpec) -> Size:
    return MODEL_SIZES[spec.model_size]


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    c = size(spec).canvas
    return (c, c, CHANNELS), "float32"


def output_shape(spec: WorkloadSpec) -> tuple[int, int, int]:
    g = size(spec).grid
    return g, g, CLASSES + 4


def _convs() -> list[tuple[str, int, int, int]]:
    """(name, input channels, output channels, stride) of every convolution, heads last."""
    out, ch = [], CHANNELS
    for name, width, stride in BACKBONE:
        out.append((name, ch, width, stride))
        ch = width
    return out + [(f"{name}_head", ch, width, 1) for name, width in HEADS]


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for name, cin, cout, _ in _convs():
        shapes[f"{name}.kernel"] = (3, 3, cin, cout)
        shapes[f"{name}.bias"] = (cout,)
    return shapes


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    inits = {}
    for name, cin, _, _ in _convs():
        inits[f"{name}.kernel"] = inits[f"{name}.bias"] = fan_in_uniform(9 * cin)
    inits["cls_head.bias"] = Init("constant", PRIOR_BIAS)
    return draw_params(spec.seed, param_shapes(spec), inits)


# --- data --------------------------------------------------------------------------------------


def _texture(cls: int, h: int, w: int) -> np.ndarray:
    """Class 0: a solid red patch; 1: green horizontal stripes (period 4 px); 2: a blue
    checkerboard (4 px squares). Values +-1.5 on the class's channel, -0.5 elsewhere."""
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]
    if cls == 0:
        pattern = np.ones((h, w))
    elif cls == 1:
        pattern = np.where((rows // 2) % 2 == 0, 1.0, -1.0) * np.ones((1, w))
    else:
        pattern = np.where(((rows // 4) + (cols // 4)) % 2 == 0, 1.0, -1.0)
    out = np.full((h, w, CHANNELS), -0.5)
    out[..., cls] = 1.5 * pattern
    return out


def _place(rng: np.random.Generator, canvas: int, placed: list[np.ndarray]) -> np.ndarray | None:
    """One box in pixels (x0, y0, x1, y1), integers, or None after PLACEMENT_TRIES failures."""
    grid = canvas // STRIDE
    cells = {(int((b[1] + b[3]) / 2 // STRIDE), int((b[0] + b[2]) / 2 // STRIDE)) for b in placed}
    for _ in range(PLACEMENT_TRIES):
        w, h = (rng.integers(int(MIN_SIDE * canvas), int(MAX_SIDE * canvas) + 1, size=2))
        x0, y0 = rng.integers(0, canvas - w + 1), rng.integers(0, canvas - h + 1)
        box = np.array([x0, y0, x0 + w, y0 + h], dtype=np.float64)
        cell = (min(int((y0 + h / 2) // STRIDE), grid - 1), min(int((x0 + w / 2) // STRIDE), grid - 1))
        if cell in cells:
            continue
        if placed and np.max(boxes.iou(box, np.stack(placed))) > MAX_OVERLAP:
            continue
        return box
    return None


def draw_canvas(rng: np.random.Generator, canvas: int) -> tuple[np.ndarray, Detections]:
    """One image (H, W, 3) float32 and its objects (boxes normalised, classes, scores 1)."""
    image = rng.normal(0.0, NOISE_STD, size=(canvas, canvas, CHANNELS))
    placed: list[np.ndarray] = []
    classes: list[int] = []
    for _ in range(int(rng.integers(MIN_OBJECTS, MAX_OBJECTS + 1))):
        box = _place(rng, canvas, placed)
        if box is None:
            break
        cls = int(rng.integers(0, CLASSES))
        x0, y0, x1, y1 = box.astype(int)
        image[y0:y1, x0:x1] = _texture(cls, y1 - y0, x1 - x0) + rng.normal(0.0, NOISE_STD, size=(y1 - y0, x1 - x0, 3))
        placed.append(box)
        classes.append(cls)
    truth = Detections(np.stack(placed) / canvas, np.asarray(classes, np.int64), np.ones(len(classes)))
    return image.astype(np.float32), truth



def encode_targets(truth: Detections, grid: int) -> np.ndarray:
    """(G, G, C + 5) float32 targets of one image: each object is assigned to the one cell that
    holds its centre (centre-in-cell); that cell gets the class one-hot, the distances (l, t, r,
    b) from the cell's centre to the box's edges in stride units, and mask 1; every other cell is
    all zeros (a negative for every class)."""
    y = np.zeros((grid, grid, TARGET_CHANNELS), dtype=np.float32)
    for box, cls in zip(truth.boxes, truth.classes):
        x0, y0, x1, y1 = box * grid  # stride units
        i, j = min(int((y0 + y1) / 2), grid - 1), min(int((x0 + x1) / 2), grid - 1)
        cx, cy = j + 0.5, i + 0.5
        y[i, j, cls] = 1.0
        y[i, j, CLASSES:CLASSES + 4] = (cx - x0, cy - y0, x1 - cx, y1 - cy)
        y[i, j, -1] = 1.0
    return y


def decode_targets(y: np.ndarray) -> Detections:
    """The ground truth of one image back from its targets (lossless: one object per cell)."""
    grid = y.shape[0]
    i, j = np.nonzero(y[..., -1] > 0.5)
    classes = np.argmax(y[i, j, :CLASSES], axis=-1).astype(np.int64)
    decoded = boxes.decode_boxes(y[..., CLASSES:CLASSES + 4].astype(np.float64), grid)
    return Detections(decoded[i, j], classes, np.ones(len(i)))


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    """`n` canvases of the split's stream and their targets; labels "random" and "learnable"
    alike (the objects are the labels)."""
    rng = np.random.default_rng((spec.seed, stream))
    s = size(spec)
    x = np.empty((n, s.canvas, s.canvas, CHANNELS), dtype=np.float32)
    y = np.empty((n, s.grid, s.grid, TARGET_CHANNELS), dtype=np.float32)
    for k in range(n):
        x[k], truth = draw_canvas(rng, s.canvas)
        y[k] = encode_targets(truth, s.grid)
    return Dataset(x=x, y=y)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


# --- FLOPs, loss, score --------------------------------------------------------------------------


def _layers(spec: WorkloadSpec) -> list[tuple[str, int, bool]]:
    """(layer, forward FLOPs per sample, needs an input gradient)."""
    out, side = [], size(spec).canvas
    for k, (name, cin, cout, stride) in enumerate(_convs()):
        if stride == 2:
            side //= 2
        out.append((name, 2 * side * side * cout * 9 * cin, k > 0))
    return out


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Forward FLOPs, plus for training the backward (workloads.base.layer_flops)."""
    return layer_flops(_layers(spec), train)


def forward(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The network in float64 NumPy: (N, H, W, 3) -> (N, G, G, C + 4)."""
    p = ops.as_float64(params)
    h = np.asarray(x, dtype=np.float64)
    for name, _, stride in BACKBONE:
        h = ops.relu(ops.conv2d(h, p[f"{name}.kernel"], stride=stride, pad=1) + p[f"{name}.bias"])
    heads = [ops.conv2d(h, p[f"{name}_head.kernel"], pad=1) + p[f"{name}_head.bias"] for name, _ in HEADS]
    return np.concatenate(heads, axis=-1)


def detection_loss(out: np.ndarray, y: np.ndarray, alpha: float = FOCAL_ALPHA, gamma: float = FOCAL_GAMMA) -> float:
    """The loss's definition in float64: with z the class logits, t the one-hot targets,
    p = sigmoid(z), p_t = p t + (1 - p)(1 - t), a_t = alpha t + (1 - alpha)(1 - t),
    focal = sum over cells and classes of -a_t (1 - p_t)^gamma log(p_t); box = sum over positive
    cells of |pred - target| summed over (l, t, r, b); loss = (focal + box) / max(1, positives),
    positives counted over the whole batch."""
    z, t = out[..., :CLASSES].astype(np.float64), y[..., :CLASSES].astype(np.float64)
    mask = y[..., -1].astype(np.float64)
    # -log p_t = softplus(-z) for t = 1, softplus(z) for t = 0: written stably.
    ce = np.maximum(z, 0.0) - z * t + np.log1p(np.exp(-np.abs(z)))
    p = 1.0 / (1.0 + np.exp(-z))
    p_t = p * t + (1.0 - p) * (1.0 - t)
    a_t = alpha * t + (1.0 - alpha) * (1.0 - t)
    focal = np.sum(a_t * (1.0 - p_t) ** gamma * ce)
    box = np.sum(np.abs(out[..., CLASSES:CLASSES + 4] - y[..., CLASSES:CLASSES + 4]) * mask[..., None])
    return float((focal + box) / max(1.0, float(np.sum(mask))))


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    return detection_loss(forward(params, x), y, spec.numerics.extra["focal_alpha"], spec.numerics.extra["focal_gamma"])


def postprocess(spec: WorkloadSpec, outputs: np.ndarray) -> list[Detections]:
    """Network outputs -> detections per image (workloads/boxes.py: decode, score threshold,
    class-wise NMS): the step the infer scenario times apart as `postprocess_*_s`."""
    return boxes.postprocess(outputs, CLASSES)


def score(spec: WorkloadSpec, outputs: np.ndarray, data: Dataset, rule: str = "coco") -> float:
    """mAP@0.5 (all-point; matching `rule`, boxes.MATCH_RULES: COCO's by default) of the
    post-processed outputs against the split's ground truth."""
    truths = [decode_targets(t) for t in data.y[: len(outputs)]]
    return boxes.mean_average_precision(postprocess(spec, outputs), truths, CLASSES, rule)


def extra_scores(spec: WorkloadSpec, outputs: np.ndarray, data: Dataset) -> dict[str, float]:
    """The optional member (workloads.extra_scores): `map_voc`, the same outputs' mAP@0.5 under
    the PASCAL VOC devkit's matching rule (boxes.MATCH_RULES), beside `map`'s COCO rule."""
    return {"map_voc": score(spec, outputs, data, "voc")}
