"""The seams every framework implements. This module imports no framework.

A backend package (`backends/<framework>/`) has the same file names in every framework:
  __init__.py  the Backend class: light, imports its framework only inside methods that the
               worker calls (import_framework, build, sync, ...);
  cnn.py       `build(trial) -> Program` (one module per workload, same builder name).

Only the worker process (runner/worker.py) calls the methods that import a framework; the
parent process calls `available()`, `modes()` and `distributions()` only. What a backend can run
is data on the class (capabilities, modes, precisions, options); `backends/support.py` reads it
to answer "can this run?" in one place for the planner, the worker and the probe.
"""

from __future__ import annotations

import importlib
import time
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from dlbench import problems, subjects, workloads
from dlbench.backends.generate import Decoder
from dlbench.backends.solve import OdeModule  # noqa: F401 (capability "solve": backends/<framework>/ode.py)
from dlbench.backends.precision import Support
from dlbench.scenarios import Capability
from dlbench.packages import installed_versions, module_installed  # noqa: F401 (for the backends)
from dlbench.spec import Policy, TrialSpec
from dlbench.workloads.data import Augment, Dataset
# Variables that change speed or numerics in every framework: recorded with every trial, next to
# the backend's own (Backend.recorded_environment).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
               "NUMEXPR_NUM_THREADS")
COMMON_RECORDED_VARS = THREAD_VARS + ("CUDA_VISIBLE_DEVICES", "KMP_AFFINITY", "OMP_PROC_BIND")


class Unsupported(Exception):
    """This framework cannot run this (workload, mode, precision, ...); the message says why.
    Becomes the trial status `unsupported`, never a failure."""


# What a backend declares it provides (Capabilities.provides): fewer names than a scenario's
# record needs (scenarios.Capability), since one capability serves several scenarios.
Provided = Literal["train", "infer", "generate", "solve"]
# The capability a backend provides for each capability a scenario's record needs: a rollout's
# PPO update is a training step, and sampling serves a diffusion model's denoiser in inference
# mode. Every scenarios.Capability is a key (a test checks it).
PROVIDED_FOR: dict[Capability, Provided] = {"train": "train", "rollout": "train", "infer": "infer", "sample": "infer",
                                            "generate": "generate", "solve": "solve"}
# The order `dlbench list` and a reason's "(has: ...)" name a backend's capabilities in.
SHOWN_ORDER = ("train", "infer", "grads", "generate", "solve")


@dataclass(frozen=True)
class Capabilities:
    """What a backend can run, as data: the capabilities its programs provide (`train`: the
    Trainable and Rollout protocols; `infer`: Servable and Sampler; `generate`: Generator;
    `solve`: an ODE solver module, backends/<framework>/ode.py) and `grads`
    (Program.loss_and_grads, the training-mode parity probe). Planning turns a missing capability
    into an `unsupported` trial."""

    provides: frozenset[Provided] = frozenset({"train"})
    grads: bool = True
    # Workloads this backend does not run, each with the reason a user reads in `dlbench list`
    # and in the trial's status: (workload, reason) pairs. The one way a backend says it lacks
    # a workload that its implementations (or, exporting, its source framework's) provide.
    declined: tuple[tuple[str, str], ...] = ()
    # An exporting backend (ONNX Runtime, LiteRT) runs no model code of its own: the backend
    # family whose implementations it exports and serves ("torch", "tensorflow"), every workload
    # that family implements (builder_package); None for a framework with its own builders.
    exports_from: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.provides) - set(typing.get_args(Provided)))
        if not isinstance(self.provides, frozenset) or unknown:
            raise ValueError(f"Capabilities.provides takes a frozenset of {', '.join(typing.get_args(Provided))};"
                             f" got {self.provides!r}")

    def declines(self, workload: str) -> str | None:
        """The reason this backend does not run `workload`, or None."""
        return dict(self.declined).get(workload)

    def names(self) -> list[str]:
        """The capabilities provided, and `grads`, in the order `dlbench list` shows them."""
        have = {*self.provides, *(("grads",) if self.grads else ())}
        return [name for name in SHOWN_ORDER if name in have]

    def covers(self, capability: Capability) -> str | None:
        """None when this backend's programs have what a scenario's record needs, else the
        capability it lacks (PROVIDED_FOR)."""
        needed = PROVIDED_FOR[capability]
        return None if needed in self.provides else needed


