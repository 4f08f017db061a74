"""Device-resident data for Keras on JAX and torch (data "device"), in keras.ops only.

The whole dataset becomes one backend tensor on the device in load(); each step's batch is
gathered there (and augmented there, crop_flip in keras.ops) by a PyDataset item, which fit()
consumes as it does any PyDataset: Keras's JAX and torch adapters pass backend tensors through.
Keras on TensorFlow keeps tf.data (native.TFDataPipeline over variables on the default device):
its PyDataset adapter would route every batch through tf.data.Dataset.from_generator.
"""

from __future__ import annotations

import typing
from typing import Any

import keras
import numpy as np
from keras import ops

from dlbench.workloads.data import Augment, Dataset


def crop_flip(x: Any, offsets: np.ndarray, flips: np.ndarray, pad: int) -> Any:
    """workloads.data.crop_flip in keras.ops (NHWC): one take from the zero-padded batch,
    flattened, so the values are bit-identical copies."""
    b, h, w, c = x.shape
    hp, wp = h + 2 * pad, w + 2 * pad
    padded = ops.reshape(ops.pad(x, [[0, 0], [pad, pad], [pad, pad], [0, 0]]), (b * hp * wp, c))
    offsets = ops.convert_to_tensor(np.asarray(offsets, np.int32))
    rows = offsets[:, 0:1] + ops.arange(h, dtype="int32")[None, :]
    cols = ops.arange(w, dtype="int32")[None, :]
    cols = offsets[:, 1:2] + ops.where(ops.convert_to_tensor(flips)[:, None], ops.flip(cols, axis=1), cols)
    first = ops.arange(b, dtype="int32")[:, None, None] * (hp * wp)
    index = first + rows[:, :, None] * wp + cols[:, None, :]
    return ops.reshape(ops.take(padded, ops.reshape(index, (-1,)), axis=0), (b, h, w, c))


@typing.final
class DeviceRowBatches(keras.utils.PyDataset):
    """Batch i = the samples of index row i, gathered from device tensors (and augmented)."""

    def __init__(self, x: Any, y: Any, rows: np.ndarray, augment: Augment | None) -> None:
        super().__init__(workers=1, use_multiprocessing=False)
        self._x, self._y, self._rows, self._augment = x, y, rows, augment

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> tuple[Any, Any]:
        if not 0 <= i < len(self._rows):
            raise IndexError(f"batch {i} of {len(self._rows)}")
        idx = ops.convert_to_tensor(np.asarray(self._rows[i], np.int32))
        x = ops.take(self._x, idx, axis=0)
        if self._augment is not None:
            a = self._augment
            x = crop_flip(x, a.offsets[i], a.flips[i], a.pad)
        return x, ops.take(self._y, idx, axis=0)


@typing.final
class DevicePipeline:
    """The dataset as backend tensors on the device; a PyDataset of device gathers per chunk."""

    def __init__(self) -> None:
        self._x: Any = None
        self._y: Any = None

    def load(self, dataset: Dataset) -> None:
        self._x = ops.convert_to_tensor(np.ascontiguousarray(dataset.x))
        self._y = ops.convert_to_tensor(np.ascontiguousarray(dataset.y))

    def fit_input(self, rows: np.ndarray, augment: Augment | None) -> DeviceRowBatches:
        if self._x is None:
            raise RuntimeError("load(dataset) must come before batches(order)")
        return DeviceRowBatches(self._x, self._y, rows, augment)

    def first_batch(self, rows: np.ndarray, augment: Augment | None) -> tuple[Any, Any]:
        return self.fit_input(rows, augment)[0]
