"""Gap reproducer: training a small Llama-style language model on a CPU, JAX against torch and
TensorFlow's XLA (dlbench `lm`, cpu preset: JAX 4.5 samples/s against torch.compile's 12.8 and
TensorFlow's XLA 8.5 on a quiet 2-core Xeon).

The same model in each framework, written as each framework's users write it: token embedding,
10 pre-norm blocks of RMSNorm, rotary causal attention (JAX: jax.nn.dot_product_attention with
is_causal=True; torch: F.scaled_dot_product_attention; TensorFlow: the formula with a band mask,
as Keras's TensorFlow backend writes it), SwiGLU MLP, untied head, mean token cross-entropy, Adam,
the whole step compiled (jax.jit with the state donated; torch.compile or eager;
tf.function(jit_compile=True)). V 2048, T 256, D 256, 8 heads, MLP 768, batch 8, float32.

Besides each framework's step, configurations that locate the gap:
  jax-no-attention / torch-no-attention: the attention replaced by its values (o = v), so the
    difference to the full step is what the attention costs in each framework;
  jax-heads-first: the attention as TensorFlow's formula, heads-first (B, heads, T, dh);
  jax-formula: the attention as the einsum formula (as Flax's nn.dot_product_attention writes
    it), heads last;
  jax-blocked: the formula by query blocks of 64, each attending to its key prefix only, so the
    masked blocks above the diagonal are never computed (the same values);
  jax-blocked-multi-output: jax-blocked with jax-multi-output-fusion's flag;
  jax-multi-output-fusion: XLA_FLAGS=--xla_backend_extra_options=xla_cpu_use_multi_output_fusion
    (XLA:CPU's instruction fusion stops duplicating a producer into each of its consumers; by
    default the backward pass's residual-gradient chain is recomputed inside every fusion that
    feeds a weight-gradient dot, work that grows with the square of the depth);
  jax-eigen-dots: XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_dot, XLA:CPU's
    dots on Eigen instead of YNNPACK.

Prints one JSON line: `ratio` = JAX's samples/s over torch.compile's (dlbench's 0.35), and the
other ratios and shares beside it. Runs each configuration in a fresh process pinned to its
cores.

    python benchmarks/gaps/lm_train.py                 # about 3 min on 2 quiet cores
    python benchmarks/gaps/lm_train.py --quick         # a tiny model: checks that it runs
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

EIGEN_DOTS = "--xla_cpu_experimental_ynn_fusion_type=-individual_dot"
# XLA:CPU's fusion without duplicating producers into several consumers (multi-output fusion
# instead): cpu_compiler.cc runs CpuInstructionFusion with may_duplicate = !multi-output.
MULTI_OUTPUT = "--xla_backend_extra_options=xla_cpu_use_multi_output_fusion"
RATIO_BASE = "torch-compiled"  # dlbench's pair: torch.compile, its default mode
FULL = {"vocab": 2048, "seq": 256, "dim": 256, "heads": 8, "depth": 10, "mlp": 768, "batch": 8}
QUICK = {"vocab": 128, "seq": 32, "dim": 64, "heads": 4, "depth": 2, "mlp": 192, "batch": 2}
RMS_EPS, ROPE_BASE, INIT_STD = 1e-5, 10000.0, 0.02
BLOCK = 64  # jax-blocked's query block


def size(args: argparse.Namespace) -> dict[str, int]:
    return harness.sized(args, FULL, QUICK)


def steps(args: argparse.Namespace) -> int:
    return harness.step_count(args, 5, 2)


def configs(args: argparse.Namespace) -> list[harness.Config]:
    C = harness.Config
    return [
        C("jax", "jax"),
        C("torch-compiled", "torch", options={"compile": "1"}),
        C("tensorflow", "tensorflow"),
        C("torch", "torch"),
        C("jax-no-attention", "jax", options={"attention": "none"}),
        C("torch-no-attention", "torch", options={"attention": "none"}),
        C("jax-heads-first", "jax", options={"attention": "heads_first"}),
        C("jax-formula", "jax", options={"attention": "formula"}),
        C("jax-blocked", "jax", options={"attention": "blocked"}),
        C("jax-blocked-multi-output", "jax", env={"XLA_FLAGS": MULTI_OUTPUT}, options={"attention": "blocked"}),
        C("jax-multi-output-fusion", "jax", env={"XLA_FLAGS": MULTI_OUTPUT}),
        C("jax-eigen-dots", "jax", env={"XLA_FLAGS": EIGEN_DOTS}),
    ]


def parameters(s: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Names -> float32 arrays, kernels (in, out); the values do not matter for speed."""
    rng = np.random.default_rng(0)
    d, f = s["dim"], s["mlp"]
    shapes = {"embed": (s["vocab"], d), "head": (d, s["vocab"]), "final_norm": (d,)}
    for i in range(s["depth"]):
        shapes.update({f"{i}.q": (d, d), f"{i}.k": (d, d), f"{i}.v": (d, d), f"{i}.o": (d, d), f"{i}.gate": (d, f),
                       f"{i}.up": (d, f), f"{i}.down": (f, d), f"{i}.norm1": (d,), f"{i}.norm2": (d,)})
    return {k: (np.ones(v) if len(v) == 1 else rng.normal(0, INIT_STD, v)).astype(np.float32)
            for k, v in shapes.items()}


