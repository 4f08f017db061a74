"""Detection post-processing and mAP in neutral NumPy (the `detect` workload's, kept apart so the
framework comparison is the network's and every framework's outputs are scored by the same code).

Boxes are (x0, y0, x1, y1), normalised to [0, 1] of the canvas. A network output is one array
(N, G, G, C + 4) per batch: C class logits then (l, t, r, b), the distances from the cell's
centre to the box's edges in units of the grid stride (docs/workloads.md#detect).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Decoding: cells and classes whose sigmoid score is below this are dropped before NMS.
SCORE_THRESHOLD = 0.05
# Class-wise NMS: a box overlapping a higher-scored box of its class by more than this is dropped.
NMS_IOU = 0.5
# At most this many detections per image are kept (highest scores first).
MAX_DETECTIONS = 100
# A detection matches a ground-truth box of its class at IoU >= this (mAP@0.5).
MATCH_IOU = 0.5
# How a detection is matched (class_ap), detections taken in descending score over all images:
# "coco" (the workload's `map`): the detection takes the *unmatched* ground-truth box of its
#   class with the highest IoU >= MATCH_IOU, as pycocotools' COCOeval.evaluateImg does (it
#   skips matched boxes before comparing IoUs); a true positive, else a false positive.
# "voc" (`map_voc`): the PASCAL VOC devkit's VOCevaldet.m: the detection looks at the box with
#   the highest IoU among *all* of its class's ground truth in the image; IoU >= MATCH_IOU and
#   that box not yet taken: a true positive; already taken (or IoU too low): a false positive,
#   even when another box it overlaps enough is still free.
# They differ only where objects of a class overlap (tests/test_workload_detect.py has crafted
# cases). Either way: IoU without the devkit's +1 pixel term (boxes are normalised to [0, 1],
# not pixel indices, so +1 would be a whole canvas), and all-point interpolated AP (the devkit's
# VOCap.m since VOC2010), not COCO's 101-point interpolation nor its IoU range 0.5:0.95.
MATCH_RULES = ("coco", "voc")


@dataclass(frozen=True)
class Detections:
    """One image's boxes (k, 4), classes (k,) int and scores (k,) (ground truth: scores of 1)."""

    boxes: np.ndarray
    classes: np.ndarray
    scores: np.ndarray


def cell_centres(grid: int) -> np.ndarray:
    """(G, G, 2): the (x, y) centre of every cell in stride units: (j + 0.5, i + 0.5)."""
    c = np.arange(grid) + 0.5
    return np.stack(np.meshgrid(c, c, indexing="xy"), axis=-1)


def decode_boxes(ltrb: np.ndarray, grid: int) -> np.ndarray:
    """(..., G, G, 4) distances (l, t, r, b) in stride units -> (..., G, G, 4) normalised
    (x0, y0, x1, y1)."""
    centres = cell_centres(grid)
    xy0 = centres - ltrb[..., :2]
    xy1 = centres + ltrb[..., 2:]
    return np.concatenate([xy0, xy1], axis=-1) / grid


def iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of one box (4,) with each of `boxes` (k, 4)."""
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0.0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0.0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def nms(boxes: np.ndarray, scores: np.ndarray, threshold: float = NMS_IOU) -> np.ndarray:
    """Greedy non-maximum suppression: indices kept, highest score first (ties: lower index)."""
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while len(order):
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        order = rest[iou(boxes[i], boxes[rest]) <= threshold]
    return np.asarray(keep, dtype=np.int64)


def postprocess_one(output: np.ndarray, classes: int) -> Detections:
    """One image's network output (G, G, C + 4) -> its detections: sigmoid scores, every
    (cell, class) above SCORE_THRESHOLD, class-wise NMS, the MAX_DETECTIONS best."""
    out = np.asarray(output, dtype=np.float64)
    grid = out.shape[0]
    scores = 1.0 / (1.0 + np.exp(-out[..., :classes]))
    boxes = decode_boxes(out[..., classes:classes + 4], grid).reshape(-1, 4)
    cells, cls = np.nonzero(scores.reshape(-1, classes) > SCORE_THRESHOLD)
    s = scores.reshape(-1, classes)[cells, cls]
    kept_boxes, kept_cls, kept_scores = [], [], []
    for c in np.unique(cls):
        mine = np.flatnonzero(cls == c)
        keep = mine[nms(boxes[cells[mine]], s[mine])]
        kept_boxes.append(boxes[cells[keep]])
        kept_cls.append(np.full(len(keep), c, dtype=np.int64))
        kept_scores.append(s[keep])
    if not kept_boxes:
        return Detections(np.zeros((0, 4)), np.zeros(0, np.int64), np.zeros(0))
    b, k, sc = np.concatenate(kept_boxes), np.concatenate(kept_cls), np.concatenate(kept_scores)
    best = np.argsort(-sc, kind="stable")[:MAX_DETECTIONS]
    return Detections(b[best], k[best], sc[best])


def postprocess(outputs: np.ndarray, classes: int) -> list[Detections]:
    """A batch of network outputs (N, G, G, C + 4) -> detections per image."""
    return [postprocess_one(o, classes) for o in outputs]


def average_precision(recall: np.ndarray, precision: np.ndarray) -> float:
    """All-point interpolated AP (the PASCAL VOC devkit's VOCap.m, VOC2010 on): the area under the precision envelope
    (precision made non-increasing from the right) over recall, from recall 0 to the last."""
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]
    steps = np.flatnonzero(r[1:] != r[:-1])
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def true_positives(detections: list[Detections], truths: list[Detections], c: int,
                   rule: str = "coco") -> tuple[np.ndarray, int]:
    """(tp, n_truth) for class `c`: tp[i] is 1.0 when the i-th detection of class c, taken in
    descending score over all images (ties: image order, then the detection's order), is a true
    positive under `rule` (MATCH_RULES); n_truth counts the class's ground-truth boxes."""
    n_truth = sum(int(np.sum(t.classes == c)) for t in truths)
    found = [(float(s), img, b) for img, d in enumerate(detections)
             for b, k, s in zip(d.boxes, d.classes, d.scores) if k == c]
    found.sort(key=lambda f: -f[0])  # stable: ties keep image order
    gt = [t.boxes[t.classes == c] for t in truths]
    used = [np.zeros(len(g), dtype=bool) for g in gt]
    tp = np.zeros(len(found))
    for i, (_, img, box) in enumerate(found):
        if len(gt[img]) == 0:
            continue
        overlaps = iou(box, gt[img])
        if rule == "coco":  # taken boxes are out of the running
            overlaps = np.where(used[img], -1.0, overlaps)
        # Equal IoUs: the first box (the devkit's `ov > ovmax`; pycocotools' `<` takes the last).
        best = int(np.argmax(overlaps))
        if overlaps[best] >= MATCH_IOU and not used[img][best]:
            tp[i], used[img][best] = 1.0, True
    return tp, n_truth


def class_ap(detections: list[Detections], truths: list[Detections], c: int, rule: str = "coco") -> float | None:
    """AP of class `c` over all images at MATCH_IOU (true_positives under `rule`, all-point
    interpolated), or None when no ground truth has class c."""
    tp, n_truth = true_positives(detections, truths, c, rule)
    if n_truth == 0:
        return None
    hits = np.cumsum(tp)
    recall = hits / n_truth
    precision = hits / np.arange(1, len(tp) + 1)
    return average_precision(recall, precision)


def mean_average_precision(detections: list[Detections], truths: list[Detections], classes: int,
                           rule: str = "coco") -> float:
    """mAP@0.5: the mean of class_ap (matching `rule`) over the classes with ground truth (0 if
    none has any)."""
    if rule not in MATCH_RULES:
        raise ValueError(f"matching rule {rule!r} is not one of: {', '.join(MATCH_RULES)}")
    aps = [ap for c in range(classes) if (ap := class_ap(detections, truths, c, rule)) is not None]
    return float(np.mean(aps)) if aps else 0.0
