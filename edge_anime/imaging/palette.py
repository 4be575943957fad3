"""The cel palette: a style's last step, which paints the picture with a few hundred flat colours.

Why a post-step and not the model alone: a cel or cartoon picture is made of flat areas of a few colours, and
a small convolutional generator cannot draw a hard step between two flat colours: it ramps. The bundled
styles learn the bands and ink of their target, yet their output still held 0.81-0.91 of the photo's
distinct 5-bit colours (PNG; the target itself 0.50), and a JPEG adds ringing on top (issue 27 asks <= 0.6
as saved). Snapping to a fixed grid (L* steps, a*b* steps) was measured and rejected: every contour of the
grid becomes a JPEG edge and the saved picture had *more* colours (0.91). What works is what a colourist
does: choose the picture's own palette and repaint every pixel with its nearest entry.

0. **Sharpen.** An unsharp mask (``SHARPEN``) on the model's output: a small generator draws every edge as a
   ramp a few pixels wide, and a rater's first words for the bundled toon were "flattens by blurring, castles
   and streets look out of focus" (issue 41 asks flat fills that keep shapes, no blur). Sharpened, window
   frames, roof lines and lettering come out as steps the palette keeps; flat areas move by less than its
   threshold and stay flat. Blind round cmp6 (2026-12-04, the 31 shared photos, toon, sharpened at 112 entries
   against unsharpened at 256): all 2.89 -> 3.08, faces 3.06 -> 3.50, scenes 2.83 -> 2.93, preferred on 14
   photos, the unsharpened on 3. With toon4, crisper itself, again (2026-12-05, 33 photos, two raters a round): at
   0 % preferred 10 and 14 to 4 and 2 (cmp76), at 40 % 4 and 6 to 1 and 1 (cmp77), though the mask doubles the
   grain raters name on scenes (docs/styles.md, "What the network leaves on the table"). ~10 ms at 1024 x 768
   (2 cores; benchmarks/palette.py: the whole step 53 -> 63 ms).
1. **Sample.** About ``SAMPLE_PIXELS`` pixels, strided (no averaging: a thumbnail would blur the ink lines
   to grey and there would be no black to paint them with). The most saturated ``SATURATED_SHARE`` of the
   sample is added ``SATURATED_REPEAT`` more times: median cut gives boxes by population, and lips, signs
   and flowers are small but are what a viewer looks at (without it, lips came out brown).
2. **Palette.** Pillow's median cut on the sample (C, a few ms), then ``REFINE_ROUNDS`` rounds of k-means
   on the sample: each entry moves to the mean of the pixels it paints, so a blonde stays blonde instead of
   the box's grey-beige centre (Pillow's own ``kmeans=`` runs on the whole picture: ~150 ms at 1024 px;
   here a round is Pillow mapping the sample plus a bincount). ``GREY_ENTRIES`` exact greys are always in
   and near-grey entries become grey: a warm photo with few greys had its greys painted tan otherwise.
3. **Paint.** Pillow maps every pixel to its nearest entry without dithering (dither is texture, the
   opposite of cel paint), reading smooth areas from a blur (``apply_palette`` says why), and the entries
   take the style's ``chroma``.
4. **Soften.** Where two entries meet with a step of at most ``SOFT_LEVELS`` (a gradient of sky or skin cut into
   bands), the step becomes a 3-pixel ramp (a 3 x 3 box blur there only); ink and the edges of shapes, which
   step by far more, stay hard. A bare step of a few levels is what the JPEG encoder rings around: on
   ../shared/photos at the default settings look.py's texture median was 0.356 with hard band edges, 0.258
   with steps of up to 6 levels ramped and 0.243 with up to 10 (faces 0.371 -> 0.348), the sky's band contours
   visibly calmer and nothing else changed; and a 2048 x 1536 photo tiled at ``image.memory_budget_mb: 300``
   moves fewer pixels by a whole entry's step against the same photo run whole (scene_0: 32.7 dB hard, 33.5 at
   6, 33.9 at 10; docs/fullres.md). 12 ms at 1024 x 768 (2 cores).
   Wider ramps (17 pixels, steps of up to 24 levels, in areas with no edge for 12 pixels around) were tried for
   the lakes and skies a rater called "posterised": a second blind rater saw no difference on 30 of 31 photos
   (cmp7, 2026-12-04), at 20 ms more; left out.
   **The knobs are at a plateau both ways** (blind rounds on the 31 shared photos, HEAD against the variant, AMD
   EPYC, 2026-12-04): bolder (``SHARPEN`` at radius 3 and 150 %, 64 entries, chroma 1.25) was preferred on 2
   photos and rejected on 8 ("grainy", "speckled"; cmp24), and fails look.py besides (cast max 6.19, colours
   median 0.607, texture 0.387); cleaner (64 entries, read from the blur up to 14 levels instead of
   ``SMOOTH_LEVELS``: look.py's texture 0.28 -> 0.256, colours 0.59 -> 0.549) was preferred on 1, rejected on 2,
   the same on 28 (cmp25). Left as they are. A 5 x 5 median of the model's output where it is busy (the share of
   edge pixels around a pixel 0.25-0.45, before step 0: foliage and blossom as flat clumps without the style's
   dark squiggles; look.py's texture median 0.33 -> 0.26, colours 0.56 -> 0.52) was the same to two raters
   (cmp52: all 2.98 -> 2.98, preferred on 4 photos, the old on 6, "soft mushy foliage"; cmp53: 3.03 -> 3.03, 6
   to 7) and costs 0.5 s at 1024 x 768 (Pillow's median): left out (2026-12-05).
5. **Calm areas.** Where the picture has few edges and the model's output is even around a pixel (a clear sky,
   still water, a wall), the paint becomes a gradient of itself: ``imaging.calm`` says how and why. Bands and
   blotches there were what raters named most on scenes; clouds, foliage and lines keep the paint of steps 3-4.
   benchmarks/palette.py, scene_1 (mostly sky): the whole step 64 -> 88 ms at 1024 x 768, 1.1 -> 1.5 s at
   4000 x 3000 (2 cores); nothing where a picture has no calm area.

Deterministic (a strided sample, no random seeds); the input array is never modified. Not for clips: a
palette chosen per frame shifts between frames and the picture flickers (the clip writer leaves it out).
Cost: benchmarks/palette.py.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageChops, ImageFilter

from .calm import smooth_calm

SAMPLE_PIXELS = 12_288   # the palette is chosen from about this many pixels, whatever the picture's size
SATURATED_SHARE = 0.1    # the most saturated share of the sample ...
SATURATED_REPEAT = 4     # ... counts this many more times in the median cut
REFINE_ROUNDS = 2        # k-means rounds on the sample after the median cut
SMOOTH_LEVELS = 6        # an entry is read from the 7 x 7 box blur where no channel differs from it by more
BOX_7X7 = ImageFilter.BoxBlur(3)  # Pillow's running sums: the radius costs nothing
BOX_3X3 = ImageFilter.BoxBlur(1)
# Step 0. Its threshold is above the INT8 variants' grain: toon4 (crisper than toon3) at threshold 3 measured
# look.py's texture median 0.32 at fp16 but 0.36 with int8 and 0.37 with int8_qat (the default's), a fine grain
# sharpened into the sky; at 6: 0.33 with int8_qat, colours 0.55 (31 photos, 1024 px, q95); 10 gave 0.32.
SHARPEN = ImageFilter.UnsharpMask(radius=2, percent=80, threshold=6)
_EDGE_TABLE = [255 if level > SMOOTH_LEVELS else 0 for level in range(256)]
GREY_ENTRIES = 16        # exact greys every 17 levels are always in the palette ...
NEUTRAL_SPREAD = 6       # ... and an entry whose max - min of R, G, B is at most this becomes the grey of its luma
SOFT_LEVELS = 10         # band edges of at most this step (each of R, G, B) are ramped (module doc, 4)
_SOFT_TABLE = [255 if level <= SOFT_LEVELS else 0 for level in range(256)]
MIN_CHROMA, MAX_CHROMA = 0.5, 2.0     # the range a style's palette.chroma may take
MIN_COLOURS, MAX_COLOURS = 32, 256  # a PIL palette holds at most 256 entries; 16 of them are greys


def _sample(rgb: np.ndarray) -> Image.Image:
    """A strided sample of the picture, its most saturated pixels repeated (module doc, 1), as a 256-wide image
    so that Pillow's C code can cut and map it."""
    flat = rgb.reshape(-1, 3)
    sample = flat[:: max(1, flat.shape[0] // SAMPLE_PIXELS)]
    spread = sample.max(axis=1).astype(np.int16) - sample.min(axis=1)
    vivid = sample[spread >= np.quantile(spread, 1.0 - SATURATED_SHARE)]
    pixels = np.concatenate([sample] + [vivid] * SATURATED_REPEAT)
    width = min(256, pixels.shape[0])  # a picture smaller than one row: one short row
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
    indices: np.ndarray = np.asarray(image.quantize(palette=_holder(palette), dither=Image.Dither.NONE))
    return indices


def _neutral(palette: np.ndarray) -> np.ndarray:
    """Entries that are nearly grey become exactly grey (their BT.601 luma), so a grey stays grey."""
    spread = palette.max(axis=1) - palette.min(axis=1)
    grey = palette @ np.array([0.299, 0.587, 0.114], np.float32)
    out: np.ndarray = palette.copy()
    out[spread <= NEUTRAL_SPREAD] = grey[spread <= NEUTRAL_SPREAD, None]
    return out


def _refine(palette: np.ndarray, fixed: np.ndarray, sample: Image.Image, rounds: int) -> np.ndarray:
    """k-means rounds on the sample: each entry moves to the mean of the sample pixels nearest to it. The
    ``fixed`` entries (the greys) take part in the choice but do not move."""
    points = np.asarray(sample, np.float64).reshape(-1, 3)
    k = palette.shape[0]
    for _ in range(rounds):
        nearest = _paint(sample, np.concatenate([palette, fixed])).reshape(-1)
        counts = np.bincount(nearest, minlength=MAX_COLOURS)[:k]
        sums = np.stack([np.bincount(nearest, weights=points[:, c], minlength=MAX_COLOURS)[:k]
                         for c in range(3)], axis=1)
        hit = counts > 0
        palette = palette.copy()
        palette[hit] = (sums[hit] / counts[hit, None]).astype(np.float32)
    return palette


def _vivid(palette: np.ndarray, chroma: float) -> np.ndarray:
    """Each entry moved away from its own grey (BT.601 luma) by ``chroma``, at most as far as keeps every channel
    in 0..255: lightness and hue stay, greys stay grey. On the palette, so it costs nothing per pixel."""
    if chroma == 1.0:
        return palette
    grey = (palette @ np.array([0.299, 0.587, 0.114], np.float32))[:, None]
    offset = palette - grey
    with np.errstate(divide="ignore", invalid="ignore"):
        room = np.where(offset > 0, (255.0 - grey) / offset, np.where(offset < 0, -grey / offset, np.inf))
    gain = np.minimum(chroma, room.min(axis=1, keepdims=True))
    out: np.ndarray = grey + offset * gain
    return out


def choose_palette(rgb: np.ndarray, colours: int) -> np.ndarray:
    """(k, 3) u8, k <= ``colours``: the palette ``apply_palette`` chooses each pixel's entry from."""
    if not MIN_COLOURS <= colours <= MAX_COLOURS:
        raise ValueError(f"palette colours: expected {MIN_COLOURS} to {MAX_COLOURS}, got {colours}")
    sample = _sample(rgb)
    greys = np.repeat(np.linspace(0.0, 255.0, GREY_ENTRIES, dtype=np.float32)[:, None], 3, axis=1)
    palette = _neutral(_refine(_neutral(_median_cut(sample, colours - GREY_ENTRIES)), greys, sample, REFINE_ROUNDS))
    palette = np.concatenate([palette, greys])
    chosen: np.ndarray = np.clip(np.rint(palette), 0, 255).astype(np.uint8)
    return chosen


def apply_palette(rgb: np.ndarray, colours: int, *, chroma: float = 1.0, calm: bool = True) -> np.ndarray:
    """H x W x 3 u8 -> the same picture painted with at most ``colours`` flat colours of its own, their chroma
    times ``chroma`` (a style's own calibration: the toon model paints a little paler than its target). Each
    pixel's entry is chosen from the palette as sampled; only then are the entries made more vivid, or a
    pixel would pick the paler neighbour of its own entry and the boost would cancel itself. ``calm``: step 5,
    calm areas as gradients (``imaging.calm``); every picture of the pipeline gets it, and False leaves the
    paint of steps 0-4 alone (what their tests and benchmarks/palette.py look at)."""
    if not MIN_CHROMA <= chroma <= MAX_CHROMA:
        raise ValueError(f"palette chroma: expected {MIN_CHROMA} to {MAX_CHROMA}, got {chroma}")
    # step 0: the model's edges sharpened (module doc), then everything below reads the sharpened picture
    image = Image.fromarray(np.ascontiguousarray(rgb[0] if rgb.ndim == 4 else rgb)).filter(SHARPEN)
    pixels = np.asarray(image)
    palette = choose_palette(pixels, colours)
    # Which entry a pixel gets is read from a 7 x 7 box blur of the picture where the picture is smooth, from
    # the pixel itself elsewhere; its colour always from the palette. The model's output carries noise (the
    # all-INT8 IR more than FP16: blotches a few pixels wide), and where a smooth gradient crosses from one
    # entry to the next that noise cuts it into small islands and speckle, whose edges the JPEG encoder then
    # rings around. look.py's texture, toon (all-INT8) on ../shared/photos / the held-out photos: painted
    # pixel by pixel 0.42 / 0.49; from a 3 x 3 blur 0.35 / 0.44; 5 x 5 0.32 / 0.36; 7 x 7 0.33 / 0.30, and
    # the islands visibly gone. Ink and edges differ from their blur by far more than the noise and keep
    # their own value: blurred, a one-pixel black line would be painted mid-grey.
    # All in Pillow's C code (numpy's int16 difference, where and gather took 40 of 55 ms at 1024 x 768).
    blurred = image.filter(BOX_7X7)
    edge = _step(image, blurred).point(_EDGE_TABLE)
    source = Image.composite(image, blurred, edge)  # the pixel itself where it is an edge, else its blur
    paletted = source.quantize(palette=_holder(palette.astype(np.float32)), dither=Image.Dither.NONE)
    paletted.putpalette(_holder(_vivid(palette.astype(np.float32), chroma)).getpalette() or [])
    painted_image = _soften(paletted.convert("RGB"))
    if calm:
        painted_image = smooth_calm(painted_image, image, edge)
    painted: np.ndarray = np.asarray(painted_image).reshape(rgb.shape)
    return painted


def _soften(painted: Image.Image) -> Image.Image:
    """Band edges of at most ``SOFT_LEVELS`` become ramps; every other pixel keeps its entry (module doc, 4).
    A pixel counts as on a small step where its 3 x 3 box blur is within ``SOFT_LEVELS`` of it in every channel:
    beside ink or a shape's edge the blur is far off, and the pixel keeps its own colour."""
    blurred = painted.filter(BOX_3X3)
    return Image.composite(blurred, painted, _step(painted, blurred).point(_SOFT_TABLE))


def _step(picture: Image.Image, blurred: Image.Image) -> Image.Image:
    """The largest of the R, G, B differences per pixel, as an L image (Pillow's C code, no numpy round trip)."""
    red, green, blue = ImageChops.difference(picture, blurred).split()
    return ImageChops.lighter(ImageChops.lighter(red, green), blue)
