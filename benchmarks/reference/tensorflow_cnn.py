"""The cnn benchmark as a hand-written TensorFlow loop, without dlbench's runner or backend.

It takes the workload's parameters, data and per-epoch order from dlbench.workloads so that the
work is the same; the model, the optimizer and the loop are its own. benchmarks/overhead.py
compares its speed with dlbench trials of the same spec.

    python benchmarks/reference/tensorflow_cnn.py --mode compiled --threads 2

Prints one JSON line: {"framework", "mode", "samples_per_s", "train_s", "final_loss"}.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import harness  # beside this script: the CLI and result line overhead.py reads


def parse_args() -> argparse.Namespace:
    return harness.parse_args(__doc__.splitlines()[0], ("eager", "graph", "compiled"))


def pin_threads(threads: int | None) -> None:
    """Before TensorFlow is imported: its thread pools are sized when it starts."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if threads is None:
        return
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)


def main() -> None:
    args = parse_args()
    pin_threads(args.threads)

    import numpy as np
    import tensorflow as tf

    from dlbench.spec import WorkloadSpec
    from dlbench.workloads import cnn
    from dlbench.workloads.data import batch_indices, epoch_order

    if args.threads is not None:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.experimental.enable_tensor_float_32_execution(False)

    spec = WorkloadSpec(batch_size=args.batch_size, dataset_size=args.dataset_size, seed=args.seed)
    data = cnn.make_dataset(spec)
    # Host variables, not constants: a constant captured by Dataset.map is copied into the
    # pipeline's graph each epoch (0.2 s at 8192 images); a variable is captured by handle.
    with tf.device("/CPU:0"):
        x_all, y_all = tf.Variable(data.x, trainable=False), tf.Variable(data.y, trainable=False)
    w = {name: tf.Variable(value) for name, value in cnn.init_params(spec).items()}
    variables = list(w.values())
    # Adam as torch/optax: eps outside the square root of the bias-corrected v (Keras's Adam
    # adds eps before the correction and defaults it to 1e-7).
    lr, b1, b2, eps = 1e-3, 0.9, 0.999, 1e-8
    m = [tf.Variable(tf.zeros_like(v)) for v in variables]
    s = [tf.Variable(tf.zeros_like(v)) for v in variables]
    step = tf.Variable(0, dtype=tf.int64)

    def forward(x: tf.Tensor) -> tf.Tensor:
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w["conv1.kernel"], 1, "VALID"), w["conv1.bias"]))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, w["conv2.kernel"], 1, "VALID"), w["conv2.bias"]))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.reshape(h, [-1, cnn.FLAT])
        h = tf.nn.relu(tf.matmul(h, w["dense1.kernel"]) + w["dense1.bias"])
        return tf.matmul(h, w["dense2.kernel"]) + w["dense2.bias"]

    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = forward(x)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, variables)
        t = tf.cast(step.assign_add(1), tf.float64)
        step_size = tf.cast(lr / (1 - b1**t), tf.float32)
        v_scale = tf.cast(tf.sqrt(1 - b2**t), tf.float32)
        for p, g, m_i, s_i in zip(variables, grads, m, s):
            m_i.assign(b1 * m_i + (1 - b1) * g)
            s_i.assign(b2 * s_i + (1 - b2) * tf.square(g))
            p.assign_sub(step_size * m_i / (tf.sqrt(s_i) / v_scale + eps))
        return loss

    if args.mode != "eager":
        signature = [
            tf.TensorSpec((args.batch_size, *cnn.INPUT_SHAPE), tf.float32),
            tf.TensorSpec((args.batch_size,), tf.int32),
        ]
        train_step = tf.function(train_step, input_signature=signature, jit_compile=args.mode == "compiled")

    def run_epoch(epoch: int) -> Any:
        if args.plain:  # a tutorial's pipeline: the tensors' slices, shuffled by tf.data, batched
            batches = (tf.data.Dataset.from_tensor_slices((data.x, data.y))
                       .shuffle(len(data), seed=args.seed + epoch).batch(args.batch_size, drop_remainder=True)
                       .prefetch(tf.data.AUTOTUNE))
            loss = None
            for x, y in batches:
                loss = train_step(x, y)
            return loss
        rows = batch_indices(epoch_order(args.seed, epoch, len(data)), args.batch_size)
        batches = (
            tf.data.Dataset.from_tensor_slices(rows)
            .map(lambda i: (tf.gather(x_all, i), tf.gather(y_all, i)),
                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .prefetch(tf.data.AUTOTUNE)
        )
        loss = None
        for x, y in batches:
            loss = train_step(x, y)
        return loss

    for epoch in range(args.warmup_epochs):
        run_epoch(epoch).numpy()  # the fetch waits for the last step
    start = time.perf_counter()
    for epoch in range(args.warmup_epochs, args.warmup_epochs + args.epochs):
        loss = run_epoch(epoch)
    final_loss = float(loss.numpy())
    train_s = time.perf_counter() - start

    samples = args.epochs * spec.steps_per_epoch * args.batch_size
    harness.report("tensorflow", args.mode, samples, train_s, final_loss, args.plain)


if __name__ == "__main__":
    main()
