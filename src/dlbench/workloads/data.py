"""Data and order owned by the spec; every framework's pipeline only consumes these indices."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Independent random streams per purpose, all derived from the spec's seed.
STREAM_PARAMS = 1
STREAM_DATA = 2
STREAM_EVAL = 3
STREAM_FIXED_BATCH = 4


@dataclass(frozen=True)
class Dataset:
    """In-memory arrays in the canonical layout (images NHWC float32, labels int32)."""

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