def batch(s: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.integers(0, s["vocab"], (s["batch"], s["seq"] + 1)).astype(np.int32)
    return x[:, :-1], x[:, 1:]


def rope_angles(s: Mapping[str, int]) -> np.ndarray:
    dh = s["dim"] // s["heads"]
    inverse = ROPE_BASE ** (-np.arange(0, dh, 2, dtype=np.float32) / dh)
    angles = np.arange(s["seq"], dtype=np.float32)[:, None] * inverse[None, :]
    return np.concatenate([angles, angles], axis=-1)  # (T, dh)


def run_jax(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    jax.config.update("jax_default_matmul_precision", "highest")
    s = size(args)
    heads, dh, attention = s["heads"], s["dim"] // s["heads"], options.get("attention", "fused")
    cos, sin = np.cos(rope_angles(s)), np.sin(rope_angles(s))

    def rms(x: Any, scale: Any) -> Any:
        return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * scale

    def rope(x: Any) -> Any:  # (B, T, heads, dh)
        half = dh // 2
        return x * cos[:, None] + jnp.concatenate([-x[..., half:], x[..., :half]], -1) * sin[:, None]

    def formula(q: Any, k: Any, v: Any, offset: int = 0) -> Any:  # (B, T, heads, dh), keys from 0
        logits = jnp.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(dh)
        visible = jnp.arange(k.shape[1])[None, :] <= offset + jnp.arange(q.shape[1])[:, None]
        logits = jnp.where(visible, logits, -jnp.inf)
        return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, axis=-1), v)

    def attend(q: Any, k: Any, v: Any) -> Any:
        if attention == "none":
            return v
        if attention == "formula":
            return formula(q, k, v)
        if attention == "blocked":
            return jnp.concatenate([formula(q[:, i:i + BLOCK], k[:, :i + BLOCK], v[:, :i + BLOCK], i)
                                    for i in range(0, s["seq"], BLOCK)], axis=1)
        if attention == "heads_first":
            q, k, v = (t.transpose(0, 2, 1, 3) for t in (q, k, v))
            logits = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(dh)
            logits = jnp.where(jnp.tril(jnp.ones((s["seq"], s["seq"]), bool)), logits, -jnp.inf)
            return (jax.nn.softmax(logits, axis=-1) @ v).transpose(0, 2, 1, 3)
        return jax.nn.dot_product_attention(q, k, v, scale=1 / math.sqrt(dh), is_causal=True)

    def loss(p: Any, x: Any, y: Any) -> Any:
        b, t = x.shape
        h = jnp.take(p["embed"], x, axis=0)
        for i in range(s["depth"]):
            z = rms(h, p[f"{i}.norm1"])
            q, k = (rope((z @ p[f"{i}.{n}"]).reshape(b, t, heads, dh)) for n in ("q", "k"))
            v = (z @ p[f"{i}.v"]).reshape(b, t, heads, dh)
            h = h + attend(q, k, v).reshape(b, t, -1) @ p[f"{i}.o"]
            z = rms(h, p[f"{i}.norm2"])
            h = h + (jax.nn.silu(z @ p[f"{i}.gate"]) * (z @ p[f"{i}.up"])) @ p[f"{i}.down"]
        logits = rms(h, p["final_norm"]) @ p["head"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return harness.time_jax_training(loss, parameters(s), *batch(s), steps(args))


def run_torch(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    torch = harness.import_torch()
    F = torch.nn.functional

    s = size(args)
    heads, dh, attention = s["heads"], s["dim"] // s["heads"], options.get("attention", "fused")
    cos, sin = torch.tensor(np.cos(rope_angles(s))), torch.tensor(np.sin(rope_angles(s)))

    def rms(x: Any, scale: Any) -> Any:
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + RMS_EPS) * scale

    def rope(x: Any) -> Any:  # (B, heads, T, dh)
        half = dh // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def loss(p: Any, x: Any, y: Any) -> Any:
        b, t = x.shape
        h = F.embedding(x, p["embed"])
        for i in range(s["depth"]):
            z = rms(h, p[f"{i}.norm1"])
            q, k, v = ((z @ p[f"{i}.{n}"]).view(b, t, heads, dh).transpose(1, 2) for n in ("q", "k", "v"))
            o = v if attention == "none" else F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
            h = h + o.transpose(1, 2).reshape(b, t, -1) @ p[f"{i}.o"]
            z = rms(h, p[f"{i}.norm2"])
            h = h + (F.silu(z @ p[f"{i}.gate"]) * (z @ p[f"{i}.up"])) @ p[f"{i}.down"]
        logits = rms(h, p["final_norm"]) @ p["head"]
        return F.cross_entropy(logits.flatten(0, 1), y.flatten())

    x, y = (torch.from_numpy(a).long() for a in batch(s))
    return harness.time_torch_training(loss, parameters(s), x, y, steps(args), bool(options.get("compile")))


def run_tensorflow(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    tf = harness.import_tensorflow()
    s = size(args)
    heads, dh = s["heads"], s["dim"] // s["heads"]
    cos, sin = tf.constant(np.cos(rope_angles(s))), tf.constant(np.sin(rope_angles(s)))
    visible = tf.cast(tf.linalg.band_part(tf.ones([s["seq"], s["seq"]]), -1, 0), tf.bool)

    def rms(x: Any, scale: Any) -> Any:
        return x * tf.math.rsqrt(tf.reduce_mean(x * x, -1, keepdims=True) + RMS_EPS) * scale

    def rope(x: Any) -> Any:  # (B, heads, T, dh)
        half = dh // 2
        return x * cos + tf.concat([-x[..., half:], x[..., :half]], -1) * sin

    def loss(p: Any, x: Any, y: Any) -> Any:
        b, t = x.shape
        h = tf.gather(p["embed"], x)
        for i in range(s["depth"]):
            z = rms(h, p[f"{i}.norm1"])
            q, k, v = (tf.transpose(tf.reshape(z @ p[f"{i}.{n}"], [b, t, heads, dh]), [0, 2, 1, 3]) for n in "qkv")
            logits = tf.matmul(rope(q), rope(k), transpose_b=True) / math.sqrt(dh)
            o = tf.nn.softmax(tf.where(visible, logits, -math.inf), -1) @ v
            h = h + tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [b, t, -1]) @ p[f"{i}.o"]
            z = rms(h, p[f"{i}.norm2"])
            h = h + (tf.nn.silu(z @ p[f"{i}.gate"]) * (z @ p[f"{i}.up"])) @ p[f"{i}.down"]
        logits = rms(h, p["final_norm"]) @ p["head"]
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))

    return harness.time_tensorflow_training(loss, parameters(s), *batch(s), steps(args))


