"""File -> ``Decoded``: format and size guards before any pixel is decoded, EXIF orientation, colour modes.

Pillow's ``Image.open`` only reads the header, so the pixel-count guard (``image.max_pixels``) runs on
``im.size`` before ``im.load()`` allocates anything: a 20000 x 20000 PNG of 50 kB is refused in
microseconds. Large JPEGs are decoded straight at 1/2, 1/4 or 1/8 scale (``Image.draft``, libjpeg's DCT
scaling) when the planned size is far smaller, which makes decoding a 12-megapixel photo for a 512-pixel
inference several times cheaper; the image is still decoded at no less than twice the target (the same
``reducing_gap`` Pillow's ``thumbnail`` uses) so the final LANCZOS step keeps full quality.

Pillow always reads the header (format, size, EXIF, ICC, guards); the pixels of an RGB JPEG then come from
libjpeg-turbo's TurboJPEG API (``turbo``: the same pixels, at the scale Pillow's draft would pick, without a
Pillow image to copy out of), everything else from Pillow as before.

A progressive JPEG is decoded scan after scan over the whole picture, so its cost is pixels x scans, and the
pixel guard alone does not bound it: 388 KB of a 7680 x 7680 picture with 3,000 empty scans took 40-51 s of
the one decode thread. Its scans are counted from the markers (``jpeg_scans``) and more than
``MAX_JPEG_SCANS`` are refused before decoding, as libjpeg-turbo's own guidance does (``TJPARAM_SCANLIMIT``,
``djpeg -maxscans``). ``decode_cost_mpx`` is the same header read (``_read_header``) turned into an estimate of
the work, which the pipeline uses to put a heavy decode on a lane of its own; ``decode_header`` carries it too.

HEIC/HEIF (libheif: pi-heif, or pillow-heif where installed) and AVIF (Pillow's libavif) come through the
same ``Image.open`` (``heif`` registers the HEIF opener on the first decode): their header gives the size
before anything is decoded, libheif picks a
multi-image file's primary picture, and a file whose coded picture is not the size its header signals is
refused by libheif. Every picture leaves the decoder in sRGB (``colour``: an embedded ICC profile is converted
by LittleCMS), and 16-bit values are rounded to 8 bits (``modes``).
"""
from __future__ import annotations

import io
import logging
import math
import re
import struct
import threading
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from ..config import ImageSection
from ..errors import InputError, TransientError
from ..fsutil import TRANSIENT_ERRNOS
from ..inputs import read_regular
from . import heif, heif_boxes, turbo
from .colour import ProfileError, array_to_srgb, convertible, profile_after
from .decoded import Decoded
from .geometry import oriented_size
from .modes import load_sixteen_bit_rgb, to_rgb_alpha
from .target import target_size

log = logging.getLogger(__name__)

