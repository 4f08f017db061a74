"""Gap reproducer: attention's forward and backward alone on a CPU, JAX's XLA against torch's
scaled_dot_product_attention and TensorFlow's XLA: the component that holds most of the lm
training gap (benchmarks/gaps/lm_train.py: without attention JAX's step is at torch's speed).

jax.nn.dot_product_attention(implementation=None) has no CPU kernel in jax 0.10.2: it lowers to
XLA's composite (the logits materialised, float32 softmax, the mask as a select), which XLA:CPU
compiles into dots and loop fusions. torch's F.scaled_dot_product_attention runs its fused
flash-attention CPU kernel (blocked online softmax; with is_causal it skips the blocks above the
diagonal). TensorFlow has no fused attention: the formula, compiled by XLA.

Shapes: `--case lm` (default) is dlbench's lm cpu preset, (batch 8, 256 positions, 8 heads of
32) causal; `--case vit` is ViT-B/16 at batch 4, (4, 197, 12 heads of 64), not causal. Times one
call of the gradient of sum(attention(q, k, v)) with respect to q, k and v (the forward
included), jitted / compiled.

Configurations: jax (the entry point), jax-formula (the einsum formula, heads last),
jax-heads-first (the formula on (batch, heads, positions, head dim), as TensorFlow's below),
jax-blocked (causal only: query blocks of 64 attending to their key prefix, so the masked upper
blocks are never computed), jax-eigen-dots (XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=
-individual_dot: the dots on Eigen instead of YNNPACK), torch (SDPA), torch-formula, tensorflow
(the formula, heads first, under XLA).

Prints one JSON line: `ratio` = JAX's entry point's speed over torch SDPA's (below 1: slower).

    python benchmarks/gaps/attention.py              # lm's shape, about 1 min
    python benchmarks/gaps/attention.py --case vit
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402  (beside this script)

CASES = {  # batch, positions, heads, head dim, causal
    "lm": (8, 256, 8, 32, True),
    "vit": (4, 197, 12, 64, False),
}
QUICK = (2, 64, 2, 16, True)
BLOCK = 64  # jax-blocked's query block
EIGEN_DOTS = "--xla_cpu_experimental_ynn_fusion_type=-individual_dot"


def shape(args: argparse.Namespace) -> tuple[int, int, int, int, bool]:
    return QUICK if args.quick else CASES[args.case]


def steps(args: argparse.Namespace) -> int:
    return harness.step_count(args, 20, 3)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--case", choices=sorted(CASES), default="lm")


def configs(args: argparse.Namespace) -> list[harness.Config]:
    C = harness.Config
    out = [C("jax", "jax"), C("torch", "torch"), C("tensorflow", "tensorflow"),
           C("jax-formula", "jax", options={"how": "formula"}), C("torch-formula", "torch", options={"how": "formula"}),
           C("jax-heads-first", "jax", options={"how": "heads_first"}),
           C("jax-eigen-dots", "jax", env={"XLA_FLAGS": EIGEN_DOTS})]
    if shape(args)[4]:
        out.append(C("jax-blocked", "jax", options={"how": "blocked"}))
    return out


def inputs(args: argparse.Namespace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v as (batch, positions, heads, head dim), N(0, 1)."""
    b, t, n, h, _ = shape(args)
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(0, 1, (b, t, n, h)).astype(np.float32) for _ in range(3))
    return q, k, v


