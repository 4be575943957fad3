"""BlazeFace's SSD anchors and the decoding of its raw outputs into boxes, landmarks and scores.

The anchors are MediaPipe's ``SsdAnchorsCalculator`` with the options of its face-detection graphs (fixed
anchor size, so every anchor is a 1x1 unit box and only its centre matters); the decoding is its
``TensorsToDetectionsCalculator``: offsets in input pixels relative to the anchor's centre, a sigmoid over the
score clipped to +-100. Kept apart from the detector so the converter's verification (LiteRT's raw outputs)
and the runtime (OpenVINO's) decode with the very same code.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RAW_SCORE_LIMIT = 80.0  # MediaPipe clips at 100; exp(100) overflows float32, and the sigmoid is 1.0 either way
KEYPOINTS = ("right_eye", "left_eye", "nose_tip", "mouth_centre", "right_ear", "left_ear")  # the subject's sides


def ssd_anchors(input_px: int, strides: Sequence[int], *, interpolated: bool, offset: float = 0.5) -> np.ndarray:
    """Anchor centres (N x 2, x and y in 0..1) in the order of the model's outputs.

    Layers with the same stride share one feature map; each contributes two anchors per cell per layer when the
    graph interpolates an extra scale (``interpolated``, the short-range model), else one."""
    centres: list[np.ndarray] = []
    layer = 0
    while layer < len(strides):
        stride, repeats = strides[layer], 0
        while layer < len(strides) and strides[layer] == stride:
            repeats += 2 if interpolated else 1
            layer += 1
        side = int(np.ceil(input_px / stride))
        grid = (np.arange(side, dtype=np.float32) + offset) / side
        ys, xs = np.meshgrid(grid, grid, indexing="ij")
        cells = np.stack([xs.ravel(), ys.ravel()], axis=1)
        centres.append(np.repeat(cells, repeats, axis=0))
    return np.concatenate(centres).astype(np.float32)


def decode(raw: np.ndarray, anchors: np.ndarray, input_px: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(boxes N x 4 as x0, y0, x1, y1; landmarks N x 6 x 2; scores N), all in 0..1 of the detector's input.

    ``raw`` is N x 17: the 16 regressor values (box centre and size, then six keypoints, in input pixels
    relative to the anchor) and the score logit, as the converted IR concatenates them."""
    points = raw[:, :16].reshape(-1, 8, 2) / np.float32(input_px)
    centre = points[:, 0] + anchors
    half = points[:, 1] / 2
    boxes = np.concatenate([centre - half, centre + half], axis=1)
    landmarks = points[:, 2:] + anchors[:, None, :]
    logits = np.clip(raw[:, 16], -RAW_SCORE_LIMIT, RAW_SCORE_LIMIT)
    scores = 1.0 / (1.0 + np.exp(-logits))
    return boxes, landmarks, scores.astype(np.float32)


def iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Intersection over union of one x0, y0, x1, y1 box with each of ``others`` (M x 4)."""
    x0 = np.maximum(box[0], others[:, 0])
    y0 = np.maximum(box[1], others[:, 1])
    x1 = np.minimum(box[2], others[:, 2])
    y1 = np.minimum(box[3], others[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    return np.asarray(inter / np.maximum(area + areas - inter, 1e-9), dtype=np.float32)


def weighted_nms(boxes: np.ndarray, landmarks: np.ndarray, scores: np.ndarray, *, threshold: float
                 ) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """MediaPipe's weighted non-maximum suppression: each kept face is the score-weighted mean of the boxes and
    landmarks that overlap the best remaining one by more than ``threshold`` IoU. A plain NMS keeps one anchor's
    box, which jitters by an anchor step between neighbouring frames of a clip; the mean does not."""
    order = np.argsort(-scores)
    boxes, landmarks, scores = boxes[order], landmarks[order], scores[order]
    kept: list[tuple[np.ndarray, np.ndarray, float]] = []
    remaining = np.arange(len(scores))
    while remaining.size:
        best = remaining[0]
        overlap = iou(boxes[best], boxes[remaining]) > threshold
        group = remaining[overlap]
        weights = scores[group][:, None]
        box = (boxes[group] * weights).sum(axis=0) / weights.sum()
        marks = (landmarks[group] * weights[:, :, None]).sum(axis=0) / weights.sum()
        kept.append((box.astype(np.float32), marks.astype(np.float32), float(scores[best])))
        remaining = remaining[~overlap]
    return kept
