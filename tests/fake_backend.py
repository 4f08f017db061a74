"""A fake framework for runner tests: its "device work" runs on a background thread (so a
missing sync would show), and FAKE_BEHAVIOUR makes it crash, raise, hang, leak or recompile
(`probe_hang`: its loss_and_grads starts a stray child and never returns).

FAKE_BEHAVIOUR is one behaviour, or a comma list picked by the trial's repeat index
(`ok,crash,hang`: repeat 0 runs, 1 segfaults, 2 hangs), so that one sweep meets every fault.

Registered for worker processes through DLBENCH_BACKENDS=fake=fake_backend:FakeBackend with this
directory on PYTHONPATH.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
import typing
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.backends.base import Capabilities, CostGuess, Option, SingleDevice, Variant
from dlbench.backends.precision import NATIVE, Support, fp32_only
from dlbench.spec import Policy, TrialSpec
from dlbench.workloads.data import Augment, Dataset, crop_flip

STEP_S = float(os.environ.get("FAKE_STEP_S", "0.002"))
# The same fake registered under a second name (DLBENCH_BACKENDS=...,fake2=fake_backend:FakeBackend)
# runs at FAKE_STEP_S_FAKE2 seconds a step: two "frameworks" of known relative speed.


def step_s(framework: str) -> float:
    return float(os.environ.get(f"FAKE_STEP_S_{framework.upper()}", STEP_S))
# Seconds of "device work" per inference call (any batch size).
INFER_S = float(os.environ.get("FAKE_INFER_S", "0.0001"))
# Behaviour `learn` (converge scenario): held-out accuracy min(1, steps / LEARN_STEPS); each
# predict() call takes PREDICT_S seconds.
LEARN_STEPS = int(os.environ.get("FAKE_LEARN_STEPS", "100"))
PREDICT_S = float(os.environ.get("FAKE_PREDICT_S", "0"))
# `grow`: touched memory added every GROW_PERIOD_S up to GROW_TOTAL_MB, then held.
GROW_STEP_MB = 16
GROW_PERIOD_S = 0.02
GROW_TOTAL_MB = int(os.environ.get("FAKE_GROW_MB", "800"))


def _repeat() -> int:
    """The repeat index of the trial this worker runs, read from its SPEC argument (the fake
    needs it before build, in import_framework)."""
    try:
        return int(json.loads(Path(sys.argv[1]).read_text())["repeat"])
    except (IndexError, OSError, ValueError, KeyError, TypeError):
        return 0


def _event(what: str) -> None:
    """Append a line to FAKE_EVENTS (when set): which backend calls a process made, in order."""
    path = os.environ.get("FAKE_EVENTS")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {what}\n")


def _option_factor(trial: TrialSpec) -> float:
    """The step time's factor from the fake's variant options (FAKE_SPICY_FACTOR, FAKE_SLOPPY_FACTOR)."""
    factor = 1.0
    if trial.policy.options.get("flavour") == "spicy":
        factor *= float(os.environ.get("FAKE_SPICY_FACTOR", "1"))
    if trial.policy.options.get("kernels") == "sloppy":
        factor *= float(os.environ.get("FAKE_SLOPPY_FACTOR", "1"))
    return factor


def behaviour() -> str:
    choices = os.environ.get("FAKE_BEHAVIOUR", "ok").split(",")
    return choices[_repeat() % len(choices)] if len(choices) > 1 else choices[0]


def _grow(sink: list[bytearray]) -> None:
    """Allocate and touch memory steadily (a leak the watchdog can watch grow), then hang."""
    while len(sink) * GROW_STEP_MB < GROW_TOTAL_MB:
        block = bytearray(GROW_STEP_MB * 2**20)
        block[::4096] = b"1" * len(block[::4096])
        sink.append(block)
        time.sleep(GROW_PERIOD_S)
    time.sleep(3600)


def _stray_child() -> None:
    """Start a child in the worker's process group that would outlive the worker: what a loader
    worker or a compiler daemon does when nobody stops it."""
    code = "import time; time.sleep(600)"
    subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)


# FAKE_WORK=cpu: the "device work" is a fixed amount of CPU work instead of a sleep, so that
# another process's load slows it as it slows a real framework (tests/test_busy_hog.py): this
# many loop iterations per second of FAKE_STEP_S (0.2-1 s of one core's time, by the CPU).
CPU_ITERATIONS_PER_S = 2e7


def _spin(seconds: float) -> None:
    for _ in range(int(seconds * CPU_ITERATIONS_PER_S)):
        pass


class _AsyncDevice:
    """A one-thread 'device' queue: work is dispatched and runs later, like JAX or CUDA."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: Future[None] | None = None

    def dispatch(self, seconds: float) -> Future[None]:
        fut: Future[None] = Future()
        prev = self._last
        self._last = fut

        def work() -> None:
            if prev is not None:
                prev.result()
            if os.environ.get("FAKE_WORK") == "cpu":
                _spin(seconds)
            else:
                time.sleep(seconds)
            fut.set_result(None)

        threading.Thread(target=work, daemon=True).start()
        return fut


