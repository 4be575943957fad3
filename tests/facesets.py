"""Face pictures with known faces, made from ``../shared/photos``: the face photos' boxes, and group shots composed
from them (several faces at 60-300 px on a scene), for tests/test_faces.py and benchmarks/faces.py.

The boxes of the eight face photos were taken from MediaPipe's short-range BlazeFace (another model than the one
the runtime ships) and checked by eye on a contact sheet: brows to chin, ear to ear.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

FACE_BOXES: dict[str, tuple[int, int, int, int]] = {  # x0, y0, x1, y1 in the photo as stored
    "face_1.jpg": (94, 132, 269, 307),
    "face_2.jpg": (102, 122, 263, 283),
    "face_3.jpg": (60, 111, 201, 253),
    "face_4.jpg": (84, 116, 231, 264),
    "face_5.jpg": (210, 266, 622, 678),
    "face_6.jpg": (134, 160, 359, 385),
    "face_7.jpg": (95, 124, 270, 299),
    "face_8.jpg": (90, 89, 242, 241),
}
SIZE_RANGE_PX = (60.0, 300.0)
BAND_PX = 8  # the seam check: a band this wide on both sides of a box's border


@dataclass(frozen=True)
class Group:
    """A composed group shot and the box of every face pasted into it (x0, y0, x1, y1)."""

    image: Image.Image
    boxes: list[tuple[float, float, float, float]]
    scene: str


def face_region(photos: Path, name: str, size: float) -> tuple[Image.Image, float]:
    """A square of twice the face box around the face of ``name``, scaled so the face is ``size`` px; and the
    square's side."""
    x0, y0, x1, y1 = FACE_BOXES[name]
    half = x1 - x0
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    with Image.open(photos / name) as photo:
        region = photo.convert("RGB").crop((int(cx - half), int(cy - half), int(cx + half), int(cy + half)))
    side = max(8, round(2 * half * size / (x1 - x0)))
    return region.resize((side, side), Image.Resampling.LANCZOS), side


def groups(photos: Path, count: int, *, seed: int = 1, long_side: int = 1024, faces: tuple[int, int] = (2, 6),
           sizes: tuple[float, float] = SIZE_RANGE_PX) -> list[Group]:
    """``count`` group shots: a scene photo at ``long_side`` with 2-6 faces (sizes log-uniform over ``sizes``)
    pasted through a feathered ellipse, never overlapping one another."""
    scenes = sorted(photos.glob("scene_*.jpg"))
    names = sorted(FACE_BOXES)
    rng = np.random.default_rng(seed)
    made = []
    for index in range(count):
        scene = scenes[index % len(scenes)]
        with Image.open(scene) as photo:
            background = photo.convert("RGB")
        scale = long_side / max(background.size)
        background = background.resize((round(background.width * scale), round(background.height * scale)),
                                       Image.Resampling.LANCZOS)
        wanted = int(rng.integers(faces[0], faces[1] + 1))
        boxes: list[tuple[float, float, float, float]] = []
        for _ in range(200):
            if len(boxes) >= wanted:
                break
            name = names[int(rng.integers(len(names)))]
            size = float(np.exp(rng.uniform(*np.log(sizes))))
            region, side = face_region(photos, name, size)
            if side >= min(background.size):
                continue
            px = int(rng.integers(0, background.width - side))
            py = int(rng.integers(0, background.height - side))
            cx, cy = px + side / 2, py + side / 2
            box = (cx - size / 2, cy - size / 2, cx + size / 2, cy + size / 2)
            gap = side / 3
            if any(not (box[2] < b[0] - gap or box[0] > b[2] + gap or box[3] < b[1] - gap or box[1] > b[3] + gap)
                   for b in boxes):
                continue
            mask = Image.new("L", (side, side), 0)
            ImageDraw.Draw(mask).ellipse([side * 0.12, side * 0.08, side * 0.88, side * 0.98], fill=255)
            background.paste(region, (px, py), mask.filter(ImageFilter.GaussianBlur(side * 0.04)))
            boxes.append(box)
        made.append(Group(background, boxes, scene.name))
    return made


def iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match(truth: list[tuple[float, float, float, float]], found: list[tuple[float, float, float, float]],
          *, min_iou: float = 0.3) -> tuple[list[bool], int]:
    """Which true faces a found box matches (IoU over ``min_iou``, each found box once), and how many found
    boxes match none (false faces)."""
    used = [False] * len(found)
    hits = []
    for box in truth:
        scores = [iou(box, f) if not used[i] else 0.0 for i, f in enumerate(found)]
        best = int(np.argmax(scores)) if scores else -1
        hit = best >= 0 and scores[best] > min_iou
        if hit:
            used[best] = True
        hits.append(hit)
    return hits, used.count(False)


def band_psnr(result: np.ndarray, whole: np.ndarray, box: tuple[int, int, int, int]) -> float:
    """PSNR of ``result`` against ``whole`` over the band ``BAND_PX`` on both sides of ``box``'s border (x0, y0,
    x1, y1): the issue's seam check."""
    height, width = result.shape[:2]
    x0, y0, x1, y1 = box
    band = np.zeros((height, width), bool)
    band[max(0, y0 - BAND_PX):min(height, y1 + BAND_PX), max(0, x0 - BAND_PX):min(width, x1 + BAND_PX)] = True
    band[y0 + BAND_PX:y1 - BAND_PX, x0 + BAND_PX:x1 - BAND_PX] = False
    diff = result[band].astype(np.float64) - whole[band].astype(np.float64)
    mse = float((diff ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(255 ** 2 / mse)
