"""The uvicorn server for the HTTP app, in two homes: `edge-anime serve` (its main thread) and `edge-anime
run` with ``http.enabled`` (a thread beside the watch folder). Either way the owner handles the signals and
asks the server to stop (``should_exit``); uvicorn then stops accepting, lets the requests in flight finish
(up to ``service.drain_timeout_seconds``) and returns.

The socket is bound here (``listen``) before anything else starts, and uvicorn is handed it. Why: uvicorn
binds only after the app's start-up, so on a busy port the style was compiled, "ready" was logged and then
the process exited 3 with uvicorn's errno text. Bound first, a busy port stops the start at once with the
address in the message and its own exit status (``PortInUse``), and "ready" is only ever said of a socket
that is already listening.
"""
from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from ..config import Config, is_loopback
from ..errors import EXIT_TEMPFAIL, ConfigError, UserError
from . import memory
from .connections import MAX_HEAD_BYTES, guarded_protocol
from .errors import BYTES_PER_MB

log = logging.getLogger("edge_anime.http")
START_DEADLINE_SECONDS = 30.0  # a lifespan start that takes longer is a fault, said as such
KEEP_ALIVE_SECONDS = 5  # an idle connection between requests is closed after this (uvicorn's own timer)
BACKLOG = 2048  # connections the kernel queues before they are accepted (uvicorn's default)
# EX_TEMPFAIL (sysexits.h): a port another process holds may be free later (the old instance still draining),
# so systemd's Restart=on-failure may try again; 78 (a bad config, no restart) is kept for what cannot change.
EXIT_PORT_IN_USE = EXIT_TEMPFAIL


class PortInUse(UserError):
    """``http.host:http.port`` is held by another process: nothing was started."""

    exit_status = EXIT_PORT_IN_USE


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port``, before any work starts; ``PortInUse`` when another process
    holds the port, ``ConfigError`` for an address this machine does not have or may not bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart while old sockets are in TIME_WAIT
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        where = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(f"http: cannot listen on {where}: the port is in use by another process (another "
                            "edge-anime?); stop it, or choose another http.port (or --port)") from None
        raise ConfigError(f"http: cannot listen on {where}: {exc.strerror or exc}; choose another http.host "
                          "or http.port") from None
    return sock


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
        # /v1/live: one frame's bytes; a larger message closes its session (1009) before it is held whole
        ws_max_size=int(config.http.live.max_frame_mb * BYTES_PER_MB),
    ))


class ServerThread:
    """The server in a thread of its own (beside the watch folder); ``start`` binds first (``PortInUse`` on a
    busy port, before the thread starts) and returns once it serves."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._thread: threading.Thread | None = None

    def start(self, *, where: str) -> None:
        sock = listen(self.server.config.host, self.server.config.port)
        thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, name="edge-anime-http",
                                  daemon=True)
        self._thread = thread
        thread.start()
        deadline = time.monotonic() + START_DEADLINE_SECONDS
        while thread.is_alive() and not self.server.started and time.monotonic() < deadline:
            thread.join(0.02)  # the app's start-up and the accept loop: a poll with a deadline
        if not self.server.started:
            raise ConfigError(f"http: the server on {where} did not start within {START_DEADLINE_SECONDS:g} s "
                              "(the log says why)")

    def stop(self, timeout_s: float) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
