"""Calm areas painted as gradients: the palette's last step (``imaging.palette``, step 5) for skies and still water.

Why: an anime background paints a sky or a lake as one clean gradient, with the clouds' and the shore's edges
crisp. The palette cuts such an area into bands a few levels apart, and the model's output carries blotches a few
pixels wide that the palette turns into patches; blind raters named exactly that on most scenes of
../shared/photos ("lake reflection breaks into hard contour bands", "sky broken into visible blotchy patches",
issue 41). Softening the band edges (palette step 4) and wider ramps did not change what a rater saw (cmp7).

What runs, where the picture is *calm*:

- **Where.** Two tests, multiplied. Few edges: the palette's edge map (a pixel more than
  ``palette.SMOOTH_LEVELS`` from its 7 x 7 blur) averaged over a ``(2 * DENSITY_RADIUS + 1)`` square is below
  ``CALM_FULL`` (fully calm) to ``CALM_NONE`` (not at all); foliage, stone, fabric and every drawn line have far
  more edges than that. Even: the std of the *model's* luma (what the palette painted, not the paint, whose bands
  make a lake look as uneven as a cloud) over the filter's window is below ``EVEN_FULL`` to ``EVEN_NONE`` levels.
  The second test keeps clouds: without it a cloud's soft shapes passed the first and were smoothed away, and a
  blind rater preferred the unsmoothed picture on 6 photos ("clouds blurred into shapeless mush"; cmp11: all
  2.95 -> 3.02, preferred 11 to 6).
- **What.** A guided filter (He, Sun and Tang 2013, the paint guiding itself through its luma) over a
  ``(2 * RADIUS_PX + 1)`` window: steps of less than about ``sqrt(EPS)`` levels (bands, blotches) melt into a
  gradient, an edge of more stays. It is computed at 1/``FIT_SCALE`` of the size and brought up bilinearly (a
  calm area has no finer detail): ~15 ms at 1024 x 576 on 2 cores, where fitting at half size and applying at full
  size (He and Sun's "Fast Guided Filter", as ``imaging.guided`` does) cost 50 ms and looked the same. The whole
  step, with its masks, ~25 ms at 1024 x 768 (``imaging.palette``, step 5).

Blind rounds on the 31 photos of ../shared/photos (toon, default settings, HEAD before against after; keys and
ratings in the issue's closing note): both tests as shipped (cmp13), the smoothed picture preferred on 10
photos, the painted one on none, 21 the same (all 3.27 -> 3.29: scene_10's lake 3.0 -> 3.5); the evenness read
from the paint instead (cmp12) 8 to 0.

Measured and left out (2026-12-05): where the *photo* is soft (out of focus or smooth: its fine detail, a 13 x 13
mean of |luma - its 1 px blur|, under 2.5 levels, none from 4.5), the output refitted to the photo's luma by a guided
filter (6 px windows), so a bokeh background follows the photo's soft shapes instead of the style's outlined blobs.
It reaches 20-99 % of most pictures and look.py's colours median went 0.563 -> 0.585; two blind raters: cmp63
preferred it on 1 photo (scene_5's lake), the old on none; cmp64 on 1 (face_8), the old on 2 (face_5, face_7:
"softer, weaker outlines", "background stays photo blur").

Deterministic; the input arrays are never modified.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageChops, ImageFilter

from .guided import LUMA, box_mean, fit

RADIUS_PX = 8          # the filter's window radius at the picture's size
EPS = 12.0 ** 2        # in u8 levels squared: steps of less than about 12 levels melt into a gradient
FIT_SCALE = 4          # the gradient is computed at a quarter of the size
DENSITY_RADIUS = 8     # edge share measured over a 17 x 17 square
CALM_FULL = 0.03       # up to this share of edge pixels the area is painted as a gradient ...
CALM_NONE = 0.10       # ... from this share it keeps the palette's paint
EVEN_FULL = 3.0        # up to this std of the model's luma around a pixel (levels) the area is even ...
EVEN_NONE = 7.0        # ... from this it has shapes of its own (a cloud, a reflection) and keeps its paint
MIN_CALM_SHARE = 0.005  # a picture with less calm area than this is left as painted (no cost)
_RADIUS = max(1, RADIUS_PX // FIT_SCALE)  # the window's radius where the filter runs


_WEIGHT_TABLE = [round(255 * min(1.0, max(0.0, (CALM_NONE - level / 255) / (CALM_NONE - CALM_FULL))))
                 for level in range(256)]


def calm_weight(edges: Image.Image) -> Image.Image:
    """L image, 255 where a pixel's colour comes all from the gradient, 0 where it keeps the palette's paint.
    ``edges`` is the palette's L edge map (255 on an edge). All in Pillow's C code: a box blur and a table."""
    return edges.filter(ImageFilter.BoxBlur(DENSITY_RADIUS)).point(_WEIGHT_TABLE)


def smooth_calm(painted: Image.Image, source: Image.Image, edges: Image.Image) -> Image.Image:
    """The palette's paint (RGB) -> the same with its calm areas as gradients (module doc). ``source`` is what
    the palette painted (the model's output, sharpened): how even an area is is read there, where a lake is
    smooth and a cloud has its shapes, not from the paint, whose bands make a lake look as uneven as a cloud.
    The gradient is computed at 1/``FIT_SCALE`` of the size and brought up bilinearly: a calm area has no edge
    finer than that, and at the picture's size the float work cost 50 ms at 1024 x 576 against ~15 ms."""
    weight = calm_weight(edges)
    calm_pixels = sum(level * count for level, count in enumerate(weight.histogram())) / 255
    if calm_pixels < MIN_CALM_SHARE * weight.width * weight.height:
        return painted
    size = (max(1, painted.width // FIT_SCALE), max(1, painted.height // FIT_SCALE))
    even = _even(np.asarray(source.resize(size, Image.Resampling.BILINEAR)))
    weight = ImageChops.multiply(weight, Image.fromarray(even).resize(painted.size, Image.Resampling.BILINEAR))
    smooth = _guided_self(np.asarray(painted.resize(size, Image.Resampling.BILINEAR)))
    return Image.composite(Image.fromarray(smooth).resize(painted.size, Image.Resampling.BILINEAR), painted, weight)


def _even(rgb: np.ndarray) -> np.ndarray:
    """h x w u8: 255 where the luma's spread (std) around a pixel is at most ``EVEN_FULL`` levels, 0 from
    ``EVEN_NONE``, over the filter's window."""
    guide = rgb.astype(np.float32) @ LUMA
    mean = box_mean(guide, _RADIUS)
    spread = np.sqrt(np.maximum(box_mean(box_mean(guide * guide, _RADIUS) - mean * mean, _RADIUS), 0.0))
    even: np.ndarray = np.rint(255 * np.clip((EVEN_NONE - spread) / (EVEN_NONE - EVEN_FULL), 0, 1)).astype(np.uint8)
    return even


def _guided_self(rgb: np.ndarray) -> np.ndarray:
    """h x w x 3 u8 -> the same through a guided filter steered by its own luma (module doc), u8."""
    pixels = rgb.astype(np.float32)
    guide = pixels @ LUMA
    out = np.empty_like(pixels)
    for channel, (a, b) in enumerate(fit(guide, (pixels[..., c] for c in range(3)), _RADIUS, EPS)):
        out[..., channel] = a * guide + b
    smooth: np.ndarray = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    return smooth
