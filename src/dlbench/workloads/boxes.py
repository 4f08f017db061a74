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
# A detection matches a ground-truth box of its class at IoU >= this (PASCAL VOC's mAP@0.5).
MATCH_IOU = 0.5


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
    """All-point interpolated AP (PASCAL VOC 2010+): the area under the precision envelope
    (precision made non-increasing from the right) over recall, from recall 0 to the last."""
    r = np.concatenate([[0.0], recall, [1.0]])
    p = np.concatenate([[0.0], precision, [0.0]])
    p = np.maximum.accumulate(p[::-1])[::-1]
    steps = np.flatnonzero(r[1:] != r[:-1])
    return float(np.sum((r[steps + 1] - r[steps]) * p[steps + 1]))


def class_ap(detections: list[Detections], truths: list[Detections], c: int) -> float | None:
    """AP of class `c` over all images at MATCH_IOU, or None when no ground truth has class c.
    Detections are taken in descending score over all images; each matches the unmatched
    ground-truth box of its class in its image with the highest IoU >= MATCH_IOU (a true
    positive), else it is a false positive."""
    n_truth = sum(int(np.sum(t.classes == c)) for t in truths)
    if n_truth == 0:
        return None
    found = [(float(s), img, b) for img, d in enumerate(detections)
             for b, k, s in zip(d.boxes, d.classes, d.scores) if k == c]
    found.sort(key=lambda f: -f[0])  # stable: ties keep image order
    gt = [t.boxes[t.classes == c] for t in truths]
    used = [np.zeros(len(g), dtype=bool) for g in gt]
    tp = np.zeros(len(found))
    for i, (_, img, box) in enumerate(found):
        if len(gt[img]) == 0:
            continue
        overlaps = np.where(used[img], -1.0, iou(box, gt[img]))
        best = int(np.argmax(overlaps))
        if overlaps[best] >= MATCH_IOU:
            tp[i], used[img][best] = 1.0, True
    hits = np.cumsum(tp)
    recall = hits / n_truth
    precision = hits / np.arange(1, len(found) + 1)
    return average_precision(recall, precision)


def mean_average_precision(detections: list[Detections], truths: list[Detections], classes: int) -> float:
    """mAP@0.5: the mean of class_ap over the classes with ground truth (0 if none has any)."""
    aps = [ap for c in range(classes) if (ap := class_ap(detections, truths, c)) is not None]
    return float(np.mean(aps)) if aps else 0.0
