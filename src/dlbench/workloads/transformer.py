"""transformer: an encoder classifying token sequences (learned positions, mean over the
sequence, linear head). Two architectures, one per model size: a pre-LN encoder (tiny/cpu/gpu
presets) and BERT-base's post-LN encoder (LayerNorm after the embeddings and after each residual
add, as in the BERT paper and Hugging Face's BertModel) at its published shapes for `published`
(sequence 128) and `published-512`, and at small width for `published-tiny`. Definition:
docs/workloads.md#transformer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

import numpy as np

from dlbench.spec import Numerics, WorkloadSpec
import dlbench.workloads.reference_ops as ops
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, SUPERVISED_SCENARIOS, Preset, accuracy
from dlbench.workloads.data import (
    STREAM_TEACHER,
    Dataset,
    dataset_makers,
    identity_render,
    labelled_samples,
)
from dlbench.workloads.params import EMBEDDING, ONES, ZEROS, Init, dense_inits, draw_params

NAME = "transformer"
SCENARIOS = SUPERVISED_SCENARIOS
QUALITY = "accuracy"
score = accuracy


PRE, POST = "pre", "post"


@final
@dataclass(frozen=True)
class Size:
    vocab: int  # V
    seq_len: int  # L
    dim: int  # D
    heads: int
    depth: int
    mlp_dim: int  # F
    # "pre": h + f(LN(h)), a final LayerNorm before the pooling; "post" (BERT): LN(h + f(h)),
    # a LayerNorm after the embeddings and none at the end.
    norm: str = "pre"

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


MODEL_SIZES = {
    "tiny": Size(vocab=64, seq_len=16, dim=32, heads=2, depth=2, mlp_dim=128),
    "small": Size(vocab=1024, seq_len=64, dim=128, heads=4, depth=2, mlp_dim=512),
    "large": Size(vocab=8192, seq_len=128, dim=512, heads=8, depth=6, mlp_dim=2048),
    # BERT-base (Devlin et al. 2019: L=12, H=768, A=12, feed-forward 4H; uncased WordPiece
    # vocabulary of 30522) at the sequence lengths of its two pre-training phases.
    "bert-base": Size(vocab=30522, seq_len=128, dim=768, heads=12, depth=12, mlp_dim=3072, norm=POST),
    "bert-base-512": Size(vocab=30522, seq_len=512, dim=768, heads=12, depth=12, mlp_dim=3072, norm=POST),
    "bert-tiny": Size(vocab=64, seq_len=16, dim=32, heads=2, depth=2, mlp_dim=128, norm=POST),
}

PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=128, batch_size=16, epochs=1, warmup_epochs=1,
                   eval_size=32),
    # small: ~10 GFLOP per step of 64 sequences, ~0.15 s per torch eager step on two cores.
    "cpu": Preset(model_size="small", dataset_size=4096, batch_size=64, epochs=1,
                  warmup_epochs=1, eval_size=1024),
    "gpu": Preset(model_size="large", dataset_size=65536, batch_size=128, epochs=3,
                  warmup_epochs=1, eval_size=8192),
    # Published shapes (issue 34): BERT-base is 67 GFLOP per training sequence of 128 (290 at
    # 512), so a CPU runs the five steps a timed window needs (analysis/window.py) at batch 4
    # (2 at 512); a GPU user raises -b and --dataset-size.
    "published": Preset(model_size="bert-base", dataset_size=20, batch_size=4, epochs=1,
                        warmup_epochs=1, eval_size=8),
    "published-512": Preset(model_size="bert-base-512", dataset_size=10, batch_size=2, epochs=1,
                            warmup_epochs=1, eval_size=4),
    "published-tiny": Preset(model_size="bert-tiny", dataset_size=128, batch_size=16, epochs=1,
                             warmup_epochs=1, eval_size=32),
}

# What a published architecture's size is, as a report names it (workloads.published).
PUBLISHED = {
    "bert-base": "BERT-base at sequence length 128 (tables quote 22.5 GFLOPs forward)",
    "bert-base-512": "BERT-base at sequence length 512",
    "bert-tiny": "BERT-base's post-LN architecture at the tiny size (no published figure to compare)",
}

NUMERICS = Numerics()
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "ln_eps", "gelu", "attention_scale")

# The teacher sees the mean over positions of a fixed random TEACHER_EMBED-wide embedding of
# the ids (scaled to unit variance); a bag of tokens, which attention can average.
TEACHER_EMBED = 32
MARGIN = 0.4

_PROJECTIONS = ("query", "key", "value", "out")


def _size(spec: WorkloadSpec) -> Size:
    size: Size = MODEL_SIZES[spec.model_size]
    return size


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    return (_size(spec).seq_len,), "int32"


def block_shapes(i: int, s: Size) -> dict[str, tuple[int, ...]]:
    b = f"block{i}"
    shapes: dict[str, tuple[int, ...]] = {f"{b}.ln1.scale": (s.dim,), f"{b}.ln1.bias": (s.dim,)}
    for proj in _PROJECTIONS:
        shapes[f"{b}.attn.{proj}.kernel"] = (s.dim, s.dim)
        shapes[f"{b}.attn.{proj}.bias"] = (s.dim,)
    shapes.update({
        f"{b}.ln2.scale": (s.dim,), f"{b}.ln2.bias": (s.dim,),
        f"{b}.mlp.fc1.kernel": (s.dim, s.mlp_dim), f"{b}.mlp.fc1.bias": (s.mlp_dim,),
        f"{b}.mlp.fc2.kernel": (s.mlp_dim, s.dim), f"{b}.mlp.fc2.bias": (s.dim,),
    })
    return shapes


def norm_name(s: Size) -> str:
    """The encoder's one LayerNorm outside the blocks: after the embeddings (post-LN) or before
    the pooling (pre-LN)."""
    return "embed.ln" if s.norm == POST else "final_ln"


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    s = _size(spec)
    shapes: dict[str, tuple[int, ...]] = {"embed.tokens": (s.vocab, s.dim),
                                          "embed.positions": (s.seq_len, s.dim)}
    if s.norm == POST:
        shapes.update({"embed.ln.scale": (s.dim,), "embed.ln.bias": (s.dim,)})
    for i in range(s.depth):
        shapes.update(block_shapes(i, s))
    if s.norm == PRE:
        shapes.update({"final_ln.scale": (s.dim,), "final_ln.bias": (s.dim,)})
    shapes.update({"head.kernel": (s.dim, spec.num_classes), "head.bias": (spec.num_classes,)})
    return shapes


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def block_inits(i: int, s: Size) -> dict[str, Init]:
    """Block i's LayerNorms (ones, zeros) and dense layers (torch's fan-in bound)."""
    b = f"block{i}"
    inits: dict[str, Init] = {}
    for ln in ("ln1", "ln2"):
        inits.update({f"{b}.{ln}.scale": ONES, f"{b}.{ln}.bias": ZEROS})
    for proj in _PROJECTIONS:
        inits.update(dense_inits(f"{b}.attn.{proj}", s.dim))
    inits.update(dense_inits(f"{b}.mlp.fc1", s.dim))
    inits.update(dense_inits(f"{b}.mlp.fc2", s.mlp_dim))
    return inits


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    s = _size(spec)
    inits: dict[str, Init] = {"embed.tokens": EMBEDDING, "embed.positions": EMBEDDING}
    for i in range(s.depth):
        inits.update(block_inits(i, s))
    ln = norm_name(s)
    inits.update({f"{ln}.scale": ONES, f"{ln}.bias": ZEROS, **dense_inits("head", s.dim)})
    return draw_params(spec.seed, param_shapes(spec), inits)


def _teacher_embedding(spec: WorkloadSpec) -> np.ndarray:
    """N(0, 1) rows, then centred and scaled to unit variance over the vocabulary: with V=64 the
    rows' own mean (std 1/8 per column, times sqrt(L) in the features) acted like a teacher bias
    and one class got 30 % of the labels, another 0.3 %."""
    rng = np.random.default_rng((spec.seed, STREAM_TEACHER, 1))
    e = rng.standard_normal((_size(spec).vocab, TEACHER_EMBED))
    return (e - e.mean(axis=0)) / e.std(axis=0)


def teacher_features(spec: WorkloadSpec, ids: np.ndarray) -> np.ndarray:
    """Mean over positions of the teacher's fixed embedding of the ids, times sqrt(L) (unit
    variance)."""
    e, total = _teacher_embedding(spec), np.zeros((len(ids), TEACHER_EMBED))
    for position in range(ids.shape[1]):  # not e[ids]: that holds L x as much memory at once
        total += e[ids[:, position]]
    return total / math.sqrt(ids.shape[1])


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    s = _size(spec)

    def draw(rng: np.random.Generator, m: int) -> np.ndarray:
        return rng.integers(0, s.vocab, size=(m, s.seq_len), dtype=np.int32)

    def features(ids: np.ndarray) -> np.ndarray:
        return teacher_features(spec, ids)

    return labelled_samples(spec, n, stream, draw, features, identity_render, MARGIN)


make_dataset, make_eval_dataset, fixed_batch = dataset_makers(_samples)


def block_flops(s: Size, tokens: int) -> int:
    """One encoder block over `tokens` positions, 2 per multiply-add: the four D x D projections
    (8 T D²), the attention matmuls q k^T and softmax·v (2 T² D each) and the MLP (4 T D F)."""
    return 8 * tokens * s.dim**2 + 4 * tokens**2 * s.dim + 4 * tokens * s.dim * s.mlp_dim


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Per sequence, 2 per multiply-add: the blocks (block_flops), then the head (2 D C). The
    embedding lookup, softmax, norms and GELU count 0. Every matmul's inputs need gradients in
    training (the first one is fed by the embedding, a parameter), so training is 3x the
    forward."""
    s = _size(spec)
    fwd = s.depth * block_flops(s, s.seq_len) + 2 * s.dim * spec.num_classes
    return 3 * fwd if train else fwd


