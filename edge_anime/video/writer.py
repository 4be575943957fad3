"""The output clip: an MP4 written to a hidden temp file beside the output, renamed into place when complete.

Picture: ``video.codec`` (libx264, the H.264 encoder in PyAV's bundled FFmpeg) at ``video.crf``, yuv420p,
with the input's time base and each frame's own timestamp, so the frame rate (constant or variable), the
frame count and the duration are the input's; the input's display rotation is set on the stream.
Sound: each audio stream is copied packet for packet (no re-encoding, no loss) when MP4 players take its
codec (``COPY_AUDIO``: AAC, MP3, ALAC, AC-3, E-AC-3, Opus, FLAC), else decoded and re-encoded to AAC
(Vorbis from WebM, PCM from MOV/MKV). Copied packets whose times step back (a joined recording's seam) are
shifted to follow on (``retime.PacketRetimer``), as the frames are (``retime.Retimer``, in the reader); a
packet FFmpeg's muxer still refuses is the input's damage (an InputError naming it), never a traceback.
The temp name is ``fsutil``'s, so the watch folder's recovery removes what a killed writer left, and nothing
half-written is ever visible under the output's name.
"""
from __future__ import annotations

import contextlib
import errno
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ..config import VideoSection
from ..errors import InputError, TransientError, UserError
from ..fsutil import fsync_dir, temp_path_for
from . import require_av
from .retime import PacketRetimer

# Audio codecs MP4 players play (phones, browsers, VLC): copied as they are. Others are re-encoded to AAC.
COPY_AUDIO = frozenset({"aac", "mp3", "alac", "ac3", "eac3", "opus", "flac"})
AAC_BIT_RATE = 160_000  # per stream, stereo-transparent for AAC-LC
AAC_LAYOUTS = {1: "mono", 2: "stereo", 3: "3.0", 4: "4.0", 5: "5.0", 6: "5.1", 8: "7.1"}  # others: stereo downmix
PIXEL_FORMAT = "yuv420p"  # what every H.264 player decodes


class _Audio:
    """One input audio stream and its output: copied packets, or decode -> resample -> AAC."""

    def __init__(self, out: Any, stream: Any) -> None:
        av = require_av(Path("<audio>"))
        self.source = stream
        self.codec = stream.codec_context.name
        self.copied = self.codec in COPY_AUDIO and self.codec in out.supported_codecs
        self.retimer = PacketRetimer()
        if self.copied:
            self.stream = out.add_stream_from_template(stream)
            self.resampler = None
        else:
            rate = stream.codec_context.sample_rate or 48_000
            self.stream = out.add_stream("aac", rate=rate)
            # by channel count: a PCM decoder may state "1 channels" (no order), which the AAC encoder refuses
            channels = stream.codec_context.channels or 2
            self.stream.layout = AAC_LAYOUTS.get(channels, "stereo")
            self.stream.format = "fltp"  # the AAC encoder's only sample format
            self.stream.bit_rate = AAC_BIT_RATE
            self.resampler = av.AudioResampler(format="fltp", layout=self.stream.layout, rate=rate)

    def describe(self) -> str:
        return f"{self.codec} copied" if self.copied else f"{self.codec} -> aac"

    def packets(self, packet: Any) -> list[Any]:
        """Output packets for one input packet (``None``: flush the encoder at the end)."""
        if self.copied:
            if packet is None or packet.dts is None:
                return []
            packet.stream = self.stream
            return [self.retimer.apply(packet)]
        frames = self.source.decode(packet) if packet is not None else self.source.decode(None)
        out: list[Any] = []
        assert self.resampler is not None
        for frame in frames:
            frame.pts = None  # the resampler and the encoder count samples from the first
            for resampled in self.resampler.resample(frame):
                out += self.stream.encode(resampled)
        if packet is None:
            for resampled in self.resampler.resample(None):
                out += self.stream.encode(resampled)
            out += self.stream.encode(None)
        return out


