"""Time many candidates in seconds: screen every one on a small picture, then time the few that could win at
the shape that will run. The first start's measurement (``runtime.choice``) is this.

Why two stages: at the default 1024 px a 2-core box needs ~3-7 s per round of requests of one candidate (f32
on the AMX Xeon; twice that on the AVX2 EPYC), and the bundled style has up to 9 candidates (3 IRs x 3
precisions): timing each at that shape took 78 s to 2 min on a 2-core box and kept several 1024 px engines'
activations alive at once (1.7 GB peak where serving needs ~1.2 GB). Per pixel the candidates rank the same on
a small picture of the same aspect (``SCREEN_PIXELS``, about 16x fewer pixels): the screen costs a second or
two per candidate and tells the clear losers apart. Only the candidates within ``SHORTLIST_SHARE`` of the
screen's fastest (at most ``SHORTLIST_MAX``) are then timed at the shape the image policy gives a typical photo,
one at a time, so the start's peak is one engine at that shape: what serving holds for one photo size.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import openvino as ov

from ..config import DeviceSection
from ..models import ModelInfo
from ..ticking import ticking
from . import isolated
from .timing import (
    GUESS_COMPILE_SECONDS,
    GUESS_REQUESTS,
    GUESS_SECONDS_PER_MEGAPIXEL,
    Candidate,
    Timing,
    measure_candidates,
)

log = logging.getLogger(__name__)

# The screen's picture: 4:3 at 160 px, 1/41 of the default 1024 px shape. At 128x96 and 256x192 the bundled
# style's 9 candidates ranked as at 1024x768 but for one swap of neighbours (docs/design.md, "screens small").
SCREEN_PIXELS = 160 * 120
SCREEN_SECONDS = 0.5  # per candidate at the screen, over its rounds (a round there is 0.03-0.2 s)
FINAL_SECONDS = 1.0  # per shortlisted candidate at the real shape: one timed round after its warm-up round
SHORTLIST_SHARE = 0.85  # within 15 % of the screen's fastest: close enough that the real shape decides
SHORTLIST_MAX = 2
PULSE_SECONDS = 5.0  # the longest the log stays quiet while measuring: a person must see it is not hung
SCREEN_TIMEOUT_S = 300.0  # a screen that has not ended by then hangs: the style's default runs instead


@dataclass
class Contest:
    """What was timed: every candidate at ``screen_hw`` (none when the shape is small enough to time directly),
    the shortlist (or every candidate, without a screen) at the real shape."""

    shape_hw: tuple[int, int]
    screen_hw: tuple[int, int] | None
    screen: list[Timing] = field(default_factory=list)
    final: list[Timing] = field(default_factory=list)
    failed: str | None = None  # why nothing could be timed (then nothing is kept: the next start measures)


def screen_shape(shape_hw: tuple[int, int], multiple: int) -> tuple[int, int] | None:
    """(H, W) of the screen's picture at ``shape_hw``'s aspect, sides multiples of ``multiple``; None when the
    real shape is itself no more than twice that (then the candidates are timed there directly)."""
    height, width = shape_hw
    if height * width <= 2 * SCREEN_PIXELS:
        return None
    scale = math.sqrt(SCREEN_PIXELS / (height * width))
    step = max(1, multiple)
    return (max(step, round(height * scale / step) * step), max(step, round(width * scale / step) * step))


def estimate_seconds(count: int, shape_hw: tuple[int, int], *, multiple: int = 8,
                     final_seconds: float = FINAL_SECONDS) -> float:
    """A first guess of ``run_contest``'s wall time, said before anything is timed (f32's cost, so it errs long
    where bf16 or INT8 run faster; the progress lines re-estimate as they go)."""
    def one(hw: tuple[int, int], seconds: float) -> float:
        round_s = GUESS_REQUESTS * hw[0] * hw[1] / 1e6 * GUESS_SECONDS_PER_MEGAPIXEL
        return GUESS_COMPILE_SECONDS + round_s + max(seconds, round_s)

    small = screen_shape(shape_hw, multiple)
    if small is None:
        return count * one(shape_hw, final_seconds)
    return count * one(small, SCREEN_SECONDS) + min(count, SHORTLIST_MAX) * one(shape_hw, final_seconds)


def shortlist(timings: Sequence[Timing], fits: Callable[[Timing], bool]) -> list[Candidate]:
    """The screened candidates worth timing at the real shape: those that hold the quality floor (``fits``)
    within ``SHORTLIST_SHARE`` of the fastest such, fastest first, at most ``SHORTLIST_MAX``."""
    fit = sorted((t for t in timings if t.images_per_s > 0 and fits(t)), key=lambda t: -t.images_per_s)
    if not fit:
        return []
    return [t.candidate for t in fit if t.images_per_s >= SHORTLIST_SHARE * fit[0].images_per_s][:SHORTLIST_MAX]


def run_contest(style: ModelInfo, device: DeviceSection, candidates: Sequence[Candidate], shape_hw: tuple[int, int],
                *, fits: Callable[[Timing], bool], core: ov.Core | None = None,
                final_seconds: float = FINAL_SECONDS, pulse_seconds: float | None = None) -> Contest:
    """Screen ``candidates`` at ``screen_shape`` and time the ``shortlist`` at ``shape_hw``; without a screen,
    time them all at ``shape_hw``. ``fits`` says whether a screened candidate holds the quality floor (its
    ``psnr_vs_f32_db`` is measured at the screen and carried to its final figure). Logs a line per candidate
    and at least every ``pulse_seconds`` (``PULSE_SECONDS``).

    The screen runs in a child process (``runtime.isolated``: what its many compiles leave behind goes back
    to the system when it exits); the shortlist is timed here, one engine at a time, as serving will run."""
    core = core if core is not None else ov.Core()
    pulse_seconds = pulse_seconds if pulse_seconds is not None else PULSE_SECONDS
    small = screen_shape(shape_hw, style.size_multiple)
    contest = Contest(shape_hw, small)
    final_stage = f"at {shape_hw[1]}x{shape_hw[0]}"
    if small is None:
        progress = Progress(len(candidates), final_stage, pulse_seconds=pulse_seconds)
        with progress.pulse():
            contest.final = measure_candidates(style, device, candidates, shape_hw, seconds=final_seconds,
                                               core=core, on_candidate=progress.say)
        return contest
    total = len(candidates) + min(len(candidates), SHORTLIST_MAX)  # at most: the shortlist is not known yet
    started = time.perf_counter()
    try:
        contest.screen = isolated.call(screen, style, device, list(candidates), small, total, pulse_seconds,
                                       timeout=SCREEN_TIMEOUT_S)
    except isolated.IsolatedError as exc:  # a candidate crashed the plugin, or it hung: run the style's default
        log.warning("choice: the screen failed (%s); running %s without timing the others", exc,
                    candidates[0].label)
        contest.screen = [Timing(c, error="the screen failed") for c in candidates]
        contest.failed = str(exc)
        return contest
    chosen = shortlist(contest.screen, fits)
    if chosen:
        log.info("choice: shortlisted %s; timing %s %s", ", ".join(c.label for c in chosen),
                 "it" if len(chosen) == 1 else "them", final_stage)
    progress = Progress(len(candidates) + len(chosen), final_stage, done=len(candidates), started=started,
                        pulse_seconds=pulse_seconds, stage_size=len(chosen))
    with progress.pulse():
        # rounds=1: at this shape one round outlasts the run, so each is timed once after its warm-up round
        # and dropped before the next is built (only one engine's activations alive at this size).
        contest.final = measure_candidates(style, device, chosen, shape_hw, seconds=final_seconds, rounds=1,
                                           core=core, on_candidate=progress.say)
    screened = {t.candidate: t for t in contest.screen}
    for timing in contest.final:  # the precision's own loss was measured beside its f32 twin at the screen
        timing.psnr_vs_f32_db = screened[timing.candidate].psnr_vs_f32_db
    return contest


def screen(style: ModelInfo, device: DeviceSection, candidates: list[Candidate], shape_hw: tuple[int, int],
           total: int, pulse_seconds: float) -> list[Timing]:
    """Every candidate at the screen's ``shape_hw`` (run in the child process: ``run_contest``); ``total`` is
    how many candidates the whole contest times, for the progress lines."""
    progress = Progress(total, f"screening at {shape_hw[1]}x{shape_hw[0]}", pulse_seconds=pulse_seconds,
                        stage_size=len(candidates))
    core = ov.Core()
    timings: dict[Candidate, Timing] = {}
    with progress.pulse():
        # One IR's precisions at a time: each compiled model holds ~40 MB even with its activations given
        # back, and all 9 kept for rounds alternating over every candidate peaked at 650 MB at 160x120. A
        # precision is still compared with its f32 twin of the same IR (``psnr_vs_f32_db``).
        for variant in dict.fromkeys(c.variant for c in candidates):
            group = [c for c in candidates if c.variant == variant]
            for timing in measure_candidates(style, device, group, shape_hw, seconds=SCREEN_SECONDS, core=core,
                                             on_candidate=progress.say):
                timings[timing.candidate] = timing
    return [timings[c] for c in candidates]


class Progress:
    """The measurement's log lines: one per candidate as it is done with, with what is left, and a line after
    ``pulse_seconds`` of silence (a warm-up round at 1024 px on a 2-core AVX2 box takes ~10 s).

    Counts are the stage's own ("screening at 160x120: 1 of 6"): a count over the whole contest read "1 of 8"
    beside 6 names, the 2 to come being the shortlist not yet chosen (issue 42). ``total`` and ``done`` still
    cover the whole contest, for the time left."""

    def __init__(self, total: int, stage: str, *, done: int = 0, started: float | None = None,
                 pulse_seconds: float = PULSE_SECONDS, stage_size: int | None = None) -> None:
        self.total, self.stage, self.done = total, stage, done
        self.stage_first = done  # the contest's count when this stage began
        self.stage_size = stage_size if stage_size is not None else total - done
        self.started = started if started is not None else time.perf_counter()
        self.pulse_seconds = pulse_seconds
        self._last = time.perf_counter()
        self._lock = threading.Lock()

    def say(self, timing: Timing, done: int, total: int) -> None:
        """``measure_candidates``' ``on_candidate``: ``done`` counts within its own call, so it is not used."""
        label = timing.candidate.label
        if timing.error:
            what = f"{label} refused by the plugin ({timing.error})"
        elif timing.runs_images_per_s:
            what = f"{label} {timing.images_per_s:.2f} images/s"
        else:
            what = f"{label} compiled and warmed, timed in the rounds that follow"
        with self._lock:
            self.done += 1
            self._last = now = time.perf_counter()
            elapsed = now - self.started
            left = elapsed / max(1, self.done) * max(0, self.total - self.done)
            log.info("choice: %s, %d of %d: %s (%s so far, about %s left)", self.stage, self.done - self.stage_first,
                     self.stage_size, what, duration(elapsed), duration(left))

    def pulse(self) -> AbstractContextManager[None]:
        """While the block runs, a line whenever the log has been quiet for ``pulse_seconds``."""
        return ticking(0.5, self._beat, name="edge-anime-choice-pulse")

    def _beat(self) -> None:
        with self._lock:
            now = time.perf_counter()
            if now - self._last < self.pulse_seconds:
                return
            self._last = now
            log.info("choice: %s, still measuring candidate %d of %d (%s so far)", self.stage,
                     min(self.done - self.stage_first + 1, self.stage_size), self.stage_size,
                     duration(now - self.started))


def duration(seconds: float) -> str:
    """``8 s``, ``95 s``, ``3 min``: a person's reading of a wait, not a measurement."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
