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

import functools
import importlib
import io
import threading

from PIL import Image, features

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