@dataclass(frozen=True)
class SolveGuess:
    """What a solve trial (runner/scenarios/solve.py) of this framework costs, before the store
    knows better (runner/estimates.py: solve_s): its solver curves (solvers x dtypes of
    backends/<framework>/ode.py, the explicit ones apart: on a stiff problem each runs to the step
    cap once and skips its tighter tolerances), the seconds of one tolerance point of a curve
    that solves (warm solves until 0.2 s and three, and the counting solve), of one curve that
    runs to the step cap (5000 steps: its first solve and its timed one), of a curve's compiles
    (the timed solve's and the counting solve's), and the neural ODE's gradient methods and
    seconds per gradient point (each tolerance compiles anew). Fitted on the quiet 2-core run of
    docs/benchmarks.md "ODE solvers"; only a first estimate."""

    explicit_curves: int
    implicit_curves: int
    point_s: float
    capped_curve_s: float
    compile_s: float
    gradient_methods: int
    gradient_point_s: float


@dataclass(frozen=True)
class CostGuess:
    """What a trial of this framework costs besides its compute, before the store knows better
    (runner/estimates.py: ESTIMATES): seconds from process start to a built program (import, build,
    data), and seconds to compile a cnn-sized train step (8 parameter tensors) in compiled mode,
    which the planner scales with the workload's size. Measured on the project's 2-core machines
    (docs/benchmarks.md, the whole zoo); only a first estimate. `solve`: the solver scenario's
    costs, for a backend with ODE solvers."""

    startup_s: float
    compile_s: float
    solve: SolveGuess | None = None


@dataclass(frozen=True)
class Variant:
    """What makes an option a *variant* (issue 32, `dlbench tune`): the same mathematics in
    another idiom or setting, which the headroom search tries against the default. Data only:
    why it exists, where the fact behind it comes from, which values the search tries and where
    it applies. A setting that changes the mathematics (reduced precision, another algorithm) is
    not a variant but a sweep axis; one that may (a matmul precision) is a variant whose parity
    verdict decides (a variant that fails parity is reported and never wins). docs/variants.md
    lists every one."""

    why: str
    source: str
    # The values the search tries besides the default (a subset of Option.allowed).
    tried: tuple[str, ...]
    # Workloads whose programs read the option; empty: every workload.
    workloads: tuple[str, ...] = ()
    # Modes it applies in; empty: every mode.
    modes: tuple[str, ...] = ()
    # Values that need a GPU (the search skips them on a CPU; a user asking gets Unsupported).
    gpu_only: tuple[str, ...] = ()
    # Profile categories (analysis/categories.py) it addresses: a finding about one of them
    # points to this variant where the store has it measured.
    addresses: tuple[str, ...] = ()
    # Device kinds ("cpu", "gpu") where the setting does anything (oneDNN, OpenMP's wait
    # policy: the CPU only); empty: both.
    devices: tuple[str, ...] = ()
    # (workload, value) pairs where a tried value is what the default already runs (torch's
    # memory format: the default is the layout each workload's model declares), left out there.
    same_as_default: tuple[tuple[str, str], ...] = ()
    # Other options (name, value) the search sets with each tried value, which means nothing
    # without them (JAX's loop=scan changes nothing at one step per call).
    together: tuple[tuple[str, str], ...] = ()

    def values(self, workload: str, mode: str, device_kind: str) -> tuple[str, ...]:
        """The values the search tries for a trial of `workload` in `mode` on `device_kind`
        ("cpu" or "gpu"): none where the option does not apply."""
        if (self.workloads and workload not in self.workloads) or (self.modes and mode not in self.modes):
            return ()
        if self.devices and device_kind not in self.devices:
            return ()
        return tuple(v for v in self.tried if (device_kind == "gpu" or v not in self.gpu_only)
                     and (workload, v) not in self.same_as_default)


