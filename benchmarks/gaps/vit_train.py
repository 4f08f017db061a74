"""Gap reproducer: training ViT-B/16 at its published shape on a CPU, JAX against torch and
TensorFlow's XLA (dlbench `vit --preset published`, batch 4: JAX 0.9 samples/s against torch
eager 1.7 and TensorFlow's XLA 1.6 on a quiet 2-core Xeon; JAX's profile put 77 % of its step in
XLA:CPU's dots).

The same model in each framework, written as each framework's users write it: the 16x16
stride-16 patch convolution with bias, the class token and learned positions, 12 pre-LN blocks
(LayerNorm, separate query/key/value projections with biases, softmax attention over 197
positions: jax.nn.dot_product_attention, F.scaled_dot_product_attention, the formula in
TensorFlow; exact GELU MLP of 3072), a final LayerNorm and the 1000-class head on the class
token; mean cross-entropy, Adam, the whole step compiled (jax.jit; torch eager and torch.compile;
tf.function(jit_compile=True)). Batch 4 at 224x224x3, float32.

Configurations besides each framework's step:
  jax-no-attention / torch-no-attention: attention replaced by its values (o = v): the rest of
    the step is the dense layers' dots, LayerNorm, GELU and the update;
  jax-multi-output-fusion: XLA_FLAGS=--xla_backend_extra_options=xla_cpu_use_multi_output_fusion
    (XLA:CPU's instruction fusion stops duplicating a producer into each of its consumers; by
    default the backward pass's residual-gradient chain is recomputed inside every fusion that
    feeds a weight-gradient dot, work that grows with the square of the depth);
  jax-eigen-dots: XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=-individual_dot (XLA:CPU's
    dots on Eigen instead of YNNPACK);
  jax-onednn-dots: the same plus --xla_cpu_use_onednn=true
    --xla_cpu_experimental_onednn_fusion_type=dot (XLA:CPU's experimental oneDNN dot fusions);
  jax-matmul-default: jax_default_matmul_precision "default" instead of "highest" (dlbench's
    variant `jax.matmul_precision=default`).

Prints one JSON line: `ratio` = JAX's samples/s over torch eager's (dlbench's 0.53), with
torch.compile against torch eager (the published-shape row: compiled no faster) beside it.

    python benchmarks/gaps/vit_train.py            # about 5 min on 2 quiet cores
    python benchmarks/gaps/vit_train.py --quick    # a tiny ViT: checks that it runs
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
ONEDNN_DOTS = f"{EIGEN_DOTS} --xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot"
RATIO_BASE = "torch"  # dlbench's quiet table: torch eager led
FULL = {"image": 224, "patch": 16, "dim": 768, "heads": 12, "depth": 12, "mlp": 3072, "classes": 1000, "batch": 4}
QUICK = {"image": 32, "patch": 16, "dim": 64, "heads": 4, "depth": 1, "mlp": 256, "classes": 10, "batch": 2}
LN_EPS = 1e-6


def size(args: argparse.Namespace) -> dict[str, int]:
    return harness.sized(args, FULL, QUICK)


def steps(args: argparse.Namespace) -> int:
    return harness.step_count(args, 4, 2)


def configs(args: argparse.Namespace) -> list[harness.Config]:
    C = harness.Config
    return [
        C("jax", "jax"),
        C("torch", "torch"),
        C("tensorflow", "tensorflow"),
        C("torch-compiled", "torch", options={"compile": "1"}),
        C("jax-no-attention", "jax", options={"attention": "none"}),
        C("torch-no-attention", "torch", options={"attention": "none"}),
        C("jax-multi-output-fusion", "jax", env={"XLA_FLAGS": MULTI_OUTPUT}),
        C("jax-eigen-dots", "jax", env={"XLA_FLAGS": EIGEN_DOTS}),
        C("jax-onednn-dots", "jax", env={"XLA_FLAGS": ONEDNN_DOTS}),
        C("jax-matmul-default", "jax", options={"precision": "default"}),
    ]


def parameters(s: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Names -> float32 arrays: kernels (in, out), the patch kernel HWIO."""
    rng = np.random.default_rng(0)
    d, f, p = s["dim"], s["mlp"], s["patch"]
    tokens = (s["image"] // p) ** 2 + 1
    shapes = {"patch.kernel": (p, p, 3, d), "patch.bias": (d,), "cls": (1, 1, d), "positions": (1, tokens, d),
              "final_ln.scale": (d,), "final_ln.bias": (d,), "head.kernel": (d, s["classes"]),
              "head.bias": (s["classes"],)}
    for i in range(s["depth"]):
        for n, (a, b) in {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "fc1": (d, f), "fc2": (f, d)}.items():
            shapes.update({f"{i}.{n}.kernel": (a, b), f"{i}.{n}.bias": (b,)})
        shapes.update({f"{i}.ln{j}.{w}": (d,) for j in (1, 2) for w in ("scale", "bias")})
    return {k: (np.ones(v) if k.endswith("scale") else rng.normal(0, 0.02, v)).astype(np.float32)
            for k, v in shapes.items()}


def batch(s: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """NHWC images and labels."""
    rng = np.random.default_rng(1)
    return (rng.normal(0, 1, (s["batch"], s["image"], s["image"], 3)).astype(np.float32),
            rng.integers(0, s["classes"], s["batch"]).astype(np.int32))


def run_jax(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    jax.config.update("jax_default_matmul_precision", options.get("precision", "highest"))
    s = size(args)
    heads, dh, attention = s["heads"], s["dim"] // s["heads"], options.get("attention", "fused")

    def dense(p: Any, name: str, x: Any) -> Any:
        return x @ p[f"{name}.kernel"] + p[f"{name}.bias"]

    def ln(p: Any, name: str, x: Any) -> Any:
        mean, var = jnp.mean(x, -1, keepdims=True), jnp.var(x, -1, keepdims=True)
        return (x - mean) * lax.rsqrt(var + LN_EPS) * p[f"{name}.scale"] + p[f"{name}.bias"]

    def loss(p: Any, x: Any, y: Any) -> Any:
        b = x.shape[0]
        z = lax.conv_general_dilated(x, p["patch.kernel"], (s["patch"],) * 2, "VALID",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC")) + p["patch.bias"]
        z = z.reshape(b, -1, s["dim"])
        h = jnp.concatenate([jnp.broadcast_to(p["cls"], (b, 1, s["dim"])), z], axis=1) + p["positions"]
        t = h.shape[1]
        for i in range(s["depth"]):
            a = ln(p, f"{i}.ln1", h)
            q, k, v = (dense(p, f"{i}.{n}", a).reshape(b, t, heads, dh) for n in "qkv")
            o = v if attention == "none" else jax.nn.dot_product_attention(q, k, v, scale=1 / math.sqrt(dh))
            h = h + dense(p, f"{i}.o", o.reshape(b, t, -1))
            h = h + dense(p, f"{i}.fc2", jax.nn.gelu(dense(p, f"{i}.fc1", ln(p, f"{i}.ln2", h)), approximate=False))
        logits = dense(p, "head", ln(p, "final_ln", h[:, 0]))
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    return harness.time_jax_training(loss, parameters(s), *batch(s), steps(args))


def run_torch(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    torch = harness.import_torch()
    F = torch.nn.functional
    s = size(args)
    heads, dh, attention = s["heads"], s["dim"] // s["heads"], options.get("attention", "fused")
    params = parameters(s)
    params["patch.kernel"] = np.ascontiguousarray(params["patch.kernel"].transpose(3, 2, 0, 1))  # OIHW

    def dense(p: Any, name: str, x: Any) -> Any:
        return x @ p[f"{name}.kernel"] + p[f"{name}.bias"]

    def ln(p: Any, name: str, x: Any) -> Any:
        return F.layer_norm(x, x.shape[-1:], p[f"{name}.scale"], p[f"{name}.bias"], LN_EPS)

    def loss(p: Any, x: Any, y: Any) -> Any:
        b = x.shape[0]
        z = F.conv2d(x, p["patch.kernel"], p["patch.bias"], stride=s["patch"]).flatten(2).transpose(1, 2)
        h = torch.cat([p["cls"].expand(b, 1, -1), z], dim=1) + p["positions"]
        t = h.shape[1]
        for i in range(s["depth"]):
            a = ln(p, f"{i}.ln1", h)
            q, k, v = (dense(p, f"{i}.{n}", a).view(b, t, heads, dh).transpose(1, 2) for n in "qkv")
            o = v if attention == "none" else F.scaled_dot_product_attention(q, k, v)
            h = h + dense(p, f"{i}.o", o.transpose(1, 2).reshape(b, t, -1))
            h = h + dense(p, f"{i}.fc2", F.gelu(dense(p, f"{i}.fc1", ln(p, f"{i}.ln2", h))))
        return F.cross_entropy(dense(p, "head", ln(p, "final_ln", h[:, 0])), y)

    x, y = batch(s)
    xt, yt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(y).long()
    return harness.time_torch_training(loss, params, xt, yt, steps(args), bool(options.get("compile")))


def run_tensorflow(args: argparse.Namespace, options: Mapping[str, str]) -> harness.Result:
    tf = harness.import_tensorflow()
    s = size(args)
    heads, dh = s["heads"], s["dim"] // s["heads"]

    def dense(p: Any, name: str, x: Any) -> Any:
        return x @ p[f"{name}.kernel"] + p[f"{name}.bias"]

    def ln(p: Any, name: str, x: Any) -> Any:
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        return tf.nn.batch_normalization(x, mean, var, p[f"{name}.bias"], p[f"{name}.scale"], LN_EPS)

    def loss(p: Any, x: Any, y: Any) -> Any:
        b = x.shape[0]
        z = tf.nn.conv2d(x, p["patch.kernel"], s["patch"], "VALID") + p["patch.bias"]
        h = tf.concat([tf.broadcast_to(p["cls"], [b, 1, s["dim"]]), tf.reshape(z, [b, -1, s["dim"]])], 1)
        h = h + p["positions"]
        t = h.shape[1]
        for i in range(s["depth"]):
            a = ln(p, f"{i}.ln1", h)
            q, k, v = (tf.transpose(tf.reshape(dense(p, f"{i}.{n}", a), [b, t, heads, dh]), [0, 2, 1, 3]) for n in "qkv")
            o = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) / math.sqrt(dh), -1) @ v
            h = h + dense(p, f"{i}.o", tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [b, t, -1]))
            h = h + dense(p, f"{i}.fc2", tf.nn.gelu(dense(p, f"{i}.fc1", ln(p, f"{i}.ln2", h)), approximate=False))
        logits = dense(p, "head", ln(p, "final_ln", h[:, 0]))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))

    return harness.time_tensorflow_training(loss, parameters(s), *batch(s), steps(args))


