"""Colour management: every picture is fed to the model in sRGB, and every output is sRGB.

The styles were trained on sRGB photos. An iPhone's HEIC is Display P3, a camera's JPEG may be Adobe RGB or
ProPhoto: fed as if they were sRGB their numbers mean other colours (a P3 photo's reds go dull, an Adobe RGB
one's greens go pale). So a picture with an embedded ICC profile is converted to sRGB by LittleCMS (Pillow's
``ImageCms``) with the perceptual intent before inference; a picture without one is taken as sRGB (what every
browser and viewer does). After that the pixels are sRGB, so the profile an output carries is sRGB's, never
the input's.

Most phone JPEGs embed an sRGB profile of their own; converting those would cost a transform per photo for
nothing. A profile is judged once (cached by its bytes): when its transform to sRGB moves none of a grid of
probe colours by more than one level, the pixels are left as they are and the input's own sRGB profile is
kept. A profile LittleCMS cannot read is reported by the caller and the pixels are taken as sRGB: a picture
with a broken profile is still a picture.
"""
from __future__ import annotations

import functools
import io

import numpy as np
from PIL import Image, ImageCms

ICC_COLOUR_SPACE_OFFSET = slice(16, 20)  # bytes 16-19 of an ICC header name its data colour space
PROBE_LEVELS = (0, 32, 64, 96, 128, 160, 192, 224, 255)  # a 9 x 9 x 9 grid of colours
SRGB_SAME_MAX_LEVELS = 1  # a profile that moves no probe colour further is sRGB for our purpose
INTENT = ImageCms.Intent.PERCEPTUAL  # matrix-shaper profiles have no perceptual table: LCMS uses colorimetric
_CONVERTIBLE = {b"RGB ": "RGB", b"GRAY": "L"}


# nclx (ISO/IEC 23091-2) codes of a HEIF container's colour box, for a picture without an ICC profile.
NCLX_SRGB_PRIMARIES = frozenset({1, 2})  # BT.709 (sRGB's primaries), unspecified: nothing to convert
# SDR transfers decoded with sRGB's curve: BT.709/601/2020 camera curves and sRGB itself. A phone's still in one
# of these is display-referred like sRGB; PQ (16) and HLG (18) stills are HDR and are left as they are.
NCLX_SDR_TRANSFERS = frozenset({1, 2, 6, 13, 14, 15})
SRGB_PRIMARIES_XY = ((0.64, 0.33), (0.30, 0.60), (0.15, 0.06))
D65_XY = (0.3127, 0.3290)
NCLX_BAND_ROWS = 256  # rows converted at once: float32 temporaries of a 4000 px wide band stay ~12 MB


class ProfileError(ValueError):
    """An embedded profile LittleCMS cannot use; the caller keeps the pixels as sRGB and says why."""


@functools.lru_cache(maxsize=1)
def srgb_icc() -> bytes:
    """The sRGB profile every output carries (LittleCMS's own, 588 bytes)."""
    return bytes(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())


def _srgb_profile() -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(io.BytesIO(srgb_icc()))


def colour_space(icc: bytes | None) -> bytes | None:
    """The 4-byte data colour space an ICC header names (``RGB ``, ``GRAY``, ``CMYK``...), None without one."""
    return icc[ICC_COLOUR_SPACE_OFFSET] if icc is not None and len(icc) >= 20 else None


@functools.lru_cache(maxsize=16)
def _transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """The LCMS transform from ``icc`` (for pixels in ``mode``) to sRGB RGB, or None when it is the identity
    within ``SRGB_SAME_MAX_LEVELS`` (an sRGB profile). Cached: building one costs milliseconds, and a box sees
    the same few profiles (its camera's, its phones') over and over."""
    try:
        source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        transform = ImageCms.buildTransform(source, _srgb_profile(), mode, "RGB", renderingIntent=INTENT)
    except (ImageCms.PyCMSError, OSError, ValueError) as exc:
        raise ProfileError(str(exc) or type(exc).__name__) from None
    if mode != "RGB":
        return transform
    levels = np.array(PROBE_LEVELS, np.uint8)
    grid = np.stack(np.meshgrid(levels, levels, levels, indexing="ij"), axis=-1).reshape(1, -1, 3)
    moved = np.asarray(transform.apply(Image.fromarray(np.ascontiguousarray(grid), "RGB")), np.int16)
    return None if int(np.abs(moved - grid).max()) <= SRGB_SAME_MAX_LEVELS else transform


def convertible(icc: bytes | None, mode: str) -> bool:
    """Whether ``icc`` describes pixels of ``mode`` (an RGB profile on RGB, a grey one on L) so that
    ``to_srgb`` applies to them."""
    return _CONVERTIBLE.get(colour_space(icc) or b"") == mode


def to_srgb(image: Image.Image, icc: bytes) -> tuple[Image.Image, bytes]:
    """``image`` (RGB or L, described by ``icc``) in sRGB RGB, and the profile that now describes it: the
    input's own when it was sRGB already (the pixels untouched), else sRGB's. Raises ``ProfileError`` for a
    profile LittleCMS cannot read or that does not fit the mode."""
    if not convertible(icc, image.mode):
        raise ProfileError(f"a {(colour_space(icc) or b'?').decode('latin-1').strip()} profile on {image.mode} "
                           "pixels")
    transform = _transform(icc, image.mode)
    if transform is None:
        return image, icc
    return transform.apply(image), srgb_icc()


