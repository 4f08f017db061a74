"""The JAX backend's own options (`--option jax.NAME=VALUE`, Policy.options): several steps per
jitted call (backends/multistep.py), the cnn's max-pool, lm's attention, XLA:CPU's multi-output
fusion, and the default matmul precision. Shared
by the backend (configure applies the precision and reads it back) and the programs. Imports no
JAX. Every option here is a variant the headroom search tries (issue 32; docs/variants.md).
"""

from __future__ import annotations

import os

from dlbench.backends import multistep
from dlbench.backends.base import Option, Variant, option_value
from dlbench.spec import Policy

# XLA:CPU makes this many host devices (one otherwise); they share the process's thread pool.
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"
# Policy.matmul_precision -> jax_default_matmul_precision.
MATMUL_PRECISION = {"highest": "highest", "tf32": "tensorfloat32"}
# The workloads whose steps are mostly convolutions (vit's one patch convolution is 1 % of its step).
CONV_WORKLOADS = ("cnn", "resnet", "detect", "ddpm")
# The workloads whose models have a non-overlapping 2x2/2 max-pool (resnet's is 3x3/2).
POOL_WORKLOADS = ("cnn",)
# XLA:CPU's instruction fusion without duplicating a producer into each consumer: a backend
# option (xla_backend_extra_options), read from XLA_FLAGS when XLA starts (no jax.config switch).
MULTI_OUTPUT_FUSION_FLAG = "--xla_backend_extra_options=xla_cpu_use_multi_output_fusion"
# jaxlib 0.10.2's XLA:CPU hands each dot and convolution to YNNPACK (an `individual_dot` /
# `individual_convolution` YNN fusion); removing a type from the flag's default list leaves that
# op to XLA's own Eigen-based kernels (TensorFlow 2.21's XLA runs those).
YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type"
YNN_TYPES = {"dot_library": "individual_dot", "conv_library": "individual_convolution"}

