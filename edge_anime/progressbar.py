"""The progress bar every command draws on a terminal (``stylize``'s pictures and frames, ``batch``): one tqdm
set up one way, so a fix reaches every bar.

Two things tqdm does not do by itself:

- A terminal that reports no size (a pseudo-terminal nobody sized: ``script``, ``docker exec -t``, an SSH or
  CI runner's pty) gives 0 rows and 0 columns, and tqdm then draws nothing at all (a bar below the last of
  -1 rows is hidden): ``stylize`` sat silent for the 33 s of its photos after "engine: compiling", and
  ``batch`` too. Such a terminal gets ``FALLBACK_COLUMNS`` x ``FALLBACK_ROWS``.
- tqdm redraws only when the count moves, so while a photo of 20 s runs the bar shows ``0/3 [00:00<?]`` as if
  it had hung. The bar is redrawn every ``REDRAW_SECONDS`` (``ticking``), so its clock moves.
"""
from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import IO, Any, cast

from .ticking import ticking

FALLBACK_COLUMNS = 80  # for a terminal that reports no width
FALLBACK_ROWS = 24     # and no height
REDRAW_SECONDS = 1.0


def columns(fp: IO[str] | Any) -> tuple[int, int]:
    """(columns, rows) tqdm may use on ``fp``, one less than the terminal's as tqdm's own measure, with the
    fallbacks where the terminal reports none: tqdm takes 0 rows (-1 after its own subtraction) for a
    terminal too short to draw any bar in, and 0 columns for no room."""
    try:
        size = os.get_terminal_size(fp.fileno())
        width, height = size.columns, size.lines
    except (AttributeError, OSError, ValueError):
        width, height = 0, 0
    return (width if width > 0 else FALLBACK_COLUMNS) - 1, (height if height > 0 else FALLBACK_ROWS) - 1


class TerminalBar:
    """A tqdm bar on stderr that always has a width and redraws itself every second until ``close``.

    ``bar`` is the tqdm itself (``update``, ``n``, ``set_postfix_str``...); callers decide whether to draw
    one at all (a terminal on stderr and no ``-q``)."""

    def __init__(self, total: float | None = None, *, unit: str, desc: str | None = None) -> None:
        from tqdm import tqdm

        width, rows = columns(sys.stderr)
        self.bar: Any = tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, ncols=width, nrows=rows)
        cast(Any, self.bar).dynamic_ncols = columns  # measured at each redraw as dynamic_ncols=True, with a floor
        self._redraw = ticking(REDRAW_SECONDS, self.bar.refresh, name="edge-anime-progress")
        self._redraw.__enter__()
        self._closed = False

    def close(self) -> None:
        """Stop redrawing and close the bar (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        self._redraw.__exit__(None, None, None)
        self.bar.close()

    def __enter__(self) -> TerminalBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
