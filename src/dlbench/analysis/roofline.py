"""The roofline (Williams, Waterman and Patterson, "Roofline: an insightful visual performance
model", CACM 2009): what a step can attain is min(the compute ceiling, its arithmetic intensity x
the memory bandwidth); the ridge, ceiling / bandwidth FLOP per byte, divides the steps bound by
memory (left) from those bound by compute (right).

On CPUs both ceilings are measured (runner/ceiling.py: the float32 matmul ceiling;
runner/bandwidth.py: the memory bandwidth), per thread count. A step's intensity is its FLOPs over
the bytes it must move:
- a decode step (the generate scenario): the bytes it must read, every weight and the KV cache up
  to the generation's mean position (workloads/lm.py: decode_step), so its time is at least
  bytes / bandwidth: `tpot_bound_s`, and `tpot_bound_share` = that bound over the measured median
  TPOT (1.0: at the memory's limit);
- a training step: the optimizer state it must stream once (train_step_min_bytes below).
Both byte counts leave things out (activations, re-reads, writes of new cache entries): lower
bounds, so the intensities are upper bounds and a point may sit further right than the step
really is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# Per parameter, the float32 values an optimizer's update reads and writes: Adam reads the weight,
# its gradient and the two moments and writes the weight and the moments back.
STATE_ACCESSES = {"adam": 7}


def train_step_min_bytes(parameters: int, itemsize: int, optimizer: str) -> int | None:
    """The bytes a training step must move at least when its state does not fit in the cache: the
    optimizer's update streams every parameter's state once (STATE_ACCESSES x parameters x
    itemsize). Activations, the forward's and backward's reads of the weights, the gradients'
    writes and the batch are left out: a lower bound. None for an optimizer not in the table."""
    accesses = STATE_ACCESSES.get(optimizer)
    return None if accesses is None else accesses * parameters * itemsize


def ridge_flops_per_byte(ceiling_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The intensity at which the bandwidth's slope meets the compute ceiling."""
    return ceiling_flops_per_s / bandwidth_bytes_per_s


def attainable_flops_per_s(intensity_flops_per_byte: float, ceiling_flops_per_s: float,
                           bandwidth_bytes_per_s: float) -> float:
    """The roof over an intensity: min(ceiling, intensity x bandwidth)."""
    return min(ceiling_flops_per_s, intensity_flops_per_byte * bandwidth_bytes_per_s)


def memory_bound_s(step_bytes: float, bandwidth_bytes_per_s: float) -> float:
    """The least time a step that must move `step_bytes` can take at the bandwidth."""
    return step_bytes / bandwidth_bytes_per_s


def bound_share(bound_s: float, measured_s: float | None) -> float | None:
    """The bound over the measured time (1.0: at the limit; 0.25: four times slower than it)."""
    return None if not measured_s else bound_s / measured_s


@dataclass(frozen=True)
class Point:
    """One trial on the roofline: what kind of step, its intensity and achieved FLOP/s, and the
    two ceilings measured for its thread count (None where not measured: an accelerator)."""

    kind: str
    flops_per_byte: float
    flops_per_s: float
    ceiling_flops_per_s: float | None
    bandwidth_bytes_per_s: float | None

    def side(self) -> str | None:
        """Which side of the ridge the point's intensity is on; None without both ceilings."""
        if self.ceiling_flops_per_s is None or self.bandwidth_bytes_per_s is None:
            return None
        ridge = ridge_flops_per_byte(self.ceiling_flops_per_s, self.bandwidth_bytes_per_s)
        return "memory-bound side" if self.flops_per_byte < ridge else "compute-bound side"


TRAINING_STEP, DECODE_STEP = "training step", "decode step"


def point(metrics: Mapping[str, float | None], batch_size: int) -> Point | None:
    """The trial's point: a decode step (decode_flops_per_step over decode_bytes_per_step at
    decode_flops_per_s) or a training step (flops_per_sample x the batch over min_step_bytes at
    achieved_flops_per_s); None for a trial with neither."""
    ceiling, bandwidth = metrics.get("matmul_ceiling_flops_per_s"), metrics.get("memory_bandwidth_bytes_per_s")
    decode = [metrics.get(k) for k in ("decode_flops_per_step", "decode_bytes_per_step", "decode_flops_per_s")]
    if all(decode):
        flops, step_bytes, rate = (float(v or 0.0) for v in decode)
        return Point(DECODE_STEP, flops / step_bytes, rate, ceiling, bandwidth)
    train = [metrics.get(k) for k in ("flops_per_sample", "min_step_bytes", "achieved_flops_per_s")]
    if all(train):
        flops, step_bytes, rate = (float(v or 0.0) for v in train)
        return Point(TRAINING_STEP, flops * batch_size / step_bytes, rate, ceiling, bandwidth)
    return None
