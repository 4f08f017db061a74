"""The TensorFlow input pipelines over the spec's index rows, and crop_flip in TF ops.

- data "pipeline": tf.data, TensorFlow's idiomatic loader: one element per row of the spec's
  order, a map that gathers the row from host variables (and augments it), in order
  (deterministic=True), with `loader_workers` parallel calls (0: sequential), prefetched.
- data "device": the dataset in variables on the default device (load), each step's batch
  gathered (and augmented) there by a tf.function called just before the step.

Variables, not constants: a dataset or function captures a variable by its handle, while a
captured constant is copied into the graph on every batches() call (about 0.2 s per epoch at
8192 images, 10 s for the first one at 50000).
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator

import numpy as np
import tensorflow as tf

from dlbench.workloads.data import Augment

Batch = tuple[tf.Tensor, tf.Tensor]


def crop_flip(x: tf.Tensor, offsets: tf.Tensor, flips: tf.Tensor, pad: int) -> tf.Tensor:
    """workloads.data.crop_flip in TF ops (NHWC): one gather_nd from the zero-padded batch, so
    the values are bit-identical copies."""
    b, h, w = tf.shape(x)[0], x.shape[1], x.shape[2]
    padded = tf.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]])
    offsets = tf.cast(offsets, tf.int32)
    rows = offsets[:, 0:1] + tf.range(h)[None, :]
    cols = tf.range(w)[None, :]
    cols = offsets[:, 1:2] + tf.where(flips[:, None], tf.reverse(cols, [1]), cols)
    shape = tf.stack([b, h, w])
    index = tf.stack([
        tf.broadcast_to(tf.range(b)[:, None, None], shape),
        tf.broadcast_to(rows[:, :, None], shape),
        tf.broadcast_to(cols[:, None, :], shape),
    ], axis=-1)
    return tf.gather_nd(padded, index)


def gather_fn(x: tf.Variable, y: tf.Variable, pad: int | None) -> Callable[..., Batch]:
    """(row) -> batch, or (row, offsets, flips) -> augmented batch where `pad` is given."""
    if pad is None:
        def gather(idx: tf.Tensor) -> Batch:
            return tf.gather(x, idx), tf.gather(y, idx)

        return gather

    def gather_augmented(idx: tf.Tensor, offsets: tf.Tensor, flips: tf.Tensor) -> Batch:
        return crop_flip(tf.gather(x, idx), offsets, flips, pad), tf.gather(y, idx)

    return gather_augmented


def _elements(order: np.ndarray, augment: Augment | None) -> tuple[np.ndarray, ...]:
    rows = np.asarray(order, dtype=np.int64)
    return (rows,) if augment is None else (rows, augment.offsets, augment.flips)


def dataset(x: tf.Variable, y: tf.Variable, order: np.ndarray, augment: Augment | None,
            workers: int) -> tf.data.Dataset:
    """tf.data over the rows: `workers` parallel map calls (None, i.e. sequential, for 0) and
    prefetch, which fills its buffer from tf.data's own thread. Keras on TensorFlow feeds fit()
    with it too."""
    elements = _elements(order, augment)
    return (
        tf.data.Dataset.from_tensor_slices(elements if len(elements) > 1 else elements[0])
        .map(gather_fn(x, y, None if augment is None else augment.pad),
             num_parallel_calls=workers or None, deterministic=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def loader_batches(x: tf.Variable, y: tf.Variable, order: np.ndarray, augment: Augment | None,
                   workers: int) -> Iterator[Batch]:
    return iter(dataset(x, y, order, augment, workers))


@typing.final
class DeviceGather:
    """Gathers (and augments) step batches from device-resident variables: one tf.function per
    variant, traced once (fixed shapes)."""

    def __init__(self, x: tf.Variable, y: tf.Variable) -> None:
        self._x, self._y = x, y
        self._fns: dict[int | None, Callable[..., Batch]] = {}

    def _fn(self, pad: int | None) -> Callable[..., Batch]:
        if pad not in self._fns:
            self._fns[pad] = tf.function(gather_fn(self._x, self._y, pad))
        return self._fns[pad]

    def batches(self, order: np.ndarray, augment: Augment | None) -> Iterator[Batch]:
        elements = _elements(order, augment)
        fn = self._fn(None if augment is None else augment.pad)
        for i in range(len(order)):
            yield fn(*(tf.constant(e[i]) for e in elements))
