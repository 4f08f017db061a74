"""What every gap reproducer in this folder shares: the command line, one fresh process per
configuration (only that framework imported, pinned to its cores before the import), rounds in
alternating order, and the one JSON line a reproducer prints. Imports no framework and nothing
of dlbench, so that a reproducer and this file are all an upstream maintainer needs.

A reproducer declares its configurations (`Config`: a label, the framework, the environment it
sets before the import, e.g. XLA_FLAGS, and options its runner reads) and one runner per
framework; `main` runs every configuration `--rounds` times in fresh processes, interleaved
(round r runs them in reverse order when r is odd), and hands the medians to the reproducer's
`summarise`, which names the `ratio` it reproduces.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Result = dict[str, Any]
Runner = Callable[[argparse.Namespace, Mapping[str, str]], Result]
# The variables a framework's threads follow; set before its import.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
# The distributions whose versions a result names (those installed).
PACKAGES = {"jax": ("jax", "jaxlib"), "torch": ("torch",), "tensorflow": ("tensorflow", "tensorflow-cpu"),
            "keras": ("keras", "keras-hub", "torch"), "numpy": ("numpy",)}
# Where time_jax_training writes its trace (set by the child from --jax-trace).
JAX_TRACE = "GAPS_JAX_TRACE"
# Variables that change speed, recorded with every result as the environment had them.
RECORDED_VARIABLES = ("XLA_FLAGS", "OMP_WAIT_POLICY", "TF_ENABLE_ONEDNN_OPTS", "KERAS_BACKEND")


@dataclass(frozen=True)
class Config:
    """One configuration a reproducer measures: `framework` picks the runner, `env` is set in
    the child before the framework's import (XLA_FLAGS, TF_ENABLE_ONEDNN_OPTS), `options` reach
    the runner as strings."""

    label: str
    framework: str
    env: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, str] = field(default_factory=dict)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small shapes and few steps: checks that it runs")
    p.add_argument("--only", default="", help="comma list of configuration labels to run (default: all)")
    p.add_argument("--rounds", type=int, default=1, help="fresh processes per configuration, interleaved")
    p.add_argument("--threads", type=int, default=0, help="pin each process to N cores (default: all)")
    p.add_argument("--steps", type=int, default=0, help="timed repetitions per process (default: the script's)")
    p.add_argument("--list", action="store_true", help="print the configurations and exit")
    p.add_argument("--jax-trace", default="", metavar="DIR",
                   help="JAX configurations: write a jax.profiler trace of the timed steps and the compiled"
                        " program's HLO under DIR/<label> (benchmarks/gaps/xla_trace.py summarises it)")
    p.add_argument("--child", default="", help=argparse.SUPPRESS)
    return p


def pin(threads: int) -> int:
    """Pin this process to its first `threads` cores (all when 0) and set the thread variables;
    before any framework is imported. Returns the thread count."""
    cores = sorted(os.sched_getaffinity(0))
    if threads:
        if threads > len(cores):
            raise SystemExit(f"--threads {threads}: only {len(cores)} cores are available to this process")
        cores = cores[:threads]
        os.sched_setaffinity(0, cores)
    for var in THREAD_VARIABLES:
        os.environ[var] = str(len(cores))
    return len(cores)


def sized(args: argparse.Namespace, full: dict[str, int], quick: dict[str, int]) -> dict[str, int]:
    """A script's shapes: `quick` under --quick, else `full`."""
    return quick if args.quick else full


def step_count(args: argparse.Namespace, full: int, quick: int) -> int:
    """Timed steps: --steps where given, else `quick` under --quick, else `full`."""
    return args.steps or (quick if args.quick else full)


def timed(call: Callable[[], Any], sync: Callable[[Any], Any], steps: int, warmup: int = 1) -> Result:
    """Median wall and CPU seconds of `steps` calls, each synced (`sync` of its result), after
    `warmup` untimed ones. CPU seconds are the process's (every thread's, spin-waits included):
    on a loaded machine they move less than wall seconds."""
    for _ in range(warmup):
        sync(call())
    wall, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        sync(call())
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"median_s": statistics.median(wall), "min_s": min(wall), "cpu_s": statistics.median(cpu),
            "steps": steps}


