"""The detect workload: its NumPy definitions against hand-worked cases (focal + L1 loss, targets,
NMS, decoding, all-point AP and mAP@0.5 under COCO's and the VOC devkit's matching rules, the
latter against a NumPy transcription of the devkit), the workload contract, and the Program contract
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


# --- the matching rules against the references -------------------------------------------------


def _voc_devkit_ap(detections, truths, c, minoverlap=0.5, plus_one=0.0):  # type: ignore[no-untyped-def]
    """A line-by-line NumPy transcription of the PASCAL VOC devkit's VOCevaldet.m (one class;
    no `difficult` boxes) and VOCap.m. `plus_one` is the devkit's +1 pixel term (iw = x1 - x0 +
    1, ...), 0 for dlbench's normalised boxes. Returns (tp flags in score order, AP)."""
    ids, bb, conf = [], [], []
    for img, d in enumerate(detections):
        for b, k, sc in zip(d.boxes, d.classes, d.scores):
            if k == c:
                ids.append(img), bb.append(b), conf.append(sc)
    gt = [t.boxes[t.classes == c] for t in truths]
    det = [np.zeros(len(g), bool) for g in gt]
    npos = sum(len(g) for g in gt)
    si = np.argsort(-np.asarray(conf), kind="stable")  # [sc,si]=sort(-confidence): MATLAB's sort is stable
    tp, fp = np.zeros(len(si)), np.zeros(len(si))
    for d, k in enumerate(si):
        i, b = ids[k], bb[k]
        ovmax, jmax = -np.inf, -1
        for j, g in enumerate(gt[i]):
            bi = [max(b[0], g[0]), max(b[1], g[1]), min(b[2], g[2]), min(b[3], g[3])]
            iw, ih = bi[2] - bi[0] + plus_one, bi[3] - bi[1] + plus_one
            if iw > 0 and ih > 0:
                ua = ((b[2] - b[0] + plus_one) * (b[3] - b[1] + plus_one)
                      + (g[2] - g[0] + plus_one) * (g[3] - g[1] + plus_one) - iw * ih)
                ov = iw * ih / ua
                if ov > ovmax:
                    ovmax, jmax = ov, j
        if ovmax >= minoverlap:
            if not det[i][jmax]:
                tp[d], det[i][jmax] = 1, True
            else:
                fp[d] = 1  # false positive (multiple detection)
        else:
            fp[d] = 1
    fp, tp_sum = np.cumsum(fp), np.cumsum(tp)
    rec, prec = tp_sum / npos, tp_sum / (fp + tp_sum)
    mrec, mpre = np.concatenate([[0], rec, [1]]), np.concatenate([[0], prec, [0]])
    for i in range(len(mpre) - 2, -1, -1):
        mpre[i] = max(mpre[i], mpre[i + 1])
    i = np.flatnonzero(mrec[1:] != mrec[:-1]) + 1
    return tp, float(np.sum((mrec[i] - mrec[i - 1]) * mpre[i]))


def test_coco_and_voc_matching_differ_where_objects_overlap():
    """Two overlapping objects A and B of one class. d1 sits on A (IoU 1); d2, scored lower,
    overlaps A by 0.72 and B by 0.61: COCO's rule skips the taken A and matches B (AP 1); the
    devkit's takes its best box overall, A, already taken: a false positive (AP 1/2)."""
    a, b = [0.0, 0.0, 0.5, 0.5], [0.2, 0.0, 0.7, 0.5]
    d2 = [0.08, 0.0, 0.58, 0.5]
    assert boxes.iou(np.array(d2), np.array([a, b])).tolist() == pytest.approx([0.42 / 0.58, 0.38 / 0.62])
    truths = [_truth([a, b], [0, 0])]
    found = [_found([a, d2], [0, 0], [0.9, 0.8])]
    assert boxes.true_positives(found, truths, 0, "coco")[0].tolist() == [1.0, 1.0]
    assert boxes.true_positives(found, truths, 0, "voc")[0].tolist() == [1.0, 0.0]
    assert boxes.class_ap(found, truths, 0, "coco") == 1.0
    assert boxes.class_ap(found, truths, 0, "voc") == 0.5
    tp, ap = _voc_devkit_ap(found, truths, 0)
    assert tp.tolist() == [1.0, 0.0] and ap == 0.5
    with pytest.raises(ValueError, match="'pascal' is not one of: coco, voc"):
        boxes.mean_average_precision(found, truths, 1, "pascal")


