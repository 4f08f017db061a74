"""The cnn workload: canonical parameters, data and order, and FLOPs equal to torch's counter."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.spec import WorkloadSpec
from dlbench.workloads import cnn
from dlbench.workloads.data import batch_indices, epoch_order

SPEC = WorkloadSpec(dataset_size=256, eval_size=32)


def test_params_are_canonical_and_deterministic():
    a, b = cnn.init_params(SPEC), cnn.init_params(SPEC)
    assert {k: v.shape for k, v in a.items()} == cnn.param_shapes(SPEC)
    assert a["conv1.kernel"].shape == (3, 3, 3, 32)  # HWIO
    assert a["dense1.kernel"].shape == (2304, 128)  # (in, out), rows in HWC order
    assert all(np.array_equal(a[k], b[k]) and a[k].dtype == np.float32 for k in a)
    other = cnn.init_params(WorkloadSpec(seed=1))
    assert not np.array_equal(a["conv1.kernel"], other["conv1.kernel"])


def test_data_and_order_are_seeded():
    d1, d2 = cnn.make_dataset(SPEC), cnn.make_dataset(SPEC)
    assert d1.x.shape == (256, 32, 32, 3) and d1.x.dtype == np.float32
    assert np.array_equal(d1.x, d2.x) and np.array_equal(d1.y, d2.y)
    assert set(np.unique(d1.y)) <= set(range(10))
    e0, e1 = epoch_order(0, 0, 256), epoch_order(0, 1, 256)
    assert sorted(e0) == list(range(256)) and not np.array_equal(e0, e1)
    assert np.array_equal(e0, epoch_order(0, 0, 256))
    assert batch_indices(epoch_order(0, 0, 100), 32).shape == (3, 32)  # last batch dropped
    ev = cnn.make_eval_dataset(SPEC)
    assert not np.array_equal(ev.x[:4], d1.x[:4])


def test_images_carry_the_teachers_block_pattern():
    """Every pixel is its 8x8 block's pattern value plus N(0, 1) noise, and the labels are the
    teacher's on the block averages."""
    x = cnn.make_dataset(SPEC).x.astype(np.float64)
    means = cnn.teacher_features(SPEC, x).reshape(len(x), 4, 4, 3)
    noise = x - means.repeat(8, axis=1).repeat(8, axis=2)
    assert abs(noise.std() - 1.0) < 0.02 and abs(means.std() - 1.0) < 0.1


def test_reference_loss_starts_near_chance():
    b = cnn.fixed_batch(SPEC)
    loss = cnn.reference_loss(SPEC, cnn.init_params(SPEC), b.x, b.y)
    assert abs(loss - np.log(10)) < 0.5


def test_flops_formula():
    fwd = cnn.flops_per_sample(SPEC, train=False)
    assert fwd == 2 * (30 * 30 * 32 * 27 + 13 * 13 * 64 * 288 + 2304 * 128 + 128 * 10)
    conv1 = 2 * 30 * 30 * 32 * 27
    assert cnn.flops_per_sample(SPEC) == 3 * fwd - conv1  # no input gradient for conv1


def test_flops_equal_torch_flop_counter():
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(2304, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    batch = 4
    x = torch.randn(batch, 3, 32, 32)
    with FlopCounterMode(display=False) as fwd_counter:
        model(x)
    assert fwd_counter.get_total_flops() == batch * cnn.flops_per_sample(SPEC, train=False)
    with FlopCounterMode(display=False) as train_counter:
        torch.nn.functional.cross_entropy(model(x), torch.zeros(batch, dtype=torch.long)).backward()
    assert train_counter.get_total_flops() == batch * cnn.flops_per_sample(SPEC)