def import_torch() -> Any:
    """torch with one intra-op thread per core of this process (its default counts the
    machine's cores, not the affinity mask)."""
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    return torch


def import_tensorflow() -> Any:
    """TensorFlow with one intra-op thread per core of this process; before any op runs (it
    refuses the setting later)."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(len(os.sched_getaffinity(0)))
    except RuntimeError:  # already initialised by an earlier call in this process
        pass
    return tf


# --- the training step each framework's users write: Adam (torch's and optax's formula), the loss,
# its gradients and the update in one compiled call. `loss(params, x, y)` is the framework's own.


def time_jax_training(loss: Callable[..., Any], params: Mapping[str, Any], x: Any, y: Any, steps: int) -> Result:
    """jax.jit of the whole step (value_and_grad, optax.adam), the state donated."""
    import jax
    import jax.numpy as jnp
    import optax

    tx = optax.adam(1e-3)

    def step(state: Any, x: Any, y: Any) -> Any:
        p, opt = state
        value, grads = jax.value_and_grad(loss)(p, x, y)
        updates, opt = tx.update(grads, opt, p)
        return (optax.apply_updates(p, updates), opt), value

    p = {k: jnp.asarray(v) for k, v in params.items()}
    state = [(p, tx.init(p))]
    t0 = time.perf_counter()
    compiled = jax.jit(step, donate_argnums=0).lower(state[0], x, y).compile()
    compile_s = time.perf_counter() - t0

    def call() -> Any:
        state[0], value = compiled(state[0], x, y)
        return value

    trace = os.environ.get(JAX_TRACE)
    if not trace:
        return {**timed(call, lambda v: v.block_until_ready(), steps), "compile_s": compile_s}
    os.makedirs(trace, exist_ok=True)
    with open(os.path.join(trace, "step.hlo.txt"), "w") as f:
        f.write(compiled.as_text())
    call().block_until_ready()  # the first call outside the trace
    with jax.profiler.trace(trace):
        result = timed(call, lambda v: v.block_until_ready(), steps, warmup=0)
    return {**result, "compile_s": compile_s, "trace": trace}


def time_torch_training(loss: Callable[..., Any], params: Mapping[str, Any], x: Any, y: Any, steps: int,
                        compiled: bool) -> Result:
    """The step eager, or torch.compile of the whole step (loss, backward, fused Adam)."""
    torch = import_torch()
    p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.Adam(p.values(), lr=1e-3, fused=True)

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        value = loss(p, x, y)
        value.backward()
        opt.step()
        return value.detach()

    if compiled:
        step = torch.compile(step)
    t0 = time.perf_counter()
    step(x, y)  # the compile, where compiled
    return {**timed(lambda: step(x, y), lambda v: v, steps), "compile_s": time.perf_counter() - t0}


def time_tensorflow_training(loss: Callable[..., Any], params: Mapping[str, Any], x: Any, y: Any,
                             steps: int) -> Result:
    """tf.function(jit_compile=True) of the step: GradientTape, Adam written out (Keras's Adam
    places eps elsewhere), variables updated in place."""
    tf = import_tensorflow()
    p = {k: tf.Variable(v) for k, v in params.items()}
    m = {k: tf.Variable(tf.zeros_like(v)) for k, v in p.items()}
    v2 = {k: tf.Variable(tf.zeros_like(v)) for k, v in p.items()}
    t_var = tf.Variable(0.0)

    @tf.function(jit_compile=True)
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            value = loss(p, x, y)
        grads = tape.gradient(value, list(p.values()))
        t = t_var.assign_add(1.0)
        for (k, var), g in zip(p.items(), grads):
            g = tf.convert_to_tensor(g)  # an embedding's gradient comes as IndexedSlices
            m[k].assign(0.9 * m[k] + 0.1 * g)
            v2[k].assign(0.999 * v2[k] + 0.001 * g * g)
            var.assign_sub(1e-3 / (1 - 0.9**t) * m[k] / (tf.sqrt(v2[k]) / tf.sqrt(1 - 0.999**t) + 1e-8))
        return value

    x, y = tf.constant(x), tf.constant(y)
    t0 = time.perf_counter()
    step(x, y).numpy()  # the trace and XLA compile
    return {**timed(lambda: step(x, y), lambda v: v.numpy(), steps), "compile_s": time.perf_counter() - t0}


def versions(framework: str) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in PACKAGES.get(framework, (framework,)):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": len(os.sched_getaffinity(0)), "load_1m": round(os.getloadavg()[0], 2),
            "env": {v: os.environ[v] for v in RECORDED_VARIABLES if v in os.environ}}


def _child(args: argparse.Namespace, configs: Sequence[Config], runners: Mapping[str, Runner]) -> int:
    config = next(c for c in configs if c.label == args.child)
    threads = pin(args.threads)
    if args.jax_trace:
        os.environ[JAX_TRACE] = os.path.join(args.jax_trace, config.label)
    result = runners[config.framework](args, config.options)
    result.update(threads=threads, versions=versions(config.framework), env=dict(config.env),
                  load_1m=round(os.getloadavg()[0], 2))
    print(json.dumps(result))
    return 0


def _run_child(script: str, argv: Sequence[str], config: Config) -> Result:
    env = {**os.environ, **config.env}
    cmd = [sys.executable, script, *argv, "--child", config.label]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit {done.returncode}: {tail[-300:]}"}
    result: Result = json.loads(lines[-1])
    return result


def _median_results(runs: Sequence[Result]) -> Result:
    """The rounds of one configuration: numbers as their median (in nested dicts too), the rest
    from the first run."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[0]
    out = _median_of(ok)
    out["rounds"] = len(ok)
    return out