# Formats tried by Image.open. A short list on purpose: Pillow can open EPS (runs Ghostscript), PSD, ICO and
# dozens more, none of which a photo box needs, and each one is attack surface. Phone JPEGs that are
# MPO files come in through the JPEG opener (it hands them to the MPO class: ``im.format == "MPO"``).
# HEIF (HEIC, an iPhone's photos) and AVIF are read by libheif and libavif (``heif``).
ALLOWED_FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "TIFF", "GIF", "PPM", "HEIF", "AVIF")
SUPPORTED_TEXT = "JPEG, PNG, WebP, HEIC, AVIF, BMP, TIFF, GIF or PPM"
CONTAINER_NAMES = {"HEIF": "HEIC/HEIF", "AVIF": "AVIF"}
DRAFT_FORMATS = frozenset({"JPEG", "MPO"})
# Decode at >= 2x the target so the final LANCZOS still does real anti-aliasing (Pillow's thumbnail uses 2 too).
# Measured (2 shared vCPUs, best of 3-5, decode+plan): ../shared/photos at max_side 512 (31 JPEGs of
# 1280-3840 px; 5 qualify for a draft at gap 2): 70 ms/photo with draft vs 85 ms without, drafted ones within
# 44-56 dB PSNR of a full decode; gap 1 drafts 24 of them, 33 ms/photo, but down to 26.8 dB (visibly
# softer). A 6000x4000 JPEG at the default max_side 1024: 0.43-0.54 s with draft (decoded at 3000x2000)
# vs 1.42 s without.
DRAFT_REDUCING_GAP = 2.0
EXIF_ORIENTATION_TAG = 0x0112
# Scans a progressive JPEG may have. Encoders write about 10 (libjpeg's simple progression: 10 for colour, 6 for
# gray; mozjpeg's searched scripts and Photoshop's fewer); libjpeg-turbo's own fuzzers allow 500 on pictures
# of at most 1 MP, and ours may be 60 MP (image.max_pixels), so the limit is lower. Measured on a shared 2-core
# EPYC (decode() at max_side 128, best of 3): 100 repeated scans of 2048 x 2048 take 0.3 s, of 4096 x 4096 0.7 s;
# what is allowed but heavy goes to the pipeline's heavy lane (HEAVY_DECODE_MPX).
MAX_JPEG_SCANS = 100
PROGRESSIVE_SOF = frozenset({0xC2, 0xC6, 0xCA, 0xCE})  # SOF2/6/10/14: the progressive frame types
# A marker where entropy-coded data may be: 0xFF followed by neither a stuffed 0x00, a restart marker nor fill.
_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")
_STANDALONE_MARKERS = frozenset({0x01, 0xD8})  # TEM, SOI: no length follows
TYPICAL_JPEG_SCANS = 10  # what decode_cost_mpx calls one pass over a progressive JPEG
TURBO_MAX_SCANS = 2 * TYPICAL_JPEG_SCANS  # more: decoded by Pillow alone (see decode)
# Above this estimate (decode_cost_mpx) a decode runs on the pipeline's heavy lane, apart from the photos: a
# 12 MP phone JPEG (drafted, ~0.4 s on 2 EPYC cores) stays on the common lane; a 24 MP picture, a 2 MP
# progressive JPEG of 100 scans or a large PNG/TIFF (seconds) goes to the heavy one.
HEAVY_DECODE_MPX = 16.0
# Malformed files make Pillow's plugins raise any of these; all mean "this file is not a usable image".
# RuntimeError: what Pillow's AVIF plugin raises for a damaged file ("Missing or empty image item").
LIBHEIF_LIMIT = "Security limit exceeded"  # how libheif words a refusal by its limits (heif.apply_security_limits)
CORRUPT_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, KeyError, RuntimeError)


_limits_lock = threading.Lock()
_synced_max_pixels: int | None = None  # the max_pixels Pillow's globals were last set for


def _sync_pillow_limits(max_pixels: int) -> None:
    """Make Pillow's own bomb check enforce ``image.max_pixels`` too, and make its warning an error.

    Pillow warns above ``MAX_IMAGE_PIXELS`` and raises above twice that; some plugins check again while
    loading frames. Setting the limit to ours turns every one of those checks into the same policy. Both
    are process-wide settings, so they are changed once per ``max_pixels`` value (under a lock), not on
    every decode from every decode thread. Where a test runner has since reset the warning filters, the
    explicit size check in ``decode`` still refuses the file before any pixel is decoded.
    """
    global _synced_max_pixels
    if _synced_max_pixels == max_pixels:
        return
    with _limits_lock:
        if _synced_max_pixels == max_pixels:
            return
        Image.MAX_IMAGE_PIXELS = max_pixels
        warnings.filterwarnings("error", category=Image.DecompressionBombWarning)
        heif.apply_security_limits(max_pixels)  # libheif's own limit, behind _check_container
        _synced_max_pixels = max_pixels


def _open(data: bytes) -> ImageFile.ImageFile:
    """The header of ``data`` read by the allowed formats' openers only (no pixel decoded yet)."""
    heif.ensure_registered()
    return Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)


