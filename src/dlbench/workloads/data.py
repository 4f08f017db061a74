"""Data and order owned by the spec; every framework's pipeline only consumes these indices."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dlbench.spec import WorkloadSpec

# Independent random streams per purpose, all derived from the spec's seed.
STREAM_PARAMS = 1
STREAM_DATA = 2
STREAM_EVAL = 3
STREAM_FIXED_BATCH = 4
# The teacher's weights: one stream shared by the train, eval and fixed-batch splits, so the
# three are labelled by the same function.
STREAM_TEACHER = 5
# Augmentation parameters of one epoch: `default_rng((seed, epoch, STREAM_AUGMENT))`.
STREAM_AUGMENT = 6
# crop_flip: zero-pad every side by this many pixels, crop back to the input size at a random
# offset, mirror left-right with probability 1/2 (the CIFAR recipe).
CROP_PAD = 4
# Hidden width of the random teacher MLP.
TEACHER_HIDDEN = 32
# Most candidates drawn at once by labelled_samples.
CHUNK = 16384


@dataclass(frozen=True)
class Dataset:
    """In-memory arrays in the canonical layout (images NHWC float32, token ids int32, labels
    int32)."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return int(self.y.shape[0])


def epoch_order(seed: int, epoch: int, n: int) -> np.ndarray:
    """The permutation of sample indices for one epoch: `default_rng((seed, epoch))`."""
    return np.random.default_rng((seed, epoch)).permutation(n).astype(np.int64)


def batch_indices(order: np.ndarray, batch_size: int) -> np.ndarray:
    """Indices per step, shape (steps, batch); the incomplete last batch is dropped because a
    ragged batch would recompile inside the timed window."""
    steps = len(order) // batch_size
    return order[: steps * batch_size].reshape(steps, batch_size)


@dataclass(frozen=True)
class Augment:
    """Per-sample crop_flip parameters for the steps of one epoch, drawn by the spec; every
    pipeline applies exactly these (pad `pad` zeros on each side, crop at `offsets`, mirror where
    `flips`), so an augmented batch is bit-identical in every framework: only copies, no
    arithmetic on the values."""

    offsets: np.ndarray  # (steps, batch, 2) int32: the crop's top-left (row, column) in the
    #                      padded image, each in [0, 2 * pad]
    flips: np.ndarray  # (steps, batch) bool: mirror the crop left-right
    pad: int = CROP_PAD

    def __len__(self) -> int:
        return int(self.flips.shape[0])

    def steps(self, start: int, stop: int) -> Augment:
        """The parameters of steps [start, stop)."""
        return Augment(self.offsets[start:stop], self.flips[start:stop], self.pad)

    def shard(self, rows: slice) -> Augment:
        """The parameters of one data-parallel shard (`rows` of every step's batch)."""
        return Augment(self.offsets[:, rows], self.flips[:, rows], self.pad)


def epoch_augment(spec: WorkloadSpec, epoch: int) -> Augment | None:
    """The augmentation parameters of one epoch's steps, or None for `augment = "none"`. One
    draw per position in the epoch's order (`dataset_size` of them, the dropped tail included),
    from `default_rng((seed, epoch, STREAM_AUGMENT))`: offsets first, then flips."""
    if spec.augment == "none":
        return None
    rng = np.random.default_rng((spec.seed, epoch, STREAM_AUGMENT))
    n = spec.dataset_size
    offsets = rng.integers(0, 2 * CROP_PAD + 1, size=(n, 2), dtype=np.int32)
    flips = rng.random(n) < 0.5
    steps, b = spec.steps_per_epoch, spec.batch_size
    return Augment(offsets[: steps * b].reshape(steps, b, 2), flips[: steps * b].reshape(steps, b))


def epoch_steps(spec: WorkloadSpec, epoch: int, copies: int = 1) -> tuple[np.ndarray, Augment | None]:
    """One epoch's per-step index rows (steps, batch) and its augmentation parameters (None
    without augmentation): what every Program.batches consumes. Where the training split holds
    `copies` per-epoch copies of its samples (ddpm: the noise redrawn each epoch), the epoch's
    order indexes copy `epoch mod copies` (rows offset by that times `dataset_size`);
    `workloads.epoch_steps` passes the workload's count."""
    rows = batch_indices(epoch_order(spec.seed, epoch, spec.dataset_size), spec.batch_size)
    if copies > 1:
        rows = rows + (epoch % copies) * spec.dataset_size
    return rows, epoch_augment(spec, epoch)


