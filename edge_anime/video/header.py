"""The container's header -> ``ClipInfo``, and the limits that refuse a clip before any frame is decoded.

Why from the header: a 4K two-hour clip must be refused in milliseconds, not after minutes of decoding.
``video.max_seconds``, ``video.max_frames`` and ``image.max_pixels`` (per frame, the photo's guard) are
checked here. A zero-byte file, a file FFmpeg cannot open (a truncated MP4 has no ``moov`` index), one
without a video stream and one whose stream holds no frame are InputErrors naming the file. So are a device
or a FIFO (FFmpeg would read ``/dev/zero`` forever or wait on the FIFO) and a photo under a clip's name: FFmpeg
opens a JPEG as a video of unknown length, which read as "a zero-length clip".

A header can lie (a Matroska segment's duration is one number anyone can write), so the reader counts the
frames and seconds it decodes against the same limits (``job._read_all``); the header check only refuses
early what it can.

The header's colour tags say whether a clip is HDR (HLG or PQ, what phones record): ``ClipInfo.hdr`` is then
the grade to SDR that ``hdr`` applies to every frame before inference.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import InputError
from ..inputs import check_regular
from . import require_av
from .hdr import ToneMap, tone_map_for

DEFAULT_FPS = Fraction(25)  # a stream that states no rate at all (rare): FFmpeg's own default
VIDEO_TEXT = "MP4, MOV, M4V, Matroska or WebM"


@dataclass(frozen=True)
class ClipInfo:
    """What the header says; ``frames`` is exact when ``frames_exact``, else duration x rate."""

    path: Path
    width: int
    height: int
    fps: Fraction
    frames: int
    frames_exact: bool
    seconds: float
    audio_codecs: tuple[str, ...]
    hdr: ToneMap | None = None  # HLG or PQ: graded to SDR before inference (``hdr``); None for SDR


def open_input(path: Path) -> Any:
    """``av.open`` for reading, its errors as InputErrors naming the file (stage ``header``)."""
    av = require_av(path)
    check_regular(path)
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}", stage="read") from exc
    if size == 0:
        raise InputError(f"{path}: an empty file (0 bytes), not a clip", stage="header")
    picture = picture_format(path)
    if picture is not None:
        raise InputError(f"{path}: a {picture} picture, not a video clip; expected a video ({VIDEO_TEXT}); a photo "
                         "needs a photo's extension, such as .jpg, to be stylized as one", stage="header")
    try:
        return av.open(str(path), "r")
    except av.FFmpegError as exc:
        raise InputError(f"{path}: not a readable clip (truncated or damaged?): {_why(exc)}", stage="header") from None


def picture_format(path: Path) -> str | None:
    """The format of a file that is one of the photo formats the decoder takes (``JPEG``, ``PNG``...), else
    None. Pillow reads the first bytes only; a clip is none of these formats."""
    from PIL import Image, UnidentifiedImageError

    from ..imaging.decoder import ALLOWED_FORMATS, CORRUPT_ERRORS

    try:
        with Image.open(path, formats=ALLOWED_FORMATS) as im:
            return im.format or "still"
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return "large"  # a picture all the same, over image.max_pixels
    except (UnidentifiedImageError, *CORRUPT_ERRORS):
        return None


def read_info(path: Path, container: Any) -> ClipInfo:
    if not container.streams.video:
        # MP4's demuxer drops a video track without a single frame: a zero-length clip lands here too
        raise InputError(f"{path}: no video stream with frames (audio or data only, or zero-length)", stage="header")
    stream = container.streams.video[0]
    ctx = stream.codec_context
    width, height = int(ctx.width or 0), int(ctx.height or 0)
    if width <= 0 or height <= 0:
        raise InputError(f"{path}: the video stream states no picture size", stage="header")
    fps = Fraction(stream.average_rate or stream.guessed_rate or DEFAULT_FPS)
    seconds = _seconds(stream, container)
    frames = int(stream.frames or 0)
    exact = frames > 0
    if not exact:
        frames = int(math.floor(seconds * fps + 0.5))
    if frames <= 0 or seconds <= 0:
        raise InputError(f"{path}: a zero-length clip (no frames in its video stream)", stage="header")
    audio = tuple(s.codec_context.name for s in container.streams.audio)
    return ClipInfo(path=path, width=width, height=height, fps=fps, frames=frames, frames_exact=exact,
                    seconds=seconds, audio_codecs=audio, hdr=tone_map_for(path, ctx))


def check_limits(info: ClipInfo, config: Config) -> ClipInfo:
    cfg = config.video
    if info.seconds > cfg.max_seconds:
        raise InputError(f"{info.path}: {info.seconds:.1f} s long, over video.max_seconds={cfg.max_seconds:g}",
                         stage="header")
    if info.frames > cfg.max_frames:
        raise InputError(f"{info.path}: {info.frames} frames, over video.max_frames={cfg.max_frames}", stage="header")
    pixels = info.width * info.height
    if pixels > config.image.max_pixels:
        raise InputError(f"{info.path}: frames of {info.width}x{info.height} = {pixels} pixels, over "
                         f"image.max_pixels={config.image.max_pixels}", stage="header")
    return info


def _seconds(stream: Any, container: Any) -> float:
    """The video stream's duration, else the container's (Matroska states only the latter)."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000  # AV_TIME_BASE
    return 0.0


def _why(exc: BaseException) -> str:
    """FFmpeg's message without the file name it repeats."""
    text = getattr(exc, "strerror", None) or str(exc)
    return str(text)
