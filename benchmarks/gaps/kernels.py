"""Gap reproducer: the matrix products and convolutions of one training step, one at a time, in
JAX (XLA:CPU), torch (oneDNN / MKL) and TensorFlow (its XLA). Each op of a model's step is timed
alone, forward and both gradients as the backward pass runs them, and weighted by how often the
step runs it: the sum is what the step's kernels cost in each framework, without the rest of the
program (fusions, copies, the schedule).

Cases (batch as dlbench's presets run them):
  vit       ViT-B/16, batch 4 (788 rows): per block the query/key/value/out (768x768), MLP up
            (768x3072) and down (3072x768) products, 12 blocks;
  lm        dlbench's lm cpu preset, batch 8 x 256 tokens (2048 rows), D 256, MLP 768, vocab head
            2048, 10 blocks;
  resnet50  ResNet-50 v1.5 at 224x224, batch 4: its 53 convolutions (20 distinct shapes), NHWC
            in JAX and TensorFlow, channels_last in torch;
  cnn       dlbench's cnn, batch 128 at 32x32: its two 3x3 convolutions.

A product Y = X W (X m x k) runs as three dots: forward `nn` (m,k)x(k,n), the input gradient
`nt` dY W^T and the weight gradient `tn` X^T dY, each in the form the framework's autodiff
emits; a convolution as forward, input gradient and weight gradient (jax.vjp's, tf.GradientTape's,
torch.nn.grad's conv2d_input / conv2d_weight).

Run it at `--threads 1` and at the step's thread count: where one thread is at parity and two
are not, the gap is in the intra-op parallelism, not in the kernels' code.

Prints one JSON line: `ratio` = torch's summed time over JAX's (JAX's speed relative to torch's
for the step's kernels; below 1: slower), per-op GFLOP/s in `ops`.

    python benchmarks/gaps/kernels.py --case vit --threads 2   # about 1 min
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (beside this script)

Op = tuple[str, tuple[int, ...], int]  # kind, shape, times per step


def _dense(rows: int, k: int, n: int, count: int) -> list[Op]:
    return [("nn", (rows, k, n), count), ("nt", (rows, n, k), count), ("tn", (k, rows, n), count)]


def _conv(b: int, h: int, cin: int, cout: int, k: int, stride: int, count: int, first: bool = False,
          same: bool = True) -> list[Op]:
    """A convolution's three ops; `same` pads k // 2 (ResNet's), else none (VALID, the cnn's)."""
    shape = (b, h, cin, cout, k, stride, int(same))
    grads = [("conv_dw", shape, count)] if first else [("conv_dx", shape, count), ("conv_dw", shape, count)]
    return [("conv", shape, count), *grads]


def _resnet50(b: int) -> list[Op]:
    ops = _conv(b, 224, 3, 64, 7, 2, 1, first=True)
    stage_in, h = 64, 56
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        out = 4 * width
        # the first block: 1x1 in, 3x3 with the stage's stride (v1.5), 1x1 out, 1x1 projection
        ops += _conv(b, h, stage_in, width, 1, 1, 1) + _conv(b, h, width, width, 3, stride, 1)
        h //= stride
        ops += _conv(b, h, width, out, 1, 1, 1) + _conv(b, h * stride, stage_in, out, 1, stride, 1)
        if blocks > 1:
            ops += (_conv(b, h, out, width, 1, 1, blocks - 1) + _conv(b, h, width, width, 3, 1, blocks - 1)
                    + _conv(b, h, width, out, 1, 1, blocks - 1))
        stage_in = out
    return ops


CASES: dict[str, list[Op]] = {
    "vit": _dense(788, 768, 768, 48) + _dense(788, 768, 3072, 12) + _dense(788, 3072, 768, 12),
    "lm": _dense(2048, 256, 256, 40) + _dense(2048, 256, 768, 20) + _dense(2048, 768, 256, 10)
    + _dense(2048, 256, 2048, 1),
    "resnet50": _resnet50(4),
    "cnn": _conv(128, 32, 3, 32, 3, 1, 1, first=True, same=False) + _conv(128, 15, 32, 64, 3, 1, 1, same=False),
}
QUICK = _dense(64, 32, 48, 2) + _conv(2, 8, 4, 8, 3, 1, 1) + _conv(2, 9, 4, 8, 3, 1, 1, same=False)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--case", choices=sorted(CASES), default="vit")


def configs(args: argparse.Namespace) -> list[harness.Config]:
    C = harness.Config
    return [C("jax", "jax"), C("torch", "torch"), C("tensorflow", "tensorflow")]


def ops(args: argparse.Namespace) -> list[Op]:
    return QUICK if args.quick else CASES[args.case]


def flops(kind: str, shape: tuple[int, ...]) -> float:
    if kind in ("nn", "nt", "tn"):
        m, k, n = shape
        return 2.0 * m * k * n
    b, h, cin, cout, k, stride, _ = shape
    out = out_size(shape)
    return 2.0 * b * out * out * cin * cout * k * k


def out_size(shape: tuple[int, ...]) -> int:
    _, h, _, _, k, stride, same = shape
    return (h + 2 * (k // 2) * same - k) // stride + 1


def padding(shape: tuple[int, ...]) -> list[tuple[int, int]]:
    """Explicit (low, high) padding per spatial axis: k // 2 each side where `same`, as torch
    pads (so every framework computes the same output size)."""
    pad = (shape[4] // 2) * shape[6]
    return [(pad, pad), (pad, pad)]


def operands(kind: str, shape: tuple[int, ...]) -> tuple[Any, Any]:
    """NumPy operands: dots as the form's (lhs, rhs); convolutions as (NHWC input, HWIO kernel)
    for the forward and the weight gradient, (NHWC output gradient, HWIO kernel) for the input
    gradient."""
    import numpy as np

    rng = np.random.default_rng(0)
    if kind in ("nn", "nt", "tn"):
        m, k, n = shape
        lhs = {"nn": (m, k), "nt": (m, k), "tn": (k, m)}[kind]
        rhs = {"nn": (k, n), "nt": (n, k), "tn": (k, n)}[kind]
        return rng.normal(0, 1, lhs).astype(np.float32), rng.normal(0, 1, rhs).astype(np.float32)
    b, h, cin, cout, k, stride, _ = shape
    out = out_size(shape)
    x = rng.normal(0, 1, (b, h, h, cin)).astype(np.float32)
    w = rng.normal(0, 0.1, (k, k, cin, cout)).astype(np.float32)
    if kind == "conv_dx":
        return rng.normal(0, 1, (b, out, out, cout)).astype(np.float32), w
    return x, w


def _per_op(args: argparse.Namespace, build: Any, sync: Any) -> harness.Result:
    """Each distinct op timed alone: seconds per call and GFLOP/s, and the weighted sum."""
    steps = args.steps or (3 if args.quick else 10)
    total, total_cpu, out = 0.0, 0.0, {}
    for kind, shape, count in ops(args):
        call = build(kind, shape)
        t = harness.timed(call, sync, steps, warmup=2)
        total += count * t["median_s"]
        total_cpu += count * t["cpu_s"]
        out[f"{kind} {'x'.join(map(str, shape))}"] = {"ms": round(1e3 * t["median_s"], 3), "count": count,
                                                       "cpu_ms": round(1e3 * t["cpu_s"], 3),
                                                       "gflops": round(flops(kind, shape) / t["median_s"] / 1e9, 1)}
    return {"median_s": total, "cpu_s": total_cpu, "ops": out}


def run_jax(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    import jax
    import jax.numpy as jnp
    from jax import lax

    jax.config.update("jax_default_matmul_precision", "highest")

    def conv_fn(shape: tuple[int, ...]) -> Any:
        stride = shape[5]
        return lambda x, w: lax.conv_general_dilated(x, w, (stride, stride), padding(shape),
                                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def build(kind: str, shape: tuple[int, ...]) -> Any:
        a, b = (jnp.asarray(v) for v in operands(kind, shape))
        if kind in ("nn", "nt", "tn"):
            f = {"nn": lambda a, b: a @ b, "nt": lambda a, b: a @ b.T, "tn": lambda a, b: a.T @ b}[kind]
        elif kind == "conv":
            f = conv_fn(shape)
        elif kind == "conv_dw":  # the weight's cotangent of the forward, as the backward pass runs it
            conv = conv_fn(shape)
            dy = jnp.ones(jax.eval_shape(conv, a, b).shape, a.dtype)
            f = lambda x, w: jax.vjp(lambda w: conv(x, w), w)[1](dy)[0]  # noqa: E731
        else:  # conv_dx: the input's cotangent, from the output's cotangent `a`
            bsz, h, cin = shape[:3]
            x = jnp.zeros((bsz, h, h, cin), a.dtype)
            conv = conv_fn(shape)
            f = lambda dy, w: jax.vjp(lambda x: conv(x, w), x)[1](dy)[0]  # noqa: E731
        jitted = jax.jit(f)
        return lambda: jitted(a, b)

    return _per_op(args, build, lambda y: y.block_until_ready())


def run_torch(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    torch = harness.import_torch()
    F, grad = torch.nn.functional, torch.nn.grad
    cl = torch.channels_last

    def build(kind: str, shape: tuple[int, ...]) -> Any:
        a, b = (torch.from_numpy(v) for v in operands(kind, shape))
        if kind in ("nn", "nt", "tn"):
            return {"nn": lambda: a @ b, "nt": lambda: a @ b.T, "tn": lambda: a.T @ b}[kind]
        bsz, h, cin, cout, k, stride, same = shape
        pad = (k // 2) * same
        w = b.permute(3, 2, 0, 1).contiguous(memory_format=cl)  # OIHW, channels_last as dlbench runs it
        t = a.permute(0, 3, 1, 2).contiguous(memory_format=cl)
        if kind == "conv":
            return lambda: F.conv2d(t, w, stride=stride, padding=pad)
        if kind == "conv_dw":
            dy = torch.ones_like(F.conv2d(t, w, stride=stride, padding=pad))
            return lambda: grad.conv2d_weight(t, w.shape, dy, stride=stride, padding=pad)
        return lambda: grad.conv2d_input((bsz, cin, h, h), w, t, stride=stride, padding=pad)

    with torch.no_grad():
        return _per_op(args, build, lambda y: y)


def run_tensorflow(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    tf = harness.import_tensorflow()

    def build(kind: str, shape: tuple[int, ...]) -> Any:
        a, b = (tf.constant(v) for v in operands(kind, shape))
        if kind in ("nn", "nt", "tn"):
            ta, tb = kind == "tn", kind == "nt"
            f = tf.function(lambda a, b: tf.matmul(a, b, transpose_a=ta, transpose_b=tb), jit_compile=True)
            return lambda: f(a, b)
        bsz, h, cin, cout, k, stride, _ = shape
        pad = [[0, 0], *padding(shape), [0, 0]]  # explicit, NHWC
        if kind == "conv":
            f = tf.function(lambda x, w: tf.nn.conv2d(x, w, stride, pad), jit_compile=True)
        elif kind == "conv_dw":
            dy = tf.ones_like(tf.nn.conv2d(a, b, stride, pad))
            f = tf.function(lambda x, w: tf.compat.v1.nn.conv2d_backprop_filter(
                x, w.shape, dy, [1, stride, stride, 1], pad), jit_compile=True)
        else:
            f = tf.function(lambda dy, w: tf.nn.conv2d_transpose(
                dy, w, [bsz, h, h, cin], stride, pad), jit_compile=True)
        return lambda: f(a, b)

    return _per_op(args, build, lambda y: y.numpy())


def summarise(args: argparse.Namespace, r: Mapping[str, harness.Result]) -> harness.Result:
    return {
        "gap": "kernels",
        "case": "quick" if args.quick else args.case,
        "ratio": harness.ratio(r, "jax", "torch"),
        "ratio_to_tensorflow_xla": harness.ratio(r, "jax", "tensorflow"),
        "tensorflow_to_torch": harness.ratio(r, "tensorflow", "torch"),
        "ratio_cpu": harness.ratio(r, "jax", "torch", "cpu_s"),
        "ops_per_step": sum(c for _, _, c in ops(args)),
        "gflop_per_step": sum(c * flops(k, s) for k, s, c in ops(args)) / 1e9,
    }


if __name__ == "__main__":
    sys.exit(harness.main(__file__, __doc__.split("\n\n")[0], configs,
                          {"jax": run_jax, "torch": run_torch, "tensorflow": run_tensorflow}, summarise,
                          add_arguments))