def crop_flip(x: np.ndarray, offsets: np.ndarray, flips: np.ndarray, pad: int = CROP_PAD) -> np.ndarray:
    """The definition of crop_flip on an NHWC batch, in NumPy: `x` zero-padded by `pad` on every
    side of H and W, then out[b, i, j] = padded[b, oy + i, ox + j'] with j' = W-1-j where
    flips[b] (the crop mirrored), else j. Used by the NumPy pipelines (JAX, Keras) and as the
    reference the tests compare every framework's own implementation with."""
    n, h, w = x.shape[:3]
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    rows = offsets[:, 0, None] + np.arange(h)
    cols = offsets[:, 1, None] + np.where(flips[:, None], np.arange(w)[::-1], np.arange(w))
    out: np.ndarray = padded[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
    return out


def teacher_labels(
    features: np.ndarray, num_classes: int, rng: np.random.Generator, margin: float
) -> tuple[np.ndarray, np.ndarray]:
    """Labels from a fixed random teacher: a 2-layer tanh MLP on `features` (n, F), expected
    with entries of roughly unit variance. Returns (argmax labels int32, kept): `kept` marks the
    samples whose top teacher logit beats the runner-up by at least `margin`; the others are too
    close to a decision boundary to be learnable and the caller draws replacements.

    The teacher's weights are drawn from `rng`: pass a fresh `default_rng((seed, STREAM_TEACHER))`
    so every split sees the same teacher. No hidden bias and orthonormal output columns keep the
    classes balanced: at 10 classes and margin 0.4 every class got 3-20 % of the labels over
    seeds 0-5 with 48 or 256 features (7-13 % without the margin); a hidden bias of std 0.5 gave
    one class 28 % and another 0.8 %."""
    f = features.astype(np.float64)
    hidden = max(TEACHER_HIDDEN, num_classes)
    w1 = rng.standard_normal((f.shape[1], hidden)) / np.sqrt(f.shape[1])
    w2 = np.linalg.qr(rng.standard_normal((hidden, num_classes)))[0]
    logits = np.tanh(f @ w1) @ w2
    top2 = np.sort(logits, axis=1)[:, -2:]
    return logits.argmax(axis=1).astype(np.int32), top2[:, 1] - top2[:, 0] >= margin


def labelled_samples(
    spec: WorkloadSpec,
    n: int,
    stream: int,
    draw: Callable[[np.random.Generator, int], np.ndarray],
    features: Callable[[np.ndarray], np.ndarray],
    render: Callable[[np.random.Generator, np.ndarray], np.ndarray],
    margin: float,
) -> Dataset:
    """`n` samples of the split's stream, labelled per `spec.labels`: uniform random labels, or
    the teacher's labels keeping only samples with the margin (more candidates are drawn until
    `n` are kept). A sample is drawn in two steps so that rejected candidates cost little:
    `draw(rng, m)` gives m latents (what the teacher sees: `features(latents)`), then
    `render(rng, kept latents)` the model's inputs (images from their block means; the identity
    where the teacher sees the input itself)."""
    rng = np.random.default_rng((spec.seed, stream))
    if spec.labels == "random":
        x = render(rng, draw(rng, n))
        return Dataset(x=x, y=rng.integers(0, spec.num_classes, size=n, dtype=np.int32))
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    drawn = passed = kept_total = 0
    while kept_total < n:
        # Draw what is missing over the pass rate so far (a guess of 1/2 at first), plus 10 %,
        # at most CHUNK candidates at a time so the peak memory stays near the split's size.
        rate = passed / drawn if passed else 0.5
        latents = draw(rng, min(max(int((n - kept_total) / rate * 1.1), 64), CHUNK))
        teacher = np.random.default_rng((spec.seed, STREAM_TEACHER))
        y, kept = teacher_labels(features(latents), spec.num_classes, teacher, margin)
        take = np.flatnonzero(kept)[: n - kept_total]
        xs.append(render(rng, latents[take]))
        ys.append(y[take])
        drawn += len(latents)
        passed += int(kept.sum())
        kept_total += len(take)
    if len(xs) == 1:  # one chunk: no copy
        return Dataset(x=xs[0], y=ys[0])
    return Dataset(x=np.concatenate(xs), y=np.concatenate(ys))


def identity_render(rng: np.random.Generator, latents: np.ndarray) -> np.ndarray:
    """For workloads whose teacher sees the input itself."""
    return latents


Sampler = Callable[[WorkloadSpec, int, int], Dataset]


def dataset_makers(
    samples: Sampler,
) -> tuple[Callable[[WorkloadSpec], Dataset], Callable[[WorkloadSpec], Dataset],
           Callable[[WorkloadSpec, int], Dataset]]:
    """A workload's `make_dataset`, `make_eval_dataset` and `fixed_batch` from its sampler
    `samples(spec, n, stream)`: the three splits differ only in size and random stream, which
    keeps them disjoint draws in every workload."""

    def make_dataset(spec: WorkloadSpec) -> Dataset:
        return samples(spec, spec.dataset_size, STREAM_DATA)

    def make_eval_dataset(spec: WorkloadSpec) -> Dataset:
        return samples(spec, spec.eval_size, STREAM_EVAL)

    def fixed_batch(spec: WorkloadSpec, size: int = 8) -> Dataset:
        return samples(spec, size, STREAM_FIXED_BATCH)

    return make_dataset, make_eval_dataset, fixed_batch
