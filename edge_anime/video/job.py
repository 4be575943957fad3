"""One clip through the shared pipeline: frames decoded ahead on a reader, encoded behind on a writer, in order.

  reader (the calling thread): demux -> decode -> RGB (an HDR clip graded to SDR first, ``hdr``) ->
      ``imaging.plan`` (the photo's size rules, so every frame of the clip is one static shape) ->
      ``Pipeline.submit``: the same engine, requests and encode threads as the photos, with the same
      back-pressure;
  the pipeline: inference of ``engine.num_requests`` frames at once (both cores busy), ``imaging.finish``;
  writer (its own thread): takes the frames back in their order, runs the style's tone guard with its map
  smoothed across frames (``imaging.tone.ToneTrack`` says why there), blends static regions (``stability``),
  encodes and muxes them between the audio packets they were read with (``writer.ClipWriter``).

Memory does not grow with the clip's length: a window of frames (``pipeline.max_in_flight`` + 2, plus the
``retime.REORDER_DEPTH`` the retimer holds back) is in flight between reader and writer; the reader waits
for the writer to free a slot. Nor does the work grow past the limits when the header lies about the length:
the reader counts frames, seconds and each frame's pixels against ``video.max_frames``, ``video.max_seconds``
and ``image.max_pixels`` as it decodes (a Matroska file that said 0.2 s ran 600 frames past a 100-frame limit).
Each frame's time goes through ``retime.Retimer`` (the reader holds back its few frames), so a clip whose
times are out of order, repeated or reset (a ``+genpts`` remux, joined recordings) is re-timed into the
strictly increasing times the encoder and the muxer need, instead of failing in the muxer. A frame whose
size differs from the first frame's is fitted into it with black bars (``fit_box`` says why).
A stop (``cancel``) or any error ends both threads, removes the temp file and raises: nothing is visible.
"""
from __future__ import annotations

import collections
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from .. import imaging
from ..config import Config
from ..core.pipeline import Job, JobResult, Pipeline
from ..errors import InputError, TransientError
from ..faces.detect import Face
from ..faces.track import FaceTrack
from ..imaging.decoded import Decoded
from ..imaging.decoder import DRAFT_REDUCING_GAP
from ..imaging.geometry import MIN_SIDE_PX
from ..imaging.target import target_size
from ..imaging.tone import ToneTrack
from .hdr import grade
from .header import ClipInfo, check_limits, open_input, read_info
from .retime import REORDER_DEPTH, Retimer, frame_step
from .stability import Flicker, Smoother, static_weight
from .writer import ClipWriter

log = logging.getLogger("edge_anime.video")

WAIT_STEP_S = 0.1  # longest a thread waits before looking at the stop flags again
WINDOW_EXTRA = 2   # frames decoded ahead beyond what the pipeline holds
SETTLE_TIMEOUT_S = 120.0  # after a failure: how long to wait for the frames still in the pipeline


class ClipStopped(TransientError):
    """The clip was stopped (the service is stopping); the input is untouched and is tried again."""