@typing.final
class Pending:
    """An inference output still being computed on the fake device: sync() waits for it and
    np.asarray() waits too (as a host fetch of a real framework's output does)."""

    def __init__(self, fut: Future[None], logits: np.ndarray) -> None:
        self.fut, self.logits = fut, logits

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self.fut.result()
        return self.logits if dtype is None else self.logits.astype(dtype)


@typing.final
class FakeProgram:
    def __init__(self, trial: TrialSpec, device: _AsyncDevice) -> None:
        self.trial = trial
        self.device = device
        self.data: Dataset | None = None
        self.compiles = 0
        self.leak: list[bytearray] = []

    def load(self, dataset: Dataset) -> None:
        self.data = dataset

    def init(self, params: dict[str, np.ndarray]) -> Any:
        return {"step": 0, "params": params}

    def batches(self, order: np.ndarray, augment: Augment | None = None) -> Iterator[Any]:
        assert self.data is not None
        for i, idx in enumerate(order):
            x = self.data.x[idx]
            if augment is not None:
                x = crop_flip(x, augment.offsets[i], augment.flips[i], augment.pad)
            yield x, self.data.y[idx]

    def compile(self, state: Any, batch: Any) -> float | None:
        return None

    def train_loop(self) -> dict[str, Any]:
        return {"steps_per_call": 1, "loop": "python", "rule": "the fake backend"}

    def train_chunk(self, state: Any, batches: Iterator[Any], n_steps: int) -> tuple[Any, Any]:
        b = behaviour()
        if self.compiles == 0 or b == "recompile":
            self.compiles += 1
        for _ in range(n_steps):
            next(batches)
            state = {"step": state["step"] + 1}
            if b == "crash" and state["step"] == 3:
                ctypes.string_at(0)  # segfault
            if b == "abort" and state["step"] == 3:
                os.kill(os.getpid(), signal.SIGABRT)
            if b == "raise" and state["step"] == 3:
                raise RuntimeError(os.environ.get("FAKE_ERROR", "fake failure at step 3"))
            if b == "hang" and state["step"] == 3:
                time.sleep(3600)
            if b == "kill_parent" and state["step"] == 3:
                # a lost executor: the process that started this worker (a Ray worker) dies
                os.kill(os.getppid(), signal.SIGKILL)
                time.sleep(3600)  # PR_SET_PDEATHSIG ends this one
            if b == "grow" and state["step"] == 3:
                _grow(self.leak)
            if b in ("orphan", "stray") and state["step"] == 3:
                _stray_child()  # `stray` goes on and ends normally
            if b == "orphan" and state["step"] == 3:
                time.sleep(3600)
            if b == "spew" and state["step"] == 3:
                # half a gigabyte of output (sparse: no disk), then a last line and a failure
                os.ftruncate(1, 512 * 2**20)
                os.write(1, b"\nthe last line of a long output\n")
                raise RuntimeError("failed after a long output")
            if b == "setsid" and state["step"] == 1:
                # a helper that leaves the worker's session and process group
                escaped = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"],
                                           start_new_session=True)
                Path(os.environ["FAKE_ESCAPED_PID"]).write_text(str(escaped.pid))
            if b == "leak":
                self.leak.append(bytearray(8 * 1024 * 1024))
            if b == "child" and state["step"] == 1:
                # a loader-worker-like child holding 300 MiB for a few seconds
                code = "import time; x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(4)"
                self.child = subprocess.Popen([sys.executable, "-c", code])
            if b == "child" and state["step"] == 2:
                time.sleep(2.5)  # let the sampler re-list the process tree and see the child
        fut = self.device.dispatch(step_s(self.trial.framework) * _option_factor(self.trial) * n_steps)
        if b == "nan":  # a diverging model: its losses are NaN and infinity from the start
            return state, (fut, np.array([np.nan, np.inf, -np.inf] * n_steps)[:n_steps])
        return state, (fut, np.full(n_steps, 1.0 / (1 + state["step"])))

    def predict(self, state: Any, x: np.ndarray) -> np.ndarray:
        if behaviour() == "learn":
            return self._learned_logits(state["step"], x)
        # The same logits as infer_fn, in the spec's dtype: the float64 run is the reference's.
        return fake_logits(x, self.trial.workload.num_classes, np.dtype(self.trial.workload.numerics.dtype))

    def _learned_logits(self, step: int, x: np.ndarray) -> np.ndarray:
        """Right for the first min(1, step / LEARN_STEPS) of the held-out split, class 0
        otherwise (held-out samples found by their bytes); lm: learned_lm_logits."""
        from dlbench import workloads

        time.sleep(PREDICT_S)
        spec = self.trial.workload
        if spec.name == "lm":
            return learned_lm_logits(spec, step, x)
        held_out = workloads.get(spec.name).make_eval_dataset(spec)
        where = {row.tobytes(): (i, int(label)) for i, (row, label) in enumerate(zip(held_out.x, held_out.y))}
        known = min(1.0, step / LEARN_STEPS) * len(held_out)
        labels = [label if i < known else 0 for i, label in (where[row.tobytes()] for row in x)]
        return np.eye(spec.num_classes)[labels]

    def infer_fn(self, state: Any) -> Any:
        """Logits = a fixed linear map of the inputs' row means, in the spec's dtype, so that
        the fake is its own float64 reference; behaviour `wrong` is off by 1 %, `recompile`
        compiles on every call."""
        dtype = np.dtype(self.trial.workload.numerics.dtype)

        def forward(x: np.ndarray) -> Pending:
            if behaviour() == "recompile" or self.compiles == 0:
                self.compiles += 1
            return Pending(self.device.dispatch(INFER_S), fake_logits(x, self.trial.workload.num_classes, dtype))

        return forward

    def infer_input(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, np.dtype(self.trial.workload.numerics.dtype))

    def loss_and_grads(self, state: Any, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
        """A deterministic stand-in in the spec's dtype, so that the fake is its own float64
        parity reference (DLBENCH_REFERENCE_FRAMEWORK=fake); behaviour `wrong` is off by 1 %."""
        if behaviour() == "probe_hang":  # a probe (dlbench check, the reference) that never ends
            _stray_child()
            _event("probe hangs")
            time.sleep(3600)
        dtype = np.dtype(self.trial.workload.numerics.dtype)
        scale = dtype.type(np.mean(np.asarray(x, dtype)))
        grads = {k: np.sin(np.asarray(v, dtype)) * scale for k, v in state["params"].items()}
        if (behaviour() == "wrong" or behaviour() == "wrong_kernels" and not os.environ.get("FAKE_PLAIN_KERNELS")
                or self.trial.policy.options.get("kernels") == "sloppy"):
            grads = {k: v * dtype.type(1.01) for k, v in grads.items()}
        return float(scale), grads

    def params(self, state: Any) -> dict[str, np.ndarray]:
        return {}

    def canonical_batch(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        return batch[0], batch[1]

    def losses_to_numpy(self, losses: Any) -> np.ndarray:
        fut, values = losses
        fut.result()
        return np.asarray(values, dtype=np.float64)

    def compilations(self) -> int:
        return self.compiles

    def precision(self) -> dict[str, Any]:
        return {"compute_dtype": self.trial.workload.numerics.dtype}

    def numerics(self) -> dict[str, Any]:
        import dataclasses

        n = self.trial.workload.numerics
        got = {**dataclasses.asdict(n), **n.extra}
        if behaviour() == "numerics":  # an optimizer port with another epsilon than the spec's
            got["eps"] = 1e-3
        return got

    def decoder(self, state: Any, batch: int, max_len: int) -> FakeDecoder:
        return FakeDecoder(self.trial.workload, state["params"])


class FakeDecoder:
    """The generate scenario's decoder on the fake backend: lm's float64 NumPy decoder with its
    own cache, its logits rounded to float32 (so generation parity passes), and a fake compile
    per new prompt length."""

    how = "fake: the NumPy reference decoder"

    def __init__(self, spec: Any, params: dict[str, np.ndarray]) -> None:
        self.spec, self.params, self.lengths = spec, params, set()
        self.cache: Any = None
        self.position = 0

    def prefill(self, prompt: np.ndarray) -> np.ndarray:
        from dlbench.workloads import lm

        if behaviour() == "hang":  # a generation that never ends: the trial is stopped from outside
            time.sleep(3600)
        self.lengths.add(prompt.shape[1])
        logits, self.cache = lm.reference_prefill(self.spec, self.params, prompt)
        self.position = prompt.shape[1]
        return logits[:, -1].astype(np.float32)

    def decode(self, logits: np.ndarray) -> np.ndarray:
        from dlbench.workloads import lm

        out, self.cache = lm.reference_decode(self.spec, self.params, logits.argmax(axis=-1), self.position, self.cache)
        self.position += 1
        return out.astype(np.float32)

    def tokens(self, logits: np.ndarray) -> np.ndarray:
        return logits.argmax(axis=-1)

    def to_numpy(self, logits: np.ndarray) -> np.ndarray:
        return logits

    def cache_bytes(self) -> int:
        return 1024

    def compilations(self) -> int:
        return len(self.lengths)


def learned_lm_logits(spec: Any, step: int, x: np.ndarray) -> np.ndarray:
    """lm after `step` steps of the fake's learning: at every position the log of the mixture
    (1 - a) uniform + a (the chain's transition from the token there), a = min(1, step /
    LEARN_STEPS): the held-out perplexity falls from the vocabulary size to about exp(entropy
    rate) as a rises."""
    from dlbench.workloads import lm

    chain = lm.chain(spec)
    vocab = len(chain.stationary)
    dense = np.zeros((vocab, vocab))
    np.put_along_axis(dense, chain.successors, chain.probs, axis=1)
    a = min(1.0, step / LEARN_STEPS)
    return np.log((1 - a) / vocab + a * dense[np.asarray(x)]).astype(np.float32)


def fake_logits(x: np.ndarray, num_classes: int, dtype: np.dtype[Any]) -> np.ndarray:
    means = np.asarray(x, dtype).reshape(len(x), -1).mean(axis=1, keepdims=True)
    logits = means * np.arange(1, num_classes + 1, dtype=dtype) + dtype.type(1)
    return logits * dtype.type(1.01) if behaviour() == "wrong" else logits


@typing.final
class FakeDataParallel:
    """Any device count, 'made' on the CPU; the gradient communication time is not exposed."""

    def unsupported(self, trial: TrialSpec) -> str | None:
        return None

    def environment(self, trial: TrialSpec) -> dict[str, str]:
        return {"FAKE_DEVICES": str(trial.devices)}

    def setup(self, trial: TrialSpec) -> dict[str, Any]:
        return {"mechanism": "fake", "platform": "cpu"}

    def comm_s(self) -> float | None:
        return None


@typing.final
class FakeBackend:
    name = "fake"
    capabilities = Capabilities(frozenset({"train", "infer", "generate"}))
    data_parallel = FakeDataParallel()
    precisions: Support = dict(NATIVE)
    # An option to prove options reach the worker's policy (FakeBackend.configure reads it back).
    # Two variants for `dlbench tune` (tests/test_tune.py): `flavour=spicy` steps at FAKE_SPICY_FACTOR
    # times the step time, `kernels=sloppy` at FAKE_SLOPPY_FACTOR and off by 1 % in its gradients
    # (it fails parity); `kernels` applies in eager mode only.
    options = {
        "flavour": Option(allowed=("plain", "spicy"), default="plain", help="a fake option",
                          variant=Variant(why="a fake idiom", source="tests/fake_backend.py", tried=("spicy",),
                                          addresses=("pooling",))),
        "kernels": Option(allowed=("exact", "sloppy"), default="exact", help="a fake kernel choice",
                          variant=Variant(why="fake faster kernels", source="tests/fake_backend.py",
                                          tried=("sloppy",), modes=("eager",))),
    }
    recorded_environment: tuple[str, ...] = ("FAKE_CACHE_DIR",)
    allocator_units: dict[str, str] = {}
    # behaviour `wrong_kernels` is `wrong` unless FAKE_PLAIN_KERNELS=1 (a framework whose
    # CPU-specific kernels differ: the parity diagnosis)
    kernel_alternatives = {"plain kernels": {"FAKE_PLAIN_KERNELS": "1"}}
    cost_guess = CostGuess(startup_s=0.5, compile_s=0.1)

    def __init__(self) -> None:
        self.device = _AsyncDevice()

    def available(self) -> tuple[bool, str]:
        return True, "fake 0.0"

    def modes(self) -> dict[str, str | None]:
        return {"eager": None, "graph": "the fake has no graph mode", "compiled": None}

    def distributions(self) -> dict[str, str]:
        return {"fake": "0.0"}

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        return {"FAKE_CACHE_DIR": cache_dir}

    def reference_environment(self) -> dict[str, str]:
        return {}

    def import_framework(self) -> None:
        if behaviour() == "import_error":
            raise ImportError("fake framework cannot be imported")
        time.sleep(0.01)

    def configure(self, policy: Policy) -> dict[str, Any]:
        return {"threads": policy.threads, "flavour": policy.options.get("flavour", "plain")}

    def device_kind(self) -> str:
        return "cpu"

    def build(self, trial: TrialSpec) -> FakeProgram:
        _event(f"build {trial.workload.name}")
        return FakeProgram(trial, self.device)

    def forget_compiled(self) -> None:
        _event("forget")

    def sync(self, *outputs: Any) -> None:
        if behaviour() == "nosync":
            return
        for out in outputs:
            if isinstance(out, tuple) and out and isinstance(out[0], Future):
                out[0].result()
            elif isinstance(out, Pending):
                out.fut.result()

    def info(self) -> dict[str, Any]:
        return {"version": "0.0"}

    def allocator_stats(self) -> dict[str, float]:
        return {}


@typing.final
class MissingBackend:
    """A registered framework that is not installed."""

    name = "missing"
    capabilities = Capabilities()
    data_parallel = SingleDevice("missing is not installed")
    precisions: Support = fp32_only("missing runs nothing")
    options: dict[str, Option] = {}
    recorded_environment: tuple[str, ...] = ()
    allocator_units: dict[str, str] = {}
    kernel_alternatives: dict[str, dict[str, str]] = {}
    cost_guess = CostGuess(startup_s=0.0, compile_s=0.0)

    def available(self) -> tuple[bool, str]:
        return False, "missing is not installed (pip install 'dlbench[missing]')"

    def modes(self) -> dict[str, str | None]:
        return {"eager": None, "graph": None, "compiled": None}

    def distributions(self) -> dict[str, str]:
        return {}

    def environment(self, policy: Policy, cache_dir: str) -> dict[str, str]:
        return {}