def jpeg_scans(data: bytes, *, stop_after: int = MAX_JPEG_SCANS) -> int:
    """The scans (SOS markers) of the first picture in a JPEG's bytes, counted from its markers without
    decoding anything; counting stops at ``stop_after + 1``, so a scan bomb costs no more than a photo.

    Marker segments are skipped by their length (an EXIF thumbnail's own markers are not counted) and the
    entropy-coded data between them is searched by a regular expression in C, not byte by byte in Python:
    0xFF there is always followed by a stuffed 0x00, a restart marker or another 0xFF. The count ends at the
    first EOI (an MPO's second picture, trailing bytes) and at a malformed segment, which the decoder then
    judges on its own."""
    scans, pos, size = 0, 2, len(data)
    while pos < size:
        found = _MARKER.search(data, pos)
        if found is None:
            break
        marker, pos = data[found.start() + 1], found.start() + 2
        if marker == 0xD9:  # EOI
            break
        if marker in _STANDALONE_MARKERS:
            continue
        length = int.from_bytes(data[pos:pos + 2], "big")
        if length < 2:
            break
        if marker == 0xDA:
            scans += 1
            if scans > stop_after:
                break
        pos += length  # past the segment; after an SOS, the search runs through its entropy-coded data
    return scans


def _check_container(path: Path, data: bytes, im: Image.Image, cfg: ImageSection) -> int:
    """The pixels a HEIC/HEIF or AVIF decodes for its primary picture, by its boxes (``heif_boxes``: grid
    tiles, coded picture sizes); InputError when any of them is over ``image.max_pixels``.

    Why: the size the opener reports is the picture's after its crop (``clap``), so a 64 x 64 header can stand
    for a 32768 x 32768 grid, or for an 8192 x 8192 coded frame; the pixel guard on ``im.size`` alone lets both
    be decoded. Other formats: their header's size (0 here)."""
    pixels, reason = _container_pixels(data, im, cfg.max_pixels)
    if reason is not None:
        raise InputError(f"{path}: {reason}, over image.max_pixels={cfg.max_pixels}; refused before decoding "
                         f"(its {CONTAINER_NAMES[str(im.format)]} header reports {im.size[0]}x{im.size[1]}, the size "
                         "after any crop)", stage="decode")
    return pixels


def _container_pixels(data: bytes, im: Image.Image, max_pixels: int) -> tuple[int, str | None]:
    """(the coded pixels a HEIF/AVIF's primary picture decodes, why it is over ``max_pixels`` or None); (0,
    None) for other formats and for boxes ``heif_boxes`` cannot follow, where libheif's own limit
    (``heif.apply_security_limits``) still holds."""
    if im.format not in CONTAINER_NAMES:
        return 0, None
    cost = heif_boxes.primary_cost(data)
    return (0, None) if cost is None else (cost.coded_pixels, cost.over(max_pixels))


def _progressive(im: Image.Image) -> bool:
    return im.format in DRAFT_FORMATS and bool(im.info.get("progressive") or im.info.get("progression"))


def _check_scans(path: Path, data: bytes) -> int:
    """A progressive JPEG's scans; InputError for more than ``MAX_JPEG_SCANS`` (see the module docstring)."""
    scans = jpeg_scans(data)
    if scans > MAX_JPEG_SCANS:
        raise InputError(f"{path}: a progressive JPEG of more than {MAX_JPEG_SCANS} scans (a photo has about "
                         f"{TYPICAL_JPEG_SCANS}); refused before decoding: each scan is decoded over the whole "
                         "picture, so this many would take minutes of CPU", stage="decode")
    return scans


def decode_cost_mpx(path: Path, cfg: ImageSection, *, data: bytes) -> float:
    """An estimate of the work of ``decode(path, cfg, data=data)`` from the header alone, in megapixels decoded
    (a progressive JPEG counts once per ``TYPICAL_JPEG_SCANS`` scans): what the pipeline's decode lanes
    are chosen by, for a job whose caller did not read the header already (``decode_header``'s ``cost_mpx``).
    0.0 for anything the header already refuses, which ``decode`` then refuses in as little time (too many
    pixels or scans, not an image)."""
    try:
        return _read_header(path, cfg, data=data, metadata=False).cost_mpx
    except (InputError, TransientError):
        return 0.0


def _orientation(im: Image.Image) -> int:
    try:
        value = int(im.getexif().get(EXIF_ORIENTATION_TAG, 1))
    except CORRUPT_ERRORS:  # a broken EXIF block must not lose the picture
        return 1
    return value if 1 <= value <= 8 else 1


