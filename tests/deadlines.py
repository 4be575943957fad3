"""Deadlines scaled to the box: a test's bound on "this should have happened by now", and pytest-timeout's limit
on a whole test, both grow with how busy the box is.

A deadline in a test is a bound never reached when things work; a fixed one is reached anyway on a box that
five others are testing on (issue 44: an 8 s first-line deadline and a 120 s drain failed at a load of 8 on two
cores). ``scaled(seconds)`` multiplies by the box's slowdown: the 1-minute load average per usable core, at least
1 (an idle or merely busy box keeps the number as written), at most ``MAX_SLOWDOWN`` (a test that hangs still
fails in bounded time). ``EDGE_ANIME_TEST_SLOWDOWN`` sets the factor instead (a box known to be slow, or 1 to
measure against the numbers as written).

What a test waits for is an event (a line, a file, a socket, a metric), polled or awaited; the deadline only
bounds the wait. Durations that are the point of a test (a settle time, a writer's pauses) are not scaled here.
"""
from __future__ import annotations

import os

SLOWDOWN_ENV = "EDGE_ANIME_TEST_SLOWDOWN"
MAX_SLOWDOWN = 6.0


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def slowdown() -> float:
    """How many times slower than an idle box this one runs now (1 to ``MAX_SLOWDOWN``)."""
    forced = os.environ.get(SLOWDOWN_ENV, "").strip()
    if forced:
        return max(1.0, float(forced))
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: take the numbers as written
        return 1.0
    return min(MAX_SLOWDOWN, max(1.0, load / usable_cores()))


def scaled(seconds: float) -> float:
    """``seconds`` (a deadline written for an idle 2-core box) scaled to the box as it is now."""
    return seconds * slowdown()
