"""Memory that large upload bodies leave behind, given back to the system (glibc only; a no-op elsewhere).

Why: an upload body of a few MB is allocated on one thread and freed on another, many at once. glibc serves
an allocation over its mmap threshold with its own mapping, returned to the system when freed, but that
threshold grows to the largest block freed so far (up to 32 MB): after the first large body, later ones
were carved from the per-thread arenas instead, whose free tops malloc_trim cannot return. 150 concurrent
20 MB uploads left 3.4 GB behind on the main of issue 28; with the bodies bounded but the threshold moving,
still ~200 MB per burst, growing burst after burst. A fixed threshold keeps every body-sized block in a
mapping of its own, and ``trim`` after the last body returns what the arenas hold free.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging

from ..errors import BYTES_PER_MB

log = logging.getLogger("edge_anime.http")

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD_BYTES = BYTES_PER_MB  # blocks from 1 MiB up get a mapping of their own, unmapped when freed


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt  # noqa: B018 - glibc only: musl and macOS have neither function
        libc.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def fix_mmap_threshold() -> bool:
    """Pin glibc's mmap threshold (process-wide, from now on); False where there is no glibc."""
    if _LIBC is None:
        return False
    done = bool(_LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    if not done:
        log.warning("could not pin malloc's mmap threshold: large uploads may leave memory behind")
    return done


def trim() -> None:
    """Return the free pages of every malloc arena to the system (a few ms)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


__all__ = ["fix_mmap_threshold", "trim"]
