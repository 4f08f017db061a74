"""Frozen, framework-neutral specifications that cross process boundaries as JSON.

These classes validate and never act: environment variables, affinity and device setup are the
worker's job (runner/worker.py), done before any framework is imported. This module is the ground
floor: it validates what it can know alone; what depends on a workload is checked by
`workloads.validate`, what depends on a framework by `backends.support`.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import math
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

SCHEMA_VERSION = 1

MODES = ("eager", "graph", "compiled")
# Which framework runs which on which device is data in each backend (backends/precision.py).
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "int8")
# What a trial measures; each workload says which it runs and how (workloads: SCENARIOS).
SCENARIOS = ("train", "infer", "converge", "rollout", "generate", "solve")
COMPILE_CACHES = ("cold", "warm")
LABELS = ("learnable", "random")
# Where the training data lives: "pipeline", the framework's idiomatic loader (DataLoader,
# tf.data, NumPy batching with device prefetch); "device", the whole dataset on the device once,
# batches gathered there by index (docs/methodology.md, input pipeline).
DATA_PLACEMENTS = ("pipeline", "device")
# Augmentations (image workloads): crop_flip = pad-4 random crop + horizontal flip, parameters
# drawn by the spec (workloads/data.py: epoch_augment, crop_flip).
AUGMENTATIONS = ("none", "crop_flip")
DTYPES = ("float32", "float64")
# Matmul precision of float32 matmuls and convolutions: "highest" (IEEE fp32, every TF32 switch
# off) or "tf32" (TF32 tensor cores), which precision tf32 and only it selects.
MATMUL_PRECISIONS = ("highest", "tf32")
# Where a reinforcement-learning rollout runs (workloads/ppo.py): "host", a Python loop of
# environment steps, each a call into the framework; "fused", the whole rollout one compiled
# program (lax.scan, tf.function over a tf.while_loop); "default", fused where the mode compiles
# and the framework can, else host. Supervised workloads ignore it.
ROLLOUTS = ("default", "host", "fused")
# Inference (scenario "infer"): a p99 needs at least 100 requests to be more than the maximum.
MIN_INFER_REQUESTS = 100
# The inference scenario's load (runner/scenarios/infer.py, runner/scenarios/loadgen.py): "standard", MLPerf
# LoadGen's SingleStream (latency) and Offline (throughput); "server", SingleStream then LoadGen's
# Server (Poisson arrivals) at `server_qps`, or a sweep for the highest QPS meeting `p99_bound_ms`;
# "loop", the hand-written request loop LoadGen replaced.
INFER_LOADS = ("standard", "server", "loop")
# The generate scenario's load (runner/scenarios/generate.py): "standard", its own timed
# generations; "server", those and then LoadGen's Server with token latencies (Poisson arrivals,
# TTFT and TPOT p99 bounds) at `gen_qps`, or a sweep for the highest QPS meeting both bounds.
GEN_LOADS = ("standard", "server")
# Data parallelism (docs/methodology.md, multi-device scaling): "weak" keeps the per-device
# batch (global batch = per-device batch x devices), "strong" keeps the global batch.
SCALINGS = ("weak", "strong")
# BatchNorm under data parallelism: statistics per replica's shard, or synchronised over the
# global batch. Recorded with every multi-device trial; no workload with BatchNorm runs on
# several devices yet (backends/base.py: data_parallel_unsupported).
BN_SYNCS = ("per-replica", "synchronised")
# The canonical fixed batch of every parity check (loss and gradients, logits) has this many
# samples; the parity phase splits it into one equal shard per device, so the device count must
# divide it.
PARITY_BATCH = 8

Mode = Literal["eager", "graph", "compiled"]
# Field metadata of a field added after stores existed: left out of the serialised spec while it
# holds its default, so every configuration key made before it stays what it was (to_dict).
OMIT_DEFAULT = {"omit_default": True}


class SpecError(ValueError):
    """Invalid user input; the message is one line naming the bad value and what is allowed."""


def _check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise SpecError(f"{name} {value!r} is not one of: {', '.join(allowed)}")


# The largest data set or batch a spec takes: sample indices are int64 arrays, and a generated
# data set of more than 2**31 samples would not fit a machine's memory anyway.
MAX_SAMPLES = 2**31 - 1
# The longest a trial may be given (a week): a timeout is a number; inf is refused, as it would
# reach exports as `Infinity`, which is not JSON.
MAX_TIMEOUT_S = 7 * 24 * 3600.0


# The largest count a spec takes (epochs, steps, requests, workers, devices...) unless it says
# another: what every framework's 32-bit counters hold; a larger one only ever overflowed one.
MAX_COUNT = 2**31 - 1
# Seeds: NumPy's legacy seeding (and several frameworks') takes 32 bits.
MAX_SEED = 2**32 - 1


def _check_positive_int(name: str, value: object, minimum: int = 1, maximum: int = MAX_COUNT) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value > maximum:
        raise SpecError(f"{name} must be an integer from {minimum} to {maximum:,}, got {value:,}")


@dataclass(frozen=True)
class Numerics:
    """Every default that differs between frameworks, pinned. Each backend passes these
    explicitly and reports them back (Program.numerics) so a test can compare."""

    optimizer: str = "adam"
    learning_rate: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    # Adam as in torch/optax: bias-corrected moments, eps added outside the square root.
    eps: float = 1e-8
    eps_placement: str = "outside_sqrt"
    bias_correction: bool = True
    weight_decay: float = 0.0
    # "VALID" (cnn) or "SYMMETRIC": k//2 zeros on every side, written out as explicit pads
    # (TF's "SAME" pads stride-2 convolutions asymmetrically, torch's padding=1 symmetrically).
    padding: str = "VALID"
    flatten_order: str = "HWC"
    dropout: float = 0.0
    loss: str = "mean_softmax_cross_entropy"
    # float32 for every benchmark; float64 only for the parity reference (runner/reference.py).
    dtype: str = "float32"
    # Initialisation is not a numeric the frameworks compute: canonical parameters come from
    # the workload module (NumPy) and every backend copies them in.
    # BatchNorm (resnet): momentum is the weight of the NEW batch statistic (torch's reading;
    # Keras/TF's momentum=0.9 is the weight of the old value), eps inside the square root, the
    # batch is normalised with its biased variance and the running variance is updated with the
    # unbiased one (torch's convention), training mode inside the train step.
    bn_momentum: float = 0.1
    bn_eps: float = 1e-5
    bn_running_var: str = "unbiased"
    # LayerNorm (transformer): biased variance, eps inside the square root (Keras defaults to
    # 1e-3, torch and flax to 1e-5/1e-6: pinned here).
    ln_eps: float = 1e-5
    # GELU: "erf" is the exact form (torch's default); jax.nn.gelu defaults to the tanh form.
    gelu: str = "erf"
    # Attention logits scaled by 1/sqrt(head dim), softmax over keys, no mask, no dropout.
    attention_scale: str = "rsqrt_head_dim"
    # Neural ODE: fixed-step classic Runge-Kutta 4, gradients by backpropagating through the
    # solver's operations (discretise-then-optimise, no adjoint).
    ode_solver: str = "rk4"
    # A workload's own numerics beyond the shared fields above (GroupNorm groups, focal-loss
    # alpha, PPO's clip range, ...): name -> number, string or bool. Plugins put theirs here too,
    # so a new workload never adds a field to this class. Left out of the serialised spec while
    # empty, so configuration keys of workloads without extras stay what they were.
    extra: dict[str, Any] = field(default_factory=dict, metadata=OMIT_DEFAULT)

    def value(self, name: str) -> Any:
        """A numeric by name: a shared field, else an entry of `extra` (KeyError if neither)."""
        if name != "extra" and name in self.__dataclass_fields__:
            return getattr(self, name)
        return self.extra[name]


@dataclass(frozen=True)
class WorkloadSpec:
    """What is trained: model, data and optimizer, independent of any framework."""

    name: str = "cnn"
    # A named model size of the workload (workloads.<name>.MODEL_SIZES): layer widths, depth,
    # sequence length... live in the workload module under this name.
    model_size: str = "default"
    # "learnable": labels from a fixed random teacher with a margin, so accuracy means
    # something; "random": uniform random labels (throughput only).
    labels: str = "learnable"
    # "none" or "crop_flip" (images only): applied by every framework's pipeline from the
    # spec's per-sample parameters.
    augment: str = "none"
    batch_size: int = 128
    dataset_size: int = 8192
    eval_size: int = 1024
    num_classes: int = 10
    seed: int = 0
    numerics: Numerics = field(default_factory=Numerics)

    def validate(self) -> None:
        """What the spec can check alone; `workloads.validate` adds the workload's own checks
        (a known name and model size, augmentation only for images)."""
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"workload must be a name, got {self.name!r}")
        _check_choice("labels", self.labels, LABELS)
        _check_choice("augment", self.augment, AUGMENTATIONS)
        _check_choice("dtype", self.numerics.dtype, DTYPES)
        _check_positive_int("batch size", self.batch_size, maximum=MAX_SAMPLES)
        _check_positive_int("dataset size", self.dataset_size, maximum=MAX_SAMPLES)
        _check_positive_int("eval size", self.eval_size)
        _check_positive_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        if self.dataset_size < self.batch_size:
            raise SpecError(
                f"dataset size {self.dataset_size} is smaller than batch size {self.batch_size}:"
                " an epoch would have no complete batch (incomplete batches are dropped)"
            )

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size // self.batch_size

    def digest(self) -> str:
        """Hash of the workload spec: part of the configuration key used by comparisons."""
        blob = json.dumps(to_dict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class Policy:
    """Every setting that changes speed or numerics. Recorded with each trial as read back."""

    mode: str = "compiled"
    threads: int | None = None  # None: every core in the parent's affinity mask
    compile_cache: str = "cold"
    # Parallel workers of the input pipeline: torch DataLoader num_workers, tf.data
    # num_parallel_calls, a thread pool for the JAX/NumPy pipeline; 0: the training thread.
    loader_workers: int = 0
    # "pipeline" or "device" (DATA_PLACEMENTS).
    data: str = "pipeline"
    # Matmul precision: fp32 everywhere by default (no TF32, JAX "highest").
    matmul_precision: str = "highest"
    # The trial's framework's own options (ONNX Runtime's graph optimisation level, ...): name ->
    # value, each declared and validated by its backend (Backend.options); empty for the
    # framework's defaults, and then left out of the serialised spec.
    options: dict[str, str] = field(default_factory=dict, metadata=OMIT_DEFAULT)
    # Rollout placement of RL workloads (ROLLOUTS).
    rollout: str = field(default="default", metadata=OMIT_DEFAULT)

    def validate(self) -> None:
        _check_choice("mode", self.mode, MODES)
        _check_choice("rollout", self.rollout, ROLLOUTS)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.options.items()):
            raise SpecError(f"options must map names to strings, got {self.options!r}")
        _check_choice("compile cache", self.compile_cache, COMPILE_CACHES)
        _check_choice("matmul precision", self.matmul_precision, MATMUL_PRECISIONS)
        if self.threads is not None:
            _check_positive_int("threads", self.threads)
        _check_positive_int("loader workers", self.loader_workers, minimum=0)
        _check_choice("data", self.data, DATA_PLACEMENTS)


def option(default: Any, flag: str, help: str, *, omit_default: bool = False, value: str | None = None,
           choices: tuple[str, ...] | None = None, shared: bool = False) -> Any:
    """A field of a scenario's options with its command-line flag and help beside it: `run`'s
    flags, their defaults and the suite-file keys are built from these fields (cli/run.py,
    cli/suite.py), so an option is declared here once. The flag names the argparse destination
    and the suite key (`--load`: `load`, key `load`); `help` may show the field's default as
    `{default}`. `omit_default`: the field came after stores existed (OMIT_DEFAULT). `value`:
    what a suite file's key takes where the field's type says too little (cli/suite.py: Key
    kinds such as "fraction"); `choices`: the names a suite key allows (the flag leaves them to
    validation, which says them). `shared`: the flag is declared (with its help) by another
    scenario's options, and this field takes the value given to it too (`--load` and `--qps`
    drive infer's and generate's LoadGen Server alike); both defaults must agree."""
    metadata: dict[str, Any] = {"flag": flag, "help": help, **(OMIT_DEFAULT if omit_default else {})}
    if shared:
        metadata["shared"] = True
    if value is not None:
        metadata["value"] = value
    if choices is not None:
        metadata["choices"] = choices
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class ScenarioOptions(abc.ABC):
    """The options of one `--scenario` (OPTIONS), a trial's `options`: frozen, each field an
    `option` (its flag and help beside it), stored flat under the field names (to_dict), so
    stored configuration keys stay what they were before the options were one field."""

    # The --scenario these options belong to (OPTIONS); empty for NoOptions.
    SCENARIO: ClassVar[str] = ""

    @abc.abstractmethod
    def validate(self, scenario: str) -> None:
        """Checked for a trial of `scenario`; a value given for another scenario is refused."""


@typing.final
@dataclass(frozen=True)
class InferOptions(ScenarioOptions):
    """The inference scenario's options (`--scenario infer`: runner/scenarios/infer.py,
    runner/scenarios/served.py): batch-1 requests until `infer_requests` are timed or `infer_budget_s` is
    spent, whichever comes first; then the spec's batch size back to back under the same rule.
    `infer_load` (INFER_LOADS) and, for "server", the target QPS (None: the sweep) and the p99
    latency bound LoadGen judges each Server test by."""

    infer_requests: int = option(1000, "--infer-requests",
                                 "infer: batch-1 requests timed, unless the budget runs out first (default {default})")
    infer_budget_s: float = option(20.0, "--infer-budget-s",
                                   "infer: seconds each timed loop (latency, throughput) may take (default {default})",
                                   value="seconds")
    # Added after stores existed: left out of the serialised spec at their defaults.
    infer_load: str = option("standard", "--load", "infer: standard (MLPerf LoadGen SingleStream and Offline, the"
                             " default), server (SingleStream, then LoadGen's Server: Poisson arrivals), or loop (the"
                             " hand-written request loop); generate: standard or server (LoadGen's Server with token"
                             " latencies)", omit_default=True, choices=INFER_LOADS)
    server_qps: float | None = option(None, "--qps", "--load server: target queries per second (default: a sweep"
                                      " for the highest QPS that meets --p99-bound-ms, or for generate the TTFT and"
                                      " TPOT bounds)", omit_default=True)
    p99_bound_ms: float | None = option(None, "--p99-bound-ms", "infer --load server: the p99 latency bound, ms"
                                        " (required)", omit_default=True)
    SCENARIO: ClassVar[str] = "infer"

    def validate(self, scenario: str) -> None:
        """Checked for every trial (a value outside the scenario must stay at its default)."""
        _check_positive_int("infer requests", self.infer_requests, minimum=MIN_INFER_REQUESTS)
        if not self.infer_budget_s > 0:
            raise SpecError(f"infer budget must be > 0 seconds, got {self.infer_budget_s!r}")
        _check_choice("load", self.infer_load, INFER_LOADS)
        if self.infer_load != "standard" and scenario != self.SCENARIO:
            raise SpecError(f"load {self.infer_load!r} applies to the {self.SCENARIO} scenario only, not {scenario!r}")
        for name, value in (("qps", self.server_qps), ("p99 bound (ms)", self.p99_bound_ms)):
            if value is None:
                continue
            if self.infer_load != "server":
                raise SpecError(f"{name} {value!r} applies to --load server only, not {self.infer_load!r}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise SpecError(f"{name} must be a number > 0, got {value!r}")
        if self.infer_load == "server" and self.p99_bound_ms is None:
            raise SpecError("load server needs a p99 latency bound: --p99-bound-ms (a number > 0)")


@typing.final
@dataclass(frozen=True)
class ConvergeOptions(ScenarioOptions):
    """Time to target (`--scenario converge`: runner/scenarios/converge.py, runner/scenarios/rl.py): train from
    the canonical weights, evaluating on the held-out split every `eval_every` steps with the
    clock stopped, until the target or a budget (`max_steps`, `max_time_s` of training time).
    The target is one of: `target_accuracy`, the workload's held-out quality (its QUALITY,
    higher is better), or `target_perplexity`, the held-out perplexity of a workload that
    reports one (lm; lower is better). With neither, the plan gives a workload with a default
    target its default (workloads.with_default_target: lm's perplexity 1.1 x exp(entropy
    rate)); the others need one."""

    target_accuracy: float | None = option(
        None, "--target-accuracy", "converge: held-out quality to reach, e.g. accuracy (a target is required by"
        " --scenario converge, except where the workload has a default: lm's perplexity)", value="fraction")
    # Added after stores existed: left out of the serialised spec at its default.
    target_perplexity: float | None = option(
        None, "--target-perplexity", "converge: held-out perplexity to reach, at or below (a number > 1; workloads"
        " that report perplexity: lm, whose default is 1.1 x exp(entropy rate))", omit_default=True,
        value="perplexity")
    eval_every: int = option(32, "--eval-every", "converge: steps between evaluations, K (default {default})")
    max_steps: int = option(2000, "--max-steps", "converge: step budget (default {default})")
    max_time_s: float = option(600.0, "--max-time-s", "converge: training-time budget in seconds, evaluation"
                               " excluded (default {default})", value="seconds")
    SCENARIO: ClassVar[str] = "converge"

    def validate(self, scenario: str) -> None:
        _check_positive_int("eval every", self.eval_every)
        _check_positive_int("max steps", self.max_steps)
        if not self.max_time_s > 0:
            raise SpecError(f"max time must be > 0 seconds, got {self.max_time_s!r}")
        given = {name: value for name, value in (("target accuracy", self.target_accuracy),
                                                 ("target perplexity", self.target_perplexity)) if value is not None}
        if scenario != self.SCENARIO:
            for name, value in given.items():
                raise SpecError(f"{name} {value!r} applies to the {self.SCENARIO} scenario only, not {scenario!r}")
            return
        if not given:
            raise SpecError(f"the {self.SCENARIO} scenario needs a target: --target-accuracy (a number in (0, 1])"
                            " or --target-perplexity (a number > 1, where the workload reports perplexity),"
                            " or target-accuracy / target-perplexity in a suite file")
        if len(given) > 1:
            raise SpecError(f"target accuracy {self.target_accuracy!r} and target perplexity"
                            f" {self.target_perplexity!r} are two targets: allowed is one of them")
        target = self.target_accuracy
        if target is not None and (isinstance(target, bool) or not isinstance(target, (int, float))
                                   or not 0 < target <= 1):
            raise SpecError(f"target accuracy must be a number in (0, 1] for the {self.SCENARIO} scenario,"
                            f" got {target!r}")
        perplexity = self.target_perplexity
        if perplexity is not None and (isinstance(perplexity, bool) or not isinstance(perplexity, (int, float))
                                       or not 1 < perplexity < math.inf):
            raise SpecError(f"target perplexity must be a finite number > 1 (a perplexity is at least 1) for the"
                            f" {self.SCENARIO} scenario, got {perplexity!r}")


# The most cache positions (prompt + 1 + new tokens) a generation may ask for, and the most
# sequences it decodes together.
MAX_GENERATION_POSITIONS = 65536
MAX_GENERATION_BATCH = 65536


@typing.final
@dataclass(frozen=True)
class GenerateOptions(ScenarioOptions):
    """Greedy generation with a KV cache (`--scenario generate`: runner/scenarios/generate.py):
    `gen_batch` prompts of `prompt_len` tokens, `new_tokens` greedy tokens each; timed
    generations until ten are timed or `infer_budget_s` is spent (all added after stores
    existed: left out of the serialised spec at their defaults). `gen_load` (GEN_LOADS) and, for
    "server", the target QPS of one LoadGen test (None: the sweep) and the p99 bounds on the time
    to first token and the time per output token that LoadGen judges each test by (defaults:
    MLPerf's own for llama2-70b's Server, loadgen/mlperf.conf: TTFT 2000 ms, TPOT 200 ms).
    `--load` and `--qps` are infer's flags too (`shared`)."""

    prompt_len: int = option(32, "--prompt-len", "generate: prompt tokens per sequence (default {default})",
                             omit_default=True)
    new_tokens: int = option(32, "--new-tokens", "generate: greedy tokens per sequence (default {default})",
                             omit_default=True)
    gen_batch: int = option(1, "--gen-batch", "generate: sequences decoded together (default {default})",
                            omit_default=True)
    gen_load: str = option("standard", "--load", "", omit_default=True, choices=GEN_LOADS, shared=True)
    gen_qps: float | None = option(None, "--qps", "", omit_default=True, shared=True)
    ttft_bound_ms: float = option(2000.0, "--ttft-bound-ms", "generate --load server: the p99 bound on the time to"
                                  " first token, ms (default {default}: MLPerf's for llama2-70b's Server)",
                                  omit_default=True)
    tpot_bound_ms: float = option(200.0, "--tpot-bound-ms", "generate --load server: the p99 bound on the time per"
                                  " output token, ms (default {default}: MLPerf's for llama2-70b's Server)",
                                  omit_default=True)
    SCENARIO: ClassVar[str] = "generate"
    # The options of LoadGen's Server that only a generate trial takes (check_unused).
    BOUNDS: ClassVar[tuple[tuple[str, str], ...]] = (("TTFT bound (ms)", "ttft_bound_ms"),
                                                     ("TPOT bound (ms)", "tpot_bound_ms"))

    def validate(self, scenario: str) -> None:
        for name, value in (("prompt length", self.prompt_len), ("new tokens", self.new_tokens)):
            _check_positive_int(name, value, maximum=MAX_GENERATION_POSITIONS)
        # a larger batch's cache fills no machine: its trial failed in a C++ allocator's dump
        _check_positive_int("generation batch", self.gen_batch, maximum=MAX_GENERATION_BATCH)
        positions = self.prompt_len + 1 + self.new_tokens
        if positions > MAX_GENERATION_POSITIONS:
            raise SpecError(f"prompt length + 1 + new tokens is {positions}, over the most a cache holds here:"
                            f" {MAX_GENERATION_POSITIONS}")
        if scenario != "generate" and self != GenerateOptions():
            raise SpecError(f"prompt length, new tokens, generation batch, load, qps and the TTFT and TPOT bounds"
                            f" apply to the generate scenario only, not {scenario!r}")
        self._validate_server()

    def _validate_server(self) -> None:
        _check_choice("load", self.gen_load, GEN_LOADS)
        default = GenerateOptions()
        for name, f in (("qps", "gen_qps"), *self.BOUNDS):
            value = getattr(self, f)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise SpecError(f"{name} must be a finite number > 0, got {value!r}")
            if self.gen_load != "server" and value != getattr(default, f):
                raise SpecError(f"{name} {value!r} applies to --load server only, not {self.gen_load!r}")
        if self.gen_load == "server" and self.new_tokens < 2:
            raise SpecError(f"load server needs new tokens >= 2 (a time per output token follows the first),"
                            f" got {self.new_tokens}")

    def check_unused(self, scenarios: tuple[str, ...]) -> None:
        """A sweep without the generate scenario that was given a TTFT or TPOT bound would ignore
        it: refused, naming it (load and qps are shared with the infer scenario)."""
        if self.SCENARIO in scenarios:
            return
        default = GenerateOptions()
        for name, f in self.BOUNDS:
            if getattr(self, f) != getattr(default, f):
                raise SpecError(f"{name} {getattr(self, f)!r} applies to --scenario {self.SCENARIO} with --load server"
                                f" only, not --scenario {','.join(scenarios)}")


