"""Clips: every frame through the same pipeline, engine and image policy as a photo; the sound kept.

A clip is a file whose extension is in ``video.extensions``. It is read with PyAV (FFmpeg in a wheel, the
``video`` extra), each frame planned by ``imaging.plan`` (so one clip is one static shape) and submitted to
the very ``Pipeline`` the photos use, then encoded in order to a hidden temp ``.mp4`` beside the output and
renamed into place when complete. The modules, one job each:
  ``header``    the container's header: size, rate, frames, duration; the limits refuse from it;
  ``writer``    the output file: H.264 picture, audio copied or re-encoded to AAC, temp + rename;
  ``stability`` the static-region blend that tames flicker, and the flicker figure itself;
  ``job``       one clip: a reader thread ahead, the pipeline in the middle, a writer thread behind;
  (the watch folder's side, clips one at a time beside the photos, is ``service.clips``)

This module imports nothing heavy: the watch folder asks ``is_clip`` about every name.
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ..config import VideoSection
from ..errors import InputError

OUTPUT_EXTENSION = "mp4"
INSTALL_HINT = "pip install 'edge-anime[video]'"


def is_clip(name: str | Path, cfg: VideoSection) -> bool:
    """Whether ``name`` is taken as a clip (its extension is in ``video.extensions``)."""
    text = str(name)
    return "." in text and text.rpartition(".")[2].lower() in cfg.extensions



def require_av(path: Path) -> ModuleType:
    """PyAV, or an InputError naming the extra: a clip that arrives on a box without it fails with the fix."""
    try:
        import av
    except ImportError:
        raise InputError(f"{path}: a video clip needs PyAV, which is not installed: {INSTALL_HINT}",
                         stage="video") from None
    return av
