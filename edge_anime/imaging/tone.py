"""The tone guard: a cheap post-step that keeps a stylized picture from coming out washed out or colour-cast.

Why: a style can collapse a photo dominated by one colour into fog (the bundled ``toon`` gave blue-sky photos
0.28 of the photo's L* contrast) and tint its whites (243,243,243 -> 232,236,235). The guard compares the
model's output with the photo exactly as it was fed to the model and repairs only what went wrong:

1. **Neutrals.** Where the *photo* is neutral (max - min of R, G, B at most ``NEUTRAL_FULL`` levels, fading
   to nothing at ``NEUTRAL_NONE``) the output pixel is pulled to the grey of its own luma, so whites and greys
   lose a cast the model gave them. A colour the model painted deliberately over a grey (max - min above
   ``PAINT_FULL`` levels, fully kept from ``PAINT_KEEP``) is left alone. Only candidate pixels (the photo's
   neutral ones) are touched, in float32; when the sample shows no cast (on the photo's neutral pixels the
   output's mean max - min, times step 2's gain, is at most ``CAST_SKIP`` levels above the photo's) the step
   is skipped. It runs
   first: a grey stays grey through step 2's curve, while a cast left for later would be multiplied by its
   gain.
2. **Range.** L* is estimated per pixel from luma through a 256-entry table, on a strided sample (about
   ``SAMPLE_PIXELS`` pixels, the same for every picture size). When the output's L* spread (std, the figure
   of ``../shared/tools/look.py``) is below ``MIN_RATIO`` of the photo's, the output's L* is stretched around
   its mean by the gain that brings it back to ``MIN_RATIO`` (at most ``MAX_GAIN``) and its mean moved
   ``MEAN_PULL`` of the way to the photo's. The change is one 256-entry curve applied to R, G and B alike: a
   grey stays grey, hues keep their order, and it costs one table look-up per byte. A picture that already has
   ``MIN_RATIO`` of the photo's spread is left as it is: a strong style comes through unchanged, and the
   guard never darkens or flattens a picture.
3. **Lost colours** (``imaging.hues``, before step 2's curve): where the photo has a clear colour and the output
   kept less than half its chroma at about the same lightness (a sign's green stripe painted grey), the
   photo's colour comes back under the output's luma. Only such pixels change.

4. **Whites** (``keep_whites``, after step 2's curve): where the photo is near white (its luma, a 3 x 3 mean, from
   ``WHITE_FROM`` and fully from ``WHITE_FULL``) the output is lightened toward white until it is at most
   ``WHITE_DROP`` levels of luma darker than the photo there; its hue stays (each channel moves the same share of
   its way to 255). The style paints a white cloud, a pale sky or blossom a dingy light grey (230 where the photo
   is 247), and blind raters named it on scenes as "a yellowish stain in the cloud", "sky washed grey", "clouds
   greyish" (issue 41, five raters, 2026-12-05). Only the photo's near-white pixels are touched; pictures only
   (a clip keeps the guard it had: ``ToneTrack``).

``strength`` (0..1) scales all four: the stretch's gain and mean shift, the share of a cast removed (the
pull is raised by the stretch's gain, so the cast left is never larger than before), the weight of a lost
colour's return and the share of a white's lift. 0 is the identity. The
result is deterministic; the input arrays are never modified.

Cost (benchmarks/tone.py, docs/design.md): a few ms at 1024 x 768; the steps are bounded by one pass of
table look-ups over the output plus float work on the photo's neutral (step 1) and near-white (step 4) pixels only.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

from .hues import restore_hues

SAMPLE_PIXELS = 65_536   # statistics are taken on about this many pixels, whatever the picture's size
MIN_RATIO = 0.9          # the output keeps at least this share of the photo's L* std (the issue asks >= 0.8)
MAX_GAIN = 4.0           # the stretch never multiplies L* differences by more (0.28 -> 0.9 needs 3.2)
MEAN_PULL = 0.5          # share of the way the output's mean L* moves to the photo's when it is stretched
MIN_SPREAD_L = 2.0       # a photo with an L* std below this is flat: nothing to restore
NEUTRAL_FULL = 8         # photo's max - min (u8 levels) up to which a pixel is fully neutral (about C* 3)
NEUTRAL_NONE = 18        # ... and from which it is not neutral at all (look.py's C* < 4 reaches 13 on photos)
PAINT_FULL = 64          # output's max - min up to which a cast on a neutral pixel is fully removed
PAINT_KEEP = 128         # ... and from which the output's colour is taken as deliberate paint and kept
CAST_SKIP = 0.5          # step 2 skips when the output's neutral sample is at most this much less grey (levels)
LUMA_WEIGHTS = (77, 150, 29)  # BT.601 luma in 1/256ths: the u8 grey a pixel reads as
WHITE_FROM = 222         # step 4: the photo's luma (u8, a 3 x 3 mean) from which a pixel counts as white ...
WHITE_FULL = 236         # ... and from which fully (L* about 89 and 94)
WHITE_DROP = 4           # ... where the output may be at most this many levels of luma darker than the photo


def _srgb_to_lstar(values: np.ndarray) -> np.ndarray:
    """CIE L* of the sRGB grey with these u8 values (look.py's formula restricted to greys)."""
    c = values.astype(np.float64) / 255.0
    linear = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    f = np.where(linear > 216 / 24389, np.cbrt(linear), (24389 / 27 * linear + 16) / 116)
    lstar: np.ndarray = 116 * f - 16
    return lstar


def _ramp(full: float, none: float) -> np.ndarray:
    """256 weights over a u8 max - min: 1 up to ``full``, falling linearly to 0 at ``none``."""
    levels = np.arange(256, dtype=np.float32)
    ramp: np.ndarray = np.clip((none - levels) / (none - full), 0.0, 1.0).astype(np.float32)
    return ramp


_NEUTRAL_WEIGHT = _ramp(NEUTRAL_FULL, NEUTRAL_NONE)
_PAINT_WEIGHT = _ramp(PAINT_FULL, PAINT_KEEP)
LSTAR_OF_GREY = _srgb_to_lstar(np.arange(256)).astype(np.float32)  # u8 grey -> L*, monotonic
IDENTITY = np.arange(256, dtype=np.uint8)


@dataclass(frozen=True)
class ToneStats:
    """What the guard decides from: L* mean and std of photo and output on the sample, and the cast."""

    photo_mean: float
    photo_std: float
    out_mean: float
    out_std: float
    cast: float | None  # mean max - min of the output where the photo is neutral, less the photo's own there
                        # (None: no neutral pixels)

    @property
    def ratio(self) -> float:
        """L* contrast of the output against the photo (look.py's ``contrast``); 1.0 for a flat photo."""
        return self.out_std / self.photo_std if self.photo_std >= MIN_SPREAD_L else 1.0


@dataclass(frozen=True)
class ToneMap:
    """The range step as a line on L*: ``L' = gain * (L - pivot) + pivot + shift``; identity is (1, 0)."""

    gain: float = 1.0
    pivot: float = 50.0
    shift: float = 0.0

    @property
    def identity(self) -> bool:
        return self.gain == 1.0 and self.shift == 0.0

    def lut(self) -> np.ndarray:
        """The 256-entry curve that applies the line to u8 values (via the grey's L* and back)."""
        if self.identity:
            return IDENTITY
        target = np.clip(self.gain * (LSTAR_OF_GREY - self.pivot) + self.pivot + self.shift, 0.0, 100.0)
        values = np.interp(target, LSTAR_OF_GREY, np.arange(256, dtype=np.float32))
        lut: np.ndarray = np.clip(np.rint(values), 0, 255).astype(np.uint8)
        return lut

    def blend(self, other: ToneMap, weight: float) -> ToneMap:
        """``weight`` of ``other`` mixed into this map (a clip's running map, see ``ToneTrack``)."""
        keep = 1.0 - weight
        return ToneMap(gain=keep * self.gain + weight * other.gain, pivot=keep * self.pivot + weight * other.pivot,
                       shift=keep * self.shift + weight * other.shift)


def _sample(rgb: np.ndarray) -> np.ndarray:
    """A strided view of about SAMPLE_PIXELS pixels (no copy): the same rows and columns for photo and output."""
    height, width = rgb.shape[:2]
    step = max(1, int(np.sqrt(height * width / SAMPLE_PIXELS)))
    return rgb[::step, ::step]


def _luma(rgb: np.ndarray) -> np.ndarray:
    """u8 luma (BT.601) of H x W x 3 u8, computed in uint16 (no float pass)."""
    r, g, b = LUMA_WEIGHTS
    acc = rgb[..., 0].astype(np.uint16) * r
    acc += rgb[..., 1].astype(np.uint16) * g
    acc += rgb[..., 2].astype(np.uint16) * b
    acc += 128
    luma: np.ndarray = (acc >> 8).astype(np.uint8)
    return luma


def _spread(rgb: np.ndarray) -> np.ndarray:
    """max - min of R, G, B per pixel (u8): 0 for a grey, a cheap stand-in for chroma."""
    high = np.maximum(np.maximum(rgb[..., 0], rgb[..., 1]), rgb[..., 2])
    low = np.minimum(np.minimum(rgb[..., 0], rgb[..., 1]), rgb[..., 2])
    spread: np.ndarray = high - low
    return spread


def measure(output: np.ndarray, photo: np.ndarray) -> ToneStats:
    """The statistics the guard decides from, on the strided sample of both pictures (same size)."""
    out_s, photo_s = _sample(output), _sample(photo)
    l_out = LSTAR_OF_GREY[_luma(out_s)]
    l_photo = LSTAR_OF_GREY[_luma(photo_s)]
    spread_photo = _spread(photo_s)
    neutral = spread_photo <= NEUTRAL_FULL
    cast = float(_spread(out_s)[neutral].mean() - spread_photo[neutral].mean()) if neutral.any() else None
    return ToneStats(photo_mean=float(l_photo.mean()), photo_std=float(l_photo.std()),
                     out_mean=float(l_out.mean()), out_std=float(l_out.std()), cast=cast)


def plan_range(output: np.ndarray, stats: ToneStats, *, strength: float = 1.0) -> ToneMap:
    """The range step's map for ``output`` (identity when its spread is already ``MIN_RATIO`` of the photo's).

    The gain is checked on the sample after the curve's clipping at black and white, and raised (up to
    ``MAX_GAIN``) until the sample reaches the ratio asked for: clipping eats part of a plain stretch."""
    if strength <= 0 or stats.ratio >= MIN_RATIO or stats.out_std <= 1e-3:
        return ToneMap()
    wanted = MIN_RATIO * stats.photo_std
    gain = min(MAX_GAIN, wanted / stats.out_std)
    shift = MEAN_PULL * (stats.photo_mean - stats.out_mean)
    sample = _sample(output)
    tone = ToneMap()
    for _ in range(3):
        tone = ToneMap(gain=1.0 + strength * (gain - 1.0), pivot=stats.out_mean, shift=strength * shift)
        reached = float(LSTAR_OF_GREY[_luma(tone.lut()[sample])].std())
        if reached >= strength * wanted + (1 - strength) * stats.out_std - 0.05 or gain >= MAX_GAIN:
            break
        gain = min(MAX_GAIN, gain * wanted / max(reached, 1e-3))
    return tone


def apply_range(output: np.ndarray, tone: ToneMap) -> np.ndarray:
    """``output`` through the map's curve (a new array; ``output`` itself when the map is the identity)."""
    if tone.identity:
        return output
    mapped: np.ndarray = np.take(tone.lut(), output)  # np.take: 1.6 ms at 1024 x 768 where lut[output] takes 2.8
    return mapped


def pull_neutrals(output: np.ndarray, photo: np.ndarray, *, strength: float = 1.0, reach: float = 1.0,
                  in_place: bool = False) -> np.ndarray:
    """Pull the output toward the grey of its own luma where the photo is neutral (module doc, step 1).

    Works on the photo's candidate pixels only (max - min below ``NEUTRAL_NONE``), so its cost follows how
    much of the picture is grey. ``reach`` (the range step's gain, >= 1) widens the fade-out by that factor:
    what the pull leaves of a cast the curve then multiplies by its gain, and a pixel near neutral would come
    out more cast than the model made it (measured: scene_1 4.5 -> 6.4 C* at a gain of 3.3). Returns a new
    array (``output`` itself, changed, with ``in_place``), or
    ``output`` untouched when nothing is to be done."""
    if strength <= 0:
        return output
    spread_in = _spread(photo).reshape(-1)
    none = NEUTRAL_FULL + (NEUTRAL_NONE - NEUTRAL_FULL) * max(reach, 1.0)
    candidates = np.flatnonzero(spread_in < none)
    if candidates.size == 0:
        return output
    picked = output.reshape(-1, 3)[candidates]  # N x 3 u8, one gather
    neutral_weight = _NEUTRAL_WEIGHT if reach <= 1.0 else _ramp(NEUTRAL_FULL, none)
    weight = neutral_weight[spread_in[candidates]] * _PAINT_WEIGHT[_spread(picked[None])[0]]
    weight *= np.float32(strength)
    pixels = picked.T.astype(np.float32)  # 3 x N: rows are contiguous channels
    grey = _luma(picked[None])[0].astype(np.float32)
    pixels += weight * (grey - pixels)
    result = output if in_place else output.copy()
    result.reshape(-1, 3)[candidates] = (pixels.T + 0.5).astype(np.uint8)  # stays within 0..255: a mix
    return result


def _mean_luma(rgb: np.ndarray) -> np.ndarray:
    """BT.601 luma (Pillow's L, in C) averaged over 3 x 3 (u8): step 4 compares the two pictures' light, not their
    grain, so the photo's sensor noise is not painted into the output and an output as light as the photo is left
    exactly as it is."""
    image = Image.fromarray(np.ascontiguousarray(rgb)).convert("L")
    luma: np.ndarray = np.asarray(image.filter(ImageFilter.BoxBlur(1)))
    return luma


def restore_tone(output: np.ndarray, photo: np.ndarray, *, strength: float = 1.0, neutral: bool = True,
                 hues: bool = True, whites: bool = True, tone: ToneMap | None = None, stats: ToneStats | None = None
                 ) -> np.ndarray:
    """The guard: ``output`` (H x W x 3 u8, the model's) repaired against ``photo`` (the picture as fed to the
    model, same size). ``tone`` overrides the range step's map (a clip's smoothed one, ``ToneTrack``);
    ``stats`` are ``measure(output, photo)`` when the caller has them already; ``hues``: step 3; ``whites``: step 4.
    Returns ``output`` itself when nothing needed repair, else a new array."""
    if output.shape != photo.shape or output.ndim != 3 or output.shape[2] != 3:
        raise ValueError(f"tone guard: output {output.shape} and photo {photo.shape} must both be H x W x 3")
    if strength <= 0:
        return output
    stats = stats if stats is not None else measure(output, photo)
    if tone is None:
        tone = plan_range(output, stats, strength=strength)
    result = output
    if neutral and stats.cast is not None and stats.cast * max(tone.gain, 1.0) > CAST_SKIP:
        # before the stretch: the curve would multiply a cast by its gain, past what reads as a cast; a grey
        # stays grey through the curve, which treats R, G and B alike
        # and pulled so that what is left of it after the curve is (1 - strength) of the cast, not more
        pull = 1.0 - (1.0 - strength) / max(tone.gain, 1.0)
        result = pull_neutrals(output, photo, strength=pull, reach=tone.gain)
    if hues:
        result = restore_hues(result, photo, strength=strength)  # step 3: a colour the style lost
    result = apply_range(result, tone)
    if whites:
        result = keep_whites(result, photo, strength=strength)  # step 4: after the curve, against the photo's whites
    return result


def keep_whites(output: np.ndarray, photo: np.ndarray, *, strength: float = 1.0) -> np.ndarray:
    """The output lightened toward white where the photo is near white (module doc, step 4). Works on the photo's
    near-white pixels only, so its cost follows how much of the picture is white. Returns a new array, or
    ``output`` itself when nothing is to be done."""
    if strength <= 0:
        return output
    luma = _mean_luma(photo)
    candidates = np.flatnonzero(luma.reshape(-1) > WHITE_FROM)
    if candidates.size == 0:
        return output
    white = luma.reshape(-1)[candidates].astype(np.float32)
    shade = _mean_luma(output).reshape(-1)[candidates].astype(np.float32)
    picked = output.reshape(-1, 3)[candidates].astype(np.float32)
    weight = np.clip((white - WHITE_FROM) / (WHITE_FULL - WHITE_FROM), 0.0, 1.0) * np.float32(strength)
    share = np.clip((white - WHITE_DROP - shade) / np.maximum(255.0 - shade, 1.0), 0.0, 1.0) * weight
    if not share.any():
        return output
    picked += (255.0 - picked) * share[:, None]
    result: np.ndarray = output.copy()
    result.reshape(-1, 3)[candidates] = np.rint(picked).astype(np.uint8)  # within 0..255: a mix with white
    return result


class ToneTrack:
    """The range map of a clip, smoothed across its frames (in their order), so the guard does not flicker.

    Why a running blend of the map and not one map per clip: a clip cuts between scenes, and one map taken
    from its first frame would stretch a later, contrasty scene it does not fit. Why not each frame's own
    map: the generator already normalises every frame by itself and the stretch's gain follows a ratio of two
    whole-frame statistics, which steps with every object that enters the frame; a blend of ``weight`` per
    frame (0.2: about 5 frames, a fifth of a second at 24 fps) follows a cut within a few frames and hides
    the steps. The neutral pull needs no smoothing: it depends per pixel on the photo, which is still where
    the frame is still. Feed frames in order from one thread (the clip's writer)."""

    def __init__(self, *, strength: float, neutral: bool, weight: float = 0.2) -> None:
        self.strength = strength
        self.neutral = neutral
        self.weight = weight
        self._map: ToneMap | None = None

    def apply(self, output: np.ndarray, photo: np.ndarray) -> np.ndarray:
        """The guard on the next frame, with the running map."""
        if self.strength <= 0:
            return output
        stats = measure(output, photo)
        fresh = plan_range(output, stats, strength=self.strength)
        self._map = fresh if self._map is None else self._map.blend(fresh, self.weight)
        # no lost colours: their hard mask, found per frame, would flicker; no whites: rated on pictures only
        return restore_tone(output, photo, strength=self.strength, neutral=self.neutral, hues=False, whites=False,
                            tone=self._map, stats=stats)