def _exif_to_copy(im: Image.Image, *, reset_orientation: bool) -> bytes | None:
    """The input's EXIF block with Orientation = 1 once the pixels are rotated (GPS is encode's business).

    Only formats that carry a real EXIF block are copied: a TIFF's own tags (strip offsets, ...) are not
    EXIF and would be garbage in a JPEG.
    """
    raw = im.info.get("exif")
    if not raw:
        return None
    try:
        exif = Image.Exif()
        exif.load(raw)
        if reset_orientation and EXIF_ORIENTATION_TAG in exif:
            exif[EXIF_ORIENTATION_TAG] = 1
        return exif.tobytes()
    except CORRUPT_ERRORS:
        return None  # unreadable EXIF: drop it rather than the image


def _draft_request(im: Image.Image, original: tuple[int, int], orientation: int,
                   cfg: ImageSection) -> tuple[int, int] | None:
    """The size to ask libjpeg's DCT scaling for when the planned size is at most half the stored one,
    else None (no draft: decoded at full size)."""
    if im.format not in DRAFT_FORMATS or cfg.resize == "keep":
        return None
    if cfg.upscale_to_original and cfg.upscale_method == "guided":
        return None  # the guided upscale is steered by the photo at its own size
    target = target_size(original, cfg, multiple=cfg.multiple)
    if target is None:
        return None  # over budget and refused: plan() says so with the reason
    if cfg.resize == "center_square":
        side = math.ceil(target[0] * DRAFT_REDUCING_GAP)
        request = (side, side)  # both stored sides >= side keeps the crop's side >= side
    else:
        stored = oriented_size(target, orientation)  # back to the file's own orientation
        request = (math.ceil(stored[0] * DRAFT_REDUCING_GAP), math.ceil(stored[1] * DRAFT_REDUCING_GAP))
    if request[0] * 2 <= im.size[0] and request[1] * 2 <= im.size[1]:
        return request
    return None


def _turbo_pixels(im: ImageFile.ImageFile, data: bytes, request: tuple[int, int] | None,
                  orientation: int) -> np.ndarray | None:
    """An RGB JPEG decoded by libjpeg-turbo at the scale Pillow's draft would pick, upright; None where
    only Pillow may decode it (see ``turbo``: other formats and modes, files libjpeg-turbo warns about)."""
    if im.format not in DRAFT_FORMATS or im.mode != "RGB" or not turbo.available():
        return None
    if len(im.tile) != 1 or im.tile[0].args is None or im.tile[0].args[0] != "RGB" or im.tile[0].offset != 0:
        return None  # not the plain 3-component layout starting at the file's first byte
    pixels = turbo.decode_rgb(data, im.size, turbo.draft_scale(im.size, request))
    return None if pixels is None else turbo.upright(pixels, orientation)


def _turbo_to_srgb(pixels: np.ndarray, icc: bytes | None, *, label: str) -> tuple[np.ndarray, bytes | None]:
    """A TurboJPEG-decoded RGB array in sRGB, as ``modes.to_rgb_alpha`` does for Pillow's pixels."""
    if icc is None or not convertible(icc, "RGB"):
        return pixels, None
    try:
        return array_to_srgb(pixels, icc)
    except ProfileError as exc:
        log.warning("%s: its colour profile cannot be used (%s); taken as sRGB", label, exc)
        return pixels, None


