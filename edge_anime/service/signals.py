"""Signals for `edge-anime run`, safe from the process's first line: SIGTERM at any moment exits 0.

Why it is more than ``signal.signal`` in the service: the service installed its handlers after imports, the
huge-pages re-exec and the config load, so a SIGTERM in its first ~0.2 s killed it (143) and an early
SIGHUP too (129). Now:

1. ``hold(argv)`` runs first in ``python -m edge_anime`` (and should in ``cli.entry``): for ``run`` it blocks
   SIGTERM, SIGINT and SIGHUP. A blocked signal stays pending, also across the huge-pages ``execve``.
2. ``Flags.install()`` (the first line of the run command) sets handlers that only set flags, then
   unblocks: a signal that arrived meanwhile is delivered now, to the handler.
3. The service reads the flags between steps; a stop requested before it was ready exits 0 at once.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Sequence

HELD = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def hold(argv: Sequence[str]) -> None:
    """Block the service's signals (pending, not lost) when the command is ``run``; others keep defaults."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command == "run":
        signal.pthread_sigmask(signal.SIG_BLOCK, HELD)


class Flags:
    """What the signal handlers asked for: stop (SIGTERM/SIGINT) or reload (SIGHUP)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.reload = False

    def install(self) -> Flags:
        """Handlers first, then unblock: whatever arrived since ``hold`` is delivered to them now."""
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)
        return self

    def _on_stop(self, _signum: int, _frame: object) -> None:
        self.stop.set()

    def _on_reload(self, _signum: int, _frame: object) -> None:
        self.reload = True
