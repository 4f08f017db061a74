"""The margin of ddpm's sample-quality scores (docs/workloads.md#ddpm): per preset and seed, the
Fréchet distance to the held-out clean images of `batch_size` real images (stream 9: the floor)
and of `batch_size` N(0, 1) images (stream 10: noise), in the feature network's space and in
the old 4x4-block-mean space. NumPy only, exact (no timing):

    PYTHONPATH=src python benchmarks/ddpm_feature_margin.py [SEEDS]
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from dlbench.runner.plan import workload_spec
from dlbench.workloads import ddpm


def margins(preset: str, seed: int) -> dict[str, float]:
    spec = dataclasses.replace(workload_spec("ddpm", preset), seed=seed)
    size = ddpm.MODEL_SIZES[spec.model_size].image
    held = ddpm.held_out_images(spec)
    real = ddpm.clean_images(np.random.default_rng((seed, ddpm.STREAM_QUALITY)), spec.batch_size, size)
    noise = np.random.default_rng((seed, ddpm.STREAM_QUALITY_NOISE)).standard_normal(real.shape)
    out = {}
    for space, features in (("feature", ddpm.sample_features), ("blockmean", ddpm.image_features)):
        for name, x in (("floor", real), ("noise", noise)):
            out[f"{space}_{name}"] = ddpm.frechet_distance(features(x), features(held))
        out[f"{space}_ratio"] = out[f"{space}_noise"] / out[f"{space}_floor"]
    return out


def main(seeds: int) -> None:
    for preset in ("tiny", "cpu"):
        for seed in range(seeds):
            m = margins(preset, seed)
            print(preset, seed, "  ".join(f"{k} {v:.3f}" for k, v in m.items()))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
