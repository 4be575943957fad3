"""Colour management: every picture is fed to the model in sRGB, and every output is sRGB.

The styles were trained on sRGB photos. An iPhone's HEIC is Display P3, a camera's JPEG may be Adobe RGB or
ProPhoto: fed as if they were sRGB their numbers mean other colours (a P3 photo's reds go dull, an Adobe RGB
one's greens go pale). So a picture with an embedded ICC profile is converted to sRGB by LittleCMS (Pillow's
``ImageCms``) with the perceptual intent before inference; a picture without one is taken as sRGB (what every
browser and viewer does). After that the pixels are sRGB, so the profile an output carries is sRGB's, never
the input's.

Most phone JPEGs embed an sRGB profile of their own; converting those would cost a transform per photo for
nothing. A profile is judged once (cached by its SHA-256, never by its bytes: a cache of 16 profiles of 50 MB
held 300 MB): when its transform to sRGB moves none of a grid of probe colours by more than one level, the
pixels are left as they are and the input's own sRGB profile is kept, as long as it is no bigger than one JPEG
APP2 segment carries (``KEEP_OWN_MAX_BYTES``; real sRGB profiles are 0.5-4 KB): a bigger one is padding (an sRGB
profile with 50 MB of private tag passes the probe), and sRGB's own profile says the same in 588 bytes.
A profile LittleCMS cannot read, or over ``MAX_ICC_BYTES``, is reported by the caller and the pixels are taken
as sRGB: a picture with a broken profile is still a picture.
"""
from __future__ import annotations

import functools
import hashlib
import io
import threading
from collections import OrderedDict

import numpy as np
from PIL import Image, ImageCms

ICC_COLOUR_SPACE_OFFSET = slice(16, 20)  # bytes 16-19 of an ICC header name its data colour space
PROBE_LEVELS = (0, 32, 64, 96, 128, 160, 192, 224, 255)  # a 9 x 9 x 9 grid of colours
SRGB_SAME_MAX_LEVELS = 1  # a profile that moves no probe colour further is sRGB for our purpose
INTENT = ImageCms.Intent.PERCEPTUAL  # matrix-shaper profiles have no perceptual table: LCMS uses colorimetric
_CONVERTIBLE = {b"RGB ": "RGB", b"GRAY": "L"}
# The largest profile used at all. Real RGB and grey profiles are 0.5 KB (matrix-shaper) to about 1.5 MB (a
# camera's or printer's lookup tables); past 4 MB a profile is not a colour description but a payload: parsed by
# LittleCMS on every new one, and copied into outputs it is a 16-50 MB JPEG (issue 42).
MAX_ICC_BYTES = 4 << 20
JPEG_ICC_CHUNK_BYTES = 65519  # one APP2 segment's profile bytes (65535 - 2 length - 14 "ICC_PROFILE\0" + n/N)
JPEG_ICC_MAX_CHUNKS = 255  # the chunk counter is one byte: more chunks wrap it and no reader can join them
KEEP_OWN_MAX_BYTES = JPEG_ICC_CHUNK_BYTES  # an sRGB input's own profile is copied out up to this size
TRANSFORM_CACHE_SIZE = 16


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


_cache_lock = threading.Lock()
_transforms: OrderedDict[tuple[bytes, str], ImageCms.ImageCmsTransform | None] = OrderedDict()


def _transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
    """The LCMS transform from ``icc`` (for pixels in ``mode``) to sRGB RGB, or None when it is the identity
    within ``SRGB_SAME_MAX_LEVELS`` (an sRGB profile). Cached, least recently used first out, by the profile's
    SHA-256: building one costs milliseconds, and a box sees the same few profiles (its camera's, its phones')
    over and over, while the cache must not keep the bytes of every profile it saw. ``ProfileError`` for a
    profile over ``MAX_ICC_BYTES`` (before LittleCMS reads it) or one LittleCMS cannot use."""
    if len(icc) > MAX_ICC_BYTES:
        raise ProfileError(f"a profile of {len(icc)} bytes, over the {MAX_ICC_BYTES} a colour profile may have")
    key = (hashlib.sha256(icc).digest(), mode)
    with _cache_lock:
        if key in _transforms:
            _transforms.move_to_end(key)
            return _transforms[key]
    transform = _build_transform(icc, mode)
    with _cache_lock:
        _transforms[key] = transform
        while len(_transforms) > TRANSFORM_CACHE_SIZE:
            _transforms.popitem(last=False)
    return transform


def cached_profiles() -> int:
    """How many profiles' transforms the cache holds (for tests and diagnostics)."""
    with _cache_lock:
        return len(_transforms)


def _build_transform(icc: bytes, mode: str) -> ImageCms.ImageCmsTransform | None:
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
        return image, _own_or_srgb(icc)
    return transform.apply(image), srgb_icc()


def _own_or_srgb(icc: bytes) -> bytes:
    """The profile an sRGB input's output carries: its own, unless it is bigger than ``KEEP_OWN_MAX_BYTES``."""
    return icc if len(icc) <= KEEP_OWN_MAX_BYTES else srgb_icc()


def fits_output(icc: bytes, pil_format: str) -> bool:
    """Whether a format can carry ``icc`` whole: JPEG splits a profile into at most ``JPEG_ICC_MAX_CHUNKS``
    APP2 segments of ``JPEG_ICC_CHUNK_BYTES`` (Pillow writes more and the one-byte counter wraps, so no reader
    can join them); no format is given one over ``MAX_ICC_BYTES``."""
    if len(icc) > MAX_ICC_BYTES:
        return False
    return pil_format != "JPEG" or len(icc) <= JPEG_ICC_CHUNK_BYTES * JPEG_ICC_MAX_CHUNKS


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
        return _own_or_srgb(icc) if _transform(icc, mode) is None else srgb_icc()
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
