"""The uvicorn server for the HTTP app, in two homes: `edge-anime serve` (its main thread) and `edge-anime
run` with ``http.enabled`` (a thread beside the watch folder). Either way the owner handles the signals and
asks the server to stop (``should_exit``); uvicorn then stops accepting, lets the requests in flight finish
(up to ``service.drain_timeout_seconds``) and returns.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn

from ..config import Config, is_loopback
from ..errors import ConfigError
from . import memory
from .connections import guarded_protocol

log = logging.getLogger("edge_anime.http")
START_DEADLINE_SECONDS = 30.0  # a bind or a lifespan start that takes longer is a fault, said as such
KEEP_ALIVE_SECONDS = 5  # an idle connection between requests is closed after this (uvicorn's own timer)
MAX_HEAD_BYTES = 16 * 1024  # request line and headers; h11 answers 400 past it (its default, said here)


class Server(uvicorn.Server):
    """uvicorn's server without its signal capture: uvicorn re-raises a captured SIGTERM once it has shut
    down, so the process would die by the signal (143) after a clean drain, and in a thread it cannot
    install handlers at all. The owner's handlers set ``should_exit`` instead."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def make_server(app: Any, config: Config) -> Server:
    """uvicorn for the app of ``create_app``, its connections guarded by the app's ``ConnectionGuard``
    (edge_anime/http/connections.py says why uvicorn's own ``limit_concurrency`` is off)."""
    if not is_loopback(config.http.host):
        log.warning("serving on %s:%d, reachable from other machines (%s)", config.http.host, config.http.port,
                    "Bearer token required" if config.http.auth_token_file else
                    "NO authentication: http.allow_unauthenticated is true")
    memory.fix_mmap_threshold()  # large bodies must not stay in malloc's arenas (edge_anime/http/memory.py)
    return Server(uvicorn.Config(
        app, host=config.http.host, port=config.http.port, log_config=None, access_log=False, lifespan="on",
        http=guarded_protocol(app.state.service.guard),
        timeout_graceful_shutdown=max(1, int(config.service.drain_timeout_seconds)),
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        # uvicorn's bound counts idle sockets too and answers every request with a plain-text 503 past it; the
        # guard bounds connections instead, closing idle ones first, and the app bounds the work.
        limit_concurrency=None,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    ))


class ServerThread:
    """The server in a thread of its own (beside the watch folder); ``start`` returns once it listens."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._thread = threading.Thread(target=server.run, name="edge-anime-http", daemon=True)

    def start(self, *, where: str) -> None:
        self._thread.start()
        started = threading.Event()

        def watch() -> None:
            while self._thread.is_alive() and not self.server.started:
                self._thread.join(0.02)
            started.set()

        threading.Thread(target=watch, daemon=True).start()
        started.wait(START_DEADLINE_SECONDS)
        if not self.server.started:
            raise ConfigError(f"http: cannot listen on {where} (in use, or not an address of this machine); "
                              "choose another http.port or http.host")

    def stop(self, timeout_s: float) -> None:
        self.server.should_exit = True
        self._thread.join(timeout_s)
