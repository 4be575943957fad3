"""Every Pillow colour mode the runtime accepts -> 8-bit sRGB plus an optional 8-bit alpha.

Pillow's own ``convert("L")`` clips 16-bit and 32-bit values to 255 (a 16-bit PNG turns almost white), so the
high-precision modes are scaled here, rounded to the nearest 8-bit level (``round(v / 257)``): dropping the
low byte, as Pillow's 16-bit RGB readers do, darkens every value by half a level on average and bands smooth
skies. A 16-bit RGB(A) PNG or TIFF, which Pillow can only load as 8 bits by dropping the low byte, is decoded
twice by ``load_sixteen_bit_rgb`` (once per byte) and rounded from the whole value. CMYK goes through the
embedded ICC profile when there is one, because the naive formula Pillow falls back to is noticeably off for
press (SWOP) profiles; an RGB or grey profile goes through ``colour`` (sRGB before inference).
"""
from __future__ import annotations

import io
import logging
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageCms, ImageFile

from ..errors import InputError
from .colour import MAX_ICC_BYTES, ProfileError, colour_space, convertible, nclx_to_srgb, srgb_icc, to_srgb

log = logging.getLogger(__name__)

_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
_PLAIN_TO_RGB = frozenset({"RGB", "L", "1", "RGBX", "YCbCr", "HSV"})
# A 16-bit RGB(A) raw mode -> the raw mode of the same layout that reads the other byte of each value.
SIXTEEN_BIT_FORMATS = frozenset({"PNG", "TIFF"})
_OTHER_BYTE = {"B": "L", "L": "B", "N": "B" if np.little_endian else "L"}


def _srgb_profile() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(io.BytesIO(srgb_icc()))


def icc_is_rgb(icc: bytes | None) -> bool:
    """True for a profile that may be attached to an RGB output (not CMYK, gray or Lab)."""
    return colour_space(icc) == b"RGB "