def _attention(p: dict[str, np.ndarray], b: str, h: np.ndarray, s: Size) -> np.ndarray:
    n, length, _ = h.shape

    def heads(name: str) -> np.ndarray:  # (n, L, D) -> (n, heads, L, dh), head j: columns j*dh:
        z = h @ p[f"{b}.attn.{name}.kernel"] + p[f"{b}.attn.{name}.bias"]
        return z.reshape(n, length, s.heads, s.head_dim).transpose(0, 2, 1, 3)

    q, k, v = heads("query"), heads("key"), heads("value")
    weights = ops.softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(s.head_dim), axis=-1)
    z = (weights @ v).transpose(0, 2, 1, 3).reshape(n, length, s.dim)
    return z @ p[f"{b}.attn.out.kernel"] + p[f"{b}.attn.out.bias"]


def reference_block(p: dict[str, np.ndarray], b: str, h: np.ndarray, s: Size, eps: float) -> np.ndarray:
    """One encoder block in float64: pre-LN h + f(LN(h)), or post-LN LN(h + f(h))."""

    def mlp(z: np.ndarray) -> np.ndarray:
        z = ops.gelu_erf(z @ p[f"{b}.mlp.fc1.kernel"] + p[f"{b}.mlp.fc1.bias"])
        return z @ p[f"{b}.mlp.fc2.kernel"] + p[f"{b}.mlp.fc2.bias"]

    def ln(name: str, z: np.ndarray) -> np.ndarray:
        return ops.layer_norm(z, p[f"{b}.{name}.scale"], p[f"{b}.{name}.bias"], eps)

    if s.norm == POST:
        h = ln("ln1", h + _attention(p, b, h, s))
        return ln("ln2", h + mlp(h))
    h = h + _attention(p, b, ln("ln1", h), s)
    return h + mlp(ln("ln2", h))


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> float:
    s, p, eps = _size(spec), ops.as_float64(params), spec.numerics.ln_eps
    h = p["embed.tokens"][x] + p["embed.positions"]
    ln = norm_name(s)
    if s.norm == POST:
        h = ops.layer_norm(h, p[f"{ln}.scale"], p[f"{ln}.bias"], eps)
    for i in range(s.depth):
        h = reference_block(p, f"block{i}", h, s, eps)
    if s.norm == PRE:
        h = ops.layer_norm(h, p[f"{ln}.scale"], p[f"{ln}.bias"], eps)
    return ops.cross_entropy(h.mean(axis=1) @ p["head.kernel"] + p["head.bias"], y)
