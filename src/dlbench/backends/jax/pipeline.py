"""The JAX input pipelines over the spec's index rows, and crop_flip in jax.numpy.

- data "pipeline": what JAX practitioners do for an in-memory dataset: NumPy batching on the
  host (gather, and crop_flip in NumPy: workloads.data.crop_flip), each batch put on an
  accelerator PREFETCH_DEPTH steps ahead of the one that consumes it (flax's
  prefetch_to_device). On the CPU the NumPy batches go to the jitted step as they are, as
  Keras's JAX trainer does there (JAXEpochIterator: "No benefit from look-ahead on CPU"): an
  explicit jax.device_put per batch cost the mlp at the cpu preset ~15 % of its samples per
  CPU-second (docs/benchmarks.md, issue 20). With `loader_workers` N > 0 a pool of N threads
  builds the host batches ahead, in order.
- data "device": the whole dataset on the device (load), each step's batch gathered (and
  augmented) there by one jitted function, dispatched just before the step.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from dlbench.workloads.data import Augment, crop_flip

Batch = tuple[jax.Array, jax.Array]
HostBatch = tuple[np.ndarray, np.ndarray]

# Batches put on the device ahead of the step that consumes them (flax's prefetch_to_device).
PREFETCH_DEPTH = 2


def _host_batch(x: np.ndarray, y: np.ndarray, order: np.ndarray, augment: Augment | None, i: int) -> HostBatch:
    idx = order[i]
    xb = x[idx]
    if augment is not None:
        xb = crop_flip(xb, augment.offsets[i], augment.flips[i], augment.pad)
    return xb, y[idx]


def host_batches(x: np.ndarray, y: np.ndarray, order: np.ndarray, augment: Augment | None,
                 workers: int, sharding: jax.sharding.Sharding | None = None,
                 prefetch: bool = True) -> Iterator[Batch | HostBatch]:
    """NumPy batching, the host batches built inline, or by `workers` threads (NumPy's copies
    release the GIL for large arrays); with `prefetch`, each put on the device ahead of its
    step, in shards where a sharding is given (data parallelism); without, the NumPy batches
    themselves (the jitted step takes them: on the CPU, what Keras does)."""
    make: Callable[[int], HostBatch] = functools.partial(_host_batch, x, y, order, augment)
    if workers == 0:
        host: Iterator[HostBatch] = (make(i) for i in range(len(order)))
        yield from _prefetch(host, sharding) if prefetch else host
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dlbench-loader") as pool:
        host = (f.result() for f in _ahead(pool, make, len(order), workers + PREFETCH_DEPTH))
        yield from _prefetch(host, sharding) if prefetch else host


def prefetch_to_device(sharding: jax.sharding.Sharding | None) -> bool:
    """Whether host batches go to the device ahead of their step: on an accelerator (the copy
    then overlaps the step before) and wherever batches are sharded; not on a single CPU
    device, where the device's memory is the host's and each explicit device_put only adds
    work to every step (measured; Keras's JAX trainer skips it there too)."""
    return sharding is not None or jax.default_backend() != "cpu"


def _ahead(pool: ThreadPoolExecutor, make: Callable[[int], HostBatch], n: int, depth: int) -> Iterator[Future[HostBatch]]:
    """Futures of make(0..n-1) in order, at most `depth` submitted ahead of the consumer."""
    pending: collections.deque[Future[HostBatch]] = collections.deque()
    for i in range(n):
        pending.append(pool.submit(make, i))
        if len(pending) == depth:
            yield pending.popleft()
    while pending:
        yield pending.popleft()


def _prefetch(host: Iterator[HostBatch], sharding: jax.sharding.Sharding | None) -> Iterator[Batch]:
    queue: collections.deque[Batch] = collections.deque()
    for batch in host:
        queue.append(jax.device_put(batch, sharding))
        if len(queue) == PREFETCH_DEPTH:
            yield queue.popleft()
    while queue:
        yield queue.popleft()


def crop_flip_jnp(x: jax.Array, offsets: jax.Array, flips: jax.Array, pad: int) -> jax.Array:
    """workloads.data.crop_flip in jax.numpy (NHWC): one gather from the zero-padded batch, so
    the values are bit-identical copies."""
    b, h, w = x.shape[:3]
    padded = jnp.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    rows = offsets[:, 0, None] + jnp.arange(h)
    cols = offsets[:, 1, None] + jnp.where(flips[:, None], jnp.arange(w)[::-1], jnp.arange(w))
    return padded[jnp.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]


@jax.jit
def _gather(x: jax.Array, y: jax.Array, idx: jax.Array) -> Batch:
    return x[idx], y[idx]


@functools.partial(jax.jit, static_argnames="pad")
def _gather_crop_flip(x: jax.Array, y: jax.Array, idx: jax.Array, offsets: jax.Array, flips: jax.Array,
                      pad: int) -> Batch:
    return crop_flip_jnp(x[idx], offsets, flips, pad), y[idx]


def device_batches(x: jax.Array, y: jax.Array, order: np.ndarray, augment: Augment | None) -> Iterator[Batch]:
    """Device-resident data: each batch gathered on the device by a jitted function (compiled
    once, in the first batch: the ahead-of-time compile's batch), dispatched asynchronously."""
    order = np.asarray(order, dtype=np.int32)
    for i in range(len(order)):
        if augment is None:
            yield _gather(x, y, order[i])
        else:
            yield _gather_crop_flip(x, y, order[i], augment.offsets[i], augment.flips[i], pad=augment.pad)