@dataclass(frozen=True)
class Option:
    """One framework option a user may set (`--option FRAMEWORK.NAME=VALUE`, Policy.options):
    the values it takes, the framework's own default, what it does, and, for a variant the
    headroom search tries (`dlbench tune`), why it exists and where it applies."""

    allowed: tuple[str, ...]
    default: str
    help: str
    variant: Variant | None = None
    # Environment variables a value sets before the framework is imported (value -> {name:
    # value}; runner/child.py applies them after the backend's own, and every one is among the
    # backend's recorded variables): for settings a framework reads only at import or start-up
    # (TF_ENABLE_ONEDNN_OPTS, OMP_WAIT_POLICY). A value without an entry sets nothing.
    environment: dict[str, dict[str, str]] = field(default_factory=dict)


def option_value(options: dict[str, Option], policy: Policy, name: str) -> str:
    """The value of the backend option `name` in `policy`: as given, else its default."""
    return policy.options.get(name, options[name].default)


def option_environment(options: dict[str, Option], policy: Policy) -> dict[str, str]:
    """The environment variables the policy's options set before the import (Option.environment)."""
    env: dict[str, str] = {}
    for name, option in options.items():
        env.update(option.environment.get(option_value(options, policy, name), {}))
    return env


def option_unsupported(framework: str, options: dict[str, Option], policy: Policy, device: str) -> str | None:
    """Why the policy's options cannot run on `device` ("cpu" or "cuda"), or None: a value a
    variant declares GPU-only (Variant.gpu_only), asked for on a CPU."""
    for name, value in policy.options.items():
        option = options.get(name)
        if device != "cuda" and option is not None and option.variant is not None and value in option.variant.gpu_only:
            return (f"{framework} option {name}={value} needs a GPU (this trial runs on {device}); on a CPU use"
                    f" {' or '.join(v for v in option.allowed if v not in option.variant.gpu_only)}")
    return None


@runtime_checkable
class OptionsReadBack(Protocol):
    """A program that reads framework options (Policy.options) when it is built: what it
    actually runs, read back from the objects it built (the weights' memory format, the
    optimizer's fused/foreach flags, the pooling primitive its traced step holds), recorded
    with the trial's effective policy (`options`). Options the framework reads globally are
    read back by Backend.configure instead."""

    def applied_options(self) -> dict[str, Any]:
        ...


class DataParallel(Protocol):
    """One framework's data-parallel training over `trial.devices` devices, with its own
    mechanism (torch DistributedDataParallel ranks, JAX sharding over a device mesh, TF
    MirroredStrategy). Every rank or replica consumes its contiguous shard of each global batch
    (shard_slice), so data order and canonical weights stay the spec's."""

    def unsupported(self, trial: TrialSpec) -> str | None:
        """None when this backend trains `trial` on trial.devices devices, else the reason (one
        line). Parent side: never imports the framework."""
        ...

    def environment(self, trial: TrialSpec) -> dict[str, str]:
        """Variables to set before the import (XLA's host device count); a variable a user may
        have set is extended, read from os.environ."""
        ...

    def setup(self, trial: TrialSpec) -> dict[str, Any]:
        """After configure(), before build: make the devices (logical CPU devices, rank
        processes and their process group) and return what was set up, recorded with the trial;
        `platform` ("cpu" or "gpu") says whether the devices are real accelerators."""
        ...

    def comm_s(self) -> float | None:
        """Seconds spent in gradient all-reduce so far in this process, None where the framework
        does not expose it (the worker then reports the metric null with a reason)."""
        ...


