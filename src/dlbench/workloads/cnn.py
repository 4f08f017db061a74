"""The seed CNN: conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2, flatten(HWC), dense128-relu,
dense(C); VALID padding. Canonical layouts: conv kernels HWIO, dense kernels (in, out); the
first dense kernel's rows are in HWC flatten order. Definition: docs/workloads.md#cnn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

import numpy as np

import dlbench.workloads.reference_ops as ops
from dlbench.spec import Numerics, WorkloadSpec
from dlbench.workloads.base import (
    COMMON_NUMERICS_FIELDS,
    SUPERVISED_SCENARIOS,
    Preset,
    accuracy,
    layer_flops,
)
from dlbench.workloads.data import (
    Dataset,
    dataset_makers,
    labelled_samples,
)
from dlbench.workloads.params import dense_inits, draw_params, fan_in_uniform

NAME = "cnn"
SCENARIOS = SUPERVISED_SCENARIOS
QUALITY = "accuracy"
score = accuracy
INPUT_SHAPE = (32, 32, 3)  # HWC
CONV1_CH = 32
CONV2_CH = 64
HIDDEN = 128
# Spatial sizes with VALID padding: 32 -conv-> 30 -pool-> 15 -conv-> 13 -pool-> 6.
FLAT = 6 * 6 * CONV2_CH


@final
@dataclass(frozen=True)
class Size:
    conv1_ch: int
    conv2_ch: int
    hidden: int


# One size: the backends build it from the constants above.
MODEL_SIZES = {"default": Size(conv1_ch=CONV1_CH, conv2_ch=CONV2_CH, hidden=HIDDEN)}

# Presets per device class: `cpu` ends in about a minute per trial on two cores.
PRESETS = {
    "tiny": Preset(model_size="default", dataset_size=256, batch_size=32, epochs=1,
                   warmup_epochs=1, eval_size=64),
    "cpu": Preset(model_size="default", dataset_size=8192, batch_size=128, epochs=3,
                  warmup_epochs=1, eval_size=1024),
    "gpu": Preset(model_size="default", dataset_size=50000, batch_size=128, epochs=5,
                  warmup_epochs=1, eval_size=10000),
}

NUMERICS = Numerics(padding="VALID", flatten_order="HWC")
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "padding", "flatten_order")

# Teacher features: the image average-pooled over 8x8 blocks (48 values, see teacher_features).
TEACHER_POOL = 8
MARGIN = 0.4


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    return INPUT_SHAPE, "float32"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    c = INPUT_SHAPE[2]
    return {
        "conv1.kernel": (3, 3, c, CONV1_CH),
        "conv1.bias": (CONV1_CH,),
        "conv2.kernel": (3, 3, CONV1_CH, CONV2_CH),
        "conv2.bias": (CONV2_CH,),
        "dense1.kernel": (FLAT, HIDDEN),
        "dense1.bias": (HIDDEN,),
        "dense2.kernel": (HIDDEN, spec.num_classes),
        "dense2.bias": (spec.num_classes,),
    }


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    inits = {
        "conv1.kernel": fan_in_uniform(3 * 3 * INPUT_SHAPE[2]),
        "conv1.bias": fan_in_uniform(3 * 3 * INPUT_SHAPE[2]),
        "conv2.kernel": fan_in_uniform(3 * 3 * CONV1_CH),
        "conv2.bias": fan_in_uniform(3 * 3 * CONV1_CH),
        **dense_inits("dense1", FLAT),
        **dense_inits("dense2", HIDDEN),
    }
    return draw_params(spec.seed, param_shapes(spec), inits)


def draw_block_means(rng: np.random.Generator, n: int, image: int = INPUT_SHAPE[0]) -> np.ndarray:
    """Latents of n images of `image` x `image` pixels: their block means, (n, 4, 4, 3) for
    the 32x32 images of the cnn (8x8 blocks), each N(0, 1 + 1/k²) for k x k blocks: a random
    pattern N(0, 1) plus the block mean of N(0, 1) pixel noise. Larger images (resnet's and vit's
    224x224) keep the 4x4 grid of blocks, so the teacher sees 48 values at every resolution."""
    k = _block(image)
    blocks = image // k, image // k, INPUT_SHAPE[2]
    return rng.standard_normal((n, *blocks)) * np.sqrt(1.0 + 1.0 / k**2)


def _block(image: int) -> int:
    """Teacher block side: 8 pixels at the cnn's 32 (its TEACHER_POOL), image/4 in general."""
    return image // (INPUT_SHAPE[0] // TEACHER_POOL)


