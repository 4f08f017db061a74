"""Several training steps per compiled call: the option a framework with a whole-step compiler
declares (JAX's jit, TensorFlow's tf.function) and the one rule that sets it by default.
Imports no framework.

Why: a small model's step is a few microseconds of compute and tens of microseconds of Python
dispatch (argument checks, the executable lookup, the launch). Keras on TensorFlow runs
`steps_per_execution` steps in one compiled call (a tf.while_loop in one tf.function); Keras 3's
JAX trainer calls its jitted one-step function from a Python loop. The batches of one call are
pulled in the spec's order and the per-step losses come back one per step, as with one step per
call.

The rule (`auto`), the same for every workload and both device classes:
- K = min(AUTO_STEPS, chunk_steps) steps per call, the steps written out one after another in
  the compiled function ("unroll": XLA sees straight-line code; `lax.scan`/`tf.while_loop` keep
  the compiled body at one step, but XLA:CPU runs a loop body's convolutions far slower than
  straight-line ones: measured in docs/benchmarks.md), the state donated (JAX);
- one step per call when an epoch has fewer than MIN_EPOCH_STEPS steps: the K-step program is a
  second compile (seconds for the larger models) that such a short trial never earns back, and
  the tiny presets the tests run are such trials;
- one step per call when a step costs CHEAP_STEP_FLOPS or more (the workload's analytic
  flops_per_sample x batch): the per-call cost is then a small share of the step, and unrolling
  measured slower (TF node at the cpu preset, 4e8 FLOPs per step: 0.81x per CPU-second at K = 8;
  TF mlp, 8.6e7: 1.61x; docs/benchmarks.md). Measured on CPU; the same threshold is assumed on
  a GPU, unmeasured.
- JAX's `auto` is one step per call (JAX_AUTO_STEPS): on the mlp at the cpu preset, the one
  workload the rule above selects, JAX at K = 8 measured the same samples per CPU-second as at
  K = 1 (1.02x and 1.01x of Keras-on-JAX; docs/benchmarks.md): unrolling earned JAX nothing
  there, so its default stays the plain loop, as Keras's JAX trainer's is;
  `--option jax.steps_per_call=8` asks for it. TensorFlow's mlp gained (2.01x against 1.25x of
  Keras-on-TF), so TensorFlow keeps K = AUTO_STEPS.
A chunk's steps that do not fill a K-step call (a chunk of 12 at K = 8: 8 + 4) run one per call
in the one-step program, which the first step needs anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlbench import workloads
from dlbench.backends.base import Option, Variant
from dlbench.spec import TrialSpec

AUTO_STEPS = 8
JAX_AUTO_STEPS = 1
MIN_EPOCH_STEPS = 64
CHEAP_STEP_FLOPS = 2e8
STEPS = ("auto", "1", "2", "4", "8", "16", "32")


# Where the measurements behind the rule are (docs/benchmarks.md).
SOURCE = "docs/benchmarks.md, \"Native loops against Keras on the same framework\" (issue 20)"


def options(loops: tuple[str, ...], framework: str, auto_steps: int = AUTO_STEPS,
            tried_steps: tuple[str, ...] = ("8",), modes: tuple[str, ...] = ()) -> dict[str, Option]:
    """The `steps_per_call` and `loop` options of a framework whose compiled loop takes `loops`
    (the first is the default) and whose `auto` runs at most `auto_steps` steps per call; both
    are variants the headroom search tries (`tried_steps` in `modes`; a second loop with
    steps_per_call 8, without which it changes nothing)."""
    auto = ("1, measured best on CPU" if auto_steps == 1 else
            f"min({auto_steps}, chunk steps) where an epoch has at least {MIN_EPOCH_STEPS} steps and a step"
            f" under {CHEAP_STEP_FLOPS:.0e} FLOPs, else 1")
    steps = Variant(
        why="several steps per compiled call save the per-call dispatch (argument checks, executable lookup,"
            " launch), a large share of a small model's step; the auto rule picks it only where measured faster",
        source=SOURCE, tried=tried_steps, modes=modes, addresses=("host overhead and idle",))
    loop = None if len(loops) < 2 else Variant(
        why="a compiled loop keeps the compiled body at one step (compile time) where unrolling writes the"
            " steps out; XLA:CPU measured loop bodies' convolutions slower than straight-line code",
        source=SOURCE, tried=loops[1:], modes=modes, addresses=("host overhead and idle",),
        together=(("steps_per_call", str(AUTO_STEPS)),))
    return {
        "steps_per_call": Option(
            allowed=STEPS, default="auto",
            help=f"training steps per compiled {framework} call (auto: {auto}; backends/multistep.py)",
            variant=steps),
        "loop": Option(
            allowed=loops, default=loops[0],
            help="how the steps of one call are written: unroll (one after another) or a compiled loop",
            variant=loop),
    }


@dataclass(frozen=True)
class TrainLoop:
    """The train loop a trial runs, recorded with its effective policy (`train_loop`)."""

    steps_per_call: int
    loop: str
    rule: str

    def record(self) -> dict[str, Any]:
        return {"steps_per_call": self.steps_per_call, "loop": self.loop, "rule": self.rule}


def train_loop(trial: TrialSpec, auto_steps: int = AUTO_STEPS) -> TrainLoop:
    """The loop of `trial` from its options (declared with `options`): an explicit
    steps_per_call as given, `auto` by the rule above, at most `auto_steps` per call."""
    opts = trial.policy.options
    loop = opts.get("loop", "unroll")
    asked = opts.get("steps_per_call", "auto")
    if asked != "auto":
        return TrainLoop(int(asked), loop, f"steps_per_call={asked} (option)")
    spec = trial.workload
    epoch_steps = spec.dataset_size // spec.batch_size
    if auto_steps == 1:
        return TrainLoop(1, loop, "auto: one step per call (measured no faster at K > 1 on CPU: backends/multistep.py)")
    if epoch_steps < MIN_EPOCH_STEPS:
        return TrainLoop(1, loop, f"auto: {epoch_steps} steps per epoch < {MIN_EPOCH_STEPS}, one step per call")
    step_flops = workloads.get(spec.name).flops_per_sample(spec) * spec.batch_size
    if step_flops >= CHEAP_STEP_FLOPS:
        return TrainLoop(1, loop, f"auto: {step_flops:.3g} FLOPs per step >= {CHEAP_STEP_FLOPS:.3g}, one step per call")
    k = min(auto_steps, trial.chunk_steps)
    return TrainLoop(k, loop, f"auto: min({auto_steps}, chunk_steps {trial.chunk_steps})")
