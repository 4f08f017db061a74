"""The seed CNN: conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2, flatten(HWC), dense128-relu,
dense10; mean softmax cross-entropy; Adam. Canonical layouts: conv kernels HWIO, dense kernels
(in, out); the first dense kernel's rows are in HWC flatten order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlbench.spec import WorkloadSpec
from dlbench.workloads.data import (
    STREAM_DATA,
    STREAM_EVAL,
    STREAM_FIXED_BATCH,
    STREAM_PARAMS,
    Dataset,
)

NAME = "cnn"
INPUT_SHAPE = (32, 32, 3)  # HWC
CONV1_CH = 32
CONV2_CH = 64
HIDDEN = 128
# Spatial sizes with VALID padding: 32 -conv-> 30 -pool-> 15 -conv-> 13 -pool-> 6.
FLAT = 6 * 6 * CONV2_CH
# How far class prototypes stand out of the noise: learnable, not trivial.
SIGNAL = 0.1


@dataclass(frozen=True)
class Preset:
    dataset_size: int
    batch_size: int
    epochs: int
    warmup_epochs: int
    eval_size: int


MODEL_SIZES = {"default": None}

# Presets per device class: `cpu` ends in about a minute per trial on two cores.
PRESETS = {
    "tiny": Preset(dataset_size=256, batch_size=32, epochs=1, warmup_epochs=1, eval_size=64),
    "cpu": Preset(dataset_size=8192, batch_size=128, epochs=3, warmup_epochs=1, eval_size=1024),
    "gpu": Preset(dataset_size=50000, batch_size=128, epochs=5, warmup_epochs=1, eval_size=10000),
}


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


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    """Canonical float32 parameters: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for kernels and biases
    (torch's default bound), drawn in a fixed name order from the spec's seed."""
    rng = np.random.default_rng((spec.seed, STREAM_PARAMS))
    shapes = param_shapes(spec)
    fan_in = {
        "conv1": 3 * 3 * INPUT_SHAPE[2],
        "conv2": 3 * 3 * CONV1_CH,
        "dense1": FLAT,
        "dense2": HIDDEN,
    }
    params = {}
    for name, shape in shapes.items():
        bound = 1.0 / np.sqrt(fan_in[name.split(".")[0]])
        params[name] = rng.uniform(-bound, bound, size=shape).astype(np.float32)
    return params


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    # Class prototypes are shared by the training and evaluation splits; the noise is not.
    protos = np.random.default_rng((spec.seed, STREAM_DATA, 0)).standard_normal(
        (spec.num_classes, *INPUT_SHAPE), dtype=np.float32
    )
    rng = np.random.default_rng((spec.seed, stream, 1))
    y = rng.integers(0, spec.num_classes, size=n, dtype=np.int32)
    x = rng.standard_normal((n, *INPUT_SHAPE), dtype=np.float32)
    x += SIGNAL * protos[y]
    return Dataset(x=x, y=y)


def make_dataset(spec: WorkloadSpec) -> Dataset:
    """Training split: `dataset_size` samples of 10 classes, each a fixed random prototype
    under unit Gaussian noise."""
    return _samples(spec, spec.dataset_size, STREAM_DATA)


def make_eval_dataset(spec: WorkloadSpec) -> Dataset:
    """Held-out split from the same distribution, for accuracy (evaluated outside the window)."""
    return _samples(spec, spec.eval_size, STREAM_EVAL)


def fixed_batch(spec: WorkloadSpec, size: int = 8) -> Dataset:
    """The canonical fixed batch used to compare loss and gradients across frameworks."""
    return _samples(spec, size, STREAM_FIXED_BATCH)


def _layers(spec: WorkloadSpec) -> list[tuple[str, int, bool]]:
    """(layer, forward FLOPs per sample, needs an input gradient). A multiply-add is 2 FLOPs;
    only convolutions and matmuls count (as torch.utils.flop_counter does)."""
    c = INPUT_SHAPE[2]
    return [
        ("conv1", 2 * 30 * 30 * CONV1_CH * 3 * 3 * c, False),  # the input needs no gradient
        ("conv2", 2 * 13 * 13 * CONV2_CH * 3 * 3 * CONV1_CH, True),
        ("dense1", 2 * FLAT * HIDDEN, True),
        ("dense2", 2 * HIDDEN * spec.num_classes, True),
    ]


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Forward FLOPs, plus for training the backward: weight gradients always (same count as the
    forward), input gradients only where the layer's input needs one."""
    total = 0
    for _, fwd, needs_input_grad in _layers(spec):
        total += fwd
        if train:
            total += fwd + (fwd if needs_input_grad else 0)
    return total


def reference_loss(params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """The loss in float64 NumPy, straight from the definition: a reference for parity."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    h = _pool2(np.maximum(_conv_valid(x.astype(np.float64), p["conv1.kernel"]) + p["conv1.bias"], 0))
    h = _pool2(np.maximum(_conv_valid(h, p["conv2.kernel"]) + p["conv2.bias"], 0))
    h = h.reshape(h.shape[0], -1)  # NHWC -> HWC flatten
    h = np.maximum(h @ p["dense1.kernel"] + p["dense1.bias"], 0)
    logits = h @ p["dense2.kernel"] + p["dense2.bias"]
    logits = logits - logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def _conv_valid(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    kh, kw = k.shape[:2]
    n, h, w, _ = x.shape
    out = np.zeros((n, h - kh + 1, w - kw + 1, k.shape[3]))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nhwc,co->nhwo", x[:, i : i + h - kh + 1, j : j + w - kw + 1], k[i, j])
    return out


def _pool2(x: np.ndarray) -> np.ndarray:
    n, h, w, c = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, : h2 * 2, : w2 * 2].reshape(n, h2, 2, w2, 2, c).max(axis=(2, 4))
