"""JPEG pixels through libjpeg-turbo's TurboJPEG API (``simplejpeg``), bit for bit what Pillow would decode.

Why: at INT8 speed on a 2-core box the decode of camera JPEGs is the largest piece of work the pipeline adds
to inference. ``simplejpeg`` decodes straight into a numpy array (no Pillow image in between to copy out
of) and is a small self-contained wheel. It is used only where its result is *the same picture* Pillow
gives: both run libjpeg-turbo's accurate integer DCT with fancy upsampling, and the scale is the one
Pillow's ``draft`` would pick (1/1, 1/2, 1/4 or 1/8). The tests compare the two decoders pixel for pixel
on every bundled and shared photo and at every scale.

Everything else stays with Pillow (``decoder``): other formats, CMYK/YCCK and grayscale JPEGs (ICC and
mode conversions live there), and any JPEG libjpeg-turbo only decodes with a warning (truncated, corrupt
data): Pillow then decides exactly as it did before this path existed. Without the wheel installed
everything goes through Pillow.
"""
from __future__ import annotations

import math

import numpy as np

try:  # a base dependency, but an install without its wheel (another platform) still decodes through Pillow
    import simplejpeg
except ImportError:  # pragma: no cover - the test environment has it
    simplejpeg = None

# Pillow's JPEG draft scales (JpegImagePlugin.draft): the largest of these the requested size allows.
DRAFT_SCALES = (8, 4, 2, 1)
# numpy views that turn a decoded H x W x C array upright, per EXIF Orientation (as ImageOps.exif_transpose).
_TURNS = {
    2: lambda a: a[:, ::-1],                    # FLIP_LEFT_RIGHT
    3: lambda a: a[::-1, ::-1],                 # ROTATE_180
    4: lambda a: a[::-1],                       # FLIP_TOP_BOTTOM
    5: lambda a: a.swapaxes(0, 1),              # TRANSPOSE
    6: lambda a: a.swapaxes(0, 1)[:, ::-1],     # ROTATE_270 (90 degrees clockwise)
    7: lambda a: a.swapaxes(0, 1)[::-1, ::-1],  # TRANSVERSE
    8: lambda a: a.swapaxes(0, 1)[::-1],        # ROTATE_90 (90 degrees counter-clockwise)
}


def available() -> bool:
    """True when the TurboJPEG path can be used at all."""
    return simplejpeg is not None


def draft_scale(stored: tuple[int, int], request: tuple[int, int] | None) -> int:
    """The denominator Pillow's ``JpegImageFile.draft(mode, request)`` decodes a ``stored`` (W, H) JPEG at;
    1 for no request."""
    if request is None:
        return 1
    fits = min(stored[0] // request[0], stored[1] // request[1])
    return next(s for s in DRAFT_SCALES if fits >= s or s == 1)


def decode_rgb(data: bytes, stored: tuple[int, int], scale: int) -> np.ndarray | None:
    """An RGB JPEG's pixels at 1/``scale`` (H x W x 3 u8, as Pillow sizes a draft: sides rounded up), or None
    when this path cannot give exactly that (no wheel, a warning from libjpeg-turbo, another size): the
    caller then decodes with Pillow."""
    if simplejpeg is None:
        return None
    want_w, want_h = math.ceil(stored[0] / scale), math.ceil(stored[1] / scale)
    try:
        # strict: a recoverable error (truncated or corrupt data) raises instead of returning a patched
        # picture, so such files keep Pillow's verdict. min_factor keeps the scale from being any larger.
        pixels = simplejpeg.decode_jpeg(data, "RGB", min_width=want_w, min_height=want_h, min_factor=scale,
                                        strict=True)
    except (ValueError, OSError):
        return None
    if not isinstance(pixels, np.ndarray) or pixels.shape != (want_h, want_w, 3):
        return None
    return pixels


def upright(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """``pixels`` turned by EXIF ``orientation`` (1-8), C-contiguous: the same pixels Pillow's
    ``ImageOps.exif_transpose`` gives, without a round trip through a Pillow image."""
    turn = _TURNS.get(orientation)
    return pixels if turn is None else np.ascontiguousarray(turn(pixels))
