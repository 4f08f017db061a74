"""The TensorFlow backend's own options (`--option tensorflow.NAME=VALUE`, Policy.options):
several steps per tf.function call (backends/multistep.py), oneDNN, and the inter-op thread pool.
Shared by the backend (configure applies the threads and reads everything back) and the
programs. Imports no TensorFlow. Every option here is a variant the headroom search tries (issue
32; docs/variants.md). XLA against graph mode for the train step is the `--mode` axis (compiled
against graph), which the search sweeps itself.
"""

from __future__ import annotations

from dlbench.backends import multistep
from dlbench.backends.base import Option, Variant, option_value
from dlbench.spec import Policy

OPTIONS: dict[str, Option] = {
    # Several train steps per tf.function call (backends/multistep.py), written out in order; in
    # eager mode a step is one call whatever the option says.
    **multistep.options(("unroll",), "tf.function", tried_steps=("1", "8"), modes=("graph", "compiled")),
    "onednn": Option(
        allowed=("inherit", "on", "off"), default="inherit",
        help="TF_ENABLE_ONEDNN_OPTS, set before the import: inherit (as the environment has it; unset: on"
             " for x86 builds), on or off (TensorFlow's own Eigen kernels)",
        variant=Variant(
            why="oneDNN's CPU kernels are TensorFlow's x86 default; its own Eigen kernels are the plain"
                " alternative (a public TensorFlow issue reports max_pool2d 3x slower than reduce_max), and"
                " oneDNN's different summation order is why parity may differ",
            source="https://www.intel.com/content/www/us/en/developer/articles/guide/optimization-for-tensorflow-"
                   "installation-guide.html",
            tried=("off",), devices=("cpu",), addresses=("convolution", "matmul", "pooling")),
        environment={"on": {"TF_ENABLE_ONEDNN_OPTS": "1"}, "off": {"TF_ENABLE_ONEDNN_OPTS": "0"}}),
    "inter_op_threads": Option(
        allowed=("auto", "1", "2", "4"), default="auto",
        help="tf.config.threading inter-op pool size: auto (TensorFlow's own, or --threads), 1, 2 or 4",
        variant=Variant(
            why="independent ops of a graph run in parallel on the inter-op pool, which competes with each"
                " op's intra-op threads for the same cores; Intel's guidance starts from one inter-op thread"
                " per socket",
            source="https://www.tensorflow.org/api_docs/python/tf/config/threading/"
                   "set_inter_op_parallelism_threads; https://www.intel.com/content/www/us/en/developer/articles/"
                   "technical/maximize-tensorflow-performance-on-cpu-considerations-and-recommendations-for-"
                   "inference.html",
            tried=("1",), devices=("cpu",), addresses=("host overhead and idle",))),
}


def value(policy: Policy, name: str) -> str:
    """The policy's value of the TensorFlow option `name` (its default where unset)."""
    return option_value(OPTIONS, policy, name)