@dataclass
class Progress:
    """Frames done of the clip in work, for the log line, ``status`` and metrics; read from any thread."""

    name: str
    total: int = 0
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def frames_per_s(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def snapshot(self) -> dict[str, Any]:
        return {"file": self.name, "frames_done": self.done, "frames_total": self.total,
                "frames_per_s": round(self.frames_per_s(), 2)}


@dataclass
class ClipResult:
    """What one clip gave: the pipeline's JobResult shape (for the watch folder's log), plus the clip's own."""

    job: Job
    error: BaseException | None
    timings_s: dict[str, float]
    in_size: tuple[int, int] | None = None
    out_size: tuple[int, int] | None = None
    frames: int = 0
    frames_per_s: float = 0.0
    audio: str = "none"
    flicker: tuple[float, float] | None = None  # (before, after) the static-region blend
    variant: str = ""  # the style's IR the frames ran (video.variant, else the photos' own); "" when not started

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Frame:
    index: int
    pts: int
    rotation: int
    planned: np.ndarray          # the input at the inference size (for the static weight and the figure)
    weight: np.ndarray | None    # static weight vs the previous frame
    box: tuple[float, float, float, float] | None = None  # the picture inside black bars (fractions l, t, r, b)


_END = object()


class _Clip:
    """The state shared by the reader, the pipeline's callbacks and the writer of one clip."""

    def __init__(self, pipeline: Pipeline, config: Config, src: Path, dst: Path, info: ClipInfo, *,
                 progress: Progress, cancel: threading.Event) -> None:
        self.pipeline = pipeline
        self.config = config
        self.src, self.dst, self.info = src, dst, info
        self.progress = progress
        self.cancel = cancel
        self.failed = threading.Event()
        self.error: BaseException | None = None
        self.events: queue.Queue[Any] = queue.Queue()
        # the frames the retimer holds back are in flight too: without them in the window the pipeline would
        # run that many frames short
        self.window = threading.Semaphore(pipeline.max_in_flight + WINDOW_EXTRA + REORDER_DEPTH)
        self.results: dict[int, JobResult] = {}
        self.submitted = 0  # frames handed to the pipeline (reader)
        self.returned = 0   # frames the pipeline called back for (under results_ready)
        self.results_ready = threading.Condition()
        self.in_size: tuple[int, int] | None = None
        self.out_size: tuple[int, int] | None = None
        self.flicker = Flicker()
        self.audio = "none"
        self.cut = 0  # video packets the file's own edit list cuts (flagged discard): no player shows them

    # -- errors and stops ------------------------------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.failed.set()
        with self.results_ready:
            self.results_ready.notify_all()

    def check(self) -> None:
        if self.cancel.is_set():
            raise ClipStopped(f"{self.src}: stopped before the clip was complete; it will be done again",
                              stage="video")
        if self.failed.is_set():
            raise _Abandon

    def wait_window(self) -> None:
        while not self.window.acquire(timeout=WAIT_STEP_S):
            self.check()

    # -- pipeline callback -----------------------------------------------------------------------------
    def on_frame(self, result: JobResult) -> None:
        index = result.job.tag
        assert isinstance(index, int), "a frame's tag is its index"
        with self.results_ready:
            self.results[index] = result
            self.returned += 1
            self.results_ready.notify_all()

    def take(self, index: int) -> JobResult:
        with self.results_ready:
            while index not in self.results:
                self.check()
                self.results_ready.wait(WAIT_STEP_S)
            return self.results.pop(index)


class _Abandon(Exception):
    """The other thread failed; its error is the clip's."""


def stylize_clip(pipeline: Pipeline, config: Config, src: Path, dst: Path, *, progress: Progress | None = None,
                 cancel: threading.Event | None = None,
                 on_frame: Callable[[Progress], None] | None = None) -> ClipResult:
    """Stylize ``src`` into ``dst`` (an .mp4, renamed into place when complete); never raises for the clip's
    own failures: they are in ``ClipResult.error`` (InputError, TransientError, ClipStopped, or a bug)."""
    start = time.perf_counter()
    progress = progress or Progress(src.name)
    job = Job(src=src, dst=dst)
    clip: _Clip | None = None
    variant = pipeline.engine.model_info.variant_name
    try:
        container = open_input(src)
        try:
            info = check_limits(read_info(src, container), config)
            progress.total = info.frames
            clip = _Clip(pipeline, config, src, dst, info, progress=progress, cancel=cancel or threading.Event())
            _run(clip, container, on_frame)
        finally:
            container.close()
    except BaseException as exc:  # noqa: BLE001 - every failure is this clip's result, as in the pipeline
        return ClipResult(job=job, error=exc, timings_s={"total": time.perf_counter() - start}, variant=variant)
    elapsed = time.perf_counter() - start
    return ClipResult(job=job, error=None, timings_s={"total": elapsed}, in_size=clip.in_size,
                      out_size=clip.out_size, frames=progress.done, frames_per_s=progress.done / max(elapsed, 1e-9),
                      audio=clip.audio, flicker=clip.flicker.ratios(), variant=variant)


def _run(clip: _Clip, container: Any, on_frame: Callable[[Progress], None] | None) -> None:
    video = container.streams.video[0]
    video.thread_type = "AUTO"  # frame and slice threads: decoding keeps ahead of inference
    writer = ClipWriter(clip.dst, cfg=clip.config.video, time_base=Fraction(video.time_base), fps=clip.info.fps,
                        audio_streams=list(container.streams.audio), src=clip.src)
    clip.audio = writer.describe_audio()
    thread = threading.Thread(target=_write_all, args=(clip, writer, on_frame), name="ea-video-write", daemon=True)
    thread.start()
    try:
        _read_all(clip, container)
    except _Abandon:
        pass
    except BaseException as exc:  # noqa: BLE001 - the clip's error; the writer stops on it
        clip.fail(exc)
    finally:
        clip.events.put(_END)
        thread.join()
        _settle_in_flight(clip)
    if clip.error is not None:
        writer.abort()
        raise clip.error
    decoded = clip.progress.done
    stated = clip.info.frames - clip.cut  # an MP4's count includes the frames its edit list cuts
    if decoded == 0 or (clip.info.frames_exact and decoded < stated) or \
            (not clip.info.frames_exact and decoded < 0.9 * stated):
        writer.abort()
        cut = f" ({clip.cut} cut by its edit list)" if clip.cut else ""
        raise InputError(f"{clip.src}: truncated or damaged: {decoded} of the {clip.info.frames} frames its header "
                         f"states{cut} could be decoded", stage="decode")
    writer.commit()


def _read_all(clip: _Clip, container: Any) -> None:
    """The reader: decode ahead, plan each frame by the image policy, submit it; audio packets pass through.
    A frame goes to the writer once the retimer has decided its time (``REORDER_DEPTH`` frames later)."""
    video = container.streams.video[0]
    previous: np.ndarray | None = None
    multiple = clip.pipeline.multiple
    tone = clip.info.hdr  # the clip's grade to SDR, or None (``hdr.grade`` may take the first frame's)
    track = FaceTrack() if clip.pipeline.faces is not None else None  # image.faces: auto, smoothed over frames
    timebase = Fraction(video.time_base) if video.time_base else Fraction(1, 90_000)
    retimer = Retimer(step=frame_step(clip.info.fps, timebase))
    held: collections.deque[_Frame] = collections.deque()  # submitted, waiting for the retimer's time
    canvas: tuple[int, int] | None = None  # the first frame's size: every frame is fitted into it (fit_box)
    index = 0
    for item in _demux(clip, container):
        clip.check()
        if not hasattr(item, "to_ndarray"):
            _check_time(clip, item.pts, item.stream)
            clip.events.put(item)
            continue
        _check_frame(clip, item, index, video)
        original = (int(item.width), int(item.height))
        canvas = canvas or original
        scaled = scaled_size(canvas, clip.config, multiple=multiple)
        tone = grade(clip.src, item, index, tone)
        box = None if original == canvas else fit_box(original, scaled or canvas)
        if box is not None:  # another size than the first frame's: fitted into it, black bars around
            rgb = np.zeros(((scaled or canvas)[1], (scaled or canvas)[0], 3), np.uint8)
            left, top, width, height = box
            rgb[top: top + height, left: left + width] = _frame_rgb(item, tone, (width, height))
        else:
            rgb = _frame_rgb(item, tone, scaled)
        decoded = Decoded(rgb=rgb, alpha=None, source_format="VIDEO", original_size=canvas, exif=None, icc=None,
                          path=clip.src)
        planned = imaging.plan(decoded, clip.config.image, multiple=multiple)
        faces = _faces(clip, planned.rgb, track)
        clip.in_size = canvas
        weight = static_weight(planned.rgb, previous, clip.config.video.static_threshold)
        previous = planned.rgb
        clip.wait_window()
        held.append(_Frame(index=index, pts=0, rotation=item.rotation, planned=planned.rgb, weight=weight,
                           box=None if box is None else _fractions(box, rgb.shape)))
        clip.pipeline.submit(Job(src=clip.src, dst=None, tag=index, planned=planned, notify=clip.on_frame,
                                 tone=False,  # the writer runs the tone guard, in frame order
                                 palette=False,  # a palette chosen per frame would flicker
                                 ink=False,  # and lines found per frame would flicker on noise
                                 faces=faces))
        clip.submitted += 1
        index += 1
        _release(clip, held, retimer.push(item.pts), video)
    _release(clip, held, retimer.finish(), video)
    said = retimer.repaired()
    if said is not None:
        log.warning("%s: re-timed: %s", clip.src, said)


def _release(clip: _Clip, held: collections.deque[_Frame], times: list[int], stream: Any) -> None:
    """The held frames, oldest first, to the writer with the times the retimer decided; a re-timed clip's
    length is counted against ``video.max_seconds`` too (a reset must not reopen the limit)."""
    for pts in times:
        frame = held.popleft()
        frame.pts = pts
        _check_time(clip, pts, stream)
        clip.events.put(frame)


def _frame_rgb(frame: Any, tone: Any, size: tuple[int, int] | None) -> np.ndarray:
    """The decoded frame as RGB at ``size`` (None: its own): graded to SDR first for an HDR clip (hdr.py)."""
    if tone is not None:
        rgb: np.ndarray = tone.frame_rgb(frame, size)
        return rgb
    if size is None:
        return frame.to_ndarray(format="rgb24")  # type: ignore[no-any-return]
    return frame.to_ndarray(width=size[0], height=size[1], format="rgb24",  # type: ignore[no-any-return]
                            interpolation="AREA")


def fit_box(size: tuple[int, int], canvas: tuple[int, int]) -> tuple[int, int, int, int]:
    """Where a frame of ``size`` goes in ``canvas``, its aspect kept and centred: (left, top, width, height).

    Why letterbox (or pillarbox) a frame whose size differs from the first frame's (a phone turned mid-call
    in a WebRTC recording, joined clips, a stream switching resolution): an MP4 stream has one picture size,
    the first frame's, which the header states and every frame planned for inference shares (one compiled
    shape, and the frame-to-frame blend compares like with like). Stretching the frame to it, as the encoder
    did, squeezed a 200x900 portrait into a landscape picture; cropping would cut most of it away; refusing
    would lose the user's clip. Fitted with black bars, every frame shows whole and undistorted, as a video
    editor shows a portrait shot in a landscape timeline. A frame of the same aspect fills the canvas."""
    width, height = size
    scale = min(canvas[0] / width, canvas[1] / height)
    fitted = (min(canvas[0], max(1, round(width * scale))), min(canvas[1], max(1, round(height * scale))))
    return ((canvas[0] - fitted[0]) // 2, (canvas[1] - fitted[1]) // 2, *fitted)


def _fractions(box: tuple[int, int, int, int], shape: tuple[int, ...]) -> tuple[float, float, float, float] | None:
    """The box as fractions of the canvas (the output may have another size); None when it fills it."""
    left, top, width, height = box
    if (width, height) == (shape[1], shape[0]):
        return None
    return (left / shape[1], top / shape[0], (left + width) / shape[1], (top + height) / shape[0])


def _bars(shown: np.ndarray, box: tuple[float, float, float, float] | None) -> np.ndarray:
    """The output with black outside the fitted frame's box: the model paints black bars in its own colours."""
    if box is None:
        return shown
    height, width = shown.shape[:2]
    left, top = math.floor(box[0] * width + 0.5), math.floor(box[1] * height + 0.5)
    right, bottom = math.floor(box[2] * width + 0.5), math.floor(box[3] * height + 0.5)
    out = np.zeros_like(shown)
    out[top:bottom, left:right] = shown[top:bottom, left:right]
    return out


def _faces(clip: _Clip, rgb: np.ndarray, track: FaceTrack | None) -> tuple[Face, ...] | None:
    """The frame's faces for ``image.faces: auto``, found here in frame order and smoothed over the frames
    before (``faces.track``), so a restyled face neither jitters nor blinks; None when faces are off."""
    if track is None or clip.pipeline.faces is None:
        return None
    faces, found = clip.pipeline.faces.find(rgb)
    if found > len(faces) and not track.cap_said:
        clip.pipeline.faces.say_capped(clip.src.name, found)
        track.cap_said = True
    return tuple(track.update(faces))


def _check_frame(clip: _Clip, frame: Any, index: int, stream: Any) -> None:
    """The header's limits, counted on what is decoded (``header`` says why): the frame count, the frame's own
    size and its time. InputError naming the limit, before this frame costs anything more."""
    cfg = clip.config
    if index >= cfg.video.max_frames:
        raise InputError(f"{clip.src}: more than video.max_frames={cfg.video.max_frames} frames, though its header "
                         f"states {clip.info.frames}; refused at frame {index + 1}", stage="decode")
    pixels = int(frame.width) * int(frame.height)
    if pixels > cfg.image.max_pixels:
        raise InputError(f"{clip.src}: frame {index + 1} is {frame.width}x{frame.height} = {pixels} pixels, over "
                         f"image.max_pixels={cfg.image.max_pixels} (its header states {clip.info.width}x"
                         f"{clip.info.height})", stage="decode")
    _check_time(clip, frame.pts, stream)


def _check_time(clip: _Clip, pts: int | None, stream: Any) -> None:
    """A frame or an audio packet that starts past ``video.max_seconds`` from its stream's start."""
    if pts is None or stream.time_base is None:
        return
    seconds = float((pts - (stream.start_time or 0)) * stream.time_base)
    limit = clip.config.video.max_seconds
    if seconds > limit:
        raise InputError(f"{clip.src}: longer than video.max_seconds={limit:g}, though its header states "
                         f"{clip.info.seconds:.1f} s; refused at {seconds:.1f} s of its {stream.type}", stage="decode")


def scaled_size(original: tuple[int, int], config: Config, *, multiple: int) -> tuple[int, int] | None:
    """The size FFmpeg's scaler converts each frame to, when smaller than the frame: twice the planned size, as
    a large JPEG is drafted (``imaging.decoder.DRAFT_REDUCING_GAP``), so ``imaging.plan``'s LANCZOS does only
    the last step. A 720p frame at max_side 256 is converted at 512x288 instead of 1280x720: the YUV->RGB
    conversion and the resize cost a fifth, which at small sizes is a real share of a frame's CPU time."""
    cfg = config.image
    if cfg.resize == "keep":
        return None
    target = target_size(original, cfg, multiple=max(multiple, cfg.multiple, MIN_SIDE_PX))
    if target is None:
        return None  # over budget and refused: plan() says so with the reason
    width, height = original
    if cfg.resize == "center_square":
        scale = target[0] * DRAFT_REDUCING_GAP / min(width, height)  # the crop keeps its side >= twice the target
        wanted = (math.ceil(width * scale), math.ceil(height * scale))
    else:
        wanted = (math.ceil(target[0] * DRAFT_REDUCING_GAP), math.ceil(target[1] * DRAFT_REDUCING_GAP))
    if wanted[0] >= width or wanted[1] >= height:
        return None
    return wanted


def _demux(clip: _Clip, container: Any) -> Iterator[Any]:
    """Frames of the first video stream and packets of every audio stream, in the file's order; FFmpeg's
    errors on a damaged stream become InputErrors naming the file."""
    import av

    video = container.streams.video[0]
    try:
        for packet in container.demux(video, *container.streams.audio):
            if packet.stream.type == "video":
                clip.cut += bool(packet.is_discard)  # decoded (a reference) but never shown
                yield from packet.decode()
            elif packet.dts is not None:
                yield packet
    except av.FFmpegError as exc:
        raise InputError(f"{clip.src}: truncated or damaged: {exc}", stage="decode") from None


def _write_all(clip: _Clip, writer: ClipWriter, on_frame: Callable[[Progress], None] | None) -> None:
    """The writer: frames back in order, blended, encoded; audio muxed between them as it was read."""
    smoother = Smoother(clip.config.video.temporal_smoothing)
    spec = clip.pipeline.tone
    track = None if spec is None else ToneTrack(strength=spec.strength, neutral=spec.neutral)
    last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # planned input, raw output, shown output
    try:
        while True:
            try:
                event = clip.events.get(timeout=WAIT_STEP_S)
            except queue.Empty:
                clip.check()
                continue
            if event is _END:
                return
            if not isinstance(event, _Frame):
                writer.audio_packet(event)
                continue
            result = clip.take(event.index)
            if result.error is not None:
                raise result.error
            assert result.image is not None
            raw = np.asarray(result.image)  # RGB: a clip has no alpha
            if track is not None:
                raw = track.apply(raw, _at_size(event.planned, raw.shape))
            shown = smoother.apply(raw, event.weight)
            clip.flicker.add(event.weight, (event.planned, last[0] if last else None),
                             (raw, last[1] if last else None), (shown, last[2] if last else None))
            last = (event.planned, raw, shown)
            shown = _bars(shown, event.box)
            writer.write(shown, event.pts, rotation=event.rotation)
            clip.out_size = (shown.shape[1], shown.shape[0])
            clip.window.release()
            clip.progress.done += 1
            if on_frame is not None:
                on_frame(clip.progress)
    except _Abandon:
        return
    except BaseException as exc:  # noqa: BLE001 - the clip's error; the reader stops on it
        clip.fail(exc)


def _at_size(planned: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The frame as fed to the model at the output's size (it differs with ``image.upscale_to_original``)."""
    if planned.shape == shape:
        return planned
    resized: np.ndarray = np.asarray(Image.fromarray(planned).resize((shape[1], shape[0]), Image.Resampling.BILINEAR))
    return resized


def _settle_in_flight(clip: _Clip) -> None:
    """Wait until every frame submitted has come back (the pipeline calls back exactly once per job, a closing
    one too): when a clip returns, none of its frames is still in the shared pipeline."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    with clip.results_ready:
        while clip.returned < clip.submitted and time.monotonic() < deadline:
            clip.results_ready.wait(WAIT_STEP_S)
    if clip.returned < clip.submitted:
        log.warning("%s: %d frame(s) still in the pipeline after %g s", clip.src, clip.submitted - clip.returned,
                    SETTLE_TIMEOUT_S)
