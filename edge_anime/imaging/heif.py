"""HEIC/HEIF and AVIF: which library reads and writes them, registered once, and what their bytes say they are.

HEIC (an iPhone's default) is read through pillow-heif, which bundles libheif and libde265 and registers a
``HEIF`` opener with Pillow; AVIF through Pillow's own plugin (libavif, in Pillow's wheel since 11.3). Both then
go through the decoder's one ``Image.open``, so the allow-list, the pixel guard from the header and every
bad-input rule apply to them as to a JPEG. pillow-heif is registered on the first decode, not at import: a
module import must not change Pillow's process-wide registry (``--help`` and the config check stay
side-effect free), and a box without the wheel still runs every other format.

pillow-heif is registered without thumbnails, depth maps and auxiliary images: a photo box decodes the primary
picture only (libheif picks the primary of a multi-image file), so each of those is attack surface and work
for nothing. libheif applies the container's own rotation and mirror (``irot``/``imir``) while decoding and
pillow-heif resets the EXIF Orientation to 1, so a HEIC is upright straight out of ``load()``.
"""
from __future__ import annotations

import functools
import io
import threading

from PIL import Image, features

_register_lock = threading.Lock()
_registered: bool | None = None  # None: not tried yet; False: pillow-heif is not installed
# ISO BMFF brands of the ``ftyp`` box (bytes 8-11 and the compatible brands after them): what a file is by its
# bytes, so a truncated HEIC is called a damaged HEIC, not "not a JPEG, PNG, ..." (Pillow loses the reason).
HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1"})
AVIF_BRANDS = frozenset({b"avif", b"avis"})
FTYP_SCAN_BYTES = 64  # the ftyp box of a still image lists a handful of brands; more is not a photo's header
INSTALL_HINT = "pip install pillow-heif"


def ensure_registered() -> bool:
    """Register pillow-heif's HEIF opener with Pillow once per process (under a lock: decode threads race);
    True when HEIC can be read here."""
    global _registered
    if _registered is not None:
        return _registered
    with _register_lock:
        if _registered is None:
            try:
                import pillow_heif
            except ImportError:
                _registered = False
            else:
                pillow_heif.register_heif_opener(thumbnails=False, depth_images=False, aux_images=False)
                _registered = True
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
    """Whether this install can encode ``pil_format`` (``HEIF``: pillow-heif with an HEVC encoder; ``AVIF``:
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