def _open_error(path: Path, exc: BaseException, cfg: ImageSection, *, data: bytes | None = None) -> Exception:
    """Map whatever opening or decoding raised to the error taxonomy, with a reason an operator reads."""
    label = str(path)
    if isinstance(exc, (Image.DecompressionBombError, Image.DecompressionBombWarning)):
        # Pillow's own text names its limit, which is twice ours when it raises: say ours alone
        counted = re.search(r"\((\d+) pixels\)", str(exc))
        size = f"{int(counted[1])} pixels, " if counted else ""
        return InputError(f"{label}: refused before decoding: {size}over image.max_pixels={cfg.max_pixels}",
                          stage="decode")
    if isinstance(exc, IsADirectoryError):
        return InputError(f"{label}: is a directory, not an image file", stage="decode")
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{label}: no such file", stage="decode")
    if isinstance(exc, PermissionError):
        return InputError(f"{label}: permission denied", stage="decode")
    if isinstance(exc, UnidentifiedImageError):
        try:
            empty = (len(data) if data is not None else path.stat().st_size) == 0
        except OSError:
            empty = False
        reason = "empty file (0 bytes)" if empty else f"not a {SUPPORTED_TEXT} image"
        container = heif.container_format(data) if data is not None else None
        if container == "HEIF" and not heif.ensure_registered():
            reason = f"a HEIC/HEIF image, and this install cannot read HEIC ({heif.INSTALL_HINT})"
        elif container == "AVIF" and not heif.avif_available():
            reason = "an AVIF image, and this Pillow cannot read AVIF (Pillow >= 11.3 can)"
        elif container is not None:
            reason = (f"corrupt or truncated {CONTAINER_NAMES[container]} image (its container or its coded "
                      "picture cannot be read)")
        return InputError(f"{label}: {reason}", stage="decode")
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return TransientError(f"{label}: {exc.strerror or exc}", stage="read")
    if isinstance(exc, MemoryError):
        return TransientError(f"{label}: out of memory while decoding", stage="decode")
    text = " ".join(str(exc).split())  # libheif's messages end in a newline; one line in a log, failed.jsonl
    if LIBHEIF_LIMIT in text:
        return InputError(f"{label}: refused by libheif's security limits, which follow image.max_pixels="
                          f"{cfg.max_pixels} ({text})", stage="decode")
    return InputError(f"{label}: corrupt or truncated image data ({type(exc).__name__}: {text})", stage="decode")


def decode(path: Path, cfg: ImageSection, *, data: bytes | None = None) -> Decoded:
    """Read ``path`` into RGB u8 (+ alpha) with EXIF orientation applied; ``InputError(stage="decode")``
    for anything that is not a usable picture, before allocating pixels when the header already says so.

    ``data``: the file's bytes when the caller has already read them (the pipeline times the read on its
    own), so the file is not read twice; ``path`` still names the file in every error."""
    path = Path(path)
    _sync_pillow_limits(cfg.max_pixels)
    if data is None:
        data = read_regular(path)  # never a device or a FIFO (edge_anime.inputs says why)
    try:
        with _open(data) as im:
            width, height = im.size
            if width * height > cfg.max_pixels:  # Pillow's check covers this; kept for a plain reason
                raise InputError(f"{path}: {width}x{height} is {width * height} pixels, over image.max_pixels="
                                 f"{cfg.max_pixels}; refused before decoding", stage="decode")
            _check_container(path, data, im, cfg)
            scans = _check_scans(path, data) if _progressive(im) else 1
            orientation = _orientation(im) if cfg.apply_exif_orientation else 1
            original = oriented_size((width, height), orientation)
            request = _draft_request(im, original, orientation, cfg)
            source_format = im.format or "unknown"
            # Past TURBO_MAX_SCANS the TurboJPEG path is not tried: a file with that many scans is usually one
            # libjpeg-turbo warns about, which its strict mode notices only after the whole decode, and Pillow
            # then decodes it all again (4096 x 4096 with 100 scans: 2.0 s instead of 0.7, best of 3).
            pixels = _turbo_pixels(im, data, request, orientation) if scans <= TURBO_MAX_SCANS else None
            if pixels is not None:  # a JPEG's EXIF and ICC are in its header: Image.open has read them
                exif = _exif_to_copy(im, reset_orientation=cfg.apply_exif_orientation)
                pixels, icc = _turbo_to_srgb(pixels, im.info.get("icc_profile") or None, label=str(path))
                return Decoded(rgb=pixels, alpha=None, source_format=source_format, original_size=original,
                               exif=exif, icc=icc, path=path, restore_size=original)
            if request is not None:
                im.draft(im.mode, request)
            loaded = load_sixteen_bit_rgb(im, lambda: _open(data)) or im
            loaded.load()
            exif = _exif_to_copy(loaded, reset_orientation=cfg.apply_exif_orientation)  # a PNG's may follow pixels
            if orientation != 1:
                ImageOps.exif_transpose(loaded, in_place=True)
            if source_format not in DRAFT_FORMATS:
                # Only a JPEG can be drafted smaller, so elsewhere the loaded picture is the original size.
                # Taken from the pixels, not the header: Pillow turns a TIFF upright while loading it (its
                # Orientation tag is then gone), and a tag the header read missed must not make the plan
                # resize a portrait picture to landscape.
                original = loaded.size
            rgb_image, alpha_image, icc = to_rgb_alpha(loaded, label=str(path))
    except (InputError, TransientError):
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning, MemoryError, *CORRUPT_ERRORS) as exc:
        raise _open_error(path, exc, cfg, data=data) from exc
    rgb = np.ascontiguousarray(np.asarray(rgb_image))
    alpha = np.ascontiguousarray(np.asarray(alpha_image)) if alpha_image is not None else None
    return Decoded(rgb=rgb, alpha=alpha, source_format=source_format, original_size=original, exif=exif,
                   icc=icc, path=path, restore_size=original)


