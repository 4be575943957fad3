"""``image.upscale_method: guided``: bring a low-resolution stylized picture to the photo's size with a fast
guided filter (He & Sun, "Fast Guided Filter", 2015) steered by the full-resolution photo.

Why: a Lanczos upscale of a 1024 px result onto a 12 MP photo is soft, and its outlines sit where the
low-resolution grid put them. The guided filter models the output locally as ``a * guide + b``: the
coefficients are fitted at low resolution (where the stylized picture is) against the downscaled photo's
luminance, smoothed, brought up bilinearly, and applied to the photo's full-resolution luminance, so every
edge of the output lands on the photo's own edge, and flat regions keep the style's flat colour.

Numpy and Pillow only. Memory is bounded: the full-resolution side runs in strips of ``STRIP_ROWS`` rows
(the coefficient planes are upsampled per strip with Pillow's ``box``), so a 24 MP photo never holds a float
copy of itself.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from PIL import Image

RADIUS_PX = 2        # box radius of the fit, in low-resolution pixels
EPS = 1e-3           # regularisation (guide in [0, 1]): larger keeps more of the low-res output's own edges
STRIP_ROWS = 256
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


def box_mean(plane: np.ndarray, radius: int) -> np.ndarray:
    """Mean over a (2r+1)^2 window, edges by replication, via cumulative sums (O(1) per pixel)."""
    padded = np.pad(plane, ((radius + 1, radius), (radius + 1, radius)), mode="edge").astype(np.float64)
    summed = padded.cumsum(0).cumsum(1)
    size = 2 * radius + 1
    total = summed[size:, size:] - summed[:-size, size:] - summed[size:, :-size] + summed[:-size, :-size]
    return np.asarray(total / (size * size), dtype=np.float32)


def fit(guide: np.ndarray, planes: Iterable[np.ndarray], radius: int, eps: float
        ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The guided filter's fit (He, Sun and Tang 2013): per plane, the box-smoothed (a, b) of ``a * guide + b``
    over windows of ``radius``, ``eps`` in the guide's units squared. ``guided_upscale`` applies them to the photo
    at its size, ``imaging.calm`` to the picture's own luma."""
    mean_i = box_mean(guide, radius)
    var_i = box_mean(guide * guide, radius) - mean_i * mean_i
    coefficients = []
    for p in planes:
        mean_p = box_mean(p, radius)
        a = (box_mean(guide * p, radius) - mean_i * mean_p) / (var_i + eps)
        b = mean_p - a * mean_i
        coefficients.append((box_mean(a, radius), box_mean(b, radius)))
    return coefficients


def _luma(rgb: np.ndarray) -> np.ndarray:
    return np.asarray((rgb.astype(np.float32) @ LUMA) / 255.0, dtype=np.float32)


def guided_upscale(low: np.ndarray, photo: np.ndarray, *, radius: int = RADIUS_PX, eps: float = EPS) -> np.ndarray:
    """``low`` (h x w x 3 u8, the stylized picture) -> H x W x 3 u8 at ``photo``'s size (H x W x 3 u8)."""
    height, width = photo.shape[:2]
    small_h, small_w = low.shape[:2]
    guide_small = _luma(np.asarray(Image.fromarray(photo).resize((small_w, small_h), Image.Resampling.BOX)))
    planes = (low[..., channel].astype(np.float32) / 255.0 for channel in range(3))
    coefficients = [(Image.fromarray(a, "F"), Image.fromarray(b, "F"))
                    for a, b in fit(guide_small, planes, radius, eps)]
    out = np.empty((height, width, 3), np.uint8)
    scale_y = small_h / height
    for top in range(0, height, STRIP_ROWS):
        bottom = min(height, top + STRIP_ROWS)
        guide = _luma(photo[top:bottom])
        box = (0.0, top * scale_y, float(small_w), bottom * scale_y)
        for channel, (a_plane, b_plane) in enumerate(coefficients):
            a = np.asarray(a_plane.resize((width, bottom - top), Image.Resampling.BILINEAR, box=box))
            b = np.asarray(b_plane.resize((width, bottom - top), Image.Resampling.BILINEAR, box=box))
            out[top:bottom, :, channel] = np.clip(np.rint((a * guide + b) * 255.0), 0, 255).astype(np.uint8)
    return out


def edge_alignment(output: np.ndarray, photo: np.ndarray) -> float:
    """How well ``output``'s edges sit on ``photo``'s (same size, u8 RGB): the normalised correlation of their
    gradient magnitudes, 1.0 when every edge of one is an edge of the other in the same place and strength
    pattern. Used by the tests and ``benchmarks/fullres.py`` to compare upscale methods."""
    def gradient(rgb: np.ndarray) -> np.ndarray:
        y = _luma(rgb)
        gy, gx = np.zeros_like(y), np.zeros_like(y)
        gy[1:-1] = y[2:] - y[:-2]
        gx[:, 1:-1] = y[:, 2:] - y[:, :-2]
        return np.asarray(np.hypot(gx, gy), dtype=np.float32)

    a, b = gradient(output).ravel().astype(np.float64), gradient(photo).ravel().astype(np.float64)
    a -= a.mean()
    b -= b.mean()
    return float(a @ b / (np.sqrt((a @ a) * (b @ b)) + 1e-12))
