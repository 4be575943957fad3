"""The watch folder's clips: one at a time on a thread of their own, their frames in the photos' pipeline.

Why one at a time: a clip already keeps every inference request busy, and each clip in work holds a reader,
a writer and a window of frames; photos that arrive meanwhile still go straight to the pipeline and
interleave with the clip's frames. The core sees a clip as one claim in flight like a photo; its verdict
comes through the same ``done`` when the clip ends.

Stopping (``stop``): the clip in work is cancelled, its temp file removed, and it is handed back with the
clips not started yet, untouched, for the shell to return to the inbox. Progress (frames done / total,
frames/s) is read by the status file and metrics, and logged every ``LOG_EVERY_S``.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Config
from ..errors import UserError
from ..logs import FIELDS_ATTR, log_name
from ..pipeline import Job
from ..stylizer import StylizerClosed
from ..video.job import ClipResult, ClipStopped, Progress
from ..watch.claim import Claim
from ..watch.faults import StyleFault

if TYPE_CHECKING:
    from ..stylizer import Stylizer

log = logging.getLogger("edge_anime.video")

LOG_EVERY_S = 10.0   # a progress line per clip this often
STOP_JOIN_S = 10.0   # how long ``stop`` waits for a cancelled clip to let go (a frame in inference)
RELOAD_RETRIES = 1   # a clip that met a Stylizer a reload had just closed goes to the new one this many times

Done = Callable[[Claim, BaseException | None, ClipResult], None]


class ClipRunner:
    """``submit`` clips; ``done(claim, error, result)`` when each ends; ``stop`` hands back the unfinished."""

    def __init__(self, *, stylizer: Callable[[], Stylizer], config: Callable[[], Config], done: Done) -> None:
        self._stylizer = stylizer  # the shell's current Stylizer (a reload may rebuild it between clips)
        self._config = config
        self._done = done
        self._queue: queue.Queue[tuple[Claim, Path]] = queue.Queue()
        self._cancel = threading.Event()
        self._stopped: list[Claim] = []
        self._lock = threading.Lock()
        self._current: Progress | None = None
        self._thread: threading.Thread | None = None

    def submit(self, claim: Claim, dst: Path) -> None:
        """Queue a clip (never blocks the core's thread)."""
        self._queue.put((claim, dst))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ea-video", daemon=True)
            self._thread.start()

    def progress(self) -> dict[str, Any] | None:
        """The clip in work: file, frames_done, frames_total, frames_per_s; None when none is."""
        with self._lock:
            return self._current.snapshot() if self._current is not None else None

    def stop(self) -> list[Claim]:
        """Cancel the clip in work and return it with the clips not started: each untouched, no temp left."""
        self._cancel.set()
        self._queue.put(_STOP)
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)
        with self._lock:
            stopped, self._stopped = self._stopped, []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return stopped
            if item is not _STOP:
                stopped.append(item[0])

    # -- the clip thread -------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            claim, dst = item
            if self._cancel.is_set():
                with self._lock:
                    self._stopped.append(claim)
                continue
            result = self._one(claim, dst)
            if isinstance(result.error, ClipStopped):
                with self._lock:
                    self._stopped.append(claim)
                continue
            try:
                self._done(claim, result.error, result)
            except Exception:  # the core only enqueues; a bug there must not end the clip thread
                log.exception("video: reporting %s failed", claim.rel)

    def _one(self, claim: Claim, dst: Path) -> ClipResult:
        progress = Progress(claim.rel)
        with self._lock:
            self._current = progress
        next_log = [time.monotonic() + LOG_EVERY_S]

        def on_frame(state: Progress) -> None:
            now = time.monotonic()
            if now >= next_log[0]:
                next_log[0] = now + LOG_EVERY_S
                log.info("clip %s: %d/%d frames, %.2f frames/s", log_name(claim.rel), state.done, state.total,
                         state.frames_per_s(), extra={FIELDS_ATTR: {"event": "clip_progress", **state.snapshot()}})

        try:
            result = self._run_clip(claim, dst, progress, on_frame)
        finally:
            with self._lock:
                self._current = None
        if result.ok:
            flicker = f", flicker {result.flicker[0]:.2f} -> {result.flicker[1]:.2f}" if result.flicker else ""
            log.info("clip %s: %d frames in %.1f s (%.2f frames/s), audio %s%s", log_name(claim.rel), result.frames,
                     result.timings_s["total"], result.frames_per_s, result.audio, flicker,
                     extra={FIELDS_ATTR: {"event": "clip_done", "file": claim.rel, "frames": result.frames,
                                          "frames_per_s": round(result.frames_per_s, 3), "audio": result.audio,
                                          "flicker": result.flicker}})
        return result

    def _run_clip(self, claim: Claim, dst: Path, progress: Progress,
                  on_frame: Callable[[Progress], None]) -> ClipResult:
        """``Stylizer.run_clip`` on the shell's current Stylizer. The style is compiled before a clip is queued,
        but a reload can swap the Stylizer (StylizerClosed: the clip goes to the new one) or a recompile can
        fail in between (a StyleFault: the clip is kept, not condemned); nothing raised here may end the
        clip thread, or every later clip would wait until a restart."""
        job = Job(src=claim.path, dst=dst)
        for _ in range(RELOAD_RETRIES + 1):
            try:
                return self._stylizer().run_clip(claim.path, dst, style=claim.style or None, state=progress,
                                                 cancel=self._cancel, on_frame=on_frame, video=self._config().video)
            except StylizerClosed as exc:
                closed: BaseException = exc
            except UserError as exc:  # the style's fault, as in the shell's submit: the input is kept
                return ClipResult(job=job, error=StyleFault(claim.style or "default", str(exc)), timings_s={})
            except Exception as exc:
                log.exception("video: clip %s could not start", claim.rel)
                return ClipResult(job=job, error=exc, timings_s={})
        return ClipResult(job=job, error=closed, timings_s={})


_STOP: Any = object()
