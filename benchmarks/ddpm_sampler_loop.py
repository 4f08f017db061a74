"""How torch should run ddpm's DDIM loop in compiled mode: three loops around the same eval-mode
U-Net, timed interleaved in one process (issue 18; numbers in docs/benchmarks.md).

- host: the runner's NumPy loop around the compiled denoiser (runner/scenarios/sample.py: host_sampler;
  each step's input goes to torch and its output back to NumPy);
- tensor: the same loop in torch tensors around the compiled denoiser (no NumPy per step);
- whole: torch.compile of the whole S-step loop (dynamo unrolls it: one graph of S U-Nets).

Prints each loop's cold compile seconds (first call minus a steady one, fresh Inductor cache)
and, over interleaved rounds (order rotated), the median wall and process-CPU milliseconds per
denoising step, and each loop's sample against the host loop's (normwise).

    PYTHONPATH=src python benchmarks/ddpm_sampler_loop.py [--preset cpu] [--rounds 5] [--loops host,tensor,whole]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--loops", default="host,tensor,whole")
    args = ap.parse_args()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="ddpm-loop-inductor-")  # cold compiles
    import torch

    from dlbench.backends.torch import INFER_COMPILE_OPTIONS
    from dlbench.backends.torch import ddpm as tddpm
    from dlbench.runner.plan import workload_spec
    from dlbench.runner.scenarios.sample import host_sampler
    from dlbench.spec import Policy, TrialSpec
    from dlbench.workloads import ddpm

    spec = workload_spec("ddpm", args.preset)
    trial = TrialSpec(workload=spec, framework="torch", policy=Policy(mode="compiled"))
    program = tddpm.build(trial)
    state = program.init(ddpm.init_params(spec))
    noise = ddpm.initial_noise(spec, spec.batch_size)
    steps = len(ddpm.ddim_timesteps(spec))
    samplers: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
    names = args.loops.split(",")
    if "host" in names:
        samplers["host"] = host_sampler(trial, ddpm, program, program.infer_fn(state))
    model = state.model.eval()
    coef = [tuple(float(v) for v in row[:3]) for row in ddpm.ddim_coefficients(spec)]

    def loop(x: torch.Tensor) -> torch.Tensor:
        """x NCHW; the model takes NCHW with the timestep channel and returns HWC-flat noise."""
        n, c, h, w = x.shape
        for t, a, b in coef:
            eps = model(torch.cat([x, torch.full((n, 1, h, w), t)], dim=1))
            x = a * x + b * eps.reshape(n, h, w, c).permute(0, 3, 1, 2)
        return x

    def tensor_loop(forward: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[np.ndarray], np.ndarray]:
        def sample(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                z = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
                n, c, h, w = z.shape
                for t, a, b in coef:
                    eps = forward(torch.cat([z, torch.full((n, 1, h, w), t)], dim=1))
                    z = a * z + b * eps.reshape(n, h, w, c).permute(0, 3, 1, 2)
                return z.permute(0, 2, 3, 1).numpy()
        return sample

    if "tensor" in names:
        denoiser = torch.compile(model, **INFER_COMPILE_OPTIONS)
        samplers["tensor"] = tensor_loop(denoiser)
    if "whole" in names:
        whole = torch.compile(loop, **INFER_COMPILE_OPTIONS)

        def sample_whole(x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return whole(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))).permute(0, 2, 3, 1).numpy()
        samplers["whole"] = sample_whole

    print(f"ddpm {args.preset}: batch {spec.batch_size}, S = {steps}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.1f}", flush=True)
    outs = {}
    for name, f in samplers.items():
        t0 = time.perf_counter()
        outs[name] = f(noise)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        f(noise)
        steady = time.perf_counter() - t0
        print(f"{name:7s} first call {first:7.2f} s, steady {steady:6.3f} s: compile ~{first - steady:6.2f} s", flush=True)
    wall: dict[str, list[float]] = {n: [] for n in samplers}
    cpu: dict[str, list[float]] = {n: [] for n in samplers}
    order = list(samplers)
    for r in range(args.rounds):
        for name in order[r % len(order):] + order[: r % len(order)]:
            c0, t0 = time.process_time(), time.perf_counter()
            samplers[name](noise)
            wall[name].append((time.perf_counter() - t0) / steps)
            cpu[name].append((time.process_time() - c0) / steps)
    ref = outs.get("host", next(iter(outs.values())))
    for name in samplers:
        err = float(np.linalg.norm(outs[name] - ref) / np.linalg.norm(ref))
        print(f"{name:7s} median {statistics.median(wall[name]) * 1e3:7.2f} ms/step wall, "
              f"{statistics.median(cpu[name]) * 1e3:7.2f} ms/step CPU (min wall {min(wall[name]) * 1e3:.2f});"
              f" sample vs host {err:.1e}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
