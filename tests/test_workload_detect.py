"""The detect workload: its NumPy definitions against hand-worked cases (focal + L1 loss, targets,
NMS, decoding, VOC all-point AP and mAP@0.5), the workload contract, and the Program contract
in one fresh process per framework (dlbench.testing.program: the float32 loss against the
float64 `reference_loss`, canonical gradients, K falling steps, no recompiles, predict)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from dlbench import workloads
from dlbench.backends import installed
from dlbench.runner.plan import workload_spec
from dlbench.testing.program import problems
from dlbench.workloads import boxes, contract, detect

SPEC = workload_spec("detect", "tiny")


def _truth(b: list[list[float]], c: list[int]) -> boxes.Detections:
    return boxes.Detections(np.array(b, dtype=np.float64).reshape(-1, 4), np.array(c), np.ones(len(c)))


def _found(b: list[list[float]], c: list[int], s: list[float]) -> boxes.Detections:
    return boxes.Detections(np.array(b, dtype=np.float64).reshape(-1, 4), np.array(c), np.array(s))


def test_map_of_a_hand_worked_case():
    """Class 0: GT g1 in image A, g2 in image B. Detections by score: g1 in A (TP), a box in A
    where there is none (FP), g2 in B (TP), a near-duplicate of g1 in A (FP: g1 is taken).
    Precision 1, 1/2, 2/3, 1/2 at recall 1/2, 1/2, 1, 1: the envelope is 1 up to recall 1/2 and
    2/3 up to 1, AP = 1/2 + 1/3 = 5/6. Class 1 has a GT box and no detection: AP 0. Class 2
    has no GT: left out. mAP = (5/6 + 0) / 2."""
    g1, g2, empty = [0.0, 0.0, 0.5, 0.5], [0.5, 0.5, 1.0, 1.0], [0.5, 0.5, 1.0, 1.0]
    truths = [_truth([g1, [0.5, 0.0, 1.0, 0.5]], [0, 1]), _truth([g2], [0])]
    found = [_found([g1, empty, [0.0, 0.0, 0.5, 0.45]], [0, 0, 0], [0.9, 0.8, 0.6]), _found([g2], [0], [0.7])]
    assert boxes.class_ap(found, truths, 0) == pytest.approx(5 / 6)
    assert boxes.class_ap(found, truths, 1) == 0.0
    assert boxes.class_ap(found, truths, 2) is None
    assert boxes.mean_average_precision(found, truths, 3) == pytest.approx(5 / 12)
    # Below the IoU threshold a box on the right object is still a false positive.
    miss = [_found([[0.0, 0.0, 0.5, 0.2]], [0], [0.9]), _found([], [], [])]
    assert boxes.class_ap(miss, [_truth([g1], [0]), _truth([], [])], 0) == 0.0


def test_all_point_average_precision():
    # The envelope at each recall step is the best precision at that recall or beyond.
    assert boxes.average_precision(np.array([0.25, 0.5, 0.5, 1.0]), np.array([1.0, 1.0, 0.67, 0.8])) \
        == pytest.approx(0.5 * 1.0 + 0.5 * 0.8)
    assert boxes.average_precision(np.array([1.0]), np.array([1.0])) == 1.0


def test_nms_is_greedy_and_classwise():
    b = np.array([[0, 0, 1, 1], [0, 0, 1, 0.9], [0, 0, 1, 0.4]], dtype=np.float64)
    # b1 overlaps b0 by IoU 0.9 and goes; b2 by 0.4 and stays.
    assert boxes.nms(b, np.array([0.9, 0.8, 0.7])).tolist() == [0, 2]
    assert boxes.nms(b, np.array([0.1, 0.8, 0.7])).tolist() == [1, 2]  # b2 overlaps b1 by 4/9


def test_postprocess_decodes_one_confident_cell():
    out = np.full((4, 4, detect.CLASSES + 4), -10.0)
    out[1, 2, 1] = 10.0
    out[1, 2, detect.CLASSES:] = 0.5  # l, t, r, b in strides from the centre (2.5, 1.5)
    found = boxes.postprocess_one(out, detect.CLASSES)
    assert found.classes.tolist() == [1]
    assert found.boxes.tolist() == [[0.5, 0.25, 0.75, 0.5]]
    assert found.scores[0] == pytest.approx(1 / (1 + math.exp(-10)))


def test_targets_are_centre_in_cell_and_lossless():
    data = detect.fixed_batch(SPEC, 8)
    grid = detect.size(SPEC).grid
    assert data.y.shape == (8, grid, grid, detect.TARGET_CHANNELS) and data.y.dtype == np.float32
    rng = np.random.default_rng(7)
    for _ in range(20):
        image, truth = detect.draw_canvas(rng, detect.size(SPEC).canvas)
        y = detect.encode_targets(truth, grid)
        assert 1 <= y[..., -1].sum() == len(truth.classes) <= detect.MAX_OBJECTS
        centres = (truth.boxes[:, :2] + truth.boxes[:, 2:]) / 2 * grid
        for (cx, cy), c in zip(centres, truth.classes):
            assert y[int(cy), int(cx), c] == 1.0 and y[int(cy), int(cx), -1] == 1.0
        back = detect.decode_targets(y)
        order = np.lexsort(back.boxes.T[::-1])
        want = np.lexsort(truth.boxes.T[::-1])
        np.testing.assert_allclose(back.boxes[order], truth.boxes[want], atol=1e-6)
        assert back.classes[order].tolist() == truth.classes[want].tolist()


def test_loss_of_a_hand_worked_cell():
    """One cell, logits 0: the positive class costs 0.25 * 0.5² * ln 2, each negative 0.75 *
    0.5² * ln 2; the box is off by 1 in one coordinate; one positive."""
    out = np.array([[[[0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]]]])
    y = np.array([[[[1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 1.0, 1.0]]]])
    assert detect.detection_loss(out, y) == pytest.approx((0.0625 + 2 * 0.1875) * math.log(2) + 1.0)
    # Without positives the normaliser is 1 and the box term 0.
    assert detect.detection_loss(out, np.zeros_like(y)) == pytest.approx(3 * 0.1875 * math.log(2))


def test_perfect_outputs_score_one_and_the_prior_starts_low():
    data = detect.make_eval_dataset(SPEC)
    c = detect.CLASSES
    perfect = np.concatenate([data.y[..., :c] * 20 - 10, data.y[..., c:c + 4]], axis=-1)
    assert detect.score(SPEC, perfect, data) == 1.0
    shuffled = np.concatenate([perfect[1:], perfect[:1]])
    assert detect.score(SPEC, shuffled, data) < 0.2
    params = detect.init_params(SPEC)
    assert np.all(params["cls_head.bias"] == np.float32(detect.PRIOR_BIAS))
    assert 1 / (1 + math.exp(-detect.PRIOR_BIAS)) == pytest.approx(0.01)


def test_workload_contract_and_flops():
    assert contract.interface(detect, "detect", plugin=False) == []
    assert contract.shapes(detect) == [] and contract.behaviour(detect) == []
    assert workloads.postprocess("detect") is detect.postprocess and workloads.postprocess("cnn") is None
    # conv1 (stride 2, 3 -> 16) on 32x32: a 16x16 output of 27 multiply-adds per channel.
    fwd = sum(f for _, f, _ in detect._layers(SPEC))
    assert detect._layers(SPEC)[0][1] == 2 * 16 * 16 * 16 * 27
    assert detect.flops_per_sample(SPEC) == 3 * fwd - 2 * 16 * 16 * 16 * 27


def test_num_classes_is_fixed_at_three():
    """detect fixes its class count (NUM_CLASSES): the CLI's specs carry 3 and any other value
    is refused in one line naming it and what is allowed, not silently ignored."""
    from dataclasses import replace

    from dlbench.spec import SpecError

    assert SPEC.num_classes == contract.preset_spec(detect).num_classes == detect.CLASSES == 3
    workloads.validate(SPEC)
    with pytest.raises(SpecError, match=r"^detect num_classes 10 is not one of: 3 \(detect fixes its class count\)$"):
        workloads.validate(replace(SPEC, num_classes=10))
    # A classifier's num_classes stays the spec's.
    assert workloads.fixed_classes("cnn") is None
    workloads.validate(replace(workload_spec("cnn", "tiny"), num_classes=7))


# One process per framework; compiled mode only where it is cheap (JAX's jit is the only mode).
CI_MODES = {"torch": "eager", "jax": "compiled", "tensorflow": "graph"}
SLOW_MODES = {"torch": "compiled", "tensorflow": "compiled", "keras-jax": "compiled", "keras-torch": "compiled",
              "keras-tensorflow": "compiled"}


def _contract(framework: str, mode: str) -> None:
    found = installed()[framework]
    if not found["installed"]:
        pytest.skip(f"{framework}: {found['detail']}")
    found, facts = problems(framework, "detect", [mode])
    assert found == [], found
    assert facts[mode]["status"] == "ok", facts


@pytest.mark.parametrize("framework", list(CI_MODES))
def test_program_contract(framework: str):
    _contract(framework, CI_MODES[framework])


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(SLOW_MODES))
def test_program_contract_slow(framework: str):
    _contract(framework, SLOW_MODES[framework])


def test_infer_times_postprocessing_apart_only_where_a_workload_has_it():
    """runner/scenarios/inference.py: each pool input's output is post-processed once, timed; the medians
    land in their own metrics (a workload without post-processing gets none)."""
    from dlbench.runner.scenarios.inference import postprocess_metrics
    from dlbench.spec import TrialSpec

    grid = detect.size(SPEC).grid
    calls: list[int] = []

    def forward(x: np.ndarray) -> np.ndarray:
        calls.append(len(x))
        return np.zeros((len(x), grid, grid, detect.CLASSES + 4), np.float32)

    requests, batches = [np.zeros(1)] * 3, [np.zeros(SPEC.batch_size)] * 2
    m: dict[str, float | None] = {}
    postprocess_metrics(TrialSpec(workload=SPEC, framework="torch", scenario="infer"), forward, requests, batches, m)
    assert calls == [1, 1, 1, SPEC.batch_size, SPEC.batch_size]
    assert set(m) == {"postprocess_p50_s", "postprocess_batch_median_s"} and all(v > 0 for v in m.values())
    m = {}
    postprocess_metrics(TrialSpec(workload=workload_spec("cnn", "tiny"), framework="torch", scenario="infer"),
                        forward, requests, batches, m)
    assert m == {}


def test_infer_parity_takes_grid_outputs():
    """analysis/parity.py: inference outputs with rows of any shape (detect's grids) are compared
    with the reference's rows, cycled; a different row shape fails."""
    from dlbench.analysis import parity

    ref = np.random.default_rng(0).standard_normal((8, 4, 4, 7))
    ok = parity.compare_infer_logits({"batch 1": ref, "batch 16": np.resize(ref, (16, 4, 4, 7))}, ref, "float32")
    assert ok.verdict == "pass" and ok.worst_rel_err == 0.0
    bad = parity.compare_infer_logits({"batch 1": ref.reshape(8, 4, 28)}, ref, "float32")
    assert bad.verdict == "fail" and "does not match" in (bad.reason or "")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_an_unknown_loss_is_unsupported(framework: str):
    """backends/<fw>/program.py: LOSSES is keyed by the numerics block's loss name; a name no
    entry has is Unsupported (a pair's status), not a KeyError."""
    pytest.importorskip(framework)
    import importlib

    from dlbench.backends.base import Unsupported
    from dlbench.spec import Numerics

    program = importlib.import_module(f"dlbench.backends.{framework}.program")
    assert set(program.LOSSES) == {"mean_softmax_cross_entropy", "focal_l1_detection", "mean_squared_error"}
    with pytest.raises(Unsupported, match="'hinge'"):
        program.loss_kind(Numerics(loss="hinge"))


def test_the_served_model_is_scored_by_the_workloads_own_metric():
    """runner/scenarios/served.py: a non-classifier's served outputs over the whole eval split (batches of
    the spec's size, the last padded and cut back) are scored by the workload's `score`, stored
    as infer_<QUALITY> (detect: infer_map), never as accuracy. The float64 reference network
    stands in for a framework; near-perfect outputs for the first rows make the score non-zero."""
    from types import SimpleNamespace

    from dlbench.runner.scenarios import served
    from dlbench.spec import TrialSpec

    # 21 held-out rows in batches of 16: the second batch is padded.
    spec = replace(SPEC, eval_size=SPEC.batch_size + 5)
    data = detect.make_eval_dataset(spec)
    params = detect.init_params(spec)
    c = detect.CLASSES
    lookup = {x.tobytes(): np.concatenate([y[..., :c] * 20 - 10, y[..., c:c + 4]], axis=-1)
              for x, y in zip(data.x[:10], data.y[:10])}
    seen: list[int] = []

    def forward(x: np.ndarray) -> np.ndarray:
        seen.append(len(x))
        out = detect.forward(params, x).astype(np.float32)
        return np.stack([lookup.get(row.tobytes(), o) for row, o in zip(x, out)])

    program = SimpleNamespace(infer_input=lambda x: x, precision=lambda: {})
    result = SimpleNamespace(metrics={})
    served.accuracy(TrialSpec(workload=spec, framework="torch", scenario="infer"), program, forward, result)  # type: ignore[arg-type]
    assert seen == [spec.batch_size, spec.batch_size]
    assert set(result.metrics) == {"infer_map"}
    assert result.metrics["infer_map"] == detect.score(spec, forward(data.x), data) > 0.0
