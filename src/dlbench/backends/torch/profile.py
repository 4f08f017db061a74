"""torch.profiler for profiled trials (backends/profiling.py): the CPU activity (and CUDA
where a GPU is used), exported as a Chrome trace; ATen op, autograd node, optimizer and
Inductor kernel names mapped to the shared categories."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# First match wins; searched case-insensitively in the event's name. Inductor names its
# generated C++ kernels after the ops they fuse (cpp_fused_max_pool2d_with_indices_relu_1), so
# pooling comes before the elementwise ops such a kernel also contains.
RULES = (
    (r"Optimizer\.step|Optimizer\.zero_grad|_foreach_|fused_adam|adam", "optimizer update"),
    (r"DataLoader|_next_data|collate|pin_memory", "input pipeline"),
    # Inductor lowers max-pool's backward to scatter_reduce (cnn, resnet: their only scatter)
    (r"max_pool|avg_pool|adaptive_.*pool|MaxPool|AvgPool|pool2d|scatter_reduce", "pooling"),
    (r"conv|Convolution", "convolution"),
    (r"addmm|\bmm\b|aten::mm|bmm|matmul|linear|MmBackward|scaled_dot_product|attention|baddbmm|dot", "matmul"),
    (r"batch_norm|layer_norm|group_norm|NativeBatchNorm|NativeLayerNorm|NativeGroupNorm|_norm", "normalisation"),
    (r"cross_entropy|nll_loss|log_softmax|softmax|NllLoss|LogSoftmax|aten::sum|aten::mean|amax|SumBackward|"
     r"MeanBackward|\bsum\b|\bmean\b|cumsum|cumprod|logsumexp|argmax|argmin|topk|sort", "loss and reductions"),
    (r"relu|gelu|threshold|sigmoid|tanh|erf|\badd|\bmul|\bsub|\bdiv|exp|sqrt|where|clamp|pow|neg|"
     r"AddBackward|MulBackward|fill_|zero_|cpp_fused|ones_like|zeros_like|full_like|random_|uniform_|normal_|"
     r"bernoulli|dropout|rsub|reciprocal|silu|square|softplus|mish|hardswish|hardsigmoid|elu\b|aten::(?:eq|ne|lt|le|gt|ge|logical_\w+|bitwise_\w+|abs|sign|maximum|minimum)\b",
     "elementwise and activation"),
    (r"copy|_to_copy|\bto\b|contiguous|transpose|permute|view|reshape|aten::t\b|expand|clone|cat|stack|"
     r"slice|select|index|empty|as_strided|detach|unsqueeze|squeeze|flatten|TBackward|ViewBackward|"
     r"PermuteBackward|ReshapeAlias|UnsafeView|aten::item|_local_scalar_dense|lift_fresh|resolve_conj|resolve_neg|"
     r"pad|narrow|split|chunk|unbind|roll|flip|repeat|tile|gather|scatter\b|masked_select|nonzero",
     "copies and layout"),
    # the backward pass hands each parameter its gradient (a move, or an add where one is kept)
    (r"AccumulateGrad", "copies and layout"),
    (r"TorchDynamo|CompiledFunction|AOTDispatcher|Runtime Wrapper|Pregraph bytecode|Guard", "host overhead and idle"),
)
# The backward pass: autograd's nodes (eager), AOTAutograd's compiled backward (compiled).
BACKWARD = r"Backward|autograd::engine::evaluate_function"
# The profiler's own step markers and the compiled region's wrapper hold other events.
CONTAINERS = r"^PyTorch Profiler|^ProfilerStep#|^Torch-Compiled Region|^## "


def prepare() -> None:
    """Inductor's generated CPU kernels record themselves in the profiler only when asked before
    they are compiled (a profiled trial only: it adds a marker to each kernel)."""
    import torch._inductor.config as inductor_config

    inductor_config.cpp.enable_kernel_profile = True


def start(trace_dir: Path) -> Callable[[], Path]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    prof = profile(activities=activities)
    prof.__enter__()

    def stop() -> Path:
        prof.__exit__(None, None, None)
        path = trace_dir / "torch.trace.json"
        prof.export_chrome_trace(str(path))
        return path

    return stop