class ClipWriter:
    """``write`` frames in order, ``audio`` packets as they come, then ``commit`` (or ``abort``)."""

    def __init__(self, dst: Path, *, cfg: VideoSection, time_base: Fraction, fps: Fraction,
                 audio_streams: list[Any], src: Path | None = None) -> None:
        self.av = require_av(dst)
        self.dst = dst
        self.src = src  # named when the muxer refuses the input's packets
        self.cfg = cfg
        self.time_base = time_base
        self.fps = fps
        self.tmp = temp_path_for(dst)
        try:
            self.out = self.av.open(str(self.tmp), "w", format="mp4")
        except OSError as exc:
            raise _write_error(dst, exc) from exc
        self.audio = {s.index: _Audio(self.out, s) for s in audio_streams}
        self.video: Any = None
        self._pending: list[Any] = []  # audio packets before the first frame (the header needs every stream)
        self.frames = 0

    # -- writing ---------------------------------------------------------------------------------------
    def audio_packet(self, packet: Any) -> None:
        audio = self.audio.get(packet.stream.index)
        if audio is None:
            return
        packets = audio.packets(packet)
        if self.video is None:
            self._pending += packets
        else:
            self._mux(packets)

    def write(self, rgb: np.ndarray, pts: int, *, rotation: int = 0) -> None:
        """One stylized frame (H x W x 3 u8) at ``pts`` in the input's time base."""
        rgb = rgb[: rgb.shape[0] - rgb.shape[0] % 2, : rgb.shape[1] - rgb.shape[1] % 2]  # yuv420p: even sides
        if self.video is None:
            self._open_video(width=rgb.shape[1], height=rgb.shape[0], rotation=rotation)
        frame = self.av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = pts
        frame.time_base = self.time_base
        self._mux(self.video.encode(frame.reformat(format=PIXEL_FORMAT)))
        self.frames += 1

    def _open_video(self, *, width: int, height: int, rotation: int) -> None:
        try:
            stream = self.out.add_stream(self.cfg.codec, rate=self.fps,
                                         options={"crf": str(self.cfg.crf), "preset": self.cfg.preset})
        except (self.av.FFmpegError, ValueError) as exc:
            raise UserError(f"video.codec: {self.cfg.codec!r} is not an encoder of this FFmpeg "
                            f"({exc}); libx264 is the H.264 encoder of PyAV's wheels") from None
        stream.width, stream.height = width, height
        stream.pix_fmt = PIXEL_FORMAT
        stream.time_base = self.time_base
        stream.codec_context.time_base = self.time_base
        if rotation:
            stream.set_display_rotation(rotation)
        self.video = stream
        pending, self._pending = self._pending, []
        self._mux(pending)

    def _mux(self, packets: list[Any]) -> None:
        if not packets:
            return
        try:
            self.out.mux(packets)
        except OSError as exc:
            raise _write_error(self.dst, exc) from exc
        except self.av.FFmpegError as exc:  # EINVAL and the like: times or packets no MP4 can hold
            raise InputError(f"{self.src or self.dst}: damaged timing or packets the MP4 muxer refuses "
                             f"({exc.strerror or exc}); expected a clip whose times can be put in order",
                             stage="write") from None

    # -- the end ---------------------------------------------------------------------------------------
    def commit(self) -> None:
        """Flush the encoders, close, fsync, rename into place, fsync the folder: complete or not at all."""
        try:
            for audio in self.audio.values():
                packets = audio.packets(None)
                if self.video is None:
                    self._pending += packets
                else:
                    self._mux(packets)
            if self.video is not None:
                self._mux(self.video.encode(None))
            self.out.close()
            fd = os.open(self.tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.tmp, self.dst)
            fsync_dir(self.dst.parent)
        except OSError as exc:
            self.abort()
            raise _write_error(self.dst, exc) from exc
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Close what is open and remove the temp file; never raises (it runs on the way out of an error)."""
        with contextlib.suppress(Exception):
            self.out.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)

    def describe_audio(self) -> str:
        return ", ".join(a.describe() for a in self.audio.values()) or "none"


def _write_error(dst: Path, exc: OSError) -> TransientError:
    """A failed write keeps the input for a retry, like a photo's (a full disk needs time, not a new file);
    raised ``from`` the OSError, whose errno watch/faults.py reads (a full disk pauses intake)."""
    reason = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
    return TransientError(f"{dst}: cannot write output: {reason}", stage="write")
