"""A callback on a thread every few seconds while a block of code runs: the systemd watchdog's ping through a
long start, the first start's "still measuring" line. One piece, so each such loop stops and joins its thread
the same way when the block ends, however it ends."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def ticking(seconds: float, tick: Callable[[], Any], *, name: str) -> Iterator[None]:
    """Call ``tick()`` every ``seconds`` on a daemon thread named ``name`` until the block ends (its result,
    if any, is dropped)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(seconds):
            tick()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