def summarise(args: argparse.Namespace, r: Mapping[str, harness.Result]) -> harness.Result:
    def share(fw: str) -> float | None:  # of the full step, what the attention costs
        full, without = r.get(fw, {}).get("median_s"), r.get(f"{fw}-no-attention", {}).get("median_s")
        return None if not full or without is None else 1 - without / full

    s = size(args)
    tokens = s["batch"] * s["seq"]
    jax_s = r.get("jax", {}).get("median_s")
    return {
        "gap": "lm_train",
        "ratio": harness.ratio(r, "jax", "torch-compiled"),
        "ratio_to_torch_eager": harness.ratio(r, "jax", "torch"),
        "ratio_to_tensorflow_xla": harness.ratio(r, "jax", "tensorflow"),
        "ratio_cpu_to_torch_eager": harness.ratio(r, "jax", "torch", "cpu_s"),
        "attention_share_jax": share("jax"),
        "attention_share_torch": share("torch"),
        "ratio_without_attention": harness.ratio(r, "jax-no-attention", "torch-no-attention"),
        "heads_first_speedup": harness.ratio(r, "jax-heads-first", "jax"),
        "formula_speedup": harness.ratio(r, "jax-formula", "jax"),
        "blocked_speedup": harness.ratio(r, "jax-blocked", "jax"),
        "ratio_blocked_multi_output": harness.ratio(r, "jax-blocked-multi-output", RATIO_BASE),
        "eigen_dots_speedup": harness.ratio(r, "jax-eigen-dots", "jax"),
        "multi_output_fusion_speedup": harness.ratio(r, "jax-multi-output-fusion", "jax"),
        "ratio_multi_output_fusion": harness.ratio(r, "jax-multi-output-fusion", RATIO_BASE),
        "jax_samples_per_s": s["batch"] / jax_s if jax_s else None,
        "shapes": {**s, "tokens_per_step": tokens},
    }


if __name__ == "__main__":
    sys.exit(harness.main(__file__, __doc__.split("\n\n")[0], configs,
                          {"jax": run_jax, "torch": run_torch, "tensorflow": run_tensorflow}, summarise))
