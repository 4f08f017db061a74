"""Float64 NumPy building blocks of the workloads' `reference_loss`: each straight from its
definition in docs/workloads.md, written for clarity over speed (tiny sizes in the tests)."""

from __future__ import annotations

import math

import numpy as np

# math.erf is exact to double precision; NumPy has no erf and SciPy is not a dependency.
_erf = np.frompyfunc(math.erf, 1, 1)


def as_float64(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> float:
    """Mean softmax cross-entropy over integer labels."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(y)), y].mean())


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """Exact GELU: x * Phi(x) = x/2 (1 + erf(x/sqrt 2))."""
    erf = np.asarray(_erf(x / math.sqrt(2.0)), dtype=np.float64)
    return 0.5 * x * (1.0 + erf)


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Over the last axis, biased variance, eps inside the square root."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def batch_norm_train(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """Training mode on NHWC: the batch mean and biased batch variance over N, H, W."""
    mean = x.mean(axis=(0, 1, 2))
    var = ((x - mean) ** 2).mean(axis=(0, 1, 2))
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def conv2d(x: np.ndarray, kernel: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
    """NHWC input, HWIO kernel, `pad` zeros on every side, no bias: a sum over kernel offsets
    of strided slices times the offset's (I, O) matrix."""
    kh, kw, _, out_ch = kernel.shape
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    n, h, w, _ = x.shape
    ho, wo = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, ho, wo, out_ch))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i, i + stride * (ho - 1) + 1, stride)
            cols = slice(j, j + stride * (wo - 1) + 1, stride)
            out += x[:, rows, cols] @ kernel[i, j]
    return out


def max_pool2(x: np.ndarray) -> np.ndarray:
    """2x2 max-pool, stride 2, on NHWC (an odd last row/column is dropped, as VALID)."""
    n, h, w, c = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, : h2 * 2, : w2 * 2].reshape(n, h2, 2, w2, 2, c).max(axis=(2, 4))


def avg_pool(x: np.ndarray, size: int) -> np.ndarray:
    """Non-overlapping `size` x `size` average pool on NHWC."""
    n, h, w, c = x.shape
    return x.reshape(n, h // size, size, w // size, size, c).mean(axis=(2, 4))


def max_pool(x: np.ndarray, size: int, stride: int, pad: int = 0) -> np.ndarray:
    """`size` x `size` max-pool with `stride` on NHWC, `pad` pixels of -inf on every side (as
    torch's MaxPool2d(padding=pad): padding never wins)."""
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=-np.inf)
    n, h, w, c = x.shape
    ho, wo = (h - size) // stride + 1, (w - size) // stride + 1
    out = np.full((n, ho, wo, c), -np.inf)
    for i in range(size):
        for j in range(size):
            out = np.maximum(out, x[:, i : i + stride * (ho - 1) + 1 : stride, j : j + stride * (wo - 1) + 1 : stride])
    return out
