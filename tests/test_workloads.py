"""Every registered workload module against its interface (workloads/base.py) and the
definitions of docs/workloads.md: canonical parameters, data, labels, presets, FLOPs and the
float64 reference loss. Tiny sizes only; the whole file runs in seconds."""

from __future__ import annotations

import dataclasses
import math
from types import ModuleType

import numpy as np
import pytest

from dlbench.runner.plan import workload_spec
from dlbench.spec import Numerics, WorkloadSpec
from dlbench.workloads import WORKLOADS, cnn, node, resnet, transformer
from dlbench.workloads.data import STREAM_TEACHER, teacher_labels

NAMES = list(WORKLOADS)
# The classifiers: labels, chance-level loss and the shared numerics hold for them (ppo and
# ddpm have their own tests: tests/test_ppo.py, tests/test_workload_ddpm.py).
SUPERVISED = [n for n in NAMES if WORKLOADS[n].QUALITY == "accuracy"]
COMMON_FIELDS = {"optimizer", "learning_rate", "beta1", "beta2", "eps", "eps_placement",
                 "bias_correction", "weight_decay", "dropout", "loss", "dtype"}


def small_spec(name: str, **kw: object) -> WorkloadSpec:
    """The smallest model size of the workload, with its numerics block."""
    module = WORKLOADS[name]
    size = "tiny" if "tiny" in module.MODEL_SIZES else "default"
    args: dict[str, object] = dict(name=name, model_size=size, numerics=module.NUMERICS,
                                   batch_size=32, dataset_size=256, eval_size=64)
    args.update(kw)
    return WorkloadSpec(**args)  # type: ignore[arg-type]


