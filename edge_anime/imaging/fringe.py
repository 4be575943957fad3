"""Colour fringes: a thin line in a colour that neither side of it has, nor the photo there, is repainted in a shade
of the photo's colour there, or a dark one brought to its sides' saturation; its luma (the line itself) stays.

Why: the network draws an outline where the photo steps from one area to another, and at some steps it draws it in
a colour of its own: a crimson rim around an ear against a white wall, an olive and magenta seam where a black cap
meets the forehead. Blind raters named exactly that on face_8 in two rounds ("reddish halo fringes on cap and ear",
cmp38; "reddish fringe artifacts at hairline/ear", cmp39) and on face_7's cap ("slight fringing at cap edge"). The
raw network has it (``palette``, ``tone``, ``ink`` and ``faces`` all off: the ear's rim 172, 59, 80 between skin
and a white wall); the palette's chroma makes it more vivid. An anime outline of skin is a darker skin tone,
which is what this step leaves.

How, per pixel in YCbCr (Pillow's conversion, in C). The candidates are the pixels whose luma or chroma is off the
5 x 5 box mean around them (a few per cent of a picture); only they are looked at in float:

1. **A foreign hue.** The photo's colours around the pixel (its 3 x 3) are taken at the output's luma: each one's
   (Cb, Cr) times the output's luma over its own (at most ``MAX_DARKEN`` ... ``1 / MAX_DARKEN``), as a darker or
   lighter shade of the same paint would have. Where the output's (Cb, Cr) is more than ``HUE_OFF`` from every one
   of those, it takes the nearest (fully from ``HUE_RAMP`` further): a shade of what the photo has there. Only
   candidates, thin things off their box mean, so an area the style recoloured as a whole (a teal for a green) is
   not one; a line the photo has keeps its colour (a red thread on a white shirt), and so does an ink line in a
   darker shade of its surroundings. (The sides' colour was tried first: its per-channel median between a black
   cap and skin is a third colour; and raw chroma, without the luma, took every dark ink line for a foreign hue.)
2. **A dark line saturated past its sides.** Where the output is at least ``DARK_LINE`` levels of luma darker than
   its sides (the median of 8 pixels 2 away, fully from twice that), its chroma per level of luma may be at most
   ``SATURATION_GAIN`` times the larger of its sides' and of the photo's (the most saturated of its 3 x 3
   neighbourhood); above that it is scaled down, hue kept. A skin's rim drawn dark keeps the skin's saturation
   for its darkness: dark brown-red, not crimson. The ink (``imaging.ink``) darkens toward a share of the local
   colour, which keeps that ratio, so its lines pass untouched.

**Where: the faces.** The pipeline runs it in each face's box widened to its hair, ears and cap (the ink's
keep-out, ``core.pipeline.FACE_INK_MARGIN``), before the portrait is drawn there. Over whole pictures (the 31
shared photos at the default settings, toon4, 2026-12-05, an earlier cut) it changed 2-7 % of a scene's pixels,
mostly the warm dark outlines in autumn foliage and on torii gates, which are the style's own and looked no better,
for 60 ms a 1024 x 768 picture (2-vCPU EPYC). Inside the faces' boxes it is what raters named: face_8's ear rim
116, 29, 42 -> 74, 49, 44, its cap's seam olive and magenta -> skin-brown, face_7's gold chain without its red
edges; ~65 ms where the boxes cover a 1024 x 1079 selfie. look.py's colours median 0.547 -> 0.561 (the repainted
lines are new colours to the JPEG; their chroma in steps of 6 made it worse, 0.006-0.03 a photo), its casts lower.

Only for stills with the palette: in a clip the candidates change per frame. Deterministic; the input arrays are
never modified.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from PIL import Image, ImageFilter

HUE_OFF = 10.0          # (Cb, Cr) distance from all the photo has around it past which a line's hue is foreign
HUE_RAMP = 6.0          # ... fully so this much further
MAX_DARKEN = 8.0        # the photo's colours are shaded to the output's luma by at most this factor either way
DARK_LINE = 20.0        # luma levels under its neighbours' median from which a pixel is a dark line
SATURATION_GAIN = 1.3   # a dark line may be this much more saturated per level of luma than its sides or the photo
MIN_LUMA = 16.0         # luma floor of the ratio chroma / luma (near black the ratio is noise)
CANDIDATE_CHROMA = 10   # |Cb - box| + |Cr - box| (levels) from which a pixel is a candidate for step 1 ...
CANDIDATE_DARK = 12     # ... or darker than its box mean by this many levels, for step 2
BOX_5X5 = ImageFilter.BoxBlur(2)
# A region is cleaned in bands of this many rows, each with the rows its 5 x 5 reaches above and below, so a
# face's box in a 24-megapixel picture of ``image.resize: full`` needs a band's memory, not the box's: ~130 B a
# pixel of a band with the result's copy (tracemalloc, a 1024 x 1079 selfie: 8.3 MB), ~50 MB for a 6000 px wide box
BAND_ROWS = 64
MARGIN_ROWS = 2
# the sides: 8 pixels 2 away (the 5 x 5's corners and edge middles); a line up to 2 px wide through the pixel
# crosses at most 2-3 of them, so their median is the sides' (a rank filter over the whole 5 x 5 cost 3x the time)
_NEIGHBOURS = [(dy, dx) for dy in (-2, 0, 2) for dx in (-2, 0, 2) if (dy, dx) != (0, 0)]
_PHOTO_3X3 = [(dy, dx) for dy in range(-1, 2) for dx in range(-1, 2)]


def clean_fringes(output: np.ndarray, photo: np.ndarray,
                  within: Iterable[tuple[int, int, int, int]] | None = None) -> np.ndarray:
    """``output`` (H x W x 3 u8, the styled picture) with its colour fringes repainted (module doc); ``photo`` is
    the picture as fed to the model, same size. ``within``: only inside these boxes (x0, y0, x1, y1, clipped to the
    picture; the pipeline's faces with their hair and ears), None: everywhere. Returns ``output`` itself when
    nothing changed, else a new array."""
    if output.shape != photo.shape or output.ndim != 3 or output.shape[2] != 3:
        raise ValueError(f"fringes: output {output.shape} and photo {photo.shape} must both be H x W x 3")
    height, width = output.shape[:2]
    result = output
    for x0, y0, x1, y1 in [(0, 0, width, height)] if within is None else within:
        x0, y0, x1, y1 = max(0, x0), max(0, y0), min(width, x1), min(height, y1)
        if x1 - x0 < 5 or y1 - y0 < 5:
            continue
        # in bands (BAND_ROWS), each read from the picture as it came in: a band does not see the one above's
        # repainting, so the bands join as one piece would
        for top in range(y0, y1, BAND_ROWS):
            lo, hi = max(y0, top - MARGIN_ROWS), min(y1, top + BAND_ROWS + MARGIN_ROWS)
            cleaned = _clean(output[lo:hi, x0:x1], photo[lo:hi, x0:x1])
            if cleaned is not None:
                rows = min(BAND_ROWS, y1 - top)
                result = result.copy() if result is output else result
                result[top:top + rows, x0:x1] = cleaned[top - lo:top - lo + rows]
    return result


def _clean(output: np.ndarray, photo: np.ndarray) -> np.ndarray | None:
    """One band: the cleaned copy, or None when nothing in it is a fringe."""
    out_ycc = Image.fromarray(np.ascontiguousarray(output)).convert("YCbCr")
    own = np.asarray(out_ycc, np.int16)
    pic = np.asarray(Image.fromarray(np.ascontiguousarray(photo)).convert("YCbCr"), np.int16)
    box = np.asarray(Image.merge("RGB", out_ycc.split()).filter(BOX_5X5), np.int16)  # Pillow blurs no YCbCr image
    # The candidates: tests each step's exact test implies (the photo's own pixel is one of its 3 x 3; a line's box
    # mean holds up to 40 % of the line itself). The two off the box mean, in int16 on the whole band, leave a few
    # per cent of its pixels; the float tests run on those only (on the whole band they were half the step's time).
    off_box = np.abs(own[..., 1] - box[..., 1]) + np.abs(own[..., 2] - box[..., 2])
    darker = box[..., 0] - own[..., 0]
    chroma_off, dark = off_box > CANDIDATE_CHROMA, darker > CANDIDATE_DARK
    index = np.flatnonzero(chroma_off | dark)
    if not index.size:
        return None
    y_cb_cr, seen_here = own.reshape(-1, 3)[index], pic.reshape(-1, 3)[index]
    out_c = np.hypot(y_cb_cr[:, 1] - 128, y_cb_cr[:, 2] - 128, dtype=np.float32)
    pic_c = np.hypot(seen_here[:, 1] - 128, seen_here[:, 2] - 128, dtype=np.float32)
    shade = np.clip(np.maximum(y_cb_cr[:, 0], MIN_LUMA).astype(np.float32) / np.maximum(seen_here[:, 0], MIN_LUMA),
                    1.0 / MAX_DARKEN, MAX_DARKEN)  # step 1's shading, of the photo's own pixel
    off_photo = np.hypot(y_cb_cr[:, 1] - 128 - (seen_here[:, 1] - 128) * shade,
                         y_cb_cr[:, 2] - 128 - (seen_here[:, 2] - 128) * shade)
    saturated = (out_c * np.maximum(seen_here[:, 0], MIN_LUMA)
                 > SATURATION_GAIN * pic_c * np.maximum(y_cb_cr[:, 0], MIN_LUMA))
    index = index[(chroma_off.reshape(-1)[index] & (off_photo > HUE_OFF)) | (dark.reshape(-1)[index] & saturated)]
    if not index.size:
        return None
    width = own.shape[1]
    rows, cols = index // width + 2, index % width + 2  # in the planes padded by 2
    planes = np.pad(own, ((2, 2), (2, 2), (0, 0)), mode="edge")
    pic = np.pad(pic, ((2, 2), (2, 2), (0, 0)), mode="edge")
    here = planes[rows, cols].astype(np.float32)  # K x 3: Y, Cb, Cr
    around = np.stack([planes[rows + dy, cols + dx] for dy, dx in _NEIGHBOURS], axis=1)  # K x 8 x 3
    middle = np.partition(around, (3, 4), axis=1)  # the sides' luma and colour: the median of the 8
    sides = (middle[:, 3].astype(np.float32) + middle[:, 4]) / 2.0
    seen = np.stack([pic[rows + dy, cols + dx] for dy, dx in _PHOTO_3X3], axis=1).astype(np.float32)  # K x 9 x 3

    cb, cr = here[:, 1] - 128.0, here[:, 2] - 128.0
    side_cb, side_cr = sides[:, 1] - 128.0, sides[:, 2] - 128.0
    seen_cb, seen_cr = seen[..., 1] - 128.0, seen[..., 2] - 128.0
    # 1: a foreign hue takes the nearest shade of what the photo has around it
    shade = np.clip(np.maximum(here[:, None, 0], MIN_LUMA) / np.maximum(seen[..., 0], MIN_LUMA),
                    1.0 / MAX_DARKEN, MAX_DARKEN)
    shade_cb, shade_cr = seen_cb * shade, seen_cr * shade  # K x 9: the photo's paint at the output's luma
    apart = np.hypot(cb[:, None] - shade_cb, cr[:, None] - shade_cr)  # K x 9
    nearest = apart.argmin(axis=1)
    pick = np.arange(nearest.size)
    weight = np.clip((apart[pick, nearest] - HUE_OFF) / HUE_RAMP, 0.0, 1.0)
    cb, cr = cb + (shade_cb[pick, nearest] - cb) * weight, cr + (shade_cr[pick, nearest] - cr) * weight
    # 2: a dark line no more saturated for its luma than its sides or the photo, times SATURATION_GAIN
    luma = np.maximum(here[:, 0], MIN_LUMA)
    reference = np.maximum(np.hypot(side_cb, side_cr) / np.maximum(sides[:, 0], MIN_LUMA),
                           (np.hypot(seen_cb, seen_cr) / np.maximum(seen[..., 0], MIN_LUMA)).max(axis=1))
    cap = SATURATION_GAIN * reference * luma
    length = np.hypot(cb, cr)
    dark = np.clip((sides[:, 0] - here[:, 0] - DARK_LINE) / DARK_LINE, 0.0, 1.0)
    scale = 1.0 - (1.0 - np.minimum(1.0, cap / np.maximum(length, 1e-3))) * dark
    cb, cr = cb * scale, cr * scale

    changed = (weight > 0) | (scale < 1.0)
    if not changed.any():
        return None
    y, cb, cr = here[changed, 0], cb[changed], cr[changed]
    rgb = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], axis=1)  # JFIF, as Pillow
    result: np.ndarray = output.copy()
    flat = result.reshape(-1, 3)
    flat[index[changed]] = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
    return result