@typing.final
class SingleDevice:
    """The DataParallel of a backend that trains on one device only; `reason` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def unsupported(self, trial: TrialSpec) -> str | None:
        return None if trial.devices == 1 else self.reason

    def environment(self, trial: TrialSpec) -> dict[str, str]:
        return {}

    def setup(self, trial: TrialSpec) -> dict[str, Any]:
        return {}

    def comm_s(self) -> float | None:
        return None


def shard_slice(global_rows: int, devices: int, rank: int) -> slice:
    """Rank `rank`'s contiguous rows of a global batch of `global_rows` (equal shards)."""
    if global_rows % devices:
        raise ValueError(f"a batch of {global_rows} does not split into {devices} equal shards")
    n = global_rows // devices
    return slice(rank * n, (rank + 1) * n)


@runtime_checkable
class Built(Protocol):
    """What every program does, whatever it can run: one framework's implementation of one
    workload, built for one policy. The capability protocols below add what a scenario needs
    (dlbench/scenarios.py: a record's `capability`); a program implements the ones it can and
    `support.build_as(trial, backend, Protocol)` checks it has the one its scenario asks for.

    `state` is whatever the framework needs (params + optimizer state); batches are framework
    tensors on the device. Losses stay on the device until the chunk's sync."""

    def init(self, params: dict[str, np.ndarray]) -> Any:
        """Canonical NumPy parameters (names and layouts of the workload) -> training state."""
        ...

    def compilations(self) -> int:
        """How many times the train step (and the inference function) has been compiled or
        traced so far (torch dynamo frames compiled, tf.function traces, JAX compiles). A change
        inside the timed window flags the trial."""
        ...

    def precision(self) -> dict[str, Any]:
        """The trial's precision policy as the training step runs it (parameter and compute
        dtypes, autocast, loss scaling; precision.py): recorded with the effective policy."""
        ...

    def numerics(self) -> dict[str, Any]:
        """Numerics as read back from the framework objects (optimizer hyper-parameters, eps
        placement, padding, flatten order, dtype), keyed like spec.Numerics."""
        ...


