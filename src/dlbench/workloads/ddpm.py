"""ddpm: a tiny diffusion U-Net (two resolutions, residual blocks with GroupNorm and SiLU, a
sinusoidal time embedding through an MLP added in every block, skip concatenation) trained to
predict the noise (epsilon-prediction MSE), and deterministic DDIM sampling.
Definition: docs/workloads.md#ddpm.

One input, one output, as every other workload: a sample is the noised image x_t (NHWC) with one
more channel holding its timestep t (the same value at every pixel; the model reads pixel (0, 0)
of it), and the target is the noise that made x_t, flattened in HWC order, as is the model's
output. Clean images, timesteps and noise are all drawn by the spec, so every framework trains
on bit-identical inputs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import final

import numpy as np

import dlbench.workloads.reference_ops as ops
from dlbench.spec import Numerics, WorkloadSpec
from dlbench.workloads.base import COMMON_NUMERICS_FIELDS, Preset
from dlbench.workloads.data import STREAM_DATA, STREAM_EVAL, Dataset, dataset_makers
from dlbench.workloads.params import ONES, ZEROS, Init, draw_params, fan_in_uniform

NAME = "ddpm"
# train: the denoiser's training step; infer: DDIM sampling (runner/scenarios/sample.py), not single
# denoiser requests.
SCENARIOS = {"train": "train", "infer": "sample"}
# Held-out denoising loss (mean squared error of the predicted noise): lower is better.
QUALITY = "denoising_mse"
CHANNELS = 3  # image channels; the input has one more, the timestep
# workloads.validate refuses --augment on ddpm with this reason.
NO_AUGMENT = "a crop or flip would move x_t but not its target, the noise"

# Diffusion schedule (pinned in the numerics block): linear betas from BETA_START to BETA_END
# over T steps.
T = 1000
BETA_START = 1e-4
BETA_END = 0.02


@final
@dataclass(frozen=True)
class Size:
    image: int  # H = W
    ch1: int  # channels at full resolution
    ch2: int  # channels at half resolution
    embed: int  # sinusoidal embedding width E (even)
    sample_steps: int  # DDIM steps S

    @property
    def time_dim(self) -> int:
        """Width of the time MLP's output, added (projected) in every block."""
        return 4 * self.ch1


MODEL_SIZES = {
    "tiny": Size(image=8, ch1=8, ch2=16, embed=16, sample_steps=10),
    "default": Size(image=16, ch1=16, ch2=32, embed=32, sample_steps=50),
}

PRESETS = {
    "tiny": Preset(model_size="tiny", dataset_size=64, batch_size=16, epochs=1, warmup_epochs=1,
                   eval_size=32),
    "cpu": Preset(model_size="default", dataset_size=4096, batch_size=64, epochs=2,
                  warmup_epochs=1, eval_size=512),
    "gpu": Preset(model_size="default", dataset_size=65536, batch_size=256, epochs=3,
                  warmup_epochs=1, eval_size=4096),
}

# The workload's own numerics (Numerics.extra): GroupNorm groups and eps (torch 1e-5, Flax 1e-6
# and Keras 1e-3 differ by default), the sinusoidal embedding's period, nearest-neighbour x2
# upsampling, SiLU, the beta schedule.
EXTRA = {
    "group_norm_groups": 4,
    "group_norm_eps": 1e-5,
    "time_embedding": "sin_cos_period_10000",
    "upsample": "nearest_x2",
    "activation": "silu",
    "beta_schedule": "linear",
    "beta_start": BETA_START,
    "beta_end": BETA_END,
    "diffusion_steps": T,
}
NUMERICS = Numerics(padding="SYMMETRIC", loss="mean_squared_error", extra=dict(EXTRA))
NUMERICS_FIELDS = (*COMMON_NUMERICS_FIELDS, "padding", "group_norm_groups", "group_norm_eps",
                   "time_embedding", "upsample", "activation")
MAX_PERIOD = 10000.0


def _size(spec: WorkloadSpec) -> Size:
    size: Size = MODEL_SIZES[spec.model_size]
    return size