def render_images(rng: np.random.Generator, block_means: np.ndarray,
                  image: int = INPUT_SHAPE[0]) -> np.ndarray:
    """NHWC float32 `image` x `image` images with the given block means (k x k blocks, k =
    image/4: 8 at 32x32): every pixel is its block's pattern value plus N(0, 1) noise. The noise
    is drawn as iid N(0, 1) minus its own block mean (for a Gaussian the deviations from the mean
    are independent of the mean), so rejected candidates never cost an image's draws. Why
    blocks: on white-noise images alone the teacher's block averages are a faint signal (std 1/8
    against 1 per pixel) and the cnn reached only 67 % held-out accuracy in 400 Adam steps; with
    the pattern, 93 % in 200 (torch eager, margin 0.4)."""
    n, (bh, bw, c), k = len(block_means), block_means.shape[1:], _block(image)
    # Pixels as (image, block row, row in block, block column, column in block, channel).
    e = rng.standard_normal((n, bh, k, bw, k, c), dtype=np.float32)
    e -= e.mean(axis=(2, 4), keepdims=True)
    e += block_means.astype(np.float32)[:, :, None, :, None, :]
    return e.reshape(n, bh * k, bw * k, c)


def image_samples(spec: WorkloadSpec, n: int, stream: int, image: int) -> Dataset:
    """The cnn's labelled images at `image` x `image` pixels (same teacher, same 4x4 grid of
    block means): resnet's and vit's data at their resolutions."""

    def draw(rng: np.random.Generator, m: int) -> np.ndarray:
        return draw_block_means(rng, m, image)

    def render(rng: np.random.Generator, block_means: np.ndarray) -> np.ndarray:
        return render_images(rng, block_means, image)

    return labelled_samples(spec, n, stream, draw, latent_features, render, MARGIN)


def teacher_features(spec: WorkloadSpec, x: np.ndarray) -> np.ndarray:
    """What the teacher sees of an image: its block averages (8x8 blocks at 32x32, image/4 in
    general: 48 values, variance ~1)."""
    return ops.avg_pool(np.asarray(x, dtype=np.float64), _block(x.shape[1])).reshape(len(x), -1)


def latent_features(block_means: np.ndarray) -> np.ndarray:
    return block_means.reshape(len(block_means), -1)


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    return labelled_samples(spec, n, stream, draw_block_means, latent_features, render_images,
                            MARGIN)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


def _layers(spec: WorkloadSpec) -> list[tuple[str, int, bool]]:
    """(layer, forward FLOPs per sample, needs an input gradient)."""
    c = INPUT_SHAPE[2]
    return [
        ("conv1", 2 * 30 * 30 * CONV1_CH * 3 * 3 * c, False),  # the input needs no gradient
        ("conv2", 2 * 13 * 13 * CONV2_CH * 3 * 3 * CONV1_CH, True),
        ("dense1", 2 * FLAT * HIDDEN, True),
        ("dense2", 2 * HIDDEN * spec.num_classes, True),
    ]


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Forward FLOPs, plus for training the backward (workloads.base.layer_flops)."""
    return layer_flops(_layers(spec), train)


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> float:
    p = ops.as_float64(params)
    h = ops.conv2d(x.astype(np.float64), p["conv1.kernel"]) + p["conv1.bias"]
    h = ops.max_pool2(ops.relu(h))
    h = ops.max_pool2(ops.relu(ops.conv2d(h, p["conv2.kernel"]) + p["conv2.bias"]))
    h = h.reshape(h.shape[0], -1)  # NHWC -> HWC flatten
    h = ops.relu(h @ p["dense1.kernel"] + p["dense1.bias"])
    return ops.cross_entropy(h @ p["dense2.kernel"] + p["dense2.bias"], y)
