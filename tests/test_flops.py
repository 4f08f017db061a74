"""The analytic FLOP counts (`workloads.<w>.flops_per_sample`, DESIGN §4) equal
torch.utils.flop_counter's count of the torch backend's own model, exactly, for every workload
at its tiny size and at the tiny sizes of the published architectures: forward, and forward +
backward with the data input needing no gradient. At the published shapes (ResNet-50 v1.5,
BERT-base, ViT-B/16) the same holds on meta tensors (slow: the model builds take a while)."""

from __future__ import annotations

import pytest

from dlbench import workloads
from dlbench.runner.plan import workload_spec
from dlbench.spec import Policy, TrialSpec
from dlbench.workloads.data import batch_indices, epoch_order

torch = pytest.importorskip("torch")

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from dlbench.backends import get_backend  # noqa: E402


# The classifiers, whose torch Program holds an nn.Module (ppo's counts: tests/test_ppo.py),
# at their tiny preset and, where they have one, the published architectures' tiny preset.
CASES = [(n, p) for n, m in workloads.WORKLOADS.items() if m.QUALITY == "accuracy"
         for p in ("tiny", "published-tiny")
         if p == "tiny" or (p in m.PRESETS and m.PRESETS[p].model_size != m.PRESETS["tiny"].model_size)]
# The published shapes: (workload, preset).
PUBLISHED = [("resnet", "published"), ("transformer", "published"), ("transformer", "published-512"),
             ("vit", "published")]


@pytest.mark.parametrize(("name", "preset"), CASES)
def test_flops_per_sample_equal_torch_flop_counter(name, preset):
    spec = workload_spec(name, preset)
    wl = workloads.get(name)
    program = get_backend("torch").build(TrialSpec(workload=spec, framework="torch", policy=Policy(mode="eager")))
    model = program.init(wl.init_params(spec)).model
    program.load(wl.make_dataset(spec))
    rows = batch_indices(epoch_order(spec.seed, 0, spec.dataset_size), spec.batch_size)
    x, y = next(iter(program.batches(rows[:1])))
    assert not x.requires_grad
    # torch 2.13's counter has no formula for the fused CPU attention kernel
    # (aten._scaled_dot_product_flash_attention_for_cpu) and counts it as 0; the math backend
    # runs the same two matmuls as bmm, which it counts. Nothing else here uses attention.
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as forward:
            model(x)
        with FlopCounterMode(display=False) as train:
            # The losses' elementwise ops count no FLOPs: any scalar of the output will do
            # (detect's targets are not class labels).
            model(x).sum().backward()
    batch = spec.batch_size
    assert forward.get_total_flops() == batch * wl.flops_per_sample(spec, train=False)
    assert train.get_total_flops() == batch * wl.flops_per_sample(spec, train=True)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "preset"), PUBLISHED)
def test_published_shapes_flops_equal_torch_flop_counter(name, preset):
    """The torch backend's own nn.Module at the published shapes, on the meta device: shapes
    only, so ResNet-50 at 224 and BERT-base at 512 cost no arithmetic. Batch 2."""
    from dlbench.backends.torch import resnet, transformer, vit

    spec = workload_spec(name, preset, batch_size=2)
    wl = workloads.get(name)
    models = {"resnet": lambda: resnet.ResnetModel(spec), "vit": lambda: vit.VitModel(spec),
              "transformer": lambda: transformer.TransformerModel(
                  wl.MODEL_SIZES[spec.model_size], spec.num_classes, spec.numerics)}
    with torch.device("meta"):
        model = models[name]().module()
    shape, dtype = wl.input_spec(spec)
    if dtype == "int32":
        x = torch.zeros((2, *shape), dtype=torch.int64, device="meta")
    else:  # NHWC images, fed as NCHW
        x = torch.zeros((2, shape[2], shape[0], shape[1]), device="meta")
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as forward:
            model(x)
        with FlopCounterMode(display=False) as train:
            model(x).sum().backward()
    assert forward.get_total_flops() == 2 * wl.flops_per_sample(spec, train=False)
    assert train.get_total_flops() == 2 * wl.flops_per_sample(spec, train=True)
