"""What every workload module provides (NumPy only, no framework).

A workload is a module under workloads/ registered in workloads/__init__.py. The module-level
names below are its whole interface; backends/<framework>/<workload>.py implement the model, and
the parity reference is the float64 run of one of those implementations (runner/reference.py),
cross-checked in the tests against the module's own NumPy `reference_loss`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dlbench.spec import Numerics, WorkloadSpec
from dlbench.workloads.data import Dataset

# A supervised workload's scenarios: user-facing name (`--scenario`) -> the runner's scenario that
# runs it (dlbench/scenarios.py: SCENARIOS). A workload with a loop of its own (reinforcement learning,
# diffusion sampling) maps a name to a runner scenario written for it.
SUPERVISED_SCENARIOS: dict[str, str] = {"train": "train", "infer": "infer", "converge": "converge"}

# The numerics every workload uses (optimizer, loss, dtype, no dropout): the start of each
# module's NUMERICS_FIELDS.
COMMON_NUMERICS_FIELDS = ("optimizer", "learning_rate", "beta1", "beta2", "eps", "eps_placement",
                          "bias_correction", "weight_decay", "dropout", "loss", "dtype")


@dataclass(frozen=True)
class Preset:
    """Sizes per device class (`tiny` for tests, `cpu`, `gpu`): `-w all` on a CPU ends in
    minutes."""

    model_size: str
    dataset_size: int
    batch_size: int
    epochs: int
    warmup_epochs: int
    eval_size: int
    # The class count of the preset's spec; None: WorkloadSpec's default (10). The published
    # shapes (resnet, vit) classify 1000 ImageNet classes, so the head's FLOPs are theirs.
    num_classes: int | None = None


@dataclass(frozen=True)
class Target:
    """The stop rule of a time-to-target (converge) trial: the held-out `metric` at `value` or
    better. `metric` is the workload's QUALITY (higher is better) or one of its extra_scores
    (lm's `eval_perplexity`, lower is better: `lower`); `rule` says where a default value comes
    from ("" for a value the user gave)."""

    metric: str
    value: float
    lower: bool = False
    rule: str = ""

    def reached(self, score: float) -> bool:
        """Whether a held-out score meets the target (a NaN score never does)."""
        return score <= self.value if self.lower else score >= self.value

    @property
    def relation(self) -> str:
        return "<=" if self.lower else ">="

    def describe(self) -> str:
        """`eval_perplexity <= 2.716`: the metric, the direction and the value."""
        return f"{self.metric} {self.relation} {self.value:.4g}"


class Workload(Protocol):
    """The module interface, written as a Protocol for the type checker and the reader.
    Optional, outside the Protocol: `postprocess(spec, outputs)`, the step from Program outputs
    to results that the infer scenario times apart (detect: decoding and NMS;
    workloads.postprocess finds it); `NUM_CLASSES`, a class count the workload fixes (detect's
    three object classes): its specs carry it and workloads.validate refuses another;
    `epoch_copies(spec) -> int`, how many per-epoch copies of its samples `make_dataset` holds
    (ddpm: timesteps and noise redrawn per epoch; epoch e reads copy e mod that,
    workloads.epoch_steps), 1 without it; `extra_scores(spec, outputs, data) -> {metric: value}`,
    further held-out scores of the outputs `score` judged, recorded beside it by the train
    scenario (detect: `map_voc`, the VOC devkit's matching; workloads.extra_scores);
    `generated_quality(spec, denoise) -> {metric: value}` (ddpm's sample quality);
    `TARGET_METRICS: {metric: lower is better}`, the extra scores a time-to-target trial may stop
    on besides QUALITY (lm: `eval_perplexity`, lower), and `default_target(spec) -> Target`, the
    target of such a trial when the user gives none (lm's: perplexity within 10 % of the best
    possible); workloads.target reads both; `PUBLISHED: {model size: description}`, the published
    architectures among its sizes (resnet's `resnet50`: ResNet-50 v1.5, with the figure model
    tables quote), which the report names (workloads.published)."""

    NAME: str
    # --scenario name -> runner scenario (SUPERVISED_SCENARIOS for a classifier)
    SCENARIOS: dict[str, str]
    # The name of the held-out quality metric `score` returns ("accuracy"); time to accuracy trains
    # until it reaches the target.
    QUALITY: str
    # model size name -> the workload's own frozen dataclass of dimensions
    MODEL_SIZES: dict[str, Any]
    PRESETS: dict[str, Preset]
    # This workload's numerics block (e.g. padding SYMMETRIC for resnet) ...
    NUMERICS: Numerics
    # ... and the fields of it that the model actually uses: each backend's Program.numerics()
    # reads these back from the framework objects and a test compares them with the spec.
    NUMERICS_FIELDS: tuple[str, ...]

    def input_spec(self, spec: WorkloadSpec) -> tuple[tuple[int, ...], str]:
        """(shape of one sample, NumPy dtype name): e.g. ((32, 32, 3), "float32") for NHWC
        images, ((64,), "int32") for token ids."""
        ...

    def param_shapes(self, spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
        """Canonical parameter names -> shapes (conv kernels HWIO, dense kernels (in, out))."""
        ...

    def buffer_shapes(self, spec: WorkloadSpec) -> dict[str, tuple[int, ...]]:
        """Non-trained state (BatchNorm running statistics): names -> shapes; empty for most."""
        ...

    def init_params(self, spec: WorkloadSpec) -> dict[str, np.ndarray]:
        """Canonical float32 parameters drawn from the spec's seed."""
        ...

    def make_dataset(self, spec: WorkloadSpec) -> Dataset:
        """The training split (`spec.dataset_size` samples, labels per `spec.labels`; times
        `epoch_copies(spec)` where the workload has per-epoch copies)."""
        ...

    def make_eval_dataset(self, spec: WorkloadSpec) -> Dataset:
        """The held-out split (`spec.eval_size` samples), same distribution and labelling."""
        ...

    def fixed_batch(self, spec: WorkloadSpec, size: int = 8) -> Dataset:
        """The canonical fixed batch of the parity check."""
        ...

    def flops_per_sample(self, spec: WorkloadSpec, train: bool = True) -> int:
        """Analytic FLOPs (DESIGN §4): matmuls and convolutions, 2 per multiply-add; training
        adds weight gradients always and input gradients where the input needs one."""
        ...

    def reference_loss(self, spec: WorkloadSpec, params: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
        """The training-mode loss in float64 NumPy, straight from the definition."""
        ...

    def score(self, spec: WorkloadSpec, outputs: np.ndarray, data: Dataset) -> float:
        """The quality metric QUALITY of Program.predict's outputs on the held-out split `data`
        (all of it, in order): accuracy for a classifier."""
        ...


def numerics_readback(numerics: Numerics, fields: tuple[str, ...]) -> dict[str, Any]:
    """The spec's values of `fields`: what a backend's Program.numerics() must read back."""
    return {f: numerics.value(f) for f in fields}


def accuracy(spec: WorkloadSpec, outputs: np.ndarray, data: Dataset) -> float:
    """A classifier's `score`: the share of samples whose largest logit is the label's."""
    return float(np.mean(np.argmax(outputs, axis=1) == data.y[: len(outputs)]))


def layer_flops(layers: Iterable[tuple[str, int, bool]], train: bool) -> int:
    """A layer stack's FLOPs per sample from (name, forward FLOPs, needs an input gradient):
    the forward, plus for training the backward: weight gradients always (the forward's count),
    input gradients only where the layer's input needs one (not the first layer's)."""
    total = 0
    for _, fwd, needs_input_grad in layers:
        total += fwd
        if train:
            total += fwd + (fwd if needs_input_grad else 0)
    return total
