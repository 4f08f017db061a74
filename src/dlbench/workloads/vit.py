"""vit: a Vision Transformer classifying images (Dosovitskiy et al. 2021): non-overlapping
P x P patches embedded by one linear map (a stride-P convolution), a learned class token
prepended, learned positions added, pre-LN encoder blocks (the transformer workload's), a final
LayerNorm, the class token's output through a linear head. ViT-B/16 (224x224, patch 16, 12
layers, D 768, 12 heads, F 3072, 1000 classes) for `published` and `gpu`, small ones for `tiny`,
`published-tiny` and `cpu`. Definition: docs/workloads.md#vit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

import numpy as np

from dlbench.spec import Numerics, WorkloadSpec
import dlbench.workloads.cnn as cnn
import dlbench.workloads.reference_ops as ops
import dlbench.workloads.transformer as transformer
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, SUPERVISED_SCENARIOS, Preset, accuracy, layer_flops
from dlbench.workloads.data import Dataset, dataset_makers
from dlbench.workloads.params import EMBEDDING, ONES, ZEROS, Init, dense_inits, draw_params, fan_in_uniform

NAME = "vit"
SCENARIOS = SUPERVISED_SCENARIOS
QUALITY = "accuracy"
score = accuracy
CHANNELS = 3
MARGIN = cnn.MARGIN


@final
@dataclass(frozen=True)
class Size:
    image: int  # input height = width
    patch: int  # P: patch height = width (and the embedding convolution's stride)
    dim: int  # D
    heads: int
    depth: int
    mlp_dim: int  # F

    @property
    def patches(self) -> int:
        """T: patches per image (the class token makes T + 1 positions)."""
        return (self.image // self.patch) ** 2

    @property
    def encoder(self) -> transformer.Size:
        """The encoder blocks' dimensions, as the transformer workload states them (pre-LN, over
        T + 1 positions; no vocabulary)."""
        return transformer.Size(vocab=0, seq_len=self.patches + 1, dim=self.dim, heads=self.heads,
                                depth=self.depth, mlp_dim=self.mlp_dim, norm=transformer.PRE)


MODEL_SIZES = {
    "tiny": Size(image=16, patch=4, dim=32, heads=2, depth=2, mlp_dim=128),
    "small": Size(image=32, patch=4, dim=128, heads=4, depth=4, mlp_dim=512),
    # ViT-B/16 (Dosovitskiy et al. 2021, Table 1: 12 layers, hidden 768, MLP 3072, 12 heads).
    "b16": Size(image=224, patch=16, dim=768, heads=12, depth=12, mlp_dim=3072),
}

PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=64, batch_size=16, epochs=1, warmup_epochs=1,
                   eval_size=32),
    "cpu": Preset(model_size="small", dataset_size=1024, batch_size=32, epochs=1, warmup_epochs=1,
                  eval_size=256),
    # 224x224 float32 images are 0.6 MB each: the gpu preset holds 2048 of them (1.2 GB).
    "gpu": Preset(model_size="b16", dataset_size=2048, batch_size=64, epochs=2, warmup_epochs=1,
                  eval_size=512, num_classes=1000),
    # Published shapes (issue 34): 105 GFLOP per training image, so a CPU runs the five steps of
    # 4 that a timed window needs (analysis/window.py).
    "published": Preset(model_size="b16", dataset_size=20, batch_size=4, epochs=1,
                        warmup_epochs=1, eval_size=8, num_classes=1000),
    "published-tiny": Preset(model_size="tiny", dataset_size=64, batch_size=16, epochs=1,
                             warmup_epochs=1, eval_size=32),
}

# What a published architecture's size is, as a report names it (workloads.published); the tiny
# size is published-tiny's and the tiny preset's alike.
PUBLISHED = {
    "b16": "ViT-B/16 at 224x224, 1000 classes (timm's vit_base_patch16_224; tables quote 17.6 G forward"
           " multiply-adds)",
    "tiny": "ViT-B/16's architecture (pre-LN blocks, class token, patch embedding) at 16x16 images, width 32,"
            " depth 2 (no published figure to compare)",
}

NUMERICS = Numerics()
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "ln_eps", "gelu", "attention_scale")


def _size(spec: WorkloadSpec) -> Size:
    size: Size = MODEL_SIZES[spec.model_size]
    return size


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    s = _size(spec)
    return (s.image, s.image, CHANNELS), "float32"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    s = _size(spec)
    shapes: dict[str, tuple[int, ...]] = {
        "embed.patch.kernel": (s.patch, s.patch, CHANNELS, s.dim),  # HWIO
        "embed.patch.bias": (s.dim,),
        "embed.cls": (s.dim,),
        "embed.positions": (s.patches + 1, s.dim),  # position 0: the class token
    }
    for i in range(s.depth):
        shapes.update(transformer.block_shapes(i, s.encoder))
    shapes.update({"final_ln.scale": (s.dim,), "final_ln.bias": (s.dim,),
                   "head.kernel": (s.dim, spec.num_classes), "head.bias": (spec.num_classes,)})
    return shapes


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    s = _size(spec)
    fan_in = s.patch * s.patch * CHANNELS
    inits: dict[str, Init] = {"embed.patch.kernel": fan_in_uniform(fan_in),
                              "embed.patch.bias": fan_in_uniform(fan_in),
                              "embed.cls": EMBEDDING, "embed.positions": EMBEDDING}
    for i in range(s.depth):
        inits.update(transformer.block_inits(i, s.encoder))
    inits.update({"final_ln.scale": ONES, "final_ln.bias": ZEROS, **dense_inits("head", s.dim)})
    return draw_params(spec.seed, param_shapes(spec), inits)


def teacher_features(spec: WorkloadSpec, x: np.ndarray) -> np.ndarray:
    """As cnn: the image's block averages on a 4x4 grid."""
    return cnn.teacher_features(spec, x)


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    return cnn.image_samples(spec, n, stream, _size(spec).image)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """2 per multiply-add: the patch embedding (2 T P² C D; its input is the data, so training
    adds only its weight gradient), the encoder blocks over T + 1 positions
    (transformer.block_flops) and the head on the class token (2 D C). Positions, the class
    token, softmax, norms and GELU count 0."""
    s = _size(spec)
    layers = [("embed.patch", 2 * s.patches * s.patch**2 * CHANNELS * s.dim, False),
              ("blocks", s.depth * transformer.block_flops(s.encoder, s.patches + 1), True),
              ("head", 2 * s.dim * spec.num_classes, True)]
    return layer_flops(layers, train)


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> float:
    s, p, eps = _size(spec), ops.as_float64(params), spec.numerics.ln_eps
    z = ops.conv2d(x.astype(np.float64), p["embed.patch.kernel"], s.patch) + p["embed.patch.bias"]
    tokens = z.reshape(len(x), s.patches, s.dim)  # patches in row-major (HW) order
    cls = np.broadcast_to(p["embed.cls"], (len(x), 1, s.dim))
    h = np.concatenate([cls, tokens], axis=1) + p["embed.positions"]
    for i in range(s.depth):
        h = transformer.reference_block(p, f"block{i}", h, s.encoder, eps)
    h = ops.layer_norm(h[:, 0], p["final_ln.scale"], p["final_ln.bias"], eps)
    return ops.cross_entropy(h @ p["head.kernel"] + p["head.bias"], y)