def _crowded_case(rng: np.random.Generator, images: int = 6) -> tuple[list[boxes.Detections], list[boxes.Detections]]:
    """Images of 1-4 objects of 2 classes clustered around one point (they overlap), and
    detections: jittered copies of the objects (some twice) plus strays, with distinct scores."""
    truths, found = [], []
    for _ in range(images):
        n = int(rng.integers(1, 5))
        centre = rng.uniform(0.3, 0.7, 2)
        half = rng.uniform(0.1, 0.2, (n, 2))
        xy = centre + rng.uniform(-0.08, 0.08, (n, 2))
        gt = np.concatenate([xy - half, xy + half], axis=1)
        cls = rng.integers(0, 2, n)
        copies = np.concatenate([gt, gt[rng.integers(0, n, 2)], gt[:1] + 0.3]) + rng.normal(0, 0.04, (n + 3, 4))
        copy_cls = np.concatenate([cls, cls[rng.integers(0, n, 2)], cls[:1]])
        truths.append(boxes.Detections(gt, cls, np.ones(n)))
        found.append(boxes.Detections(copies, copy_cls, rng.uniform(0.05, 1.0, n + 3)))
    return found, truths


def test_voc_rule_is_the_devkits_on_crowded_cases():
    """dlbench's "voc" rule gives the devkit's true positives and AP (no +1: normalised boxes)
    on 200 random crowded cases; on the same cases the "coco" rule differs in some."""
    rng = np.random.default_rng(0)
    differ = 0
    for _ in range(200):
        found, truths = _crowded_case(rng)
        for c in (0, 1):
            tp, ap = _voc_devkit_ap(found, truths, c)
            assert boxes.true_positives(found, truths, c, "voc")[0].tolist() == tp.tolist()
            assert boxes.class_ap(found, truths, c, "voc") == pytest.approx(ap, abs=1e-12)
            differ += boxes.class_ap(found, truths, c, "coco") != pytest.approx(ap, abs=1e-12)
    assert differ > 0


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
    # the train scenario's extra score: the VOC devkit's rule on the same outputs
    assert workloads.extra_scores("detect")(SPEC, perfect, data) == {"map_voc": 1.0}
    assert workloads.extra_scores("cnn") is None
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
    """runner/scenarios/infer.py: each pool input's output is post-processed once, timed; the medians
    land in their own metrics (a workload without post-processing gets none)."""
    from dlbench.runner.scenarios.infer import postprocess_metrics
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
    assert set(program.LOSSES) == {"mean_softmax_cross_entropy", "focal_l1_detection", "mean_squared_error",
                                   "mean_token_cross_entropy"}
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
    served.accuracy(TrialSpec(workload=spec, framework="torch", scenario="infer"), detect, program, forward,  # type: ignore[arg-type]
                    result)
    assert seen == [spec.batch_size, spec.batch_size]
    assert set(result.metrics) == {"infer_map"}
    assert result.metrics["infer_map"] == detect.score(spec, forward(data.x), data) > 0.0


@pytest.mark.slow
def test_coco_rule_is_pycocotools():
    """The "coco" rule against pycocotools' COCOeval at IoU 0.5 on 50 crowded cases
    (benchmarks/map_vs_pycocotools.py; pycocotools is not a dependency: skipped without it)."""
    pytest.importorskip("pycocotools")
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "map_vs_pycocotools.py"
    spec = importlib.util.spec_from_file_location("map_vs_pycocotools", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(1)
    for _ in range(50):
        out = module.compare(*module.crowded_case(rng))
        assert out["disagree"] == 0 and out["detections"] > 0
