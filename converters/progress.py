"""One line per conversion step, with the seconds since the conversion started.

Why lines and not a bar: a conversion is a dozen steps of very different lengths (tracing, converting,
one verification image after another), and on a busy box a person wants to see which one it is in and how
long the run has taken so far, in a terminal or in a CI log alike. ``models pull`` draws a tqdm bar for its
one long download; ``convert`` writes these lines to stderr, so its stdout stays the result alone.

The clock and the stream are injected (watchdog's pattern), so a test reads the lines without sleeping.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

PREFIX = "edge-anime convert"


class Progress:
    """``step(text)`` writes ``edge-anime convert: [  12.3 s] text``; with ``stream=None`` it writes nothing
    (the library default: ``convert()`` called from Python or a test stays quiet unless asked)."""

    def __init__(self, stream: TextIO | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._stream = stream
        self._clock = clock
        self._start_s = clock()

    def elapsed_s(self) -> float:
        return self._clock() - self._start_s

    def step(self, text: str) -> None:
        if self._stream is None:
            return
        self._stream.write(f"{PREFIX}: [{self.elapsed_s():6.1f} s] {text}\n")
        self._stream.flush()


def to_stderr() -> Progress:
    """The command's reporter (stderr is looked up at call time, so pytest's capture sees it)."""
    return Progress(sys.stderr)


QUIET = Progress()