def test_registry_order():
    assert NAMES == ["mlp", "cnn", "resnet", "transformer", "node", "detect", "ppo", "ddpm", "lm", "vit"]
    assert all(WORKLOADS[n].NAME == n for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_params_are_canonical_and_seeded(name: str):
    module, spec = WORKLOADS[name], small_spec(name)
    a, b = module.init_params(spec), module.init_params(spec)
    # Same names in the same order (the order the values are drawn in) and shapes.
    assert list(a) == list(module.param_shapes(spec))
    assert {k: v.shape for k, v in a.items()} == module.param_shapes(spec)
    assert all(v.dtype == np.float32 and np.array_equal(v, b[k]) for k, v in a.items())
    other = module.init_params(dataclasses.replace(spec, seed=1))
    # Drawn tensors change with the seed; constant ones (norm scales, detect's zero biases and
    # focal-prior class bias) do not.
    random = [k for k in a if not _is_norm(k) and np.ptp(a[k]) > 0]
    assert random and all(not np.array_equal(a[k], other[k]) for k in random)


def _is_norm(name: str) -> bool:
    layer = name.split(".")[-2]
    return layer.startswith(("bn", "ln", "gn")) or layer in ("final_ln", "final_norm") or layer.endswith("_norm")


@pytest.mark.parametrize("name", NAMES)
def test_initial_values_follow_the_rule(name: str):
    """Kernels U(+-1/sqrt(fan_in)) with fan_in all axes but the last; norm scales 1 and biases
    0; embeddings N(0, 0.02²); lm's kernels GPT-2's N(0, 0.02²), the residual projections
    N(0, (0.02 / sqrt(2 depth))²)."""
    params = WORKLOADS[name].init_params(small_spec(name))
    for k, v in params.items():
        if _is_norm(k):
            assert np.all(v == (1.0 if k.endswith(".scale") else 0.0)), k
        elif k.startswith("embed.") and not k.endswith((".kernel", ".bias")):
            assert abs(float(v.std()) - 0.02) < 0.002, k
        elif name == "lm":
            depth = WORKLOADS[name].MODEL_SIZES["tiny"].depth
            std = 0.02 / math.sqrt(2 * depth) if k.endswith(("attn.out.kernel", "mlp.down.kernel")) else 0.02
            assert abs(float(v.std()) - std) < 0.1 * std, k
        elif k.endswith(".kernel"):
            bound = 1 / math.sqrt(math.prod(v.shape[:-1]))
            assert np.abs(v).max() <= bound and np.abs(v).max() > 0.9 * bound, k


@pytest.mark.parametrize("name", SUPERVISED)
def test_numerics_block(name: str):
    module = WORKLOADS[name]
    fields = set(module.NUMERICS_FIELDS)
    assert COMMON_FIELDS <= fields <= {f.name for f in dataclasses.fields(Numerics)} | set(module.NUMERICS.extra)
    assert len(fields) == len(module.NUMERICS_FIELDS)
    expected = {"mlp": set(), "cnn": {"padding", "flatten_order"},
                "resnet": {"padding", "bn_momentum", "bn_eps", "bn_running_var"},
                "transformer": {"ln_eps", "gelu", "attention_scale"}, "node": {"ode_solver"},
                "vit": {"ln_eps", "gelu", "attention_scale"},
                "ddpm": {"padding", "group_norm_groups", "group_norm_eps", "time_embedding", "upsample",
                         "activation"}}
    assert fields - COMMON_FIELDS == expected[name]
    padding = {"resnet": "SYMMETRIC", "cnn": "VALID", "ddpm": "SYMMETRIC"}.get(name, Numerics().padding)
    if name == "ddpm":
        assert module.NUMERICS == Numerics(padding=padding, loss="mean_squared_error", extra=module.EXTRA)
    else:
        assert module.NUMERICS == Numerics(padding=padding)


@pytest.mark.parametrize("name", SUPERVISED)
def test_datasets_match_the_input_spec_and_are_seeded(name: str):
    module, spec = WORKLOADS[name], small_spec(name)
    shape, dtype = module.input_spec(spec)
    train, again = module.make_dataset(spec), module.make_dataset(spec)
    for data, n in ((train, spec.dataset_size), (module.make_eval_dataset(spec), spec.eval_size),
                    (module.fixed_batch(spec, 8), 8)):
        assert data.x.shape == (n, *shape) and data.x.dtype == np.dtype(dtype)
        assert data.y.shape == (n,) and data.y.dtype == np.int32
        assert data.y.min() >= 0 and data.y.max() < spec.num_classes
    assert np.array_equal(train.x, again.x) and np.array_equal(train.y, again.y)
    other = module.make_dataset(dataclasses.replace(spec, seed=1))
    assert not np.array_equal(train.x, other.x)
    if dtype == "int32":
        assert train.x.min() >= 0 and train.x.max() < module.MODEL_SIZES[spec.model_size].vocab


@pytest.mark.parametrize("name", NAMES)
def test_fixed_batch_and_eval_split_are_not_training_samples(name: str):
    module, spec = WORKLOADS[name], small_spec(name)
    rows = {r.tobytes() for r in module.make_dataset(spec).x}
    assert not rows & {r.tobytes() for r in module.fixed_batch(spec, 8).x}
    assert not rows & {r.tobytes() for r in module.make_eval_dataset(spec).x}


@pytest.mark.parametrize("name", SUPERVISED)
def test_learnable_labels_are_balanced(name: str):
    spec = small_spec(name, dataset_size=1024)
    counts = np.bincount(WORKLOADS[name].make_dataset(spec).y, minlength=spec.num_classes)
    share = spec.dataset_size / spec.num_classes
    assert counts.max() <= 3 * share and counts.min() > 0, counts


@pytest.mark.parametrize("name", [n for n in SUPERVISED if n != "node"])
def test_teacher_labels_hold_with_the_margin(name: str):
    """The labels are the teacher's on the module's teacher features, every sample beyond the
    margin (a hair less: the features are recomputed from float32 inputs)."""
    module, spec = WORKLOADS[name], small_spec(name)
    data = module.make_dataset(spec)
    teacher = np.random.default_rng((spec.seed, STREAM_TEACHER))
    y, kept = teacher_labels(module.teacher_features(spec, data.x), spec.num_classes, teacher,
                             module.MARGIN - 1e-4)
    assert np.array_equal(y, data.y) and kept.all()


def test_teacher_labels_reject_samples_near_a_boundary():
    f = np.random.default_rng(0).standard_normal((1000, 16))
    y0, kept0 = teacher_labels(f, 10, np.random.default_rng(1), 0.0)
    y1, kept1 = teacher_labels(f, 10, np.random.default_rng(1), 0.4)
    assert np.array_equal(y0, y1) and kept0.all() and 0.1 < kept1.mean() < 0.9


def test_node_labels_are_the_nearest_spiral_arm():
    spec = small_spec("node", dataset_size=512)
    data = node.make_dataset(spec)
    t = np.linspace(0.0, 1.0, 401)
    arms = np.arange(spec.num_classes)[:, None]
    angle = 2 * np.pi * (arms / spec.num_classes + node.TURNS * t)
    radius = node.INNER + (1 - node.INNER) * t
    curve = np.stack([radius * np.cos(angle), radius * np.sin(angle)], axis=-1)
    dist = np.linalg.norm(data.x[:, None, None, :] - curve[None], axis=-1).min(axis=2)
    assert np.mean(dist.argmin(axis=1) == data.y) > 0.99


@pytest.mark.parametrize("name", SUPERVISED)
def test_random_labels_are_uniform_and_unrelated(name: str):
    module = WORKLOADS[name]
    learnable = module.make_dataset(small_spec(name, dataset_size=1024))
    rand = module.make_dataset(small_spec(name, dataset_size=1024, labels="random"))
    counts = np.bincount(rand.y, minlength=10)
    assert counts.min() > 0.6 * 102.4 and counts.max() < 1.4 * 102.4
    assert np.mean(rand.y == learnable.y) < 0.2


@pytest.mark.parametrize("name", SUPERVISED)
def test_reference_loss_at_init_is_near_chance(name: str):
    module, spec = WORKLOADS[name], small_spec(name)
    batch = module.fixed_batch(spec, 32)
    loss = module.reference_loss(spec, module.init_params(spec), batch.x, batch.y)
    assert math.isfinite(loss) and abs(loss - math.log(spec.num_classes)) < 0.6


def test_resnet18_has_the_published_parameter_count():
    full = WorkloadSpec(name="resnet", model_size="full", numerics=resnet.NUMERICS)
    tiny = dataclasses.replace(full, model_size="tiny")
    count = {s.model_size: sum(math.prod(v) for v in resnet.param_shapes(s).values())
             for s in (full, tiny)}
    assert count["full"] == 11_173_962 and count["tiny"] < count["full"]
    buffers = resnet.buffer_shapes(full)
    bns = {k.rsplit(".", 1)[0] for k in resnet.param_shapes(full) if k.endswith(".scale")}
    assert set(buffers) == {f"{bn}.{s}" for bn in bns for s in ("mean", "var")}
    assert len(bns) == 20  # stem + 16 in blocks + 3 shortcuts


@pytest.mark.parametrize("name", NAMES)
def test_buffers_only_where_batchnorm(name: str):
    module = WORKLOADS[name]
    for size in module.MODEL_SIZES:
        spec = WorkloadSpec(name=name, model_size=size)
        assert bool(module.buffer_shapes(spec)) == (name == "resnet")


@pytest.mark.parametrize("name", NAMES)
def test_flops_positive_and_training_costs_more(name: str):
    module = WORKLOADS[name]
    for size in module.MODEL_SIZES:
        spec = WorkloadSpec(name=name, model_size=size)
        fwd, train = module.flops_per_sample(spec, train=False), module.flops_per_sample(spec)
        assert 0 < fwd < train <= 3 * fwd


def test_flop_formulas():
    """Spot checks against the definitions (2 per multiply-add; the first layer fed by the
    data gets no input gradient; attention q k^T and p v count 2 L² D each)."""
    mlp = WorkloadSpec(name="mlp", model_size="tiny")
    fwd = 2 * (32 * 64 + 64 * 64 + 64 * 10)
    assert WORKLOADS["mlp"].flops_per_sample(mlp, train=False) == fwd
    assert WORKLOADS["mlp"].flops_per_sample(mlp) == 3 * fwd - 2 * 32 * 64
    t = WorkloadSpec(name="transformer", model_size="tiny")
    block = 2 * 16 * (4 * 32 * 32 + 2 * 32 * 128) + 2 * 2 * 16 * 16 * 32
    assert WORKLOADS["transformer"].flops_per_sample(t) == 3 * (2 * block + 2 * 32 * 10)
    n = WorkloadSpec(name="node", model_size="tiny")
    inp, rest = 2 * 2 * 16, 4 * 4 * 2 * (2 * 16 * 32) + 2 * 16 * 10
    assert node.flops_per_sample(n) == 2 * inp + 3 * rest
    r = WorkloadSpec(name="resnet", model_size="full")
    assert resnet.flops_per_sample(r, train=False) == pytest.approx(1.11e9, rel=0.01)
    stem = 2 * 32 * 32 * 64 * 27
    assert resnet.flops_per_sample(r) == 3 * resnet.flops_per_sample(r, train=False) - stem


@pytest.mark.parametrize("name", NAMES)
def test_presets_validate_as_workload_specs(name: str):
    module: ModuleType = WORKLOADS[name]
    # The device classes everywhere; the published architectures where a workload has them.
    published = {"published", "published-tiny"} | ({"published-512"} if name == "transformer" else set())
    assert {"tiny", "cpu", "gpu"} <= set(module.PRESETS)
    # lm's own: the tiny model on enough tokens to reach its perplexity target on a CPU in minutes
    own = {"resnet": published, "transformer": published, "vit": published, "lm": {"cpu-target"}}
    assert set(module.PRESETS) - {"tiny", "cpu", "gpu"} == own.get(name, set())
    for preset in module.PRESETS:
        spec = workload_spec(name, preset)
        spec.validate()
        assert spec.numerics == module.NUMERICS
    tiny = module.PRESETS["tiny"]
    assert tiny.batch_size <= 32 and tiny.dataset_size <= 256 and tiny.epochs == 1
    assert tiny.model_size == ("tiny" if "tiny" in module.MODEL_SIZES else "default")


def test_preset_model_sizes():
    sizes = {n: {p: WORKLOADS[n].PRESETS[p].model_size for p in ("tiny", "cpu", "gpu")}
             for n in ("resnet", "transformer")}
    assert sizes == {"resnet": {"tiny": "tiny", "cpu": "full", "gpu": "full"},
                     "transformer": {"tiny": "tiny", "cpu": "small", "gpu": "large"}}


def test_cnn_keeps_the_constants_its_backends_use():
    assert (cnn.INPUT_SHAPE, cnn.CONV1_CH, cnn.CONV2_CH, cnn.HIDDEN, cnn.FLAT) == (
        (32, 32, 3), 32, 64, 128, 2304)


# Published forward figures per sample, as FLOPs (2 per multiply-add), and where they come from
# (docs/workloads.md#published-shapes): torchvision's ResNet50_Weights (4.089 "GFLOPS", which
# torchvision counts as multiply-adds); TinyBERT (Jiao et al. 2020, Table 1: BERT-base 22.5 B
# FLOPs at sequence 128); DeiT (Touvron et al. 2021, Table 1: ViT-B/16 17.6 B "FLOPs", counted
# as multiply-adds by fvcore; timm's card: 17.6 GMACs).
PUBLISHED_FWD_FLOPS = {("resnet", "published"): 2 * 4.089e9, ("transformer", "published"): 22.5e9,
                       ("vit", "published"): 2 * 17.6e9}


@pytest.mark.parametrize(("name", "preset"), sorted(PUBLISHED_FWD_FLOPS))
def test_published_shapes_match_published_flops(name: str, preset: str):
    spec = workload_spec(name, preset)
    assert WORKLOADS[name].flops_per_sample(spec, train=False) == pytest.approx(
        PUBLISHED_FWD_FLOPS[name, preset], rel=0.02)


def test_bert_base_at_512_is_the_closed_form():
    """No paper table gives BERT-base at 512: the closed form, 2 x 85M non-embedding multiply-adds
    per token plus attention's 4 L² D per layer (and the head)."""
    spec = workload_spec("transformer", "published-512")
    per_token = 12 * (4 * 768**2 + 2 * 768 * 3072)
    expected = 2 * per_token * 512 + 12 * 4 * 512**2 * 768 + 2 * 768 * spec.num_classes
    assert transformer.flops_per_sample(spec, train=False) == expected


def test_published_shapes_have_the_published_parameter_counts():
    """ResNet-50 (torchvision: 25,557,032) and ViT-B/16 (timm: 86,567,656) exactly at 1000
    classes; BERT-base's encoder as Devlin et al. (85.0M in the blocks)."""
    def count(name: str, preset: str, prefix: str = "") -> int:
        spec = workload_spec(name, preset)
        return sum(math.prod(v) for k, v in WORKLOADS[name].param_shapes(spec).items() if k.startswith(prefix))

    assert count("resnet", "published") == 25_557_032
    assert count("vit", "published") == 86_567_656
    assert count("transformer", "published", "block") == 12 * (4 * (768 * 768 + 768) + 2 * 2 * 768
                                                                + 768 * 3072 + 3072 + 3072 * 768 + 768)
    r50 = workload_spec("resnet", "published")
    assert resnet.input_spec(r50) == ((224, 224, 3), "float32") and r50.num_classes == 1000
    assert [len([b for b in resnet.blocks(r50) if b.name.startswith(f"layer{i}.")]) for i in (1, 2, 3, 4)] == [3, 4, 6, 3]
    # v1.5: a stage's stride sits on the 3x3 convolution.
    assert all(c.stride == (2 if c.size == 3 and b.name.endswith("block0") and not b.name.startswith("layer1") else 1)
               for b in resnet.blocks(r50) for c in b.convs)
