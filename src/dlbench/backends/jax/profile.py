"""jax.profiler for profiled trials (backends/profiling.py): the Perfetto trace (a Chrome trace
JSON, gzipped) beside TensorBoard's xplane; XLA's HLO names (profiling.XLA_RULES) and the host
side of a step mapped to the shared categories. Python frames are not traced
(python_tracer_level 0: tracing every frame slowed steps several-fold); the time the host spends
outside traced XLA work shows as host overhead and idle gaps. The optimizer update fuses into the
same program as the backward pass and shows as elementwise fusions (no category of its own).

XLA:CPU's thunks are named after their HLO instructions, and many names say nothing of the op
(`wrapped_iota.2`, `ynn_fusion.12`): `prepare()` has every program this worker compiles kept
(its optimised HLO text and XLA's cost analysis), and `refine` gives each traced instruction the
category of its dominant op in that program (backends/hlo.py); max-pool's backward, which XLA:CPU
expands into iotas, an arg-max reduce-window and a scatter, is then pooling. The programs' HLO
text is kept beside the trace (`hlo/<module>.txt`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlbench.backends import hlo
from dlbench.backends.profiling import (
    BYTES_METRIC,
    FLOPS_METRIC,
    INTENSITY_METRIC,
    XLA_RULES,
    Span,
)

RULES = (
    *XLA_RULES,
    # the batch's transfer to the device (host to host on a CPU)
    (r"^shard_args$|DevicePut|H2D|D2H|CopyToDevice|TransferTo|TransferFrom", "copies and layout"),
    (r"PjitFunction|PjRt|Execute|Handle inputs|AllocateOutput|TaskDispatcher|TfrtCpu|Compile|Thunk|"
     r"PythonRefManager|Wait for (?:donation|usage) holds|GarbageCollect|ThreadpoolListener", "host overhead and idle"),
)
# What this mapping cannot tell apart, said under the profile table (runner/scenarios/profiled.py).
CAVEAT = ("XLA instructions are categorised by their dominant op in the compiled program (a fusion of a"
          " convolution and its activation is convolution; XLA's own expansions take their users' category);"
          " the optimizer update fuses into elementwise fusions (no category of its own)")
# Waits for other threads, the executor's wrapper around the thunks it runs, Python frames.
CONTAINERS = r"wait for completion|^ThunkExecutor::Execute$|BlockUntilReady|^\$"


# The programs compiled in this worker: module name -> (HLO text, XLA's cost analysis).
PROGRAMS: dict[str, tuple[str, dict[str, float]]] = {}


def prepare() -> None:
    """Keep every program this worker compiles from now on (a profiled trial only): JAX's own
    compile entry point (jax._src.compiler.compile_or_get_cached, called through the module, on
    a cache hit too) wrapped to read the executable's optimised HLO and cost analysis."""
    from jax._src import compiler

    original = compiler.compile_or_get_cached

    def kept(*args: Any, **kwargs: Any) -> Any:
        executable = original(*args, **kwargs)
        try:
            cost = executable.cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost
            for module in executable.hlo_modules():
                PROGRAMS[module.name] = (module.to_string(), {k: float(v) for k, v in (cost or {}).items()
                                                              if k in ("flops", "bytes accessed")})
        except Exception:  # noqa: BLE001 (a program we cannot read stays unnamed: its names' rules apply)
            pass
        return executable

    compiler.compile_or_get_cached = kept


def refine(spans: list[Span]) -> list[Span]:
    """Each XLA instruction's span with its category in its compiled program, and whether the
    backward pass made it (backends/hlo.py), where the program is known."""
    by_module = {name: hlo.categories(text) for name, (text, _) in PROGRAMS.items()}
    backward = {name: hlo.backward(text) for name, (text, _) in PROGRAMS.items()}
    return [dataclasses.replace(s, category=by_module[s.module].get(s.op), backward=s.op in backward[s.module])
            if s.module in by_module and s.op else s for s in spans]


def program_metrics(spans: list[Span]) -> dict[str, float]:
    """XLA's flops and bytes accessed per call of the program that took most of the traced
    time, and their ratio (the memory-bound hint's arithmetic intensity); none where XLA gave
    no bytes."""
    time_in: dict[str, float] = {}
    for s in spans:
        if s.module in PROGRAMS:
            time_in[s.module] = time_in.get(s.module, 0.0) + s.dur_us
    if not time_in:
        return {}
    cost = PROGRAMS[max(time_in, key=lambda m: time_in[m])][1]
    flops, accessed = cost.get("flops"), cost.get("bytes accessed")
    if not flops or not accessed:
        return {}
    return {FLOPS_METRIC: flops, BYTES_METRIC: accessed, INTENSITY_METRIC: flops / accessed}


def _keep_programs(trace_dir: Path) -> None:
    out = trace_dir / "hlo"
    out.mkdir(exist_ok=True)
    for name, (text, _) in PROGRAMS.items():
        (out / f"{name}.txt").write_text(text)


def start(trace_dir: Path) -> Callable[[], Path]:
    import jax

    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    jax.profiler.start_trace(str(trace_dir), create_perfetto_trace=True, profiler_options=options)

    def stop() -> Path:
        jax.profiler.stop_trace()
        found = sorted(trace_dir.rglob("perfetto_trace.json.gz"))
        if not found:
            raise RuntimeError(f"jax.profiler wrote no perfetto_trace.json.gz under {trace_dir}")
        _keep_programs(trace_dir)
        return found[-1]

    return stop