def input_spec(spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
    s = _size(spec).image
    return (s, s, CHANNELS + 1), "float32"


def output_size(spec: WorkloadSpec) -> int:
    """The predicted noise per sample, flattened HWC."""
    s = _size(spec).image
    return s * s * CHANNELS


@final
@dataclass(frozen=True)
class Block:
    """A residual block: gn1 -> SiLU -> conv1 (+ time projection) -> gn2 -> SiLU -> conv2, plus
    the input (through a 1x1 `skip` convolution where the channels change)."""

    name: str
    in_ch: int
    out_ch: int
    hw: int


def blocks(spec: WorkloadSpec) -> list[Block]:
    s = _size(spec)
    return [Block("down.block", s.ch1, s.ch1, s.image), Block("mid.block", s.ch1, s.ch2, s.image // 2),
            Block("up.block", s.ch2 + s.ch1, s.ch1, s.image)]


def _conv(shapes: dict[str, tuple[int, ...]], name: str, k: int, cin: int, cout: int) -> None:
    shapes[f"{name}.kernel"] = (k, k, cin, cout)
    shapes[f"{name}.bias"] = (cout,)


def param_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    s = _size(spec)
    shapes: dict[str, tuple[int, ...]] = {
        "time.dense1.kernel": (s.embed, s.time_dim), "time.dense1.bias": (s.time_dim,),
        "time.dense2.kernel": (s.time_dim, s.time_dim), "time.dense2.bias": (s.time_dim,),
    }
    _conv(shapes, "stem", 3, CHANNELS, s.ch1)
    for b in blocks(spec):
        if b.name == "mid.block":
            _conv(shapes, "down.conv", 3, s.ch1, s.ch1)
        if b.name == "up.block":
            _conv(shapes, "up.conv", 3, s.ch2, s.ch2)
        shapes.update({f"{b.name}.gn1.scale": (b.in_ch,), f"{b.name}.gn1.bias": (b.in_ch,)})
        _conv(shapes, f"{b.name}.conv1", 3, b.in_ch, b.out_ch)
        shapes.update({f"{b.name}.time.kernel": (s.time_dim, b.out_ch), f"{b.name}.time.bias": (b.out_ch,)})
        shapes.update({f"{b.name}.gn2.scale": (b.out_ch,), f"{b.name}.gn2.bias": (b.out_ch,)})
        _conv(shapes, f"{b.name}.conv2", 3, b.out_ch, b.out_ch)
        if b.in_ch != b.out_ch:
            _conv(shapes, f"{b.name}.skip", 1, b.in_ch, b.out_ch)
    shapes.update({"out.gn.scale": (s.ch1,), "out.gn.bias": (s.ch1,)})
    _conv(shapes, "out.conv", 3, s.ch1, CHANNELS)
    return shapes


def buffer_shapes(spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
    return {}


def init_params(spec: WorkloadSpec) -> dict[str, np.ndarray]:
    shapes = param_shapes(spec)
    inits: dict[str, Init] = {}
    for name, shape in shapes.items():
        layer, leaf = name.rsplit(".", 1)
        if layer.split(".")[-1].startswith("gn"):
            inits[name] = ONES if leaf == "scale" else ZEROS
        else:  # kernels and biases of convolutions and dense layers: the kernel's fan-in
            inits[name] = fan_in_uniform(math.prod(shapes[f"{layer}.kernel"][:-1]))
    return draw_params(spec.seed, shapes, inits)


# --- the diffusion schedule and the data --------------------------------------------------------


def alpha_bars(numerics: Numerics) -> np.ndarray:
    """Cumulative products of 1 - beta_t over the linear schedule, float64, t = 0..T-1."""
    n = int(numerics.value("diffusion_steps"))
    betas = np.linspace(float(numerics.value("beta_start")), float(numerics.value("beta_end")), n, dtype=np.float64)
    out: np.ndarray = np.cumprod(1.0 - betas)
    return out


def clean_images(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """Two soft blobs per image: a random colour in [-1, 1]³ each, centre uniform over the image,
    width uniform in [size/8, size/4]; summed and squashed into [-1, 1] by tanh(2 v). float64."""
    centres = rng.uniform(0.0, size, size=(n, 2, 2))
    widths = rng.uniform(size / 8, size / 4, size=(n, 2))
    colours = rng.uniform(-1.0, 1.0, size=(n, 2, CHANNELS))
    grid = np.arange(size) + 0.5
    dy = grid[None, None, :, None] - centres[:, :, None, None, 0]
    dx = grid[None, None, None, :] - centres[:, :, None, None, 1]
    weight = np.exp(-(dy**2 + dx**2) / (2 * widths[:, :, None, None] ** 2))  # (n, 2, H, W)
    out: np.ndarray = np.tanh(2.0 * np.einsum("nkhw,nkc->nhwc", weight, colours))
    return out


def noised(numerics: Numerics, x0: np.ndarray, t: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """x_t = sqrt(abar_t) x0 + sqrt(1 - abar_t) eps (float64)."""
    ab = alpha_bars(numerics)[t][:, None, None, None]
    out: np.ndarray = np.sqrt(ab) * x0 + np.sqrt(1.0 - ab) * eps
    return out


def with_timestep(x: np.ndarray, t: np.ndarray, dtype: type = np.float32) -> np.ndarray:
    """The model input: x (N, H, W, C) with one more channel holding t (float32 by default)."""
    tt = np.broadcast_to(np.asarray(t, np.float64)[:, None, None, None], (*x.shape[:3], 1))
    return np.concatenate([x, tt], axis=-1).astype(dtype)


def _noised_samples(spec: WorkloadSpec, x0: np.ndarray, rng: np.random.Generator) -> Dataset:
    """One timestep per clean image (uniform in [0, T)), then the noise, both from `rng`: the
    model inputs (x_t with its timestep) and the targets (the noise, HWC-flattened), float32.
    `labels` has no meaning here (the target is the noise)."""
    n = len(x0)
    t = rng.integers(0, int(spec.numerics.value("diffusion_steps")), size=n)
    eps = rng.standard_normal(x0.shape)
    x = with_timestep(noised(spec.numerics, x0, t, eps), t)
    return Dataset(x=x, y=eps.reshape(n, -1).astype(np.float32))


def _samples(spec: WorkloadSpec, n: int, stream: int) -> Dataset:
    """The held-out split and the fixed batch: clean images, then their timesteps and noise,
    all from the split's stream (one draw: these are judged, not trained on)."""
    rng = np.random.default_rng((spec.seed, stream))
    return _noised_samples(spec, clean_images(rng, n, _size(spec).image), rng)


_, make_eval_dataset, fixed_batch = dataset_makers(_samples)

# Timesteps and noise are redrawn every epoch: the training split holds NOISE_EPOCHS noised
# copies of the same clean images, row e * N + i = sample i as epoch e sees it, the copy of
# epoch e drawn from default_rng((seed, e, STREAM_NOISE)); epoch e reads copy e mod NOISE_EPOCHS
# (workloads.epoch_steps offsets the spec's order into it), so past NOISE_EPOCHS epochs the draws
# repeat in that cycle while the order stays fresh. 4 covers a train trial at every preset
# (warm-up + timed epochs: tiny 2, cpu 3, gpu 4). Streams 1-6 are workloads/data.py's.
NOISE_EPOCHS = 4
STREAM_NOISE = 8


def epoch_copies(spec: WorkloadSpec) -> int:
    """How many per-epoch copies of the training split make_dataset holds (the optional member
    of the workload interface; workloads.epoch_steps)."""
    return NOISE_EPOCHS


def make_dataset(spec: WorkloadSpec) -> Dataset:
    """The training split: `spec.dataset_size` clean images from the data stream, noised once
    per epoch of the cycle (NOISE_EPOCHS copies, epoch-major), float32."""
    x0 = clean_images(np.random.default_rng((spec.seed, STREAM_DATA)), spec.dataset_size, _size(spec).image)
    n, copies = len(x0), epoch_copies(spec)
    s = _size(spec).image
    x = np.empty((copies * n, s, s, CHANNELS + 1), np.float32)
    y = np.empty((copies * n, s * s * CHANNELS), np.float32)
    for e in range(copies):  # one copy's float64 temporaries at a time
        part = _noised_samples(spec, x0, np.random.default_rng((spec.seed, e, STREAM_NOISE)))
        x[e * n : (e + 1) * n], y[e * n : (e + 1) * n] = part.x, part.y
    return Dataset(x=x, y=y)


def score(spec: WorkloadSpec, outputs: np.ndarray, data: Dataset) -> float:
    """The held-out denoising loss: mean squared error of the predicted noise."""
    y = data.y[: len(outputs)].astype(np.float64)
    return float(np.mean((np.asarray(outputs, np.float64).reshape(y.shape) - y) ** 2))


# --- sample quality: Fréchet distances in two fixed feature spaces (neither is FID) ---------------

# The feature network's canonical weights (benchmarks/train_ddpm_features.py trained them once):
# per image size, an MLP autoencoder of the workload's clean images and the whitening of its
# features. Read in NumPy, so every framework's samples are scored identically, in the trial's
# process, with no framework.
FEATURE_WEIGHTS = Path(__file__).with_name("ddpm_features.npz")

# The old, weak feature space: the means of non-overlapping FEATURE_POOL x FEATURE_POOL blocks
# of each channel (48 values per 16x16 image, 12 per 8x8). Kept as `sample_blockmean_fd`: it
# catches gross failures (a sampler that diverges) but barely tells white noise from data.
FEATURE_POOL = 4


def held_out_images(spec: WorkloadSpec) -> np.ndarray:
    """The clean images of the held-out split (the first draw of its stream), float64."""
    rng = np.random.default_rng((spec.seed, STREAM_EVAL))
    return clean_images(rng, spec.eval_size, _size(spec).image)


def image_features(x: np.ndarray) -> np.ndarray:
    """(n, H, W, C) -> (n, H/4 * W/4 * C): FEATURE_POOL-block means, float64."""
    pooled = ops.avg_pool(np.asarray(x, np.float64), FEATURE_POOL)
    return pooled.reshape(len(x), -1)


@functools.cache
def _feature_network(image: int) -> dict[str, np.ndarray]:
    with np.load(FEATURE_WEIGHTS) as f:
        return {k.split("/", 1)[1]: f[k].astype(np.float64) for k in f.files if k.startswith(f"{image}/")}


def autoencoder_features(net: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """(n, H, W, C) images -> (n, code + 1), float64: the autoencoder's code (HWC-flattened
    image -> tanh(enc1) -> enc2) and the log of its mean squared reconstruction error (code ->
    tanh(dec1) -> dec2), not yet whitened."""
    flat = np.asarray(x, np.float64).reshape(len(x), -1)

    def dense(name: str, h: np.ndarray) -> np.ndarray:
        out: np.ndarray = h @ net[f"{name}.kernel"].astype(np.float64) + net[f"{name}.bias"].astype(np.float64)
        return out

    code = dense("enc2", np.tanh(dense("enc1", flat)))
    recon = dense("dec2", np.tanh(dense("dec1", code)))
    err = np.mean((recon - flat) ** 2, axis=1, keepdims=True)
    return np.concatenate([code, np.log(err)], axis=1)


def sample_features(x: np.ndarray) -> np.ndarray:
    """(n, H, W, C) images -> (n, 5) float64: autoencoder_features with the canonical network of
    the images' size, whitened (identity covariance over the network's training images)."""
    net = _feature_network(int(x.shape[1]))
    if not net:
        raise ValueError(f"no feature network for {x.shape[1]}-pixel images in {FEATURE_WEIGHTS.name}")
    out: np.ndarray = (autoencoder_features(net, x) - net["mean"]) @ net["whiten"]
    return out


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """|mu_a - mu_b|² + tr(S_a + S_b - 2 (S_a S_b)^(1/2)) between Gaussians fitted to the
    feature rows of `a` and `b` (covariances with n - 1); tr (S_a S_b)^(1/2) is the sum of the
    square roots of the eigenvalues of S_a S_b, real and >= 0 for covariance matrices (rounding
    below 0 is clipped)."""
    mu_a, mu_b = a.mean(axis=0), b.mean(axis=0)
    s_a, s_b = np.atleast_2d(np.cov(a, rowvar=False)), np.atleast_2d(np.cov(b, rowvar=False))
    eig = np.linalg.eigvals(s_a @ s_b).real
    cross = float(np.sum(np.sqrt(np.clip(eig, 0.0, None))))
    return float(np.sum((mu_a - mu_b) ** 2) + np.trace(s_a) + np.trace(s_b) - 2.0 * cross)


# --- FLOPs --------------------------------------------------------------------------------------


def _layers(spec: WorkloadSpec) -> list[tuple[int, bool]]:
    """(forward FLOPs per sample, needs an input gradient) of every convolution and dense layer.
    The stem is fed by the data and time.dense1 by the embedding of the data's timestep: no
    input gradient for either."""
    s = _size(spec)
    shapes = param_shapes(spec)
    out = [(2 * s.embed * s.time_dim, False), (2 * s.time_dim * s.time_dim, True)]
    hw_of = {"stem": s.image, "down.conv": s.image // 2, "up.conv": s.image, "out.conv": s.image}
    for b in blocks(spec):
        hw_of.update({f"{b.name}.conv1": b.hw, f"{b.name}.conv2": b.hw, f"{b.name}.skip": b.hw})
        out.append((2 * s.time_dim * b.out_ch, True))
    for name, hw in hw_of.items():
        key = f"{name}.kernel"
        if key in shapes:
            kh, kw, cin, cout = shapes[key]
            out.append((2 * hw * hw * kh * kw * cin * cout, name != "stem"))
    return out


def flops_per_sample(spec: WorkloadSpec, train: bool = True) -> int:
    """Convolutions and dense layers, 2 per multiply-add; GroupNorm, SiLU, the embedding,
    upsampling and concatenation count 0. Training adds weight gradients (as the forward) and
    input gradients for all but the stem and time.dense1."""
    layers = _layers(spec)
    if not train:
        return sum(f for f, _ in layers)
    return sum(2 * f + (f if needs else 0) for f, needs in layers)


# --- the float64 reference ----------------------------------------------------------------------


def silu(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = x / (1.0 + np.exp(-x))
    return out


def group_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, groups: int, eps: float) -> np.ndarray:
    """NHWC: mean and biased variance over H, W and the channels of each of `groups` contiguous
    channel groups, eps inside the square root, then the per-channel affine."""
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + eps)).reshape(n, h, w, c) * scale + bias


def time_embedding(t: np.ndarray, dim: int) -> np.ndarray:
    """[sin(t f_i), cos(t f_i)], f_i = MAX_PERIOD^(-i / (dim/2)), i = 0..dim/2-1."""
    half = dim // 2
    freqs = np.exp(-math.log(MAX_PERIOD) * np.arange(half, dtype=np.float64) / half)
    args = np.asarray(t, np.float64)[:, None] * freqs[None, :]
    return np.concatenate([np.sin(args), np.cos(args)], axis=1)


def upsample_nearest2(x: np.ndarray) -> np.ndarray:
    return np.repeat(np.repeat(x, 2, axis=1), 2, axis=2)


def reference_forward(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The predicted noise (N, H*W*C), float64, straight from the definition."""
    s, p, n = _size(spec), ops.as_float64(params), spec.numerics
    groups, eps = int(n.value("group_norm_groups")), float(n.value("group_norm_eps"))
    x = np.asarray(x, np.float64)
    img, t = x[..., :CHANNELS], x[:, 0, 0, CHANNELS]

    def conv(name: str, h: np.ndarray, stride: int = 1) -> np.ndarray:
        k = p[f"{name}.kernel"]
        return ops.conv2d(h, k, stride, pad=k.shape[0] // 2) + p[f"{name}.bias"]

    def gn(name: str, h: np.ndarray) -> np.ndarray:
        return group_norm(h, p[f"{name}.scale"], p[f"{name}.bias"], groups, eps)

    temb = silu(time_embedding(t, s.embed) @ p["time.dense1.kernel"] + p["time.dense1.bias"])
    temb = temb @ p["time.dense2.kernel"] + p["time.dense2.bias"]

    def block(name: str, h: np.ndarray) -> np.ndarray:
        z = conv(f"{name}.conv1", silu(gn(f"{name}.gn1", h)))
        z = z + (silu(temb) @ p[f"{name}.time.kernel"] + p[f"{name}.time.bias"])[:, None, None, :]
        z = conv(f"{name}.conv2", silu(gn(f"{name}.gn2", z)))
        return z + (conv(f"{name}.skip", h) if f"{name}.skip.kernel" in p else h)

    h0 = conv("stem", img)
    skip = block("down.block", h0)
    h = block("mid.block", conv("down.conv", skip, stride=2))
    h = conv("up.conv", upsample_nearest2(h))
    h = block("up.block", np.concatenate([h, skip], axis=-1))
    out = conv("out.conv", silu(gn("out.gn", h)))
    return out.reshape(len(x), -1)


def reference_loss(spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray,
                   y: np.ndarray) -> float:
    """Mean squared error of the predicted noise over every element."""
    return float(np.mean((reference_forward(spec, params, x) - np.asarray(y, np.float64)) ** 2))


# --- DDIM sampling ------------------------------------------------------------------------------


def ddim_timesteps(spec: WorkloadSpec, steps: int | None = None) -> np.ndarray:
    """The S timesteps visited, descending: i * (T // S) for i = S-1 .. 0."""
    n = int(spec.numerics.value("diffusion_steps"))
    s = _size(spec).sample_steps if steps is None else steps
    return np.arange(s)[::-1] * (n // s)


def ddim_coefficients(spec: WorkloadSpec, steps: int | None = None) -> np.ndarray:
    """Per step (S, 4), float64: t, then (a, b, c) of the deterministic (eta = 0) DDIM update
    x <- a x + b eps(x, t), with x0 = (x - sqrt(1 - abar_t) eps) / sqrt(abar_t) and
    x' = sqrt(abar_prev) x0 + sqrt(1 - abar_prev) eps: a = sqrt(abar_prev / abar_t),
    b = sqrt(1 - abar_prev) - a sqrt(1 - abar_t); abar_prev = 1 after the last step. c is
    unused (0): kept so every backend reads one table."""
    ab = alpha_bars(spec.numerics)
    ts = ddim_timesteps(spec, steps)
    rows = []
    for i, t in enumerate(ts):
        prev = ab[ts[i + 1]] if i + 1 < len(ts) else 1.0
        a = math.sqrt(prev / ab[t])
        rows.append((float(t), a, math.sqrt(1.0 - prev) - a * math.sqrt(1.0 - ab[t]), 0.0))
    return np.asarray(rows, np.float64)


# The sampler's initial noise: default_rng((seed, STREAM_SAMPLE)).
STREAM_SAMPLE = 7
# The real images that give generated_quality's floor, and the noise images of its noise level.
STREAM_QUALITY = 9
STREAM_QUALITY_NOISE = 10


def initial_noise(spec: WorkloadSpec, n: int) -> np.ndarray:
    """x_T of the sampler: N(0, 1), (n, H, W, C) float32, from the spec's seed (stream 7)."""
    s = _size(spec).image
    rng = np.random.default_rng((spec.seed, STREAM_SAMPLE))
    return rng.standard_normal((n, s, s, CHANNELS)).astype(np.float32)


def generated_quality(spec: WorkloadSpec, denoise: Callable[[np.ndarray], np.ndarray]) -> dict[str, float]:
    """The quality of generated images after training (the train scenario calls it after the
    timed window, with the trained parameters' predict; workloads.generated_quality): one batch
    of `batch_size` DDIM samples (S steps, the sampler's initial noise) and their Fréchet
    distance to the held-out clean images in the feature network's space (sample_features):
    `sample_feature_fd`. Beside it, at the same sample size, `sample_feature_fd_floor` (fresh
    real images: a perfect sampler's value) and `sample_feature_fd_noise` (N(0, 1) images: a
    sampler that learnt nothing), so a value reads on that scale. And the old block-mean space's
    `sample_blockmean_fd` with its `sample_blockmean_fd_floor`. Not FID."""
    held_out = held_out_images(spec)
    images = ddim_sample(spec, denoise, initial_noise(spec, spec.batch_size))
    real = clean_images(np.random.default_rng((spec.seed, STREAM_QUALITY)), spec.batch_size, _size(spec).image)
    noise = np.random.default_rng((spec.seed, STREAM_QUALITY_NOISE)).standard_normal(images.shape)
    fd = {name: frechet_distance(sample_features(x), sample_features(held_out))
          for name, x in (("", images), ("_floor", real), ("_noise", noise))}
    return {"sample_feature_fd": fd[""], "sample_feature_fd_floor": fd["_floor"],
            "sample_feature_fd_noise": fd["_noise"],
            "sample_blockmean_fd": frechet_distance(image_features(images), image_features(held_out)),
            "sample_blockmean_fd_floor": frechet_distance(image_features(real), image_features(held_out))}


def ddim_sample(spec: WorkloadSpec, denoise: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
                steps: int | None = None, dtype: type = np.float32) -> np.ndarray:
    """The deterministic DDIM loop in NumPy around `denoise(model_input) -> eps (N, HWC)`
    (the float64 reference forward with dtype float64, or ONNX Runtime's session); the state is
    kept in `dtype`."""
    out: np.ndarray = np.asarray(x, dtype)
    for t, a, b, _ in ddim_coefficients(spec, steps):
        eps: np.ndarray = np.asarray(denoise(with_timestep(out, np.full(len(out), t), dtype)), dtype)
        out = (a * out + b * eps.reshape(out.shape)).astype(dtype)
    return out