@runtime_checkable
class Learner(Built, Protocol):
    """A program with a loss to learn from: the canonical data in, batches over the spec's
    order, steps, and the fixed-batch loss and gradients every parity check compares (the
    probe of `dlbench check` asks no more)."""

    def load(self, dataset: Dataset) -> None:
        """Take the canonical in-memory dataset (NHWC float32 images, int32 labels) into the
        framework, as the policy's `data` placement asks: "pipeline", where the idiomatic loader
        reads it (host memory for DataLoader, tf.data and NumPy batching); "device", the whole
        dataset moved to the device once. Timed with data generation as data_s."""
        ...

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[Any]:
        """One device batch per step over the spec's per-step indices (`order` has shape
        (steps, batch)), each augmented with its step's parameters where `augment` is given
        (workloads.data.crop_flip defines the result). With data "pipeline": the framework's
        idiomatic loader (DataLoader, tf.data, NumPy batching with device prefetch), with
        `policy.loader_workers` parallel workers; with "device": gathered by index on the device
        from the dataset load() put there, just before each step."""
        ...

    def train_chunk(self, state: Any, batches: Iterator[Any], n_steps: int) -> tuple[Any, Any]:
        """Run n_steps training steps -> (new state, per-step losses, still on the device)."""
        ...

    def train_loop(self) -> dict[str, Any]:
        """How train_chunk runs its steps, recorded with the effective policy (`train_loop`):
        steps per compiled call, the loop that runs them and the rule that chose it
        (backends/multistep.py), or why the framework runs one step per call."""
        ...

    def predict(self, state: Any, x: np.ndarray) -> np.ndarray:
        """Logits for canonical NHWC inputs, as NumPy (used for accuracy, outside the window)."""
        ...

    def loss_and_grads(self, state: Any, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """Loss and gradients on a canonical batch, gradients in canonical names and layouts."""
        ...

    def params(self, state: Any) -> dict[str, np.ndarray]:
        """Current parameters back in canonical names and layouts."""
        ...

    def canonical_batch(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        """A device batch back to canonical NumPy (NHWC images, int labels): proves the data
        order is identical in every framework."""
        ...

    def losses_to_numpy(self, losses: Any) -> np.ndarray:
        """The losses returned by train_chunk as a float64 NumPy vector (forces a sync)."""
        ...


@runtime_checkable
class Trainable(Learner, Protocol):
    """Capability "train": a supervised training step (training and time to accuracy)."""

    def compile(self, state: Any, batch: Any) -> float | None:
        """Ahead-of-time compile where the framework exposes it: returns the compile seconds.
        None where compilation happens inside the first step (the worker then reports
        `compile_estimate_s`). Must not change `state`."""
        ...


@runtime_checkable
class Servable(Built, Protocol):
    """Capability "infer": the forward pass in inference mode (scenario infer)."""

    def predict(self, state: Any, x: np.ndarray) -> np.ndarray:
        """Logits for canonical NHWC inputs, as NumPy (used for accuracy, outside the window)."""
        ...

    def infer_fn(self, state: Any) -> Callable[[Any], Any]:
        """The forward pass in inference mode (BatchNorm on running statistics, no autograd) as
        the trial's mode runs it, for the inference scenario: device input (from infer_input) ->
        the logits fetched to the host (NumPy, or anything np.asarray turns into it and
        Backend.sync waits on). The fetch ends a request: a server returns its result, ONNX
        Runtime always does, and it is the sync every framework has. Compiled the way the
        framework compiles inference (torch.compile of the eval model under
        torch.inference_mode, a jitted apply, tf.function(jit_compile=...), ...); never a
        predict() loop. Each batch size compiles on its first call, made before timing."""
        ...

    def infer_input(self, x: np.ndarray) -> Any:
        """Canonical NumPy inputs (NHWC images, vectors, token ids) -> the device input that
        infer_fn takes, in the layout the framework's model wants (done outside the timing)."""
        ...


# A sampler's whole loop over a batch of initial noise: noise -> samples (NumPy).
SampleLoop = Callable[[np.ndarray], np.ndarray]


@runtime_checkable
class Sampler(Servable, Protocol):
    """Capability "sample": a diffusion model served as its denoiser (scenario sample)."""

    def sample_fn(self, state: Any) -> SampleLoop | None:
        """The framework's whole sampling loop as one compiled program (lax.fori_loop under
        jax.jit, ...), or None where the runner loops on the host over infer_fn."""
        ...


@runtime_checkable
class Rollout(Learner, Protocol):
    """Capability "rollout": a reinforcement-learning program (workloads/ppo.py; scenarios
    rl_rollout, rl_train, rl_converge): rollouts in the framework's own array ops, then PPO
    updates, with the spec's draws fed in."""

    rollout_placement: str

    def env(self, obs: np.ndarray) -> Any:
        """The environments' state on the device from canonical observations."""
        ...

    def rollout(self, state: Any, env: Any, uniforms: np.ndarray, resets: np.ndarray) -> tuple[Any, Any]:
        """T steps of N environments -> (environments, trajectory), still on the device."""
        ...

    def update(self, state: Any, env: Any, traj: Any, perms: np.ndarray) -> tuple[Any, Any]:
        """The PPO update over a trajectory -> (state, per-minibatch losses on the device)."""
        ...

    def finished(self, traj: Any) -> np.ndarray:
        """The returns of the episodes that finished in a trajectory (NumPy)."""
        ...

    def wait(self, *outputs: Any) -> None:
        """Block until the outputs are computed (the framework's sync)."""
        ...


@runtime_checkable
class Generator(Built, Protocol):
    """Capability "generate": greedy decoding with a KV cache (workloads/lm.py; scenario
    generate). Each framework's decoder is written as its experts write one
    (backends/generate.py)."""

    def decoder(self, state: Any, batch: int, max_len: int) -> Decoder:
        """A decoder of `batch` sequences with room for `max_len` positions, reading `state`'s
        parameters."""
        ...


class Sampling:
    """What a framework's program class inherits to answer Sampler.sample_fn: None (the host
    loop) unless a diffusion workload's builder sets `sampler` to its compiled loop."""

    sampler: Callable[[Any], SampleLoop] | None = None

    def sample_fn(self, state: Any) -> SampleLoop | None:
        return None if self.sampler is None else self.sampler(state)


class Program(Trainable, Servable, Protocol):
    """A supervised workload's program: it trains and it serves (cnn, resnet, ...)."""

class Backend(Protocol):
    """One framework. The class attributes are data the parent reads without importing the
    framework: what it can run (capabilities, precisions, options), and what of the
    environment and of the allocator is worth recording."""

    name: str
    capabilities: Capabilities
    # (device, precision) -> None when supported, else why not (backends/precision.py: NATIVE)
    precisions: Support
    # The framework's own options (Policy.options): name -> Option; empty for most.
    options: dict[str, Option]
    # Environment variables that change this framework's speed or numerics, recorded with every
    # trial (beside COMMON_RECORDED_VARS).
    recorded_environment: tuple[str, ...]
    # allocator_stats() metric name -> unit; the trial result carries these units.
    allocator_units: dict[str, str]
    # A first run-time estimate (the planner learns better ones from the store).
    cost_guess: CostGuess
    # Settings that swap the framework's CPU-specific kernels for its plain ones (name ->
    # environment variables, set before the import): when a trial fails parity, the parent probes
    # again with each, and a pass there makes the verdict `differs` (a framework difference on
    # this CPU) instead of `fail` (runner/verdicts.py). Empty for most.
    kernel_alternatives: dict[str, dict[str, str]]

    @property
    def data_parallel(self) -> DataParallel:
        """How this backend trains on several devices (SingleDevice where it does not)."""
        ...

    def available(self) -> tuple[bool, str]:
        """Installed? Never imports the framework. (ok, reason or version string)."""
        ...

    def modes(self) -> dict[str, str | None]:
        """mode -> None when supported, else the reason it is not. Never imports the framework."""
        ...

    def distributions(self) -> dict[str, str]:
        """Installed distribution name -> version, from package metadata (no import)."""
        ...

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        """Environment variables to set before the import: compile cache locations (a fresh
        per-trial `cache_dir` for the cold cache), log levels, devices hidden from frameworks that
        are loaded but not under test. The values replace what the environment holds; a backend
        that must extend a user's variable (TF_XLA_FLAGS) reads os.environ itself. Never imports
        the framework."""
        ...

    def reference_environment(self) -> dict[str, str]:
        """Environment for the float64 parity reference process: variables set before the
        import, on top of environment(), where float64 needs a switch (JAX_ENABLE_X64); empty
        where it does not. Never imports the framework."""
        ...

    def import_framework(self) -> None:
        """Import the framework (timed by the worker as import_s). Environment variables are
        already set; thread settings are applied afterwards by configure()."""
        ...

    def configure(self, policy: Policy) -> dict[str, Any]:
        """Apply the policy's framework settings (threads, matmul precision, ...) and return
        them as read back from the framework: recorded as the trial's effective policy."""
        ...

    def device_kind(self) -> str:
        """After the import: "cuda" where the framework runs on an NVIDIA GPU, else "cpu" (the
        key of `precisions`)."""
        ...

    def build(self, trial: TrialSpec) -> Built:
        """Build the workload's Program for this trial; raises Unsupported with a reason. Called
        through backends.support.build once support.require has checked mode, precision and
        scenario; support.init then checks the Program's numerics read-back."""
        ...

    def forget_compiled(self) -> None:
        """Drop compiled state that would make the next build() compile differently than in a
        fresh process. Called by processes that build several workloads (`dlbench check`, the
        float64 reference) before each build; never by a trial worker, whose parity Program must
        leave the warmed-up train step compiled (a reset there recompiles in the timed window)."""
        ...

    def sync(self, *outputs: Any) -> None:
        """Wait until the given outputs are computed (block_until_ready, cuda.synchronize, a
        value fetch). A sync that waits on nothing is a bug: JAX dispatches asynchronously."""
        ...

    def info(self) -> dict[str, Any]:
        """Framework version, devices and build facts, after import."""
        ...

    def allocator_stats(self) -> dict[str, float]:
        """The framework allocator's own counters, named for what they are (allocated vs
        reserved, peaks); empty where the device has none (CPU)."""
        ...


@typing.final
class TimedBatches(Iterator[Any]):
    """A Program's batches with the seconds the training loop waits in next(): the input
    stall where the loop pulls batches itself. A framework that pulls them inside its own loop
    (Keras's fit) reads `inner` and leaves `pulls` at 0: not measurable there."""

    def __init__(self, inner: Iterator[Any]) -> None:
        self.inner = inner
        self.wait_s = 0.0
        self.pulls = 0

    def __next__(self) -> Any:
        t0 = time.perf_counter()
        batch = next(self.inner)
        self.wait_s += time.perf_counter() - t0
        self.pulls += 1
        return batch


BUILTIN_PACKAGES = "dlbench.backends."


def family(package: str) -> str:
    """The key of a backend package in a plugin workload's BUILDERS: the package's name under
    dlbench.backends ("torch", "jax", "tensorflow", "keras", "onnxruntime"), else (a plugin
    backend) its full name."""
    return package.removeprefix(BUILTIN_PACKAGES)


def builder_package(package: str, capabilities: Capabilities) -> str:
    """The backend package whose builder modules make the Programs of the backend package
    `package`: its own, or for an exporting backend the package of the family it exports from."""
    return package if capabilities.exports_from is None else BUILTIN_PACKAGES + capabilities.exports_from


def builder_module(package: str, workload: str) -> str | None:
    """The module whose `build(trial)` makes `workload`'s Program for the backend package
    `package`: `<package>.<workload>` for a built-in workload (e.g. dlbench.backends.jax.cnn),
    the plugin's BUILDERS entry for the package's family otherwise; for a problem of the
    problem registry, the package's module for the problem's scenario (`<package>.ode`, whose
    build returns the solver module itself: backends/solve.py); None where there is none."""
    if workload in problems.PROBLEMS:
        return f"{package}.{problems.builder(workload)}"
    declared = workloads.builders(workload)
    if declared is None:
        return f"{package}.{workload}"
    return declared.get(family(package))


def require_builder(package: str, workload: str) -> str:
    """builder_module, or Unsupported where the package has none (installed)."""
    name = builder_module(package, workload)
    if name is None or not module_installed(name):
        raise Unsupported(f"{family(package)} has no implementation of {workload!r}")
    return name


def build_program(package: str, trial: TrialSpec) -> Program:
    """Import the workload's builder module for `package` (builder_module) and call its
    `build`. A plugin's builder that fails to import or lacks `build` is one line naming it; a
    builder that raises Unsupported at import (a solver library that is not installed) makes
    the trial unsupported with its reason."""
    workload = trial.workload.name
    name = require_builder(package, workload)
    try:
        build = importlib.import_module(name).build
    except Unsupported:
        raise
    except Exception as e:
        raise RuntimeError(f"{workload}'s {family(package)} builder {name} ({subjects.origin(workload).text()})"
                           f" failed to import: {type(e).__name__}: {e}") from e
    program: Program = build(trial)
    return program
