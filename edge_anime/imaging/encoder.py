"""Stylized pixels -> output file bytes: alpha back, optional upscale, format, quality and metadata.

Alpha and JPEG: JPEG has no alpha channel, so a transparent input written as JPEG is flattened on white
(not just stripped of alpha: the colour under fully transparent pixels is whatever the editor left there,
often black, and would show as a dark box). PNG, WebP, HEIC and AVIF outputs keep the alpha as is.

Colour: the decoder hands over sRGB pixels (``colour``), so with ``output.keep_icc`` every output carries an
sRGB profile: the input's own when it was sRGB already, LittleCMS's sRGB otherwise (also for an input without
one, whose pixels were taken as sRGB). Never the input's wide-gamut profile: it no longer describes the pixels.

Metadata, one rule for every input and output format (JPEG, PNG, WebP, HEIC, AVIF): the input's EXIF is copied
(``keep_exif``) with the capture date, the camera and lens and the rest of the photo's description, its
Orientation reset to 1 (the pixels were turned upright) and its pixel size (``PixelXDimension``/``Y``) set to
the output's, upright. GPS (``strip_gps``) and the maker notes (``strip_maker_notes``: the camera maker's
private block, which holds serial numbers, and on phones location and face data) are removed by default. The
EXIF thumbnail (a small copy of the original photo) and XMP are never copied.
"""
from __future__ import annotations

import functools
import io
import logging
import struct
import threading
from pathlib import Path

import numpy as np
from PIL import Image

from ..config import ImageSection, OutputSection
from ..errors import InputError
from . import heif
from .colour import fits_output, srgb_icc
from .decoded import Decoded
from .guided import guided_upscale
from .planner import resize_image

log = logging.getLogger(__name__)

FORMAT_BY_EXT = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "webp": "WEBP", "heic": "HEIF", "heif": "HEIF",
                 "avif": "AVIF"}
EXT_BY_CONFIG_FORMAT = {"jpeg": "jpg", "png": "png", "webp": "webp"}
# format: same for these inputs gives their own format only where this install can encode it (heif.writable)
SAME_IF_WRITABLE = {"HEIF": "heic", "AVIF": "avif"}
EXIF_GPS_IFD_TAG = 0x8825
EXIF_IFD_TAG = 0x8769
EXIF_MAKER_NOTE_TAG = 0x927C
EXIF_PIXEL_X_TAG, EXIF_PIXEL_Y_TAG = 0xA002, 0xA003  # in the Exif IFD: the picture's size, as stored
HEIF_FULL_CHROMA = "444"  # pillow-heif's chroma for quality >= FULL_CHROMA_MIN_QUALITY, as JPEG's 4:4:4
AVIF_SPEED = 8  # libaom 0 (slowest) .. 10; Pillow's default 6 takes ~2x longer on a 1024 px picture on 2 cores
JPEG_APP1_MAX_BYTES = 65533  # an EXIF block must fit one APP1 segment
# At quality >= 90 chroma is kept at full resolution (4:4:4, as ImageMagick does): the stylized output has
# hard coloured outlines that 4:2:0 smears. Below 90 the file size matters more: 4:2:0.
# From the same quality chroma is also quantized with the luma table: a stylized picture puts saturated flat
# paint right against greys and ink, and libjpeg's coarser chroma table rings that colour into the greys
# (issue 27: cel on scene_10, mean C* of the photo's greys 6.5 with it, 5.4 without; the saved picture's
# distinct colours 0.56 -> 0.48 of the photo's). The price is about 30 % more bytes (155 -> 205 KB mean at
# 1024 px over ../shared/photos), at a quality where the operator asked for quality.
FULL_CHROMA_MIN_QUALITY = 90
PNG_COMPRESS_LEVEL = 6  # zlib's default: level 9 is ~3x slower for ~2% smaller stylized images
WEBP_METHOD = 4         # libwebp's default speed/size trade-off; 6 is ~2x slower for a few % smaller
FLATTEN_BACKGROUND = (255, 255, 255)


