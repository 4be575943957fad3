"""What the core reports becomes counters, metrics, the one log line per image, and the pause notice.

The core's ``Events``: the shell passes an ``Accounting`` to the core and reads it for the status file and
sd_notify. Counters move only on verdicts, so they match the folders: ``failed`` counts inputs that reached
failed/, never a retry or a held claim.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from ..logs import FIELDS_ATTR, log_name
from ..watch.claim import Claim
from ..watch.core import Pause, RoomWait
from ..watch.handler import Outcome, Verdict
from .metrics import Metrics
from .status_file import Counts

log = logging.getLogger("edge_anime.service")


class Accounting:
    """Counts, metrics and log lines for verdicts; the service's state word."""

    def __init__(self) -> None:
        self.counts = Counts()
        self.per_style: dict[str, Counts] = {}
        self.metrics = Metrics()
        self.last: dict[str, Any] | None = None
        self.broken: dict[str, str] = {}  # style -> why its model cannot be compiled (until a reload)
        self.state = "starting"
        self.started = time.time()

    # --- Events -------------------------------------------------------------------------------------
    def verdict(self, claim: Claim, verdict: Verdict, result: Any | None) -> None:
        timings = dict(getattr(result, "timings_s", None) or {})
        fields: dict[str, Any] = {"file": claim.rel, "result": verdict.outcome.value, "style": claim.style}
        name = log_name(claim.rel)
        if verdict.outcome is Outcome.DONE:
            self._done(claim, verdict, result, timings, fields)
        elif verdict.outcome is Outcome.FAILED:
            self.counts.failed += 1
            self._style(claim).failed += 1
            self.metrics.failed.labels(stage=verdict.stage, style=claim.style).inc()
            fields.update(stage=verdict.stage, reason=verdict.reason, moved_to=str(verdict.where))
            log.warning("failed %s at %s: %s", name, verdict.stage, verdict.reason, extra={FIELDS_ATTR: fields})
        elif verdict.outcome is Outcome.RETRY:
            self.counts.retried += 1
            self.metrics.retries.inc()
            fields.update(stage=verdict.stage, reason=verdict.reason, attempt=claim.attempts,
                          delay_s=verdict.delay_s, held=verdict.held)
            if verdict.held:
                log.warning("holding %s (intake paused) at %s: %s", name, verdict.stage, verdict.reason,
                            extra={FIELDS_ATTR: fields})
            else:
                log.warning("retry %s in %.1f s (attempt %d) at %s: %s", name, verdict.delay_s, claim.attempts,
                            verdict.stage, verdict.reason, extra={FIELDS_ATTR: fields})
        elif verdict.where is not None:
            log.info("returned %s to the inbox: %s", name, verdict.reason, extra={FIELDS_ATTR: fields})
        else:
            log.info("dropped the claim of %s: %s", name, verdict.reason, extra={FIELDS_ATTR: fields})
        self.last = {"file": claim.rel, "result": verdict.outcome.value, "time": time.time(),
                     "seconds": round(timings.get("total", 0.0), 4)}

    def _done(self, claim: Claim, verdict: Verdict, result: Any, timings: dict[str, float],
              fields: dict[str, Any]) -> None:
        self.counts.processed += 1
        self._style(claim).processed += 1
        self.metrics.processed.labels(style=claim.style).inc()
        self.metrics.observe(timings)
        self.metrics.clip_frames.inc(getattr(result, "frames", 0) or 0)  # a clip's result counts its frames
        faces = list(getattr(result, "faces", None) or [])  # image.faces: auto; a clip counts none per file
        self.metrics.faces.labels(style=claim.style).inc(len(faces))
        fields.update(output=str(verdict.where), in_size=getattr(result, "in_size", None),
                      out_size=getattr(result, "out_size", None), timings_s=timings, faces=faces)
        log.info("done %s %s -> %s %s%s%s", log_name(claim.rel), _size(fields["in_size"]),
                 log_name(verdict.where.name if verdict.where else ""), _size(fields["out_size"]),
                 f", {len(faces)} face{'s' if len(faces) != 1 else ''}" if faces else "",
                 _timings(timings, frames=getattr(result, "frames", 0) or 0) if result is not None
                 else " (recovered: output was complete)",
                 extra={FIELDS_ATTR: fields})

    def paused(self, reason: str) -> None:
        self.metrics.paused.set(1)
        self.metrics.pauses.inc()
        log.error("intake paused: %s; every claimed input is kept, and intake resumes by itself once writes "
                  "succeed again", reason, extra={FIELDS_ATTR: {"event": "paused", "reason": reason}})

    def resumed(self, paused_s: float) -> None:
        self.metrics.paused.set(0)
        log.info("intake resumed after %.1f s paused", paused_s,
                 extra={FIELDS_ATTR: {"event": "resumed", "paused_s": round(paused_s, 3)}})

    def waiting_for_room(self, claim: Claim, needed: int, free: int) -> None:
        """A clip that filled the disk waits for room instead of restarting at frame 0 (once per wait)."""
        folder = claim.dst.parent if claim.dst is not None else None
        never = ""
        try:
            st = os.statvfs(folder) if folder is not None else None
        except OSError:
            st = None
        if st is not None and needed > st.f_blocks * st.f_frsize:
            never = (f"; that is more than the whole filesystem holds ({_mb(st.f_blocks * st.f_frsize)}): put the "
                     "outbox on a larger disk, or raise video.crf for smaller clips")
        log.warning("holding %s until %s has %s free for its output (%s free now); it starts again by itself "
                    "then%s", log_name(claim.rel), folder or "its outbox", _mb(needed), _mb(free), never,
                    extra={FIELDS_ATTR: {"event": "waiting_for_room", "file": claim.rel, "needed_bytes": needed,
                                         "free_bytes": free}})

    def room_found(self, claim: Claim, free: int) -> None:
        log.info("resuming %s: its outbox has %s free", log_name(claim.rel), _mb(free),
                 extra={FIELDS_ATTR: {"event": "room_found", "file": claim.rel, "free_bytes": free}})

    def style_broken(self, style: str, reason: str, *, default: bool, folder: Path) -> None:
        """A style's model failed to compile: say what is held and what brings it back (once per failure)."""
        self.broken[style] = reason
        self.metrics.style_broken.labels(style=style).set(1)
        fields = {"event": "style_broken", "style": style, "reason": reason}
        if default:
            log.error("style %s (the default) cannot be compiled: %s; intake is paused and every input is kept; "
                      "fix the model, then reload (systemctl reload edge-anime)", style, reason,
                      extra={FIELDS_ATTR: fields})
        else:
            log.error("style %s cannot be compiled: %s; its folder %s is held: files there wait untouched, and "
                      "the style is tried again at the next reload (systemctl reload edge-anime) once its model "
                      "is fixed", style, reason, folder, extra={FIELDS_ATTR: fields})

    def styles_retried(self) -> list[str]:
        """A reload: every broken style is tried again (compiled on its next file); returns their names."""
        retried = sorted(self.broken)
        for style in retried:
            self.metrics.style_broken.labels(style=style).set(0)
        self.broken.clear()
        return retried

    def _style(self, claim: Claim) -> Counts:
        return self.per_style.setdefault(claim.style, Counts())

    # --- read by the shell --------------------------------------------------------------------------
    def shown_state(self, pause: Pause | None) -> str:
        """The state word for the status file: 'paused' while a ready service holds intake."""
        return "paused" if pause is not None and self.state == "ready" else self.state

    def status_line(self, pause: Pause | None) -> str:
        why = f" ({pause.reason})" if pause is not None else ""
        broken = "".join(f"; style {s} cannot be compiled" for s in sorted(self.broken))
        return f"{self.shown_state(pause)}{why}: {self.counts.summary()}{broken}"

    def pause_info(self, pause: Pause | None) -> dict[str, Any] | None:
        if pause is None:
            return None
        return {"reason": pause.reason, "seconds": round(time.monotonic() - pause.since, 1)}

    def style_counts(self, served: tuple[str, ...], compiled: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """Per style for the status file: what each has done, and whether it is compiled now (a style no
        longer served keeps its line while this process runs)."""
        names = list(served) + [s for s in self.per_style if s and s not in served]
        return {name: {"processed": self.per_style.get(name, Counts()).processed,
                       "failed": self.per_style.get(name, Counts()).failed,
                       "served": name in served, "compiled": name in compiled,
                       "broken": self.broken.get(name)} for name in names}

    def room_info(self, waits: dict[str, RoomWait]) -> list[dict[str, Any]]:
        """The claims held for room, for the status file; the metrics follow."""
        self.metrics.waiting_for_room.set(len(waits))
        self.metrics.room_needed_bytes.set(sum(w.needed for w in waits.values()))
        return [{"file": w.rel, "needed_bytes": w.needed, "free_bytes": w.free} for w in waits.values()]

    def update_gauges(self, pause: Pause | None) -> None:
        self.metrics.queue_depth.set(self.counts.queued)
        self.metrics.in_flight.set(self.counts.in_flight)
        self.metrics.paused.set(1 if pause is not None else 0)


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _size(size: Any) -> str:
    return f"{size[0]}x{size[1]}" if size else "?"


def _timings(timings: dict[str, float], *, frames: int = 0) -> str:
    """' in 0.412 s (decode=12ms infer=380ms ...)' for a photo, ' in 9.870 s (240 frames)' for a clip, whose
    result has only a total: never an empty '()' at the end of the line."""
    if not timings:
        return ""
    parts = [f"{k}={v * 1000:.0f}ms" for k, v in timings.items() if k != "total"]
    if frames:
        parts.append(f"{frames} frames")
    total = f" in {timings.get('total', sum(timings.values())):.3f} s"
    return f"{total} ({' '.join(parts)})" if parts else total
