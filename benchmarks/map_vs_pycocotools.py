"""dlbench's "coco" matching rule (workloads/boxes.py) against pycocotools' own COCOeval on random
crowded cases (objects of a class overlap, so the matching rules differ). pycocotools is not a
dlbench dependency: run it in a scratch environment that has pycocotools and NumPy, with
dlbench's source on the path (boxes.py needs NumPy only):

    python3 -m venv /tmp/cocovenv && /tmp/cocovenv/bin/pip install numpy pycocotools
    PYTHONPATH=src /tmp/cocovenv/bin/python benchmarks/map_vs_pycocotools.py [CASES]

Per case and class it compares the true-positive flag of every detection (pycocotools'
`dtMatches` at IoU 0.5) with `boxes.true_positives(..., "coco")`, and prints one JSON line:
how many detections disagreed (expected 0), how many cases the "voc" rule's AP differs from the
"coco" rule's in, and the gap between dlbench's all-point AP and COCOeval's 101-point AP@0.5 on
the same matches (interpolation only). docs/workloads.md#detect quotes a run.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from dlbench.workloads import boxes


def crowded_case(rng: np.random.Generator, images: int = 6) -> tuple[list[boxes.Detections], list[boxes.Detections]]:
    """1-4 objects of 2 classes per image clustered around one point; detections: jittered
    copies (some twice) plus a stray each, distinct random scores."""
    truths, found = [], []
    for _ in range(images):
        n = int(rng.integers(1, 5))
        xy = rng.uniform(0.3, 0.7, 2) + rng.uniform(-0.08, 0.08, (n, 2))
        half = rng.uniform(0.1, 0.2, (n, 2))
        gt = np.concatenate([xy - half, xy + half], axis=1)
        cls = rng.integers(0, 2, n)
        copies = np.concatenate([gt, gt[rng.integers(0, n, 2)], gt[:1] + 0.3]) + rng.normal(0, 0.04, (n + 3, 4))
        truths.append(boxes.Detections(gt, cls, np.ones(n)))
        found.append(boxes.Detections(copies, np.concatenate([cls, cls[rng.integers(0, n, 2)], cls[:1]]),
                                      rng.uniform(0.05, 1.0, n + 3)))
    return found, truths


def _xywh(b: np.ndarray) -> list[float]:
    return [float(b[0]), float(b[1]), float(b[2] - b[0]), float(b[3] - b[1])]


def cocoeval(found: list[boxes.Detections], truths: list[boxes.Detections]) -> COCOeval:
    """COCOeval at IoU 0.5 only, 100 detections per image, every area ("all")."""
    images = [{"id": i + 1} for i in range(len(truths))]
    anns = [{"image_id": i + 1, "category_id": int(c) + 1, "bbox": _xywh(b),
             "area": float((b[2] - b[0]) * (b[3] - b[1])), "iscrowd": 0}
            for i, t in enumerate(truths) for b, c in zip(t.boxes, t.classes)]
    for n, a in enumerate(anns):
        a["id"] = n + 1
    gt = COCO()
    gt.dataset = {"images": images, "annotations": anns, "categories": [{"id": 1}, {"id": 2}]}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
        # loadRes numbers the detections 1, 2, ... in this order (dt_ids)
        dets = [{"image_id": i + 1, "category_id": int(c) + 1, "bbox": _xywh(b), "score": float(s)}
                for i, d in enumerate(found) for b, c, s in zip(d.boxes, d.classes, d.scores)]
        dt = gt.loadRes(dets)
        ev = COCOeval(gt, dt, "bbox")
        ev.params.iouThrs = np.array([0.5])
        ev.params.maxDets = [100]
        ev.params.areaRng, ev.params.areaRngLbl = [[0.0, 1e10]], ["all"]
        ev.evaluate()
        ev.accumulate()
    return ev


def compare(found: list[boxes.Detections], truths: list[boxes.Detections]) -> dict[str, float]:
    ev = cocoeval(found, truths)
    matched = {int(d): bool(m) for e in ev.evalImgs if e is not None for d, m in zip(e["dtIds"], e["dtMatches"][0])}
    out = {"detections": 0, "disagree": 0, "voc_differs": 0, "ap_gap_max": 0.0}
    for c in (0, 1):
        # dlbench's order: descending score over all images, stable (image, then detection order)
        every = [(-float(s), cc) for d in found for s, cc in zip(d.scores, d.classes)]
        ids = [(score, n + 1) for n, (score, cc) in enumerate(every) if cc == c]
        order = [dt_id for _, dt_id in sorted(ids, key=lambda x: x[0])]
        tp, n_truth = boxes.true_positives(found, truths, c, "coco")
        out["detections"] += len(order)
        out["disagree"] += sum(bool(t) != matched[d] for t, d in zip(tp, order))
        if n_truth:
            ours = boxes.class_ap(found, truths, c, "coco")
            theirs = float(np.mean(ev.eval["precision"][0, :, c, 0, 0]))  # 101-point AP@0.5
            out["ap_gap_max"] = max(out["ap_gap_max"], abs(float(ours) - theirs))
            out["voc_differs"] += int(boxes.class_ap(found, truths, c, "voc") != ours)
    return out


def main(cases: int) -> None:
    rng = np.random.default_rng(0)
    total = {"cases": cases, "detections": 0, "disagree": 0, "voc_differs": 0, "ap_gap_max": 0.0}
    for _ in range(cases):
        one = compare(*crowded_case(rng))
        for k in ("detections", "disagree", "voc_differs"):
            total[k] += one[k]
        total["ap_gap_max"] = max(total["ap_gap_max"], one["ap_gap_max"])
    print(json.dumps(total))
    if total["disagree"]:
        sys.exit(1)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
