"""Timestamps a player and the MP4 muxer accept, for clips whose own are out of order, repeated or reset.

Why: the encoder and the MP4 muxer need strictly increasing times; a decoded frame's ``pts`` is whatever the
file says. Three kinds of file break that, and each is a user's clip, not a broken one, so it is re-timed
rather than refused:

  * an AVI (or raw H.264) with B-frames remuxed with ``ffmpeg -fflags +genpts -c copy``: the timestamps were
    generated in *decode* order, so the frames, which the decoder hands out in display order, carry them
    permuted (``0 512 1536 1024 3072 2560 ...``). The set of times is right, only their order is not:
    sorting them over a window of a few frames (B-frames move a frame by at most the decoder's reorder depth,
    ``REORDER_DEPTH`` covers x264's and x265's defaults) gives every frame back its true time, so the output
    keeps the clip's frame rate, duration and audio sync exactly;
  * recordings joined byte-wise (``cat a.ts b.ts``, camcorder ``.MTS`` segments): the times jump back to the
    start at each seam. A jump back by more than the window can reorder is a reset: the frames after it are
    shifted to go on one frame after the last one, so every frame is kept and plays at its rate; the sound
    (``PacketRetimer``) is shifted at its own seam the same way, so the two stay together;
  * times that repeat (or step back by less than a frame): each such frame is placed one tick of the time
    base after the one before, which keeps every frame and does not move the ones that follow.

Frames without a time are placed one frame after the latest time seen. A clip whose times are in order goes
through unchanged (sorting sorted times is the identity).
"""
from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

REORDER_DEPTH = 8  # frames held back to sort their times: x264's default B-pyramid needs 2-3, x265's up to 5


def frame_step(fps: Fraction, time_base: Fraction) -> int:
    """One frame's duration in ticks of ``time_base`` (at least 1): the unit resets are re-based by."""
    if fps <= 0 or time_base <= 0:
        return 1
    return max(1, round(1 / (fps * time_base)))


@dataclass
class Retimer:
    """Display times for one clip's frames, strictly increasing: ``push`` each frame's ``pts`` in decode
    output order; it returns the times decided so far, for the oldest frames not yet given one, in order;
    ``finish`` returns the rest. Holds back at most ``depth`` frames (the module doc says why)."""

    step: int
    depth: int = REORDER_DEPTH
    reordered: int = 0  # frames whose time was lower than the frame's before it (the +genpts kind)
    resets: int = 0     # jumps back past the window (joined recordings)
    bumped: int = 0     # repeated times, moved a tick on
    missing: int = 0    # frames without a time
    _heap: list[tuple[int, int]] = field(default_factory=list)
    _order: Any = field(default_factory=itertools.count)
    _offset: int = 0            # added to every time after a reset
    _high: int | None = None    # the highest (shifted) time pushed so far
    _last_in: int | None = None
    _last_out: int | None = None

    def push(self, pts: int | None) -> list[int]:
        if pts is None:
            self.missing += 1
            time = 0 if self._high is None else self._high + self.step
        else:
            time = pts + self._offset
            if self._last_in is not None and pts < self._last_in:
                self.reordered += 1
            self._last_in = pts
            if self._high is not None and time < self._high - (self.depth + 1) * self.step:
                self.resets += 1
                self._offset += self._high + self.step - time
                time = self._high + self.step
        self._high = time if self._high is None else max(self._high, time)
        heapq.heappush(self._heap, (time, next(self._order)))
        decided: list[int] = []
        while len(self._heap) > self.depth:
            decided.append(self._next())
        return decided

    def finish(self) -> list[int]:
        """The times of the frames still held back."""
        return [self._next() for _ in range(len(self._heap))]

    def _next(self) -> int:
        time, _ = heapq.heappop(self._heap)
        if self._last_out is not None and time <= self._last_out:
            self.bumped += 1
            time = self._last_out + 1
        self._last_out = time
        return time

    def repaired(self) -> str | None:
        """What was wrong with the clip's times, for the log; None when nothing was re-timed."""
        parts = []
        if self.resets:
            parts.append(f"{self.resets} jump(s) back in time (joined recordings?): later frames shifted to follow "
                         "on")
        if self.reordered and not self.resets:
            parts.append(f"{self.reordered} frame(s) stamped out of display order (a remux with +genpts?): "
                         "times sorted back")
        if self.bumped:
            parts.append(f"{self.bumped} repeated time(s): moved one tick on")
        if self.missing:
            parts.append(f"{self.missing} frame(s) without a time: placed one frame on")
        return "; ".join(parts) or None


@dataclass
class PacketRetimer:
    """Strictly increasing decode times for one copied audio stream: a packet at or before the last one (the
    seam of a joined recording) shifts it and every later packet to follow on after the last, pts with dts.
    Returns the packet (changed in place); counts the shifts."""

    resets: int = 0
    _offset: int = 0
    _last: int | None = None

    def apply(self, packet: Any) -> Any:
        if packet.dts is None:
            return packet
        dts = packet.dts + self._offset
        if self._last is not None and dts <= self._last:
            shift = self._last + max(int(packet.duration or 0), 1) - dts
            self._offset += shift
            dts += shift
            self.resets += 1
        packet.dts = dts
        if packet.pts is not None:
            packet.pts = max(packet.pts + self._offset, dts)
        self._last = dts
        return packet
