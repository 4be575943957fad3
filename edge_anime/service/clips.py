"""The watch folder's side of its clips. A clip runs on the Stylizer's clip lane (``Stylizer.submit_file``, the
one place that tells a photo from a clip): one at a time on a thread of its own, its frames in the photos'
pipeline. The core sees a clip as one claim in flight like a photo; its verdict comes through the same
``done`` when the clip ends.

What is the shell's and stays here: what a clip is called with (its name in the progress, the shell's stop,
a progress line in the log every ``LOG_EVERY_S``), the line when one ends, and at a stop the clips to hand
back. Stopping (``stop``): the clip in work is cancelled, its temp file removed, and the clips not started
yet come back untouched; all of them are returned for the shell to put back in the inbox. Progress (frames
done / total, frames/s) is the lane's (``Stylizer.clip_progress``), read by the status file and metrics.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from ..logs import FIELDS_ATTR, log_name
from ..watch.claim import Claim

if TYPE_CHECKING:
    from ..core.stylizer import FileResult, Stylizer
    from ..video.job import Progress

log = logging.getLogger("edge_anime.video")

LOG_EVERY_S = 10.0   # a progress line per clip this often
STOP_JOIN_S = 10.0   # how long ``stop`` waits for a cancelled clip to let go (a frame in inference)


class ClipRunner:
    """``cancel`` and ``on_frame`` go with every file the shell submits; ``ended`` as each ends; ``stop`` hands
    back the clips stopped unfinished."""

    def __init__(self) -> None:
        self.cancel = threading.Event()  # set by ``stop``: the clip in work ends, the queued ones never start
        self._lock = threading.Lock()
        self._stopped: list[Claim] = []
        self._logged: tuple[int, float] = (0, 0.0)  # (id of the clip's progress, when its next line is due)

    def on_frame(self, state: Progress) -> None:
        """After each frame of the clip in work (on the lane's thread): a log line every ``LOG_EVERY_S``."""
        now = time.monotonic()
        clip, due = self._logged
        if clip != id(state):
            self._logged = (id(state), now + LOG_EVERY_S)
        elif now >= due:
            self._logged = (clip, now + LOG_EVERY_S)
            log.info("clip %s: %d/%d frames, %.2f frames/s", log_name(state.name), state.done, state.total,
                     state.frames_per_s(), extra={FIELDS_ATTR: {"event": "clip_progress", **state.snapshot()}})

    def ended(self, claim: Claim, result: FileResult) -> bool:
        """A file of the shell ended: False for a clip a stop cut short (kept for ``stop`` to hand back, no
        verdict), else True, with the clip's line in the log when it was one and it was written."""
        from ..video.job import ClipResult, ClipStopped

        if not isinstance(result, ClipResult):
            return True
        if isinstance(result.error, ClipStopped):
            with self._lock:
                self._stopped.append(claim)
            return False
        if result.ok:
            flicker = f", flicker {result.flicker[0]:.2f} -> {result.flicker[1]:.2f}" if result.flicker else ""
            log.info("clip %s: %d frames in %.1f s (%.2f frames/s, variant %s), audio %s%s", log_name(claim.rel),
                     result.frames, result.timings_s["total"], result.frames_per_s, result.variant, result.audio,
                     flicker, extra={FIELDS_ATTR: {"event": "clip_done", "file": claim.rel, "frames": result.frames,
                                                   "frames_per_s": round(result.frames_per_s, 3),
                                                   "variant": result.variant, "audio": result.audio,
                                                   "flicker": result.flicker}})
        return True

    def stop(self, stylizer: Stylizer) -> list[Claim]:
        """Cancel the clip in work and the ones queued on ``stylizer``'s lane, wait up to ``STOP_JOIN_S`` for
        the lane to let go, and return the clips stopped: each untouched, no temp file left."""
        self.cancel.set()
        stylizer.wait_clips(STOP_JOIN_S)
        with self._lock:
            stopped, self._stopped = self._stopped, []
        return stopped
