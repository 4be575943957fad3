"""A face's aligned crop out of the picture, and its stylized crop pasted back without a seam.

Geometry: the crop is a square of ``crop_px`` around the face's box centre, ``scale`` times the box's size on the
picture, turned so the eyes are level (the roll from the landmarks, at most ``MAX_ROLL``). ``Placement`` holds the
affine map between crop and picture both ways; Pillow's ``Image.transform`` (bicubic) does the warps.

Blend: a feathered ellipse in crop space (1 on the face and hair, 0 before the crop's edge) warped back with the
face; the stylized crop is shifted per channel by the mean difference to the whole picture's result in the
feather ring, so the colours meet where the mask fades; then ``picture = whole * (1 - m) + face * m``. Pixels
outside the picture are taken from its edge (replicated), so a face at the border is cropped like any other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .detect import Face, eye_angle

MAX_ROLL = math.radians(45)  # beyond this the landmarks of a profile face are not a roll to undo
# The mask, as semi-axes of an ellipse in units of the crop's half side: full inside the inner one, zero
# outside the outer one. The face box is 1/scale of the crop (half of it at scale 2): its sides lie at 0.5 of
# the half side, inside the inner ellipse. The outer one stops 0.14 of the half side short of the crop's edge:
# 9 px for the smallest face (64 px, a 128 px crop on the picture), so the paste's border band of 8 px is the
# whole picture's own pixels (the seam check of tests/test_faces.py).
MASK_INNER = (0.62, 0.70)
MASK_OUTER = (0.84, 0.86)
RING = (0.05, 0.6)  # where the colours are matched: the mask's fade
MAX_SHIFT = 40.0  # levels: a larger mean difference is a different scene in the ring (a hand), not a tint


@dataclass(frozen=True)
class Placement:
    """Where one face's crop sits on the picture: the crop's centre, its side on the picture, its roll."""

    cx: float
    cy: float
    side: float
    angle: float
    crop_px: int

    @classmethod
    def of(cls, face: Face, *, crop_px: int, scale: float) -> Placement:
        x0, y0, x1, y1 = face.box
        angle = max(-MAX_ROLL, min(MAX_ROLL, eye_angle(face)))
        return cls((x0 + x1) / 2, (y0 + y1) / 2, face.size * scale, angle, crop_px)

    def crop_to_picture(self) -> np.ndarray:
        """2 x 3: crop pixel (u, v) -> picture (x, y)."""
        s = self.side / self.crop_px
        cos, sin = math.cos(self.angle) * s, math.sin(self.angle) * s
        h = self.crop_px / 2
        return np.array([[cos, -sin, self.cx - cos * h + sin * h],
                         [sin, cos, self.cy - sin * h - cos * h]])

    def picture_to_crop(self) -> np.ndarray:
        """2 x 3: picture (x, y) -> crop pixel (u, v), the inverse of ``crop_to_picture``."""
        forward = np.vstack([self.crop_to_picture(), [0.0, 0.0, 1.0]])
        return np.linalg.inv(forward)[:2]

    def bounds(self, width: int, height: int) -> tuple[int, int, int, int] | None:
        """The picture pixels the crop covers (x0, y0, x1, y1), within the picture; None when none."""
        corners = self.crop_to_picture() @ np.array([[0, 0, 1], [self.crop_px, 0, 1], [0, self.crop_px, 1],
                                                     [self.crop_px, self.crop_px, 1]], dtype=np.float64).T
        x0, y0 = max(0, math.floor(corners[0].min())), max(0, math.floor(corners[1].min()))
        x1, y1 = min(width, math.ceil(corners[0].max())), min(height, math.ceil(corners[1].max()))
        return (x0, y0, x1, y1) if x1 > x0 and y1 > y0 else None


def _affine(matrix: np.ndarray, dx: float = 0.0, dy: float = 0.0) -> tuple[float, ...]:
    """Pillow's AFFINE data (output pixel -> input pixel) for ``matrix`` with the output origin moved to (dx, dy)."""
    a, b, c = matrix[0]
    d, e, f = matrix[1]
    return (float(a), float(b), float(c + a * dx + b * dy), float(d), float(e), float(f + d * dx + e * dy))


def crop(rgb: np.ndarray, place: Placement, *, resample: Image.Resampling = Image.Resampling.BICUBIC) -> np.ndarray:
    """The face's aligned crop (crop_px square, u8 RGB), edge pixels replicated where it leaves the picture.
    ``resample``: bicubic for the restyled crop; the landmark model's is bilinear, as MediaPipe's, and 3x faster."""
    height, width = rgb.shape[:2]
    reach = math.ceil(place.side * 0.75) + 2  # the crop's half diagonal, and a little
    x0, y0 = math.floor(place.cx) - reach, math.floor(place.cy) - reach
    rows = np.clip(np.arange(y0, y0 + 2 * reach), 0, height - 1)
    cols = np.clip(np.arange(x0, x0 + 2 * reach), 0, width - 1)
    region = Image.fromarray(np.ascontiguousarray(rgb.take(rows, axis=0).take(cols, axis=1)))  # 2.5x a 2-D index
    data = _affine(place.crop_to_picture())
    data = (data[0], data[1], data[2] - x0, data[3], data[4], data[5] - y0)
    return np.asarray(region.transform((place.crop_px, place.crop_px), Image.Transform.AFFINE, data,
                                       resample=resample))


def mask(crop_px: int) -> np.ndarray:
    """The feathered ellipse (crop_px square, float32 0..1): smoothstep between the inner and outer ellipses."""
    grid = (np.arange(crop_px, dtype=np.float32) + 0.5) / (crop_px / 2) - 1
    u, v = np.meshgrid(grid, grid)
    inner = np.hypot(u / MASK_INNER[0], v / MASK_INNER[1])
    outer = np.hypot(u / MASK_OUTER[0], v / MASK_OUTER[1])
    # 0 at the inner ellipse, 1 at the outer one, along each ray from the centre
    t = np.clip((inner - 1) / np.maximum(inner / np.maximum(outer, 1e-6) - 1, 1e-6), 0, 1)
    return np.asarray(1 - t * t * (3 - 2 * t), dtype=np.float32)


def paste(whole: np.ndarray, face: np.ndarray, place: Placement, feather: np.ndarray
          ) -> tuple[int, int, int, int] | None:
    """Blend the stylized crop ``face`` into ``whole`` (the stylized picture, H x W x 3 u8, changed in place);
    returns the picture pixels it touched (x0, y0, x1, y1), or None when the crop lies off the picture."""
    height, width = whole.shape[:2]
    box = place.bounds(width, height)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    size = (x1 - x0, y1 - y0)
    data = _affine(place.picture_to_crop(), x0, y0)
    warped = np.asarray(Image.fromarray(face).transform(size, Image.Transform.AFFINE, data,
                                                        resample=Image.Resampling.BICUBIC), dtype=np.float32)
    alpha = np.asarray(Image.fromarray(feather, mode="F").transform(size, Image.Transform.AFFINE, data,
                                                                    resample=Image.Resampling.BILINEAR,
                                                                    fillcolor=0.0), dtype=np.float32)
    base = whole[y0:y1, x0:x1].astype(np.float32)
    ring = (alpha > RING[0]) & (alpha < RING[1])
    if ring.any():
        shift = np.clip(base[ring].mean(axis=0) - warped[ring].mean(axis=0), -MAX_SHIFT, MAX_SHIFT)
        warped += shift
    blended = base + (warped - base) * alpha[:, :, None]
    whole[y0:y1, x0:x1] = np.clip(np.rint(blended), 0, 255).astype(np.uint8)
    return box