def _median_of(runs: Sequence[Result]) -> Result:
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in runs)
        elif isinstance(value, dict) and all(isinstance(r.get(key), dict) for r in runs):
            out[key] = _median_of([r[key] for r in runs])
    return out


def main(
    script: str,
    description: str,
    configs: Callable[[argparse.Namespace], Sequence[Config]],
    runners: Mapping[str, Runner],
    summarise: Callable[[argparse.Namespace, Mapping[str, Result]], Result],
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
) -> int:
    p = parser(description)
    if add_arguments:
        add_arguments(p)
    args = p.parse_args()
    all_configs = list(configs(args))
    if args.child:
        return _child(args, all_configs, runners)
    wanted = [x for x in args.only.split(",") if x]
    unknown = [x for x in wanted if x not in {c.label for c in all_configs}]
    if unknown:
        p.error(f"--only {','.join(unknown)}: not a configuration; one of {', '.join(c.label for c in all_configs)}")
    chosen = [c for c in all_configs if not wanted or c.label in wanted]
    if args.list:
        for c in chosen:
            print(c.label, c.framework, dict(c.env), dict(c.options))
        return 0
    argv = _drop_values(sys.argv[1:], ("--only", "--rounds"))
    start_load = machine()["load_1m"]
    runs: dict[str, list[Result]] = {c.label: [] for c in chosen}
    for r in range(max(1, args.rounds)):
        for c in (chosen if r % 2 == 0 else chosen[::-1]):
            runs[c.label].append(_run_child(script, argv, c))
            print(f"# round {r + 1} {c.label}: {json.dumps(runs[c.label][-1])[:200]}", file=sys.stderr, flush=True)
    results = {label: _median_results(rs) for label, rs in runs.items()}
    record = summarise(args, results)
    record.update(machine=machine(), load_1m_start=start_load, quick=args.quick, rounds=args.rounds,
                  threads=args.threads or machine()["cores"], python=platform.python_version(),
                  results=results)
    print(json.dumps(record))
    return 0


def _drop_values(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """argv without the parent-only options, as `--opt VALUE` or `--opt=VALUE`."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a.split("=", 1)[0] in options and "=" in a:
            continue
        if a in options:
            skip = True
            continue
        out.append(a)
    return out


def ratio(results: Mapping[str, Result], numerator: str, denominator: str, key: str = "median_s") -> float | None:
    """time(denominator) / time(numerator): the speed of `numerator` relative to `denominator`
    (below 1: slower), from the seconds under `key`; None where either failed."""
    a, b = results.get(numerator, {}), results.get(denominator, {})
    if key not in a or key not in b or not a[key]:
        return None
    return float(b[key]) / float(a[key])