OPTIONS: dict[str, Option] = {
    # Declared in the order the headroom search tries them (a budget admits a prefix): the
    # pool first, measured 17x in its gradient (issue 32).
    "pool": Option(
        allowed=("reduce_window", "reshape"), default="reduce_window",
        help="the cnn's 2x2/2 max-pool: reduce_window (lax.reduce_window, what Flax's nn.max_pool runs) or"
             " reshape (the window's four values as two axes of a reshape, then max)",
        variant=Variant(
            why="XLA:CPU expands reduce_window's gradient into an arg-max reduce-window and a scatter; the"
                " same pool as reshape + max differentiates into elementwise compares: measured 17x faster"
                " in the pool's gradient, same values",
            source="issue 32; Flax's pooling: https://github.com/google/flax/blob/main/flax/linen/pooling.py",
            tried=("reshape",), workloads=POOL_WORKLOADS, addresses=("pooling",))),
    # Issue 50 (docs/gaps.md): the lm training gap's two parts, the attention and XLA:CPU's
    # fusion duplication, declared before the rest so that a budget admits them first.
    "attention": Option(
        allowed=("fused", "formula", "blocked"), default="fused",
        help="lm's causal attention in training: fused (jax.nn.dot_product_attention, XLA's composite on a"
             " CPU), formula (softmax(q k^T) v as einsums, as Flax's nn.dot_product_attention writes it) or"
             " blocked (the formula by four query blocks, each over its key prefix: the masked blocks above"
             " the diagonal are never computed)",
        variant=Variant(
            why="on XLA:CPU jax.nn.dot_product_attention(is_causal=True) lowers to a composite that ran"
                " single-threaded at 3.9x torch's flash-attention kernel's time (lm's shape, 2 cores); the"
                " einsum formula ran 1.45x faster, the blocked formula 2.7x",
            source="docs/gaps.md (lm-train-jax), benchmarks/gaps/attention.py",
            tried=("blocked", "formula"), workloads=("lm",),
            addresses=("matmul", "loss and reductions", "elementwise and activation"))),
    "multi_output_fusion": Option(
        allowed=("off", "on"), default="off",
        help="XLA:CPU's instruction fusion: off (XLA's default: a producer is duplicated into each"
             " consumer's fusion) or on (multi-output fusion instead; appends"
             f" {MULTI_OUTPUT_FUSION_FLAG} to XLA_FLAGS before the import)",
        variant=Variant(
            why="XLA:CPU duplicates the backward pass's residual-gradient chain into every fusion that"
                " feeds a weight-gradient dot, work that grows with the square of the depth (26 % of"
                " ViT-B/16's step on one core); multi-output fusion computes it once",
            source="docs/gaps.md (vit-published-jax), benchmarks/gaps/vit_train.py; XLA's"
                   " cpu_compiler.cc runs CpuInstructionFusion with may_duplicate = !multi-output fusion",
            tried=("on",), devices=("cpu",),
            addresses=("copies and layout", "elementwise and activation", "matmul"))),
    "conv1x1": Option(
        allowed=("conv", "dot"), default="conv",
        help="resnet's 1x1 convolutions: conv (lax.conv_general_dilated) or dot (the strided pixels times"
             " the (in, out) kernel: the same product)",
        variant=Variant(
            why="XLA:CPU runs a convolution's weight gradient as a convolution over the batch on"
                " transposed activations: ResNet-50's 1x1 weight gradients ran at 10-40 GFLOP/s on one core"
                " where oneDNN's reach 45-90; as a dot the gradient is a matrix product (1.1-1.9x the 1x1"
                " convolution's forward and backward)",
            source="docs/gaps.md (resnet50-published-xla), benchmarks/gaps/kernels.py --case resnet50",
            tried=("dot",), workloads=("resnet",), addresses=("convolution", "copies and layout"))),
    "conv_library": Option(
        allowed=("ynnpack", "eigen"), default="ynnpack",
        help="XLA:CPU's convolutions: ynnpack (jaxlib's default) or eigen (XLA's own; appends"
             f" {YNN_FLAG}=-individual_convolution to XLA_FLAGS before the import)",
        variant=Variant(
            why="YNNPACK's convolutions ran the cnn's at 7-57 GFLOP/s on one core (the 3-channel first"
                " convolution's forward and weight gradient at 7-11); with XLA's Eigen convolutions the"
                " cnn's step ran 1.9x faster",
            source="docs/gaps.md (cnn-jax-tensorflow), benchmarks/gaps/kernels.py --case cnn",
            tried=("eigen",), workloads=CONV_WORKLOADS, devices=("cpu",), addresses=("convolution",))),
    "dot_library": Option(
        allowed=("ynnpack", "eigen"), default="ynnpack",
        help="XLA:CPU's matrix products: ynnpack (jaxlib's default for the forward and input-gradient"
             f" forms) or eigen (XLA's own; appends {YNN_FLAG}=-individual_dot to XLA_FLAGS)",
        variant=Variant(
            why="with XLA's Eigen dots lm's causal attention ran 1.65x faster on two cores and the ViT-B/16"
                " step 1.09x on one",
            source="docs/gaps.md (lm-train-jax, vit-published-jax), benchmarks/gaps/attention.py",
            tried=("eigen",), devices=("cpu",), addresses=("matmul",))),
    # Several train steps per jitted call (backends/multistep.py): unrolled, or a lax.scan.
    **multistep.options(("unroll", "scan"), "jax.jit", multistep.JAX_AUTO_STEPS, tried_steps=("8",)),
    "matmul_precision": Option(
        allowed=("highest", "default", "bfloat16"), default="highest",
        help="jax_default_matmul_precision for float32 matmuls and convolutions: highest (the default;"
             " --precision tf32 sets tensorfloat32), default (JAX's own DEFAULT: the backend's fastest)"
             " or bfloat16",
        variant=Variant(
            why="dlbench pins float32 matmuls to HIGHEST; JAX's own default lets the backend pick lower"
                " internal precision (bf16 passes on TPU and GPU, possibly oneDNN bf16 on CPU): the parity"
                " verdict says whether it stays within bounds",
            source="https://docs.jax.dev/en/latest/_autosummary/jax.default_matmul_precision.html",
            tried=("default", "bfloat16"), addresses=("matmul", "convolution"))),
    # lm's generator (backends/jax/lm.py): a jitted decode step per token, or the whole decode one
    # jitted lax.while_loop (the generate scenario's only; other scenarios do not read it).
    "decode": Option(allowed=("step", "while_loop"), default="step",
                     help="lm's generate scenario: step (a jitted decode step per token) or while_loop"
                          " (the whole decode one jitted lax.while_loop; time to first token then holds"
                          " every token)"),
}


def value(policy: Policy, name: str) -> str:
    """The policy's value of the JAX option `name` (its default where unset)."""
    return option_value(OPTIONS, policy, name)


def xla_flags(policy: Policy, host_devices: int = 1) -> str | None:
    """XLA_FLAGS as the trial needs them, the environment's own first: the host platform's device
    count where data parallelism asks for more than one, the flags of the multi-output fusion and
    dot and convolution library options. None where the trial adds nothing."""
    added = [f"{HOST_DEVICES_FLAG}={host_devices}"] if host_devices > 1 else []
    if value(policy, "multi_output_fusion") == "on":
        added.append(MULTI_OUTPUT_FUSION_FLAG)
    removed = [f"-{ynn}" for name, ynn in YNN_TYPES.items() if value(policy, name) == "eigen"]
    if removed:  # one flag: XLA keeps the last of a repeated one
        added.append(f"{YNN_FLAG}={','.join(removed)}")
    if not added:
        return None
    return " ".join([os.environ.get("XLA_FLAGS", ""), *added]).strip()


def matmul_precision(policy: Policy) -> str:
    """jax_default_matmul_precision: the option where given, else the policy's precision's."""
    if "matmul_precision" in policy.options:
        return policy.options["matmul_precision"]
    return MATMUL_PRECISION[policy.matmul_precision]
