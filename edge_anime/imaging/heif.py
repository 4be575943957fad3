"""HEIC/HEIF and AVIF: which library reads and writes them, registered once, and what their bytes say they are.

HEIC (an iPhone's default) is read through libheif and libde265, which register a ``HEIF`` opener with Pillow;
AVIF through Pillow's own plugin (libavif, in Pillow's wheel since 11.3). Both then go through the decoder's one
``Image.open``, so the allow-list, the pixel guard from the header and every bad-input rule apply to them as to a
JPEG. Two wheels carry libheif, with the same API (``HEIF_MODULES``): pillow-heif, which also bundles the x265
encoder (26 MB installed, its binary wheels GPLv2) and so writes HEIC too, is taken when installed (the
``heic-out`` extra); else pi-heif, the base install's, which only decodes (4 MB, LGPLv3): a box then reads
HEIC and writes JPEG for ``output.format: same``. The opener is registered on the first decode, not at import:
a module import must not change Pillow's process-wide registry (``--help`` and the config check stay
side-effect free), and a box without either wheel still runs every other format.

The opener is registered without thumbnails, depth maps and auxiliary images: a photo box decodes the primary
picture only (libheif picks the primary of a multi-image file), so each of those is attack surface and work
for nothing. libheif applies the container's own rotation and mirror (``irot``/``imir``) while decoding and
the wheel resets the EXIF Orientation to 1, so a HEIC is upright straight out of ``load()``.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import io
import logging
import os
import threading

from PIL import Image, features

log = logging.getLogger(__name__)

_register_lock = threading.Lock()
_registered: bool | None = None  # None: not tried yet; False: neither wheel is installed
HEIF_MODULES = ("pillow_heif", "pi_heif")  # the first installed wins: pillow-heif also encodes
# ISO BMFF brands of the ``ftyp`` box (bytes 8-11 and the compatible brands after them): what a file is by its
# bytes, so a truncated HEIC is called a damaged HEIC, not "not a JPEG, PNG, ..." (Pillow loses the reason).
HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
AVIF_BRANDS = frozenset({b"avif", b"avis"})
FTYP_SCAN_BYTES = 64  # the ftyp box of a still image lists a handful of brands; more is not a photo's header
INSTALL_HINT = "pip install pi-heif"


def ensure_registered() -> bool:
    """Register a libheif wheel's HEIF opener with Pillow once per process (under a lock: decode threads race);
    True when HEIC can be read here."""
    global _registered
    if _registered is not None:
        return _registered
    with _register_lock:
        if _registered is None:
            _registered = False
            for name in HEIF_MODULES:
                try:
                    module = importlib.import_module(name)
                except ImportError:
                    continue
                module.register_heif_opener(thumbnails=False, depth_images=False, aux_images=False)
                _registered = True
                break
    return _registered


class _SecurityLimits(ctypes.Structure):
    """The head of libheif's ``struct heif_security_limits`` (heif_security_limits.h, since 1.19): fields are only
    ever appended to it, behind ``version``, so this prefix is the same in every later libheif."""
    _fields_ = [("version", ctypes.c_uint8), ("max_image_size_pixels", ctypes.c_uint64)]


# libheif's limit is a backstop against what would take the box down (a 1-gigapixel grid), not each config's
# policy (the container check's): under 16 MP (48 MB of RGB) a picture costs what the photos here cost, and
# libheif's encoder shares the limit, so a small max_pixels must not stop writing a HEIC of a few megapixels.
LIBHEIF_FLOOR_PIXELS = 4096 * 4096
_limits_lock = threading.Lock()
_limited_to: int | None = None  # the largest max_pixels libheif's global limit has been set for
_libheif_defaults: dict[str, int] = {}  # each loaded libheif's own max_image_size_pixels, before we lowered it


def _loaded_libheif() -> list[str]:
    """The paths of every libheif this process has mapped (the wheels bundle their own copy, renamed)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if line.count(" ") >= 5 and "libheif" in line}
    except OSError:
        return []
    return sorted(path for path in paths if os.path.basename(path).startswith("libheif") and os.path.isfile(path))


