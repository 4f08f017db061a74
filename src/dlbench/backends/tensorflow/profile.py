"""TensorFlow's profiler for profiled trials (backends/profiling.py): tf.profiler.experimental
writes an xplane under the trace directory; TensorFlow's own converter (the one TensorBoard's
profile plugin calls) turns it into a Chrome trace (`trace_viewer@`, plain JSON). TF op type names
(oneDNN's `_MklNative...` included) mapped to the shared categories, and in compiled mode
(jit_compile) XLA's HLO names (profiling.XLA_RULES), which TF prefixes with its op's name
(`Conv2D_1.1`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dlbench.backends.profiling import XLA_RULES

RULES = (
    (r"Adam|ApplyGradient|ResourceApply|AssignSub|AssignAdd|AssignVariable", "optimizer update"),
    # Keras's data adapter reads the iterator through optionals (IteratorGetNextAsOptional)
    (r"IteratorGetNext|Iterator|Dataset|ParallelMap|Prefetch|TensorSlice|^Optional(?:HasValue|FromValue|GetValue|None)",
     "input pipeline"),
    (r"MaxPool|AvgPool|(?<!thread)Pool|select-and-scatter|reduce-window", "pooling"),
    (r"Conv(?!ert|_to_tensor)", "convolution"),
    (r"MatMul|BatchMatMul|Einsum|_MklFused.*MatMul|Dense", "matmul"),
    (r"BatchNorm|LayerNorm|FusedBatchNorm|Rsqrt|Moments", "normalisation"),
    (r"SoftmaxCrossEntropy|Softmax|LogSoftmax|Sum\b|Mean\b|Max\b|Prod\b|Reduce|ArgMax|Sparse", "loss and reductions"),
    (r"Relu|Gelu|Erf|Tanh|Sigmoid|Add|Mul|Sub|Div|RealDiv|Exp|Log|Sqrt|Square|Pow|Neg|Maximum|Minimum|"
     r"Select|Where|Greater|Less|Equal|Cast|BiasAdd|AddN|OnesLike|ZerosLike|Fill", "elementwise and activation"),
    (r"Transpose|Reshape|Identity|Concat|Pack|Unpack|Slice|Gather|Tile|Pad|Squeeze|ExpandDims|Shape|"
     r"Copy|Send|Recv|ReadVariableOp|Const|Bitcast|BroadcastTo", "copies and layout"),
    (r"^EagerCopyToDevice|TFE_|Validate|ExecutorDoneCallback|graph_building|convert_to_tensor",
     "host overhead and idle"),
    *XLA_RULES,
)
# The backward pass: TensorFlow's gradient ops (MaxPoolGrad, Conv2DBackpropFilter, ReluGrad).
BACKWARD = r"Grad(?:$|[A-Z_])|Backprop"
# What this mapping cannot tell apart, said under the profile table (runner/scenarios/profiled.py).
CAVEAT = ("compiled mode (XLA): dots and convolutions that XLA:CPU hands to YNNPACK count as matmul, max-pool's"
          " backward expands into copies and elementwise fusions, the optimizer update into elementwise fusions")
# The Python thread waits inside these while the op threads work; the thread pools' regions
# repeat the time of the op that opened them.
CONTAINERS = (r"^TFE_Py_Execute|^EagerExecute$|^EagerLocalExecute|^EagerKernelExecute$|^KernelAndDeviceFunc::Run$"
              r"|^FunctionRun$|^ThreadpoolListener::|^ExecutorState::Process$|^__inference_|^step$"
              r"|^FunctionCall$|^PartitionedCall$|^StatefulPartitionedCall|^ThunkExecutor::Execute$|BlockUntilReady"
              r"|wait for completion|^_train_step$|^_first_elements$|^end: "
              # the executor around an async kernel (the step's call, the iterator's next) and its
              # completion: the kernel's own events are traced inside or on other threads
              r"|^ExecutorState::ProcessAsync")


def start(trace_dir: Path) -> Callable[[], Path]:
    import tensorflow as tf

    tf.profiler.experimental.start(str(trace_dir))

    def stop() -> Path:
        from tensorflow.python.profiler.internal import (
            _pywrap_profiler_plugin as plugin,
        )

        tf.profiler.experimental.stop()
        planes = sorted(str(p) for p in trace_dir.rglob("*.xplane.pb"))
        data, ok = plugin.xspace_to_tools_data(planes, "trace_viewer@", {})
        if not ok:
            raise RuntimeError(f"TensorFlow could not convert its profile {planes}: {data[:200]!r}")
        path = trace_dir / "tensorflow.trace.json"
        path.write_bytes(data)
        return path

    return stop
