"""The torch input pipelines over the spec's index rows, and crop_flip in torch ops.

- data "pipeline": a DataLoader over a Dataset whose item i is step i's whole batch (one gather
  per batch, no per-sample collation), augmented there, with `loader_workers` worker processes;
  the batch goes to the device in the training process (pinned and non-blocking on CUDA; on the
  CPU `.to` is a no-op).
- data "device": the whole dataset on the device (load), each step's batch gathered there by
  index, and augmented there, just before the step; no DataLoader.
- the `loader=tensor_dataset` variant (settings.py): the textbook DataLoader instead, over a
  TensorDataset with a Sampler that yields the spec's order and the default collation (one item
  per sample, stacked), each batch then augmented in the training process.

Image tensors are NCHW-shaped over NHWC memory (channels_last) where the model asks for it.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator

import numpy as np
import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Sampler, TensorDataset

from dlbench.workloads.data import Augment

Batch = tuple[torch.Tensor, torch.Tensor]


def crop_flip(x: torch.Tensor, offsets: torch.Tensor, flips: torch.Tensor, pad: int) -> torch.Tensor:
    """workloads.data.crop_flip on an NCHW batch: zero-pad H and W by `pad`, crop at `offsets`
    (B, 2) (row, column), mirror left-right where `flips` (B,). One advanced-indexing gather, so
    the values are copies of the input's, bit-identical to the NumPy definition."""
    b, _, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))
    rows = offsets[:, 0, None] + torch.arange(h, device=x.device)
    cols = torch.arange(w, device=x.device)
    cols = offsets[:, 1, None] + torch.where(flips[:, None], cols.flip(0), cols)
    # The slice between the advanced indices puts them first: (B, H, W) then C.
    out = padded[torch.arange(b, device=x.device)[:, None, None], :, rows[:, :, None], cols[:, None, :]]
    return out.permute(0, 3, 1, 2)  # NCHW over NHWC memory: channels_last


@typing.final
class Steps(torch.utils.data.Dataset[Batch]):
    """Item i = step i's batch: the samples of index row i, augmented with step i's parameters
    (images only; `augment` None otherwise)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor, augment: Augment | None,
                 memory_format: torch.memory_format) -> None:
        self.x, self.y, self.rows = x, y, rows
        self.memory_format = memory_format
        self.offsets = self.flips = None
        self.pad = 0
        if augment is not None:
            self.offsets = torch.from_numpy(augment.offsets.astype(np.int64)).to(rows.device)
            self.flips = torch.from_numpy(augment.flips).to(rows.device)
            self.pad = augment.pad

    def __getitem__(self, i: int) -> Batch:
        idx = self.rows[i]
        # Advanced indexing keeps channels_last; index_select would return contiguous NCHW.
        x = self.x[idx]
        if self.offsets is not None and self.flips is not None:
            x = crop_flip(x, self.offsets[i], self.flips[i], self.pad).contiguous(memory_format=self.memory_format)
        return x, self.y[idx]

    def __len__(self) -> int:
        return len(self.rows)


def loader_batches(x: torch.Tensor, y: torch.Tensor, order: np.ndarray, augment: Augment | None,
                   workers: int, device: torch.device, memory_format: torch.memory_format) -> Iterator[Batch]:
    """The idiomatic pipeline: a DataLoader over host tensors, each batch then on the device."""
    rows = torch.from_numpy(np.asarray(order, dtype=np.int64))
    loader = DataLoader(
        Steps(x, y, rows, augment, memory_format),
        batch_size=None,  # each item is already a whole batch
        shuffle=False,  # the spec's order
        num_workers=workers,
        pin_memory=device.type == "cuda",
    )
    for xb, yb in loader:
        yield xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)


@typing.final
class SpecOrder(Sampler[int]):
    """The sample indices of the spec's index rows, row after row: with batch_size = a row's
    length and drop_last, the DataLoader's batches are the rows."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def __iter__(self) -> Iterator[int]:
        return iter(self.rows.reshape(-1).tolist())

    def __len__(self) -> int:
        return int(self.rows.size)


def sampler_batches(x: torch.Tensor, y: torch.Tensor, order: np.ndarray, augment: Augment | None,
                    workers: int, device: torch.device, memory_format: torch.memory_format) -> Iterator[Batch]:
    """The textbook pipeline: DataLoader(TensorDataset(x, y), sampler in the spec's order,
    default collation), each batch on the device in `memory_format` and, where the spec
    augments, cropped and flipped there with its step's parameters (the same values)."""
    rows = np.asarray(order, dtype=np.int64)
    loader = DataLoader(TensorDataset(x, y), batch_size=rows.shape[1], sampler=SpecOrder(rows), drop_last=True,
                        num_workers=workers, pin_memory=device.type == "cuda")
    images = x.dim() == 4
    for i, (xb, yb) in enumerate(loader):
        xb = xb.to(device, non_blocking=True)
        if augment is not None:
            offsets = torch.from_numpy(augment.offsets[i].astype(np.int64)).to(device)
            xb = crop_flip(xb, offsets, torch.from_numpy(augment.flips[i]).to(device), augment.pad)
        yield (xb.contiguous(memory_format=memory_format) if images else xb), yb.to(device, non_blocking=True)


def device_batches(x: torch.Tensor, y: torch.Tensor, order: np.ndarray, augment: Augment | None,
                   memory_format: torch.memory_format) -> Iterator[Batch]:
    """Device-resident data: the epoch's rows (and augmentation parameters) go to the device
    once, each batch is gathered there just before its step."""
    rows = torch.from_numpy(np.asarray(order, dtype=np.int64)).to(x.device)
    steps = Steps(x, y, rows, augment, memory_format)
    for i in range(len(steps)):
        yield steps[i]