@functools.lru_cache(maxsize=8)
def _luma_table(quality: int) -> list[int]:
    """libjpeg's luma quantization table at ``quality``, read back from a tiny picture Pillow encodes: Pillow
    stores tables in its own order, so taking its own is safer than computing the IJG scaling here."""
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "JPEG", quality=quality)
    with Image.open(buffer) as probe:
        tables: dict[int, list[int]] = probe.quantization
    return list(tables[0])


def image_extension(cfg: OutputSection, src: Path) -> str:
    """The output's extension: the configured format, or with ``same`` the input's when it is one of ours."""
    if cfg.format == "same":
        return same_format_extension(FORMAT_BY_EXT.get(src.suffix.lower().lstrip(".")))
    return EXT_BY_CONFIG_FORMAT[cfg.format]


_told_lock = threading.Lock()
_told_unwritable: set[str] = set()  # formats the log has already said this process cannot write


def same_format_extension(pil_format: str | None) -> str:
    """``format: same`` for an input Pillow reads as ``pil_format``: its own format when it is one we write
    (an MPO is a JPEG with extra frames; HEIC and AVIF when this install has their encoder), else JPEG (BMP,
    TIFF, GIF, PPM...). One rule for a file's suffix and for an upload's sniffed bytes. A HEIC or AVIF that
    falls back to JPEG is said once per process in the log, not once per photo."""
    if pil_format in SAME_IF_WRITABLE:
        if heif.writable(pil_format):
            return SAME_IF_WRITABLE[pil_format]
        with _told_lock:
            first = pil_format not in _told_unwritable
            _told_unwritable.add(pil_format)
        if first:
            log.warning("output.format: same: this install cannot write %s (no encoder in its wheel); those "
                        "inputs are written as JPEG", pil_format)
        return "jpg"
    return {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp"}.get(pil_format or "", "jpg")


def finish(stylized: np.ndarray, decoded: Decoded, cfg: ImageSection) -> Image.Image:
    """The model's H x W x 3 u8 output -> the picture to save: the padding cropped off (an output at
    ``decoded.infer_size`` comes back at ``decoded.size``, the exact planned size), upscaled back if
    configured, alpha re-applied. The pipeline crops as it copies the output out, so there an output
    already comes at ``decoded.size``; the crop is here so a caller that hands the raw padded output gets
    the exact size too."""
    pixels = stylized[0] if stylized.ndim == 4 else stylized
    if decoded.infer_size is not None and (pixels.shape[1], pixels.shape[0]) == decoded.infer_size:
        pixels = pixels[:decoded.rgb.shape[0], :decoded.rgb.shape[1]]
    image = Image.fromarray(np.ascontiguousarray(pixels))
    alpha = Image.fromarray(decoded.alpha) if decoded.alpha is not None else None
    if cfg.upscale_to_original and decoded.restore_size is not None and image.size != decoded.restore_size:
        if cfg.upscale_method == "guided" and decoded.guide is not None:
            image = Image.fromarray(guided_upscale(np.asarray(image), decoded.guide))  # imaging.guided
        else:
            image = resize_image(image, decoded.restore_size)
    if alpha is not None:
        image.putalpha(resize_image(alpha, image.size))
    return image


def exif_for_output(raw: bytes | None, cfg: OutputSection, *, fmt: str, size: tuple[int, int]) -> bytes | None:
    """The EXIF an output of ``size`` (W, H) in ``fmt`` carries, by the module's one metadata rule; None for
    none. The EXIF is rewritten whatever the settings (Pillow's writer keeps IFD0 and its sub-IFDs, so the
    thumbnail never travels)."""
    if raw is None or not cfg.keep_exif:
        return None
    exif = Image.Exif()
    try:
        exif.load(raw)
        if cfg.strip_gps and EXIF_GPS_IFD_TAG in exif:
            del exif[EXIF_GPS_IFD_TAG]  # the pointer goes, and with it the whole GPS IFD
        if EXIF_IFD_TAG in exif:
            details = exif.get_ifd(EXIF_IFD_TAG)  # edited in place: tobytes writes it back
            if cfg.strip_maker_notes:
                details.pop(EXIF_MAKER_NOTE_TAG, None)
            if EXIF_PIXEL_X_TAG in details or EXIF_PIXEL_Y_TAG in details:
                details[EXIF_PIXEL_X_TAG], details[EXIF_PIXEL_Y_TAG] = int(size[0]), int(size[1])
        out = exif.tobytes()
    except (OSError, ValueError, KeyError, IndexError, TypeError, struct.error):
        return None  # an EXIF block Pillow cannot rewrite: dropped, the picture matters more
    if fmt == "JPEG" and len(out) > JPEG_APP1_MAX_BYTES:
        return None  # a large EXIF can outgrow a JPEG segment; the picture matters more than the EXIF
    return out


def _output_profile(decoded: Decoded, fmt: str) -> bytes:
    """The profile an output carries: the decoded picture's (sRGB: module docstring), or sRGB's where there is
    none or the format cannot carry it whole (``colour.fits_output``: a JPEG holds 255 APP2 chunks, and Pillow
    writes more with a wrapped counter, a profile no reader can join). Logged when replaced: the decoder
    bounds a profile's size already, so a caller handed this one in directly."""
    icc = decoded.icc
    if icc is None:
        return srgb_icc()
    if not fits_output(icc, fmt):
        log.warning("%s: its %d-byte colour profile does not fit a %s; written with sRGB's", decoded.path or "image",
                    len(icc), fmt)
        return srgb_icc()
    return icc


def _flatten(image: Image.Image) -> Image.Image:
    background = Image.new("RGB", image.size, FLATTEN_BACKGROUND)
    background.paste(image, mask=image.getchannel("A"))
    return background


def encode(image: Image.Image, decoded: Decoded, cfg: OutputSection, *, ext: str) -> bytes:
    """Encode ``image`` in the format ``ext`` names, with EXIF/ICC per config; ``InputError(stage="encode")``
    when the format cannot hold it (WebP stops at 16383 pixels a side)."""
    fmt = FORMAT_BY_EXT[ext.lower().lstrip(".")]
    params: dict[str, object] = {}
    if fmt == "JPEG":
        if image.mode == "RGBA":
            image = _flatten(image)
        if cfg.quality >= FULL_CHROMA_MIN_QUALITY:
            luma = _luma_table(cfg.quality)
            params = {"qtables": [luma, luma], "subsampling": 0}
        else:
            params = {"quality": cfg.quality, "subsampling": 2}
    elif fmt == "PNG":
        params = {"compress_level": PNG_COMPRESS_LEVEL}
    elif fmt == "HEIF":
        heif.ensure_registered()
        params = {"quality": cfg.quality}
        if cfg.quality >= FULL_CHROMA_MIN_QUALITY:
            params["chroma"] = HEIF_FULL_CHROMA
    elif fmt == "AVIF":
        subsampling = "4:4:4" if cfg.quality >= FULL_CHROMA_MIN_QUALITY else "4:2:0"
        params = {"quality": cfg.quality, "speed": AVIF_SPEED, "subsampling": subsampling}
    else:
        params = {"quality": cfg.quality, "method": WEBP_METHOD}
    exif = exif_for_output(decoded.exif, cfg, fmt=fmt, size=image.size)
    if exif:
        params["exif"] = exif
    if cfg.keep_icc:
        params["icc_profile"] = _output_profile(decoded, fmt)
    buffer = io.BytesIO()
    try:
        image.save(buffer, format=fmt, **params)
    except (OSError, ValueError, RuntimeError) as exc:
        raise InputError(f"{decoded.path or 'image'}: cannot encode {image.size[0]}x{image.size[1]} as {fmt}: "
                         f"{exc}", stage="encode") from exc
    return buffer.getvalue()