@typing.final
@dataclass(frozen=True)
class NoOptions(ScenarioOptions):
    """A scenario without options of its own (train, rollout)."""

    def validate(self, scenario: str) -> None:
        pass


# Tolerances the solver scenario accepts: above 0.1 there is no precision to speak of; below
# 1e-11 the float64 reference, solved 100x tighter than the tightest tolerance asked
# (problems/solve.py: reference_rtol), would need an rtol under SciPy's floor of 100 x machine
# epsilon (2.2e-14), and a solver's error would be the reference's own.
SOLVE_RTOL_RANGE = (1e-11, 0.1)
# The step cap of a solve: far past any solve that ends, within every solver library's 32-bit
# step counter (a cap of 1e20 overflowed in each and stored six "failures" of an ok trial).
MAX_SOLVE_STEPS = 10**8


@typing.final
@dataclass(frozen=True)
class SolveOptions(ScenarioOptions):
    """The solver scenario (`--scenario solve` on an ODE problem: runner/scenarios/solve.py): a
    work-precision sweep of relative tolerances from `solve_rtol_loosest` down to
    `solve_rtol_tightest`, one per decade (atol = rtol x the problem's scale), each solve capped
    at `solve_max_steps` steps (all added after stores existed: left out of the serialised spec
    at their defaults)."""

    solve_rtol_loosest: float = option(1e-3, "--rtol-loosest", "solve: the loosest relative tolerance of the sweep"
                                       " (default {default})", omit_default=True)
    solve_rtol_tightest: float = option(1e-10, "--rtol-tightest", "solve: the tightest, one tolerance per decade"
                                        " between (default {default})", omit_default=True)
    solve_max_steps: int = option(5000, "--solve-max-steps", "solve: the step cap of each solve (default {default})",
                                  omit_default=True)
    SCENARIO: ClassVar[str] = "solve"

    def validate(self, scenario: str) -> None:
        low, high = SOLVE_RTOL_RANGE
        for name, value in (("loosest rtol", self.solve_rtol_loosest), ("tightest rtol", self.solve_rtol_tightest)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
                raise SpecError(f"{name} {value!r} is not a tolerance: allowed are numbers from {low:g} to {high:g}")
        if self.solve_rtol_tightest > self.solve_rtol_loosest:
            raise SpecError(f"tightest rtol {self.solve_rtol_tightest:g} is looser than the loosest"
                            f" {self.solve_rtol_loosest:g}: allowed is tightest <= loosest")
        _check_positive_int("solve max steps", self.solve_max_steps, maximum=MAX_SOLVE_STEPS)
        if scenario != self.SCENARIO and self != SolveOptions():
            raise SpecError(f"tolerances and solve max steps apply to the {self.SCENARIO} scenario only,"
                            f" not {scenario!r}")

    def rtols(self) -> tuple[float, ...]:
        """One tolerance per decade from the loosest, the tightest last."""
        decades = math.floor(math.log10(self.solve_rtol_loosest / self.solve_rtol_tightest) + 1e-9)
        found = [self.solve_rtol_loosest / 10**i for i in range(decades + 1)]
        if not math.isclose(found[-1], self.solve_rtol_tightest, rel_tol=1e-9):
            found.append(self.solve_rtol_tightest)
        return tuple(found)


# Each options type, the `--scenario` it belongs to (a scenario not here has NoOptions): a sweep
# gives a trial the options of its scenario only, so an option never changes another scenario's
# configuration key. The order is the stored one (to_dict) and `run --help`'s.
OPTIONS: dict[str, type[ScenarioOptions]] = {k.SCENARIO: k for k in (InferOptions, ConvergeOptions, GenerateOptions,
                                                                    SolveOptions)}
OptionsT = TypeVar("OptionsT", bound=ScenarioOptions)


def scenarios_taking(flag: str) -> tuple[str, ...]:
    """The scenarios whose options declare `flag` (`--load`: infer and generate)."""
    return tuple(kind.SCENARIO for kind in OPTIONS.values()
                 if any(f.metadata["flag"] == flag for f in dataclasses.fields(kind)))


def check_unused(given: tuple[ScenarioOptions, ...], scenarios: tuple[str, ...]) -> None:
    """A sweep's option set away from its default where none of the sweep's scenarios takes it
    (`--prompt-len` without `--scenario generate`) would be dropped without a word: refused,
    naming the flag, its value and the scenarios that take it."""
    for options in given:
        default = type(options)()
        for f in dataclasses.fields(options):
            value = getattr(options, f.name)
            if value == getattr(default, f.name):
                continue
            takers = scenarios_taking(f.metadata["flag"])
            if not set(takers) & set(scenarios):
                shown = f"{value:g}" if isinstance(value, float) else str(value)
                raise SpecError(f"{f.metadata['flag']} {shown} applies to --scenario {' or '.join(takers)} only,"
                                f" not --scenario {','.join(map(str, scenarios))}")


def options_type(scenario: str) -> type[ScenarioOptions]:
    """The options type trials of `--scenario scenario` carry (NoOptions where it has none)."""
    return OPTIONS.get(scenario, NoOptions) if isinstance(scenario, str) else NoOptions


@dataclass(frozen=True)
class TrialSpec:
    """One trial: one fresh worker process. Full from the start; values that are planned but not
    supported yet fail validation with a message that says so."""

    workload: WorkloadSpec
    framework: str
    policy: Policy = field(default_factory=Policy)
    scenario: str = "train"
    precision: str = "fp32"
    # Data-parallel devices; the workload's batch_size is the global batch, split into `devices`
    # contiguous shards in rank order. `scaling` and `bn_sync` matter only with devices > 1.
    devices: int = 1
    scaling: str = "weak"
    bn_sync: str = "per-replica"
    epochs: int = 3
    warmup_epochs: int = 1
    chunk_steps: int = 16
    repeat: int = 0
    timeout_s: float = 1800.0
    # The options of the trial's scenario (options_type: InferOptions for infer, ...), validated
    # there. Stored flat, every options type's fields under their own names (to_dict), so stored
    # keys stay what they were. Options left at their defaults follow the scenario: a trial made
    # or replaced with another scenario gets that scenario's defaults (__post_init__).
    options: ScenarioOptions = field(default_factory=NoOptions)
    # The parent's watchdog kills the worker's process tree above this RSS (status `oom`).
    memory_limit_bytes: int | None = None
    # A profiled trial (`run --profile`, scenario train or infer): the timed window runs under the
    # framework's own profiler (runner/scenarios/profiled.py). Its own configuration (profile is part of
    # the key), never in the statistics of the timed trials; left out of the spec while False.
    profile: bool = field(default=False, metadata=OMIT_DEFAULT)
    # `--quiet-wait`: before the trial starts, wait up to this long for a quiet machine (other
    # processes under the busy threshold: monitors/interference.py wait_quiet). How to run, not
    # what: no part of the configuration; left out of the spec while None.
    quiet_wait_s: float | None = field(default=None, metadata=OMIT_DEFAULT)

    interpreter: str | None = None  # None: the parent's sys.executable
    run_id: int | None = None
    trial_id: int | None = None
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        wanted = options_type(self.scenario)
        given = self.options
        if isinstance(given, ScenarioOptions) and type(given) is not wanted and given == type(given)():
            object.__setattr__(self, "options", wanted())

    def validate(self) -> None:
        """What the spec can check alone; `backends.support.validate` adds the registries (a
        known workload and framework, the framework's options)."""
        self.workload.validate()
        self.policy.validate()
        if not isinstance(self.framework, str) or not self.framework:
            raise SpecError(f"framework must be a name, got {self.framework!r}")
        _check_choice("scenario", self.scenario, SCENARIOS)
        _check_choice("precision", self.precision, PRECISIONS)
        wanted = "tf32" if self.precision == "tf32" else "highest"
        if self.policy.matmul_precision != wanted:
            raise SpecError(f"matmul precision {self.policy.matmul_precision!r} does not match precision"
                            f" {self.precision!r}: allowed is {wanted!r}")
        self._validate_devices()
        _check_positive_int("epochs", self.epochs)
        _check_positive_int("warm-up epochs", self.warmup_epochs, minimum=0)
        _check_positive_int("chunk steps", self.chunk_steps)
        _check_positive_int("repeat", self.repeat, minimum=0)
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:  # false for nan and inf
            raise SpecError(f"timeout must be a number of seconds > 0 and at most {MAX_TIMEOUT_S:g} (a week),"
                            f" got {self.timeout_s!r}")
        if self.memory_limit_bytes is not None:
            _check_positive_int("memory limit", self.memory_limit_bytes, maximum=2**63 - 1)
        if self.quiet_wait_s is not None and not 0 < self.quiet_wait_s <= MAX_TIMEOUT_S:
            raise SpecError(f"quiet wait must be a number of seconds > 0 and at most {MAX_TIMEOUT_S:g} (a week),"
                            f" got {self.quiet_wait_s!r}")
        self._validate_options()
        # Which scenarios a profiler covers is their record's (support.validate checks it).
        if self.profile is not False and self.profile is not True:
            raise SpecError(f"profile must be true or false, got {self.profile!r}")

    def _validate_options(self) -> None:
        """The options' own checks; then that they are the scenario's (a value given for another
        scenario names it)."""
        options = self.options
        if not isinstance(options, ScenarioOptions):
            raise SpecError(f"options must be a scenario's options ({', '.join(k.__name__ for k in OPTIONS.values())}),"
                            f" got {options!r}")
        options.validate(self.scenario)
        if type(options) is not options_type(self.scenario):
            given = ", ".join(f"{k} {v!r}" for k, v in dataclasses.asdict(options).items()
                              if v != getattr(type(options)(), k))
            raise SpecError(f"{given} apply to the {options.SCENARIO} scenario only, not {self.scenario!r}")

    def _validate_devices(self) -> None:
        _check_positive_int("devices", self.devices)
        _check_choice("scaling", self.scaling, SCALINGS)
        _check_choice("bn sync", self.bn_sync, BN_SYNCS)
        batch = self.workload.batch_size
        for what, size in ((f"the global batch size {batch}", batch), (f"the parity batch of {PARITY_BATCH}", PARITY_BATCH)):
            if size % self.devices:
                raise SpecError(f"devices {self.devices} must divide {what} (equal shards per device);"
                                f" allowed are divisors of both {batch} and {PARITY_BATCH}")

    @property
    def per_device_batch(self) -> int:
        return self.workload.batch_size // self.devices

    def single_device(self) -> TrialSpec:
        """The one-device trial this one's scaling is measured against: the same configuration
        on one device with the per-device batch (weak scaling) or the same global batch
        (strong); its config_key() pairs the two."""
        batch = self.per_device_batch if self.scaling == "weak" else self.workload.batch_size
        return dataclasses.replace(self, devices=1, scaling="weak", bn_sync="per-replica",
                                   workload=dataclasses.replace(self.workload, batch_size=batch))

    def options_of(self, kind: type[OptionsT]) -> OptionsT:
        """The trial's options as the type its scenario takes, `kind` (TypeError if they are
        another: the caller runs a scenario whose options these are not)."""
        if not isinstance(self.options, kind):
            raise TypeError(f"the {self.scenario} trial's options are {type(self.options).__name__}, not {kind.__name__}")
        return self.options

    def with_options(self, **changes: Any) -> TrialSpec:
        """The trial with some of its options' fields changed."""
        return dataclasses.replace(self, options=dataclasses.replace(self.options, **changes))

    def config_key(self) -> str:
        """The configuration key (`configuration_key` below): trials with equal keys are
        repetitions of one configuration."""
        return configuration_key(to_dict(self))

    def label(self) -> str:
        # Scenario, data placement, precision and seed only where they differ from the defaults.
        extra = [v for v, default in ((self.scenario, "train"), (self.policy.data, "pipeline"),
                                      (self.precision, "fp32")) if v != default]
        extra += [f"seed{self.workload.seed}"] if self.workload.seed else []
        load = (self.options.infer_load if isinstance(self.options, InferOptions)
                else self.options.gen_load if isinstance(self.options, GenerateOptions) else "standard")
        extra += [load] if load != "standard" else []
        extra += [f"{self.devices}dev-{self.scaling}"] if self.devices > 1 else []
        extra += ["profiled"] if self.profile else []
        return "/".join([self.workload.name, self.framework, self.policy.mode, *extra]) + f"#{self.repeat}"


def to_dict(obj: Any) -> dict[str, Any]:
    """The dataclass as plain JSON-able data; fields marked OMIT_DEFAULT are left out while they
    hold their default (see there). A trial's options are stored flat (_flat_options)."""
    d = dataclasses.asdict(obj)
    if isinstance(obj, TrialSpec):
        d = _flat_options(d, obj.options)
    _omit_defaults(d, type(obj))
    return d


def _flat_options(d: dict[str, Any], options: ScenarioOptions) -> dict[str, Any]:
    """A serialised trial with its `options` replaced, in place, by every options type's fields
    under their own names: the trial's own values, the other types' defaults. Exactly the flat
    fields a trial had before its options were one field, so stored keys stay what they were."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if k != "options":
            out[k] = v
            continue
        for kind in OPTIONS.values():
            out.update(dataclasses.asdict(options if type(options) is kind else kind()))
    return out


def _stored_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields of `cls` as serialised: for a trial, every options type's fields in place of
    `options`."""
    if cls is not TrialSpec:
        return list(dataclasses.fields(cls))
    own = [f for f in dataclasses.fields(cls) if f.name != "options"]
    return own + [f for kind in OPTIONS.values() for f in dataclasses.fields(kind)]


def _omit_defaults(d: dict[str, Any], cls: type) -> None:
    """Remove from `d` (a serialised `cls`) the OMIT_DEFAULT fields at their default, in nested
    spec dataclasses too."""
    hints = typing.get_type_hints(cls)
    for f in _stored_fields(cls):
        if f.name not in d:
            continue
        nested = hints.get(f.name)
        if isinstance(nested, type) and dataclasses.is_dataclass(nested) and isinstance(d[f.name], dict):
            _omit_defaults(d[f.name], nested)
        elif f.metadata.get("omit_default") and d[f.name] == _default_of(f):
            del d[f.name]


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def trial_from_dict(d: dict[str, Any]) -> TrialSpec:
    d = dict(d)
    version = d.get("schema_version", SCHEMA_VERSION)
    if version > SCHEMA_VERSION:
        raise SpecError(
            f"trial spec schema version {version} is newer than this dlbench ({SCHEMA_VERSION})"
        )
    w = dict(d.pop("workload"))
    w["numerics"] = Numerics(**w.get("numerics", {}))
    d["workload"] = WorkloadSpec(**w)
    d["policy"] = Policy(**policy_fields(d.get("policy", {})))
    d["options"] = _options_from(d)
    return TrialSpec(**d)


def _options_from(d: dict[str, Any]) -> ScenarioOptions:
    """A stored trial's flat option fields (popped from `d`) as its scenario's options; those of
    another scenario must hold their defaults (every store holds them so), else SpecError. A trial
    written nested (`dataclasses.asdict` of a TrialSpec: its options one dict) reads the same."""
    nested = d.pop("options", None)
    if isinstance(nested, dict):
        for name, value in nested.items():
            if name in d and d[name] != value:
                raise SpecError(f"option {name} given twice: {d[name]!r} flat and {value!r} in options")
            d[name] = value
    kind = options_type(d.get("scenario", "train"))
    own = {f.name for f in dataclasses.fields(kind)}
    values = {}
    for other in OPTIONS.values():
        for f in dataclasses.fields(other):
            if f.name not in d:
                continue
            value = d.pop(f.name)
            if f.name in own:
                values[f.name] = value
            elif value != _default_of(f):
                raise SpecError(f"{f.name} {value!r} is an option of the {other.SCENARIO} scenario, not of"
                                f" {d.get('scenario', 'train')!r}")
    return kind(**values)


def policy_fields(policy: dict[str, Any]) -> dict[str, Any]:
    """A stored policy in today's fields. Stores before backend options kept ONNX Runtime's
    optimisation level as `ort_optimization` in every trial's policy ("all" = the default)."""
    p = dict(policy)
    legacy = p.pop("ort_optimization", "all")
    if legacy != "all":
        p["options"] = {"optimization": legacy, **p.get("options", {})}
    return p


def option_words(spec: dict[str, Any]) -> list[str]:
    """A stored trial's framework options as `torch.mkldnn=off`, sorted: part of what names its
    configuration wherever a label does not show the whole policy (a tune run's candidates
    differ by nothing else)."""
    options = policy_fields(spec.get("policy") or {}).get("options") or {}
    return [f"{spec.get('framework')}.{k}={v}" for k, v in sorted(options.items())]


# Spec fields that never make two trials different configurations: ids, the repeat index, the
# interpreter, and the limits that decide whether a trial finishes, never what it measures.
NOT_CONFIGURATION = ("repeat", "run_id", "trial_id", "interpreter", "timeout_s", "memory_limit_bytes", "quiet_wait_s")


def configuration_key(spec: dict[str, Any], drop: tuple[str, ...] = (), drop_policy: tuple[str, ...] = ()) -> str:
    """The one configuration key, over a spec as stored (DESIGN §4): the spec without the
    fields of NOT_CONFIGURATION, plus the workload's digest. Fields an older store lacks take
    their defaults, so a store keeps its keys as fields are added; a field this version does not
    know is kept (never an error). `drop` and `drop_policy` name what a caller pairs across:
    the policy for compare (it must match separately, so that a difference can be named), the
    framework for seed pairs, `data` for pipeline/device pairs."""
    d = _with_defaults({**spec, "policy": policy_fields(spec.get("policy", {}))}, _default_spec())
    _omit_defaults(d, TrialSpec)
    for k in (*NOT_CONFIGURATION, *drop):
        d.pop(k, None)
    if d.get("devices", 1) == 1:  # nothing to scale: keys stay those of stores made before them
        d.pop("scaling", None)
        d.pop("bn_sync", None)
    if isinstance(d.get("policy"), dict):
        d["policy"] = {k: v for k, v in d["policy"].items() if k not in drop_policy}
    workload = d.get("workload", {})
    d["workload_digest"] = hashlib.sha256(json.dumps(workload, sort_keys=True).encode()).hexdigest()[:16]
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _default_spec() -> dict[str, Any]:
    return to_dict(TrialSpec(workload=WorkloadSpec(), framework=""))


def _with_defaults(d: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`d` over `defaults`, nested dicts merged key by key (the workload, its numerics, the
    policy); `d`'s values win, its unknown keys stay."""
    out = dict(defaults)
    for k, v in d.items():
        base = defaults.get(k)
        out[k] = _with_defaults(v, base) if isinstance(v, dict) and isinstance(base, dict) else v
    return out
