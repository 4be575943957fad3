"""The cel palette: a style's last step, which paints the picture with a few hundred flat colours.

Why a post-step and not the model alone: a cel or cartoon picture is made of flat areas of a few colours, and
a small convolutional generator cannot draw a hard step between two flat colours: it ramps. The bundled
styles learn the bands and ink of their target, yet their output still held 0.81-0.91 of the photo's
distinct 5-bit colours (PNG; the target itself 0.50), and a JPEG adds ringing on top (issue 27 asks <= 0.6
as saved). Snapping to a fixed grid (L* steps, a*b* steps) was measured and rejected: every contour of the
grid becomes a JPEG edge and the saved picture had *more* colours (0.91). What works is what a colourist
does: choose the picture's own palette and repaint every pixel with its nearest entry.

1. **Sample.** About ``SAMPLE_PIXELS`` pixels, strided (no averaging: a thumbnail would blur the ink lines
   to grey and there would be no black to paint them with). The most saturated ``SATURATED_SHARE`` of the
   sample is added ``SATURATED_REPEAT`` more times: median cut gives boxes by population, and lips, signs
   and flowers are small but are what a viewer looks at (without it, lips came out brown).
2. **Palette.** Pillow's median cut on the sample (C, a few ms), then ``REFINE_ROUNDS`` rounds of k-means
   on the sample in numpy: each entry moves to the mean of the pixels it paints, so a blonde stays blonde
   instead of the box's grey-beige centre. Pillow's own ``kmeans=`` runs on the whole picture and cost
   ~150 ms at 1024 px here; on the sample it is one (n x 3) @ (3 x k) product a round.
3. **Paint.** Pillow maps every pixel to its nearest entry without dithering (dither is texture, the
   opposite of cel paint).

Deterministic (a strided sample, no random seeds); the input array is never modified. Not for clips: a
palette chosen per frame shifts between frames and the picture flickers (the clip writer leaves it out).
Cost: benchmarks/palette.py.
"""
from __future__ import annotations

import numpy as np
from PIL import Image

SAMPLE_PIXELS = 12_288   # the palette is chosen from about this many pixels, whatever the picture's size
SATURATED_SHARE = 0.1    # the most saturated share of the sample ...
SATURATED_REPEAT = 4     # ... counts this many more times in the median cut
REFINE_ROUNDS = 2        # k-means rounds on the sample after the median cut
MIN_COLOURS, MAX_COLOURS = 16, 256  # a PIL palette holds at most 256 entries


def _sample(rgb: np.ndarray) -> Image.Image:
    """A strided sample of the picture, its most saturated pixels repeated (module doc, 1), as a 256-wide image
    so that Pillow's C code can cut and map it."""
    flat = rgb.reshape(-1, 3)
    sample = flat[:: max(1, flat.shape[0] // SAMPLE_PIXELS)]
    spread = sample.max(axis=1).astype(np.int16) - sample.min(axis=1)
    vivid = sample[spread >= np.quantile(spread, 1.0 - SATURATED_SHARE)]
    pixels = np.concatenate([sample] + [vivid] * SATURATED_REPEAT)
    width = 256
    rows = pixels.shape[0] // width  # the few pixels past the last full row are left out
    return Image.fromarray(np.ascontiguousarray(pixels[: rows * width]).reshape(rows, width, 3))


def _median_cut(sample: Image.Image, colours: int) -> np.ndarray:
    """(k, 3) float32: Pillow's median-cut palette of the sample (k <= colours: a plain picture needs fewer)."""
    paletted = sample.quantize(colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    used = int(np.asarray(paletted).max()) + 1
    return np.asarray(paletted.getpalette() or [], np.float32).reshape(-1, 3)[:used]


def _holder(palette: np.ndarray) -> Image.Image:
    """A P image carrying ``palette`` for ``Image.quantize(palette=...)``. Its palette has 256 entries; the
    ones past ``palette`` repeat the first, so they never win a pixel of their own."""
    padded = np.concatenate([palette, np.repeat(palette[:1], MAX_COLOURS - palette.shape[0], axis=0)])
    holder = Image.new("P", (1, 1))
    holder.putpalette(np.clip(np.rint(padded), 0, 255).astype(np.uint8).reshape(-1).tobytes())
    return holder


def _paint(image: Image.Image, palette: np.ndarray) -> np.ndarray:
    """H x W indices of each pixel's nearest palette entry (Pillow's mapping, in C, no dithering)."""
    return np.asarray(image.quantize(palette=_holder(palette), dither=Image.Dither.NONE))


def _refine(palette: np.ndarray, sample: Image.Image, rounds: int) -> np.ndarray:
    """k-means rounds on the sample: each entry moves to the mean of the sample pixels nearest to it."""
    points = np.asarray(sample, np.float64).reshape(-1, 3)
    for _ in range(rounds):
        nearest = _paint(sample, palette).reshape(-1)
        k = palette.shape[0]
        counts = np.bincount(nearest, minlength=MAX_COLOURS)[:k]
        sums = np.stack([np.bincount(nearest, weights=points[:, c], minlength=MAX_COLOURS)[:k]
                         for c in range(3)], axis=1)
        hit = counts > 0
        palette = palette.copy()
        palette[hit] = (sums[hit] / counts[hit, None]).astype(np.float32)
    return palette


def choose_palette(rgb: np.ndarray, colours: int) -> np.ndarray:
    """(k, 3) u8, k <= ``colours``: the palette ``apply_palette`` paints this picture with."""
    if not MIN_COLOURS <= colours <= MAX_COLOURS:
        raise ValueError(f"palette colours: expected {MIN_COLOURS} to {MAX_COLOURS}, got {colours}")
    sample = _sample(rgb)
    palette = _refine(_median_cut(sample, colours), sample, REFINE_ROUNDS)
    chosen: np.ndarray = np.clip(np.rint(palette), 0, 255).astype(np.uint8)
    return chosen


def apply_palette(rgb: np.ndarray, colours: int) -> np.ndarray:
    """H x W x 3 u8 -> the same picture painted with at most ``colours`` flat colours of its own."""
    pixels = rgb[0] if rgb.ndim == 4 else rgb
    palette = choose_palette(pixels, colours)
    indices = _paint(Image.fromarray(np.ascontiguousarray(pixels)), palette.astype(np.float32))
    painted: np.ndarray = palette[indices].reshape(rgb.shape)
    return painted
