"""The torch backend's own options (`--option torch.NAME=VALUE`, Policy.options) and the values a
trial runs with: shared by the backend (configure applies and reads back the global ones) and
the programs (the memory format, optimizer, compiled scope and loader they build with). Imports
no torch. Every option here is a variant the headroom search tries (issue 32; docs/variants.md):
the same mathematics written or set another way, judged by parity like any trial.
"""

from __future__ import annotations

from dlbench.backends.base import Option, Variant, option_value
from dlbench.spec import Policy

# The workloads TorchProgram runs (program.py): PPO (ppo.py) has a loop of its own.
PROGRAM_WORKLOADS = ("mlp", "cnn", "resnet", "transformer", "vit", "detect", "ddpm", "lm", "node")
# The workloads with 4-D image tensors, where a memory format means anything, and the layout
# each one's Model declares (program.Model.memory_format; a test checks the two agree).
IMAGE_WORKLOADS = {"cnn": "channels_last", "resnet": "channels_last", "vit": "channels_last",
                   "detect": "channels_last", "ddpm": "contiguous"}
# torch.compile's modes a variant may ask for ("default" is COMPILE_OPTIONS's); "max-autotune"
# adds CUDA graphs, which capture GPU kernels only.
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "max-autotune")
# torch.optim.Adam's three implementations, as its (`fused`, `foreach`) flags select them.
OPTIMIZERS: dict[str, tuple[bool | None, bool | None]] = {
    "fused": (True, None), "foreach": (None, True), "for-loop": (None, False)}

