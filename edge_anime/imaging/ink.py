"""Ink lines from the photo's structure over the stylized picture: wires, branches, window frames, roof lines.

Why: a network regressed onto a filter of the photo smooths thin structure away, and raters of the bundled toon
called its scenes "a painted photo", "blurrier, loses thin lines like power wires" (issue 41; toon3 was preferred
on 22 of 31 photos for its darker, crisper ink alone). An anime background draws exactly that structure as line
art. The photo still has it at the output's size, so the lines are taken from the photo and drawn here, after the
cel palette and the tone guard (the guard's curve would otherwise lighten them) and before the portraits (a drawn
face keeps its own lines: the photo's wrinkles are not inked over it).

How, per pixel, all of it cheap filters (70-85 ms CPU at 1024 x 768 on a 2-vCPU EPYC under load; the picture's
own path is ~1.3 CPU-s):

1. **Lines**: a difference of Gaussians of the photo's luma (``LINE_SIGMA`` and ``LINE_RATIO`` times it; the line
   extraction of XDoG, Winnemoeller et al. 2012): negative along a dark line and on the dark side of an edge.
2. **Not texture**: minus ``TEXTURE_INHIBIT`` times the local mean of |DoG| (``TEXTURE_SIGMA``): grass, gravel and
   leaves are busy everywhere, a wire against the sky is alone (surround inhibition, Grigorescu et al. 2003).
3. **A line, not an edge**: brighter on both sides across it (``RIDGE_PX``): a cloud's soft rim or a wall's shade
   is brighter on one side only, and inked it drew dashes along every cloud (the step edges the network draws
   itself).
4. **One direction**: the structure tensor's coherence (half size, ``COHERENCE_SIGMA``): along a line or a
   building's edge the gradients agree, in foliage they point every way. Without 2 and 4 every leaf got a black
   speck ("confetti", what issue 41 names as today's flaw).
5. **Continuous**: a pixel keeps its ink only as far as ink goes on along the line's direction on both sides
   (``REACH_PX``), and a one-pixel gap between two inked pixels on the line is filled: strokes, not dashes.

The ink darkens the stylized colour (to ``1 - DARKEN`` of it at full strength): a dark line in the local hue,
as cel line art sits over colour. Deterministic, and computed in bands of rows (``BAND_ROWS`` plus a margin the
filters' reach covers) so a 24-megapixel picture of ``image.resize: full`` needs a band's memory, not the
picture's.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from PIL import Image, ImageFilter

LINE_SIGMA = 0.9  # px at the output's size: a 1-3 px wire or frame
LINE_RATIO = 1.6
TEXTURE_SIGMA = 5.0
TEXTURE_INHIBIT = 0.6
TEXTURE_GAIN = 8.0  # |DoG| is a few levels: scaled up before Pillow's u8 blur, down after
COHERENCE_SIGMA = 2.0  # at half size
COHERENCE_RAMP = (0.35, 0.65)  # coherence from which a line may be inked, and from which fully
COHERENCE_FLOOR = 4.0  # added to the tensor's trace: a flat area's few-level noise is not a direction
THRESHOLD = 2.5  # inhibited DoG (u8 levels) where ink starts ...
SOFTNESS = 5.0  # ... and this many levels further it is full: antialiased, not a hard stroke
GAP_LEVELS = 1.0  # a gap pixel needs at least this much DoG to be filled (a flat area has none: not a candidate)
RIDGE_PX = 3.0  # across the line, each side: both must be brighter than the line by THRESHOLD
REACH_PX = (3.0, 6.0)  # along the line, each side: ink must go on at one of these distances (no dash under ~7 px)
GAP_PX = 2.0  # a gap this far from ink on both sides along the line is filled
DARKEN = 0.85
BAND_ROWS = 256
MARGIN_ROWS = 24  # > 3 x the widest filter (TEXTURE_SIGMA), so bands join without a seam


def draw_ink(stylized: np.ndarray, photo: np.ndarray, *, strength: float,
             keep_out: Iterable[tuple[int, int, int, int]] = ()) -> np.ndarray:
    """``stylized`` (H x W x 3 u8) with the photo's lines inked over it; ``photo`` is the picture the model was fed,
    the same size. ``strength`` 0..1 scales the ink; ``keep_out`` boxes (x0, y0, x1, y1; faces) get none. A new
    array; the input is not changed."""
    if stylized.shape != photo.shape:
        raise ValueError(f"ink: the stylized picture is {stylized.shape}, its photo {photo.shape}")
    out = np.array(stylized)
    if strength <= 0:
        return out
    height = photo.shape[0]
    for top in range(0, height, BAND_ROWS):
        lo, hi = max(0, top - MARGIN_ROWS), min(height, top + BAND_ROWS + MARGIN_ROWS)
        alpha = ink_alpha(photo[lo:hi])[top - lo:top - lo + min(BAND_ROWS, height - top)]
        for x0, y0, x1, y1 in keep_out:
            ys = slice(max(y0 - top, 0), max(min(y1 - top, alpha.shape[0]), 0))
            alpha[ys, max(x0, 0):max(x1, 0)] = 0
        rows, cols = np.nonzero(alpha)  # only the inked pixels change (a few per cent): the rest stay as they are
        shade = 1.0 - (DARKEN * strength) * alpha[rows, cols]
        rows += top
        out[rows, cols] = np.clip(stylized[rows, cols] * shade[:, None] + 0.5, 0, 255).astype(np.uint8)
    return out


def ink_alpha(photo: np.ndarray) -> np.ndarray:
    """0..1 per pixel: how much ink (module doc, steps 1-5) the photo's structure asks for."""
    luma = Image.fromarray(np.ascontiguousarray(photo)).convert("L")
    fine = np.asarray(luma.filter(ImageFilter.GaussianBlur(LINE_SIGMA)), np.float32)
    coarse = np.asarray(luma.filter(ImageFilter.GaussianBlur(LINE_SIGMA * LINE_RATIO)), np.float32)
    dog = fine - coarse
    busy = np.uint8(np.clip(np.abs(dog) * TEXTURE_GAIN, 0, 255))
    texture = np.asarray(Image.fromarray(busy).filter(ImageFilter.GaussianBlur(TEXTURE_SIGMA)), np.float32)
    response = -dog - TEXTURE_INHIBIT * texture / TEXTURE_GAIN - THRESHOLD
    height, width = dog.shape
    rows, cols = np.nonzero(response > GAP_LEVELS - THRESHOLD)  # candidates: everything else stays 0
    alpha = np.zeros((height, width), np.float32)
    if not rows.size:
        return alpha
    gate, (tx, ty) = _coherence(luma)
    gate_at, tx_at, ty_at = gate[rows // 2, cols // 2], tx[rows // 2, cols // 2], ty[rows // 2, cols // 2]

    def at(values: np.ndarray, along_px: float, across_px: float = 0.0) -> np.ndarray:
        """``values`` at each candidate moved along its line and across it (the line's normal is (ty, -tx))."""
        y = np.clip(np.rint(rows + along_px * ty_at - across_px * tx_at), 0, height - 1).astype(np.intp)
        x = np.clip(np.rint(cols + along_px * tx_at + across_px * ty_at), 0, width - 1).astype(np.intp)
        return values[y, x]

    # a line, not an edge: brighter on both sides across it (a cloud's soft rim or a wall's shade is brighter on one)
    centre = fine[rows, cols]
    ridge = np.minimum(at(fine, 0.0, RIDGE_PX), at(fine, 0.0, -RIDGE_PX)) - centre
    raw = np.clip(np.minimum(response[rows, cols], ridge - THRESHOLD) / SOFTNESS, 0, 1) * gate_at
    alpha[rows, cols] = raw

    def along(step: float) -> np.ndarray:
        return at(alpha, step)

    near, far = REACH_PX
    ahead = np.maximum(along(near), along(far))
    behind = np.maximum(along(-near), along(-far))
    gap = np.minimum(along(GAP_PX), along(-GAP_PX))  # both neighbours on the line inked: fill between them
    kept = np.maximum(np.minimum(raw, 1.5 * np.minimum(ahead, behind)), np.minimum(gap, 1.0) * (gate_at > 0))
    alpha[rows, cols] = kept
    return alpha


def _coherence(luma: Image.Image) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """At half size: the coherence gate (0..1, ``COHERENCE_RAMP``) and the line's direction (unit x, y: across the
    mean gradient)."""
    half = luma.reduce(2)  # exactly 2 x 2 pixels a cell (an odd side's last one half), aligned in every band
    small = np.asarray(half.filter(ImageFilter.GaussianBlur(0.5)), np.float32)
    gy, gx = np.gradient(small)
    j11, j22, j12 = (_smooth(v, COHERENCE_SIGMA) for v in (gx * gx, gy * gy, gx * gy))
    coherence = np.sqrt((j11 - j22) ** 2 + 4 * j12 ** 2) / (j11 + j22 + COHERENCE_FLOOR)
    lo, hi = COHERENCE_RAMP
    gate = np.clip((coherence - lo) / (hi - lo), 0, 1)
    theta = 0.5 * np.arctan2(2 * j12, j11 - j22)  # the mean gradient's direction; the line runs across it
    return gate, (-np.sin(theta), np.cos(theta))  # indexed by full-size rows // 2, cols // 2


def _smooth(values: np.ndarray, sigma: float) -> np.ndarray:
    """A float low-pass of about ``sigma``: box-averaged over cells of ``2 sigma`` and brought back bilinearly, in
    Pillow's float mode. Why not a Gaussian: Pillow blurs u8 only (the tensor's products need their range), numpy
    has no blur and scipy is not a dependency of the runtime; three box passes by cumulative sums cost a third of
    the ink's time, this a few ms, and the tensor only needs to be smooth, not exactly Gaussian."""
    height, width = values.shape
    cell = max(2, round(2 * sigma))
    # padded to whole cells, so the cells sit on the same grid in every band (``BAND_ROWS`` and ``MARGIN_ROWS`` are
    # multiples of 2 x cell) and in the whole picture: bands then join without a seam
    rows, cols = -(-height // cell), -(-width // cell)
    padded = np.pad(values, ((0, rows * cell - height), (0, cols * cell - width)), mode="edge")
    image = Image.fromarray(np.ascontiguousarray(padded, np.float32), "F")
    small = image.resize((cols, rows), Image.Resampling.BOX)
    return np.asarray(small.resize((cols * cell, rows * cell), Image.Resampling.BILINEAR), np.float32)[:height, :width]
