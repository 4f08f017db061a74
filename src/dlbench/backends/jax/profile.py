"""jax.profiler for profiled trials (backends/profiling.py): the Perfetto trace (a Chrome trace
JSON, gzipped) beside TensorBoard's xplane; XLA's HLO names (profiling.XLA_RULES) and the host
side of a step mapped to the shared categories. Python frames are not traced
(python_tracer_level 0: tracing every frame slowed steps several-fold); the time the host spends
outside traced XLA work shows as host overhead and idle gaps. The optimizer update fuses into the
same program as the backward pass and shows as elementwise fusions (no category of its own)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dlbench.backends.profiling import XLA_RULES

RULES = (
    *XLA_RULES,
    (r"PjitFunction|PjRt|Execute|Handle inputs|AllocateOutput|TaskDispatcher|TfrtCpu|Compile|Thunk",
     "host overhead and idle"),
)
# What this mapping cannot tell apart, said under the profile table (runner/profiled.py).
CAVEAT = ("XLA:CPU hands dots and convolutions to YNNPACK as ynn_fusion, counted as matmul (a convolution may be"
          " inside); max-pool's backward is expanded into iota, compare-select and scatter fusions (copies and"
          " elementwise here); the optimizer update fuses into elementwise fusions")
# Waits for other threads, the executor's wrapper around the thunks it runs, Python frames.
CONTAINERS = r"wait for completion|^ThunkExecutor::Execute$|BlockUntilReady|^\$"


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
        return found[-1]

    return stop