OPTIONS: dict[str, Option] = {
    "memory_format": Option(
        allowed=("model", "channels_last", "contiguous"), default="model",
        help="the layout of image tensors and conv weights: model (what each workload's model declares:"
             " channels_last for the convnets, contiguous for ddpm), channels_last or contiguous (NCHW)",
        variant=Variant(
            why="channels_last (NHWC in memory) lets oneDNN and cuDNN convolutions and max-pool skip layout"
                " conversions; contiguous NCHW is torch's default, what most scripts run",
            source="https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html",
            tried=("channels_last", "contiguous"), workloads=tuple(IMAGE_WORKLOADS),
            addresses=("convolution", "pooling", "copies and layout"),
            same_as_default=tuple(IMAGE_WORKLOADS.items()))),
    "optimizer": Option(
        allowed=tuple(OPTIMIZERS), default="fused",
        help="torch.optim.Adam's implementation: fused (one kernel per parameter), foreach (multi-tensor"
             " ops, torch's own default where no flag is given) or for-loop (one parameter at a time)",
        variant=Variant(
            why="torch.optim.Adam without flags runs foreach, which torch.compile traces into Inductor code;"
                " fused=True is one ATen kernel that compile leaves untraced",
            source="https://pytorch.org/docs/stable/generated/torch.optim.Adam.html",
            tried=("foreach", "for-loop"), addresses=("optimizer update",))),
    "compile_scope": Option(
        allowed=("step", "model"), default="step",
        help="what compiled mode compiles: step (the whole train step, loss and optimizer included) or model"
             " (torch.compile(model), the loss, backward call and optimizer step run eagerly)",
        variant=Variant(
            why="torch.compile(model) is the plainest idiomatic use; compiling the whole step also traces the"
                " loss and the backward call, with graph breaks at zero_grad and the fused optimizer",
            source="https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html",
            tried=("model",), workloads=PROGRAM_WORKLOADS, modes=("compiled",),
            addresses=("host overhead and idle",))),
    "loader": Option(
        allowed=("batch_dataset", "tensor_dataset"), default="batch_dataset",
        help="the input pipeline (data pipeline): batch_dataset (a Dataset whose item is a whole step's"
             " batch, one gather each) or tensor_dataset (TensorDataset, a Sampler in the spec's order and"
             " the default collation, one item per sample)",
        variant=Variant(
            why="a TensorDataset with a sampler and default collation is the textbook DataLoader; it indexes"
                " and stacks one sample at a time where the default gathers each batch at once",
            source="https://pytorch.org/docs/stable/data.html",
            tried=("tensor_dataset",), workloads=PROGRAM_WORKLOADS, addresses=("input pipeline",))),
    "mkldnn": Option(
        allowed=("on", "off"), default="on",
        help="torch.backends.mkldnn.enabled: oneDNN kernels for CPU convolutions and matmuls (on, torch's"
             " default) or ATen's own",
        variant=Variant(
            why="oneDNN picks kernels by the CPU's instruction set; ATen's own kernels are the plain"
                " alternative, sometimes faster for small shapes",
            source="https://docs.pytorch.org/docs/stable/notes/mkldnn.html",
            tried=("off",), devices=("cpu",), addresses=("convolution", "matmul"))),
    "matmul_precision": Option(
        allowed=("highest", "high", "medium"), default="highest",
        help="torch.set_float32_matmul_precision: highest (IEEE fp32, the default; --precision tf32 sets"
             " high), high (TF32 or bf16x3 where available) or medium (bf16 where available)",
        variant=Variant(
            why="on a GPU with TF32 or a CPU with AVX-512-BF16/AMX, float32 matmuls may run in lower internal"
                " precision: faster, and the parity verdict says whether the result stays within bounds",
            source="https://docs.pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html",
            tried=("high", "medium"), addresses=("matmul", "convolution"))),
    "omp_wait_policy": Option(
        allowed=("inherit", "passive", "active"), default="inherit",
        help="OMP_WAIT_POLICY for torch's OpenMP runtime (libgomp), set before the import: inherit (as the"
             " environment has it; unset: libgomp spins a while, then sleeps), passive (sleep at once) or active",
        variant=Variant(
            why="libgomp's threads spin at the end of each parallel region; on a machine shared with other"
                " work, spinning measured several-fold slower CPU steps, and sleeping may cost wake-up latency"
                " on an idle one",
            source="https://gcc.gnu.org/onlinedocs/libgomp/OMP_005fWAIT_005fPOLICY.html; docs/benchmarks.md"
                   " (detect: why torch's steps were slow)",
            tried=("passive", "active"), devices=("cpu",), addresses=("host overhead and idle",)),
        environment={"passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "active": {"OMP_WAIT_POLICY": "ACTIVE"}}),
    "compile_mode": Option(
        allowed=COMPILE_MODES, default="default",
        help="torch.compile's mode in compiled mode: default, max-autotune-no-cudagraphs (Inductor benchmarks"
             " kernel choices while compiling) or max-autotune (also CUDA graphs: a GPU only)",
        variant=Variant(
            why="max-autotune benchmarks matmul/conv kernels and Triton configurations while compiling,"
                " trading compile time for step time; CUDA graphs remove kernel launch overhead on a GPU",
            source="https://pytorch.org/docs/stable/generated/torch.compile.html",
            tried=("max-autotune-no-cudagraphs", "max-autotune"), workloads=PROGRAM_WORKLOADS,
            modes=("compiled",), gpu_only=("max-autotune",), addresses=("convolution", "matmul"))),
}


def value(policy: Policy, name: str) -> str:
    """The policy's value of the torch option `name` (its default where unset)."""
    return option_value(OPTIONS, policy, name)


def memory_format_name(policy: Policy, declared: str) -> str:
    """"channels_last" or "contiguous": the option's, or the model's `declared` one."""
    asked = value(policy, "memory_format")
    return declared if asked == "model" else asked


def optimizer_flags(policy: Policy) -> tuple[bool | None, bool | None]:
    """torch.optim.Adam's (`fused`, `foreach`) arguments for the policy's optimizer option."""
    return OPTIMIZERS[value(policy, "optimizer")]


def float32_matmul_precision(policy: Policy) -> str:
    """The option where given, else "high" for --precision tf32 and "highest" otherwise."""
    if "matmul_precision" in policy.options:
        return policy.options["matmul_precision"]
    return "high" if policy.matmul_precision == "tf32" else "highest"