def decode_header(path: Path, cfg: ImageSection, *, data: bytes) -> Decoded:
    """What ``decode(path, cfg, data=data)`` returns, less the pixels, from the header alone (microseconds):
    the format, the upright size, and the EXIF and ICC profile the encoder copies, chosen by decode's rules
    (Orientation reset when applied; the input's profile when it is sRGB, sRGB's when decode converts the
    pixels to sRGB, none for CMYK or none embedded).
    Every guard a header can answer raises here what decode raises: a format outside the allow-list, over
    ``image.max_pixels``, a progressive JPEG of too many scans, not an image at all.

    Why: a caller that must refuse a picture before taking work on for it (the HTTP service, before a queue
    slot) and one that encodes a picture stylized from bytes (``Stylizer.run_encoded``) then use the
    decoder's own allow-list and messages rather than a second ``Image.open``. ``rgb`` is empty (0 x 0);
    ``cost_mpx`` is ``decode_cost_mpx``'s estimate, so a job that carries this header (``Job.header``) is not
    read again for its decode lane. A PNG whose EXIF comes after its pixels (rare: writers put eXIf first)
    has none here."""
    return _read_header(path, cfg, data=data, metadata=True)


def _read_header(path: Path, cfg: ImageSection, *, data: bytes, metadata: bool) -> Decoded:
    """The one header read behind ``decode_header`` and ``decode_cost_mpx``: every guard a header answers
    (raised as decode raises them), the decode's work estimate in ``cost_mpx``, and with ``metadata`` the
    orientation, EXIF and ICC profile the encoder copies (left out for the estimate: the ICC check builds a
    LittleCMS transform, and the pipeline estimates every file)."""
    path = Path(path)
    _sync_pillow_limits(cfg.max_pixels)
    orientation, exif, kept_icc = 1, None, None
    try:
        with _open(data) as im:
            width, height = int(im.size[0]), int(im.size[1])
            if width * height > cfg.max_pixels:
                raise InputError(f"{path}: {width}x{height} is {width * height} pixels, over image.max_pixels="
                                 f"{cfg.max_pixels}; refused before decoding", stage="decode")
            coded = _check_container(path, data, im, cfg)
            scans = _check_scans(path, data) if _progressive(im) else 0
            if metadata:
                orientation = _orientation(im) if cfg.apply_exif_orientation else 1
                exif = _exif_to_copy(im, reset_orientation=cfg.apply_exif_orientation)
                icc = im.info.get("icc_profile") or None
                kept_icc = profile_after(icc, "L" if im.mode in ("L", "LA", "La") else "RGB")  # as modes.to_rgb_alpha
            source_format = im.format or "unknown"
    except (InputError, TransientError):
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning, MemoryError, *CORRUPT_ERRORS) as exc:
        raise _open_error(path, exc, cfg, data=data) from exc
    passes = max(1.0, scans / TYPICAL_JPEG_SCANS)
    cost_mpx = max(width * height, coded) * passes / 1e6  # one frame: decode loads the first only
    return Decoded(rgb=np.zeros((0, 0, 3), np.uint8), alpha=None, source_format=source_format,
                   original_size=oriented_size((width, height), orientation), exif=exif, icc=kept_icc, path=path,
                   cost_mpx=cost_mpx)