def summarise(args: argparse.Namespace, r: Mapping[str, harness.Result]) -> harness.Result:
    s = size(args)
    jax_s = r.get("jax", {}).get("median_s")
    return {
        "gap": "vit_train",
        "ratio": harness.ratio(r, "jax", "torch"),
        "ratio_to_tensorflow_xla": harness.ratio(r, "jax", "tensorflow"),
        "ratio_cpu_to_torch": harness.ratio(r, "jax", "torch", "cpu_s"),
        "ratio_without_attention": harness.ratio(r, "jax-no-attention", "torch-no-attention"),
        "eigen_dots_speedup": harness.ratio(r, "jax-eigen-dots", "jax"),
        "multi_output_fusion_speedup": harness.ratio(r, "jax-multi-output-fusion", "jax"),
        "ratio_multi_output_fusion": harness.ratio(r, "jax-multi-output-fusion", RATIO_BASE),
        "onednn_dots_speedup": harness.ratio(r, "jax-onednn-dots", "jax"),
        "matmul_default_speedup": harness.ratio(r, "jax-matmul-default", "jax"),
        "torch_compiled_over_eager": harness.ratio(r, "torch-compiled", "torch"),
        "torch_compile_s": r.get("torch-compiled", {}).get("compile_s"),
        "jax_samples_per_s": s["batch"] / jax_s if jax_s else None,
        "shapes": {**s, "tokens": (s["image"] // s["patch"]) ** 2 + 1},
    }


if __name__ == "__main__":
    sys.exit(harness.main(__file__, __doc__.split("\n\n")[0], configs,
                          {"jax": run_jax, "torch": run_torch, "tensorflow": run_tensorflow}, summarise))
