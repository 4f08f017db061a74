"""Trains, once, the fixed feature network of ddpm's sample-quality score and writes its canonical
weights to src/dlbench/workloads/ddpm_features.npz (workloads/ddpm.py: sample_features reads them
in NumPy, so every framework's samples are scored by the same arithmetic in the trial's process
with no framework involved). Re-running it changes the score's feature space: commit the new
file only with a note in docs/workloads.md#ddpm and the margins re-measured.

    PYTHONPATH=src python benchmarks/train_ddpm_features.py [OUT.npz]

For each ddpm image size (8 and 16 pixels): an MLP autoencoder on the workload's own clean
images (ddpm.clean_images from a stream no spec draws from, default_rng((0, 100))), the image
flattened in HWC order -> HIDDEN tanh -> CODE (encoder) -> HIDDEN tanh -> image (decoder), Adam
on the mean squared reconstruction error. The feature of an image is its CODE values plus the
log of its mean squared reconstruction error, whitened with the mean and covariance of those
features over WHITEN_IMAGES training images (computed here with the NumPy feature code itself).
The reconstruction error is what separates noise from data (an autoencoder of smooth blobs
cannot reproduce white noise); the code keeps the score sensitive to what the images hold.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from dlbench.workloads import ddpm

HIDDEN, CODE = 64, 4
TRAIN_IMAGES, WHITEN_IMAGES = 20000, 5000
STEPS, BATCH, LR = 4000, 256, 1e-3
STREAM = (0, 100)
SIZES = (8, 16)


def train(size: int) -> dict[str, np.ndarray]:
    """One autoencoder's weights in dlbench's layout (dense kernels (in, out))."""
    torch.manual_seed(0)
    x = ddpm.clean_images(np.random.default_rng(STREAM), TRAIN_IMAGES, size).reshape(TRAIN_IMAGES, -1)
    d = x.shape[1]
    layers = {"enc1": torch.nn.Linear(d, HIDDEN), "enc2": torch.nn.Linear(HIDDEN, CODE),
              "dec1": torch.nn.Linear(CODE, HIDDEN), "dec2": torch.nn.Linear(HIDDEN, d)}
    opt = torch.optim.Adam([p for layer in layers.values() for p in layer.parameters()], LR)
    xt = torch.tensor(x, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    for step in range(STEPS):
        batch = xt[torch.randint(0, TRAIN_IMAGES, (BATCH,), generator=g)]
        code = layers["enc2"](torch.tanh(layers["enc1"](batch)))
        loss = ((layers["dec2"](torch.tanh(layers["dec1"](code))) - batch) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 1000 == 0 or step == STEPS - 1:
            print(f"{size}px step {step}: reconstruction mse {loss.item():.4f}", flush=True)
    out = {}
    for name, layer in layers.items():
        out[f"{name}.kernel"] = layer.weight.detach().numpy().T.astype(np.float32)
        out[f"{name}.bias"] = layer.bias.detach().numpy().astype(np.float32)
    return out


def main(path: Path) -> None:
    arrays: dict[str, np.ndarray] = {}
    for size in SIZES:
        t = time.monotonic()
        net = train(size)
        images = ddpm.clean_images(np.random.default_rng(STREAM), WHITEN_IMAGES, size)
        raw = ddpm.autoencoder_features(net, images)
        mean = raw.mean(axis=0)
        # whiten: (f - mean) @ L with L L^T = inverse covariance, so the features have identity covariance
        whiten = np.linalg.cholesky(np.linalg.inv(np.cov(raw, rowvar=False)))
        arrays.update({f"{size}/{k}": v for k, v in net.items()})
        arrays[f"{size}/mean"], arrays[f"{size}/whiten"] = mean, whiten
        print(f"{size}px: trained in {time.monotonic() - t:.0f} s", flush=True)
    np.savez_compressed(path, **arrays)
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(ddpm.__file__).with_name("ddpm_features.npz"))