def run_jax(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_default_matmul_precision", "highest")
    _, t, _, h, causal = shape(args)
    scale, how = 1 / math.sqrt(h), options.get("how", "fused")

    def formula(q: Any, k: Any, v: Any, offset: int = 0) -> Any:
        logits = jnp.einsum("btnh,bsnh->bnts", q, k) * scale
        if causal:
            visible = jnp.arange(k.shape[1])[None, :] <= offset + jnp.arange(q.shape[1])[:, None]
            logits = jnp.where(visible, logits, -jnp.inf)
        return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, axis=-1), v)

    def heads_first(q: Any, k: Any, v: Any) -> Any:
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
        logits = (q @ k.transpose(0, 1, 3, 2)) * scale
        if causal:
            logits = jnp.where(jnp.tril(jnp.ones((t, t), bool)), logits, -jnp.inf)
        return (jax.nn.softmax(logits, axis=-1) @ v).transpose(0, 2, 1, 3)

    def blocked(q: Any, k: Any, v: Any) -> Any:
        starts = range(0, t, BLOCK)
        return jnp.concatenate([formula(q[:, s:s + BLOCK], k[:, :s + BLOCK], v[:, :s + BLOCK], s) for s in starts], 1)

    def attend(q: Any, k: Any, v: Any) -> Any:
        if how == "formula":
            return formula(q, k, v)
        if how == "blocked":
            return blocked(q, k, v)
        if how == "heads_first":
            return heads_first(q, k, v)
        return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=causal)

    grad = jax.jit(jax.grad(lambda q, k, v: attend(q, k, v).sum(), argnums=(0, 1, 2)))
    q, k, v = (jnp.asarray(a) for a in inputs(args))
    return harness.timed(lambda: grad(q, k, v), jax.block_until_ready, steps(args), warmup=2)


def run_torch(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    torch = harness.import_torch()
    F = torch.nn.functional
    _, t, _, h, causal = shape(args)
    how = options.get("how", "fused")
    q, k, v = (torch.tensor(a).transpose(1, 2).contiguous().requires_grad_() for a in inputs(args))
    mask = torch.ones(t, t, dtype=torch.bool).tril()

    def attend() -> Any:
        if how == "formula":
            logits = (q @ k.transpose(-1, -2)) / math.sqrt(h)
            if causal:
                logits = logits.masked_fill(~mask, -math.inf)
            return torch.softmax(logits, -1) @ v
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def call() -> Any:
        q.grad = k.grad = v.grad = None
        attend().sum().backward()
        return q.grad

    return harness.timed(call, lambda g: g, steps(args), warmup=2)


def run_tensorflow(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    tf = harness.import_tensorflow()
    _, t, _, h, causal = shape(args)
    visible = tf.cast(tf.linalg.band_part(tf.ones([t, t]), -1, 0), tf.bool)

    @tf.function(jit_compile=True)
    def grad(q: Any, k: Any, v: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            logits = tf.matmul(q, k, transpose_b=True) / math.sqrt(h)
            if causal:
                logits = tf.where(visible, logits, -math.inf)
            out = tf.reduce_sum(tf.nn.softmax(logits, -1) @ v)
        return tape.gradient(out, [q, k, v])

    q, k, v = (tf.constant(a.transpose(0, 2, 1, 3)) for a in inputs(args))  # heads first, as Keras writes it
    return harness.timed(lambda: grad(q, k, v), lambda g: g[0].numpy(), steps(args), warmup=2)


def summarise(args: argparse.Namespace, r: Mapping[str, harness.Result]) -> harness.Result:
    b, t, n, h, causal = shape(args)
    return {
        "gap": "attention",
        "case": "quick" if args.quick else args.case,
        "ratio": harness.ratio(r, "jax", "torch"),
        "ratio_cpu": harness.ratio(r, "jax", "torch", "cpu_s"),
        "ratio_to_tensorflow_xla": harness.ratio(r, "jax", "tensorflow"),
        "torch_formula_over_sdpa": harness.ratio(r, "torch-formula", "torch"),
        "jax_formula_speedup": harness.ratio(r, "jax-formula", "jax"),
        "jax_blocked_speedup": harness.ratio(r, "jax-blocked", "jax"),
        "jax_heads_first_speedup": harness.ratio(r, "jax-heads-first", "jax"),
        "jax_eigen_dots_speedup": harness.ratio(r, "jax-eigen-dots", "jax"),
        "shapes": {"batch": b, "positions": t, "heads": n, "head_dim": h, "causal": causal},
    }


if __name__ == "__main__":
    sys.exit(harness.main(__file__, __doc__.split("\n\n")[0], configs,
                          {"jax": run_jax, "torch": run_torch, "tensorflow": run_tensorflow}, summarise,
                          add_arguments))
