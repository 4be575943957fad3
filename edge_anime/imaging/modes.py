"""Every Pillow colour mode the runtime accepts -> 8-bit RGB plus an optional 8-bit alpha.

Pillow's own ``convert("L")`` clips 16-bit and 32-bit values to 255 (a 16-bit PNG turns almost white), so the
high-precision modes are scaled here with integer shifts; CMYK goes through the embedded ICC profile when
there is one, because the naive formula Pillow falls back to is noticeably off for press (SWOP) profiles.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageCms

from ..errors import InputError

_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N"})
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
_PLAIN_TO_RGB = frozenset({"RGB", "L", "1", "RGBX", "YCbCr", "HSV"})
ICC_COLOUR_SPACE_OFFSET = slice(16, 20)  # bytes 16-19 of an ICC header name its data colour space


def _srgb_profile() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB"))


def icc_is_rgb(icc: bytes | None) -> bool:
    """True for a profile that may be attached to an RGB output (not CMYK, gray or Lab)."""
    return icc is not None and len(icc) >= 20 and icc[ICC_COLOUR_SPACE_OFFSET] == b"RGB "


def _high_bit_depth_to_l(im: Image.Image) -> Image.Image:
    """16/32-bit integer and float grayscale -> 8-bit L, scaled (never clipped at 255)."""
    arr = np.asarray(im)
    if im.mode in _SIXTEEN_BIT_MODES:
        eight = (arr.astype(np.uint16) >> 8).astype(np.uint8)  # the high byte, as libpng's strip_16
    elif im.mode == "I":
        # 32-bit int: 16-bit PNG/TIFF data arrive as I in some Pillow paths; 0..255 data stay as they are.
        if int(arr.max(initial=0)) > 255:
            eight = (np.clip(arr, 0, 65535) >> 8).astype(np.uint8)
        else:
            eight = np.clip(arr, 0, 255).astype(np.uint8)
    else:  # "F": float TIFFs are 0..1 by convention; anything brighter is taken as 0..255
        scale = 255.0 if float(np.nanmax(arr, initial=0.0)) <= 1.0 else 1.0
        eight = np.clip(np.nan_to_num(arr) * scale + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(eight, "L")


def _cmyk_to_rgb(im: Image.Image, icc: bytes | None) -> Image.Image:
    if icc is not None and len(icc) >= 20 and icc[ICC_COLOUR_SPACE_OFFSET] == b"CMYK":
        try:
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            converted = ImageCms.profileToProfile(im, source, _srgb_profile(), outputMode="RGB")
            if converted is not None:  # None only with inPlace=True
                return converted
        except (ImageCms.PyCMSError, OSError):
            pass  # a broken profile: the plain conversion below is still a picture
    return im.convert("RGB")


def to_rgb_alpha(im: Image.Image, *, label: str) -> tuple[Image.Image, Image.Image | None, bytes | None]:
    """A loaded image -> (RGB image, L alpha or None, ICC profile to keep or None).

    Alpha that is fully opaque is dropped: it would cost a resize and an RGBA output for nothing.
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
    if mode in _ALPHA_MODES:
        rgba = im if mode == "RGBA" else im.convert("RGBA")
        alpha = rgba.getchannel("A")
        lowest = alpha.getextrema()[0]  # one band: (min, max) of ints
        opaque = isinstance(lowest, (int, float)) and lowest >= 255
        return rgba.convert("RGB"), (None if opaque else alpha), (icc if icc_is_rgb(icc) else None)
    if mode in _PLAIN_TO_RGB:
        return (im if mode == "RGB" else im.convert("RGB")), None, (icc if icc_is_rgb(icc) else None)
    raise InputError(f"{label}: unsupported colour mode {mode!r}", stage="decode")