def array_to_srgb(rgb: np.ndarray, icc: bytes) -> tuple[np.ndarray, bytes]:
    """``to_srgb`` for an H x W x 3 u8 array (the TurboJPEG path): the same array when nothing changes."""
    image = Image.fromarray(rgb, "RGB")
    converted, profile = to_srgb(image, icc)
    if converted is image:
        return rgb, profile
    return np.ascontiguousarray(np.asarray(converted)), profile


def profile_after(icc: bytes | None, mode: str) -> bytes | None:
    """The profile ``to_srgb`` would leave on pixels of ``mode`` described by ``icc``, without any pixels (the
    decoder's header read): the input's own for an sRGB profile, sRGB's for one that converts, None for none,
    one of another kind or one LittleCMS cannot read (the pixels are then taken as sRGB)."""
    if icc is None or not convertible(icc, mode):
        return None
    try:
        return icc if _transform(icc, mode) is None else srgb_icc()
    except ProfileError:
        return None


def _rgb_to_xyz(primaries: tuple[tuple[float, float], ...], white: tuple[float, float]) -> np.ndarray:
    """The 3 x 3 matrix from linear RGB with these primaries (x, y) and white point to CIE XYZ."""
    columns = np.array([[x / y, 1.0, (1 - x - y) / y] for x, y in primaries]).T
    wx, wy = white
    scale = np.linalg.solve(columns, np.array([wx / wy, 1.0, (1 - wx - wy) / wy]))
    return np.asarray(columns * scale, dtype=np.float64)


@functools.lru_cache(maxsize=8)
def _nclx_matrix(primaries: tuple[tuple[float, float], ...], white: tuple[float, float]) -> np.ndarray:
    """Linear RGB in these primaries -> linear sRGB (same white: both nclx's P3 and BT.2020 are D65)."""
    return np.asarray(np.linalg.inv(_rgb_to_xyz(SRGB_PRIMARIES_XY, D65_XY)) @ _rgb_to_xyz(primaries, white),
                      dtype=np.float32)


def nclx_to_srgb(image: Image.Image, nclx: object) -> Image.Image | None:
    """An RGB picture whose HEIF colour box (``nclx``, as pi-heif gives it: codes and primaries) names primaries
    other than sRGB's (Display P3, BT.2020), without an ICC profile, converted to sRGB; None when there is
    nothing to convert or the box says something this does not handle (an HDR transfer, primaries missing).

    Why by hand: LittleCMS builds profiles from primaries, but Pillow's ImageCms does not expose that, and the
    conversion is a 3 x 3 matrix in linear light between two sRGB-curve encodings: decode the curve (a table),
    the matrix, clip to sRGB's gamut (relative colorimetric: the colours inside are exact), encode with
    rounding (a table of 16384 steps: under half a level near black)."""
    if image.mode != "RGB" or not isinstance(nclx, dict):
        return None
    if nclx.get("color_primaries") in NCLX_SRGB_PRIMARIES or nclx.get("transfer_characteristics") not in \
            NCLX_SDR_TRANSFERS:
        return None
    try:
        primaries = tuple((float(nclx[f"color_primary_{c}_x"]), float(nclx[f"color_primary_{c}_y"]))
                          for c in ("red", "green", "blue"))
        white = (float(nclx["color_primary_white_x"]), float(nclx["color_primary_white_y"]))
        matrix = _nclx_matrix(primaries, white)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, np.linalg.LinAlgError):
        return None
    if not np.isfinite(matrix).all():
        return None
    rgb = np.asarray(image)
    out = np.empty_like(rgb)
    decode_table, encode_table = _srgb_tables()
    for top in range(0, rgb.shape[0], NCLX_BAND_ROWS):
        band = decode_table[rgb[top:top + NCLX_BAND_ROWS]] @ matrix.T
        steps = np.clip(band * (len(encode_table) - 1) + 0.5, 0, len(encode_table) - 1).astype(np.int32)
        out[top:top + NCLX_BAND_ROWS] = encode_table[steps]
    return Image.fromarray(out, "RGB")


@functools.lru_cache(maxsize=1)
def _srgb_tables() -> tuple[np.ndarray, np.ndarray]:
    """(u8 code -> linear float32, linear in 16384 steps -> rounded u8 code) for sRGB's curve."""
    codes = np.arange(256, dtype=np.float64) / 255
    linear = np.where(codes <= 0.04045, codes / 12.92, ((codes + 0.055) / 1.055) ** 2.4)
    steps = np.linspace(0.0, 1.0, 16384)
    encoded = np.where(steps <= 0.0031308, steps * 12.92, 1.055 * steps ** (1 / 2.4) - 0.055)
    return linear.astype(np.float32), np.clip(np.rint(encoded * 255), 0, 255).astype(np.uint8)