def round_sixteen_to_eight(values: np.ndarray) -> np.ndarray:
    """0..65535 -> 0..255, to the nearest level (65535 / 257 = 255 exactly)."""
    return ((values.astype(np.uint32) + 128) // 257).astype(np.uint8)


def _rawmode(args: object) -> str | None:
    raw = args if isinstance(args, str) else args[0] if isinstance(args, tuple) and args else None
    return raw if isinstance(raw, str) else None


def _other_byte_tiles(im: ImageFile.ImageFile) -> list[ImageFile._Tile] | None:
    """``im``'s tiles reading the low byte where they read the high one, when every tile reads 16-bit RGB(A)
    (``RGB;16B``, ``RGBA;16L``...); else None. Same codec, same bits per pixel, so PNG's filters and TIFF's
    strips decode exactly as before."""
    if im.mode not in ("RGB", "RGBA") or not im.tile:
        return None
    tiles = []
    for tile in im.tile:
        raw = _rawmode(tile.args)
        if raw is None or raw not in (f"{im.mode};16B", f"{im.mode};16L", f"{im.mode};16N"):
            return None
        other = raw[:-1] + _OTHER_BYTE[raw[-1]]
        args = other if isinstance(tile.args, str) or tile.args is None else (other, *tile.args[1:])
        tiles.append(tile._replace(args=args))
    return tiles


def load_sixteen_bit_rgb(im: Image.Image, reopen: Callable[[], ImageFile.ImageFile]) -> Image.Image | None:
    """A 16-bit RGB(A) PNG or TIFF loaded with every value rounded to 8 bits, or None when ``im`` is not one.
    ``reopen`` opens the same bytes again, unloaded (``im`` may already be: a PNG's ``getexif`` loads it).

    Why twice: Pillow has no 16-bit RGB mode, and its readers keep the high byte only. Its raw modes for the
    two byte orders read the same layout, so decoding once with each gives both bytes of every value."""
    if im.format not in SIXTEEN_BIT_FORMATS or im.mode not in ("RGB", "RGBA"):
        return None
    with reopen() as high:
        other = _other_byte_tiles(high)
        if other is None:
            return None
        high.load()
        with reopen() as low:
            low.tile = other
            low.load()
            if low.size != high.size or low.mode != high.mode:
                return None  # not the same picture twice: keep the high bytes Pillow gives
            value = (np.asarray(high).astype(np.uint16) << 8) | np.asarray(low)
        rounded = Image.fromarray(round_sixteen_to_eight(value), high.mode)
        rounded.info = dict(high.info)
    return rounded


def _high_bit_depth_to_l(im: Image.Image) -> Image.Image:
    """16/32-bit integer and float grayscale -> 8-bit L, scaled (never clipped at 255)."""
    arr = np.asarray(im)
    if im.mode in _SIXTEEN_BIT_MODES:
        eight = round_sixteen_to_eight(arr)
    elif im.mode == "I":
        # 32-bit int: 16-bit PNG/TIFF data arrive as I in some Pillow paths; 0..255 data stay as they are.
        if int(arr.max(initial=0)) > 255:
            eight = round_sixteen_to_eight(np.clip(arr, 0, 65535))
        else:
            eight = np.clip(arr, 0, 255).astype(np.uint8)
    else:  # "F": float TIFFs are 0..1 by convention; anything brighter is taken as 0..255
        scale = 255.0 if float(np.nanmax(arr, initial=0.0)) <= 1.0 else 1.0
        eight = np.clip(np.nan_to_num(arr) * scale + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(eight, "L")


def _cmyk_to_rgb(im: Image.Image, icc: bytes | None) -> Image.Image:
    if icc is not None and colour_space(icc) == b"CMYK" and len(icc) <= MAX_ICC_BYTES:  # colour: why a bound
        try:
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            converted = ImageCms.profileToProfile(im, source, _srgb_profile(), outputMode="RGB")
            if converted is not None:  # None only with inPlace=True
                return converted
        except (ImageCms.PyCMSError, OSError):
            pass  # a broken profile: the plain conversion below is still a picture
    return im.convert("RGB")


def _managed(colour: Image.Image, icc: bytes | None, label: str) -> tuple[Image.Image, bytes | None]:
    """``colour`` (RGB or L) in sRGB RGB, with the profile that now describes it (None: none was embedded,
    sRGB by convention). A profile that cannot be used is logged and the pixels are taken as sRGB."""
    if icc is not None and convertible(icc, colour.mode):
        try:
            return to_srgb(colour, icc)
        except ProfileError as exc:
            log.warning("%s: its colour profile cannot be used (%s); taken as sRGB", label, exc)
    return (colour if colour.mode == "RGB" else colour.convert("RGB")), None


def to_rgb_alpha(im: Image.Image, *, label: str) -> tuple[Image.Image, Image.Image | None, bytes | None]:
    """A loaded image -> (sRGB RGB image, L alpha or None, the ICC profile describing the RGB now or None).

    The returned profile is the input's own when it was sRGB already, sRGB's after a conversion (``colour``),
    None when the input had none (or a CMYK one: converted to sRGB here). Alpha that is fully opaque is
    dropped: it would cost a resize and an RGBA output for nothing.
    """
    icc = im.info.get("icc_profile") or None
    mode = im.mode
    if mode == "CMYK":
        return _cmyk_to_rgb(im, icc), None, None  # now sRGB: the CMYK profile no longer describes it
    if mode in _SIXTEEN_BIT_MODES or mode in ("I", "F"):
        im, mode = _high_bit_depth_to_l(im), "L"
    if mode in ("P", "L", "RGB") and "transparency" in im.info:  # a palette or tRNS transparent colour
        im, mode = im.convert("RGBA"), "RGBA"
    elif mode == "P":
        im, mode = im.convert("RGB"), "RGB"
    alpha: Image.Image | None = None
    if mode in _ALPHA_MODES:
        rgba = im if mode == "RGBA" else im.convert("RGBA")
        alpha = rgba.getchannel("A")
        lowest = alpha.getextrema()[0]  # one band: (min, max) of ints
        if isinstance(lowest, (int, float)) and lowest >= 255:
            alpha = None
        colour = rgba.convert("L" if mode in ("LA", "La") else "RGB")  # grey stays grey for a grey profile
    elif mode in _PLAIN_TO_RGB:
        colour = im if mode in ("RGB", "L") else im.convert("RGB")
    else:
        raise InputError(f"{label}: unsupported colour mode {mode!r}", stage="decode")
    if icc is None and "nclx_profile" in im.info:  # a HEIF's colour box, no profile: Display P3 from some phones
        converted = nclx_to_srgb(colour, im.info["nclx_profile"])
        if converted is not None:
            return converted, alpha, srgb_icc()
    rgb, kept = _managed(colour, icc, label)
    return rgb, alpha, kept
