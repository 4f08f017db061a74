"""The JAX backend's own options (`--option jax.NAME=VALUE`, Policy.options): several steps per
jitted call (backends/multistep.py), the cnn's max-pool, and the default matmul precision. Shared
by the backend (configure applies the precision and reads it back) and the programs. Imports no
JAX. Every option here is a variant the headroom search tries (issue 32; docs/variants.md).
"""

from __future__ import annotations

from dlbench.backends import multistep
from dlbench.backends.base import Option, Variant, option_value
from dlbench.spec import Policy

# Policy.matmul_precision -> jax_default_matmul_precision.
MATMUL_PRECISION = {"highest": "highest", "tf32": "tensorfloat32"}
# The workloads whose models have a non-overlapping 2x2/2 max-pool (resnet's is 3x3/2).
POOL_WORKLOADS = ("cnn",)

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


def matmul_precision(policy: Policy) -> str:
    """jax_default_matmul_precision: the option where given, else the policy's precision's."""
    if "matmul_precision" in policy.options:
        return policy.options["matmul_precision"]
    return MATMUL_PRECISION[policy.matmul_precision]