def libheif_limit(max_pixels: int) -> int:
    """The largest picture libheif is let allocate for ``image.max_pixels``: a quarter more (a coded picture is
    padded to whole blocks: 1000 x 498 is coded 1000 x 504), and never under ``LIBHEIF_FLOOR_PIXELS``."""
    return max(LIBHEIF_FLOOR_PIXELS, max_pixels + max_pixels // 4)


def apply_security_limits(max_pixels: int) -> bool:
    """Lower libheif's own largest-image limit (``max_image_size_pixels``, 32768 x 32768 by default) to follow
    ``image.max_pixels`` (``libheif_limit``); True when it was set in every libheif loaded here.

    Why: the container check (``heif_boxes``) reads the boxes by hand; libheif then refuses any picture it
    would allocate over the same limit, each grid, tile and coded picture, if a file gets past that check.
    Neither wheel's API takes a limit (pi-heif and pillow-heif only switch libheif's limits off), and the
    context each decode allocates is the wheel's own, so the limit is set where every new context copies it
    from: the global limits ``heif_get_global_security_limits`` returns. Never raised above libheif's own
    default. Process-wide like Pillow's ``MAX_IMAGE_PIXELS``, so set once per ``max_pixels`` value; on a
    libheif without that call (< 1.19) or outside Linux nothing changes, and the container check still
    applies.

    The limit is the largest ``max_pixels`` any config of this process has asked for, never lowered again: it
    is process-wide, and two configs in one process (two ``Stylizer`` objects, a test run) must not refuse
    each other's pictures, nor an encoder's output, through it; each config's own limit is the container
    check's."""
    global _limited_to
    if _limited_to is not None and max_pixels <= _limited_to:
        return True
    with _limits_lock:
        if _limited_to is not None and max_pixels <= _limited_to:
            return True
        if not ensure_registered():
            return False
        paths = _loaded_libheif()
        for path in paths:
            try:
                library = ctypes.CDLL(path)  # already loaded: the same copy the wheel's extension uses
                getter = library.heif_get_global_security_limits
            except (OSError, AttributeError):
                return False
            getter.restype = ctypes.POINTER(_SecurityLimits)
            limits = getter().contents
            if limits.version < 1:
                return False
            default = _libheif_defaults.setdefault(path, int(limits.max_image_size_pixels)) or max_pixels
            limits.max_image_size_pixels = min(libheif_limit(max_pixels), default)
        _limited_to = max_pixels if paths else None
        return bool(paths)


def avif_available() -> bool:
    """Whether this Pillow reads AVIF (its wheel carries libavif from 11.3 on)."""
    return bool(features.check("avif"))


def container_format(data: bytes) -> str | None:
    """``HEIF`` or ``AVIF`` when ``data`` starts with an ISO BMFF ``ftyp`` box naming one of their brands, else
    None. Read from the first bytes only; says what the file claims to be, not that it decodes."""
    if len(data) < 16 or data[4:8] != b"ftyp":
        return None
    size = int.from_bytes(data[0:4], "big")
    end = min(max(size, 16), FTYP_SCAN_BYTES, len(data))
    brands = {data[8:12]} | {data[i:i + 4] for i in range(16, end - 3, 4)}
    if brands & AVIF_BRANDS and data[8:12] not in HEIF_BRANDS - {b"mif1", b"msf1"}:
        return "AVIF"
    if brands & HEIF_BRANDS:
        return "HEIF"
    return None


@functools.lru_cache(maxsize=4)
def writable(pil_format: str) -> bool:
    """Whether this install can encode ``pil_format`` (``HEIF``: pillow-heif, whose wheel has an HEVC encoder; ``AVIF``:
    Pillow's libavif with an AV1 encoder). Found by encoding an 8 x 8 picture once: a wheel may read a format
    and still lack its encoder, and only trying says so for certain."""
    if pil_format == "HEIF" and not ensure_registered():
        return False
    if pil_format == "AVIF" and not avif_available():
        return False
    try:
        Image.new("RGB", (8, 8)).save(io.BytesIO(), format=pil_format)
    except (OSError, ValueError, KeyError, RuntimeError):
        return False
    return True
