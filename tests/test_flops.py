"""The analytic FLOP counts (`workloads.<w>.flops_per_sample`, DESIGN §4) equal
torch.utils.flop_counter's count of the torch backend's own model, exactly, for every workload
at its tiny size: forward, and forward + backward with the data input needing no gradient."""

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


# The classifiers, whose torch Program holds an nn.Module (ppo's counts: tests/test_ppo.py).
@pytest.mark.parametrize("name", [n for n, m in workloads.WORKLOADS.items() if m.QUALITY == "accuracy"])
def test_flops_per_sample_equal_torch_flop_counter(name):
    spec = workload_spec(name, "tiny")
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
