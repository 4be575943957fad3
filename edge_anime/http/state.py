"""What the HTTP routes share (``HttpState``): the Stylizer (built in the background at start), the admission
count, the bodies' budget, the connections' guard, the token and the metrics. A module of its own so the
routes of each door (``app``'s API, ``live``'s WebSocket, ``booth``'s page) depend on it and not on each
other."""
from __future__ import annotations

import hmac
import logging
import threading
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.requests import HTTPConnection

from ..config import Config
from ..core.stylizer import Stylizer
from ..errors import UserError
from .body import BodyBudget
from .connections import ConnectionGuard
from .errors import BYTES_PER_MB, RETRY_AFTER_SECONDS, HttpError
from .front import own_names
from .token import read_token

log = logging.getLogger("edge_anime.http")

REQUEST_BUCKETS_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class HttpState:
    """What the routes share: the Stylizer (built in the background at start), the queue count, the bodies'
    budget, the connections' guard, metrics."""

    def __init__(self, config: Config, *, registry: CollectorRegistry | None = None,
                 on_ready: Callable[[], None] | None = None, on_failure: Callable[[str], None] | None = None,
                 stylizer: Stylizer | None = None) -> None:
        self.config = config
        self.settings = config.http
        self.stylizer: Stylizer | None = None
        self._given = stylizer  # owned by the caller: used, never closed here
        self.failure: str | None = None  # why the Stylizer could not be built (readyz says it, to the authorized)
        self._on_ready, self._on_failure = on_ready, on_failure
        self._admitted = 0  # requests between admission and their thread's end (waiting or running)
        self._lock = threading.Lock()
        self._capacity = 0
        self.token = read_token(config.http.auth_token_file) if config.http.auth_token_file else None
        self.names = own_names(config.http.allowed_hosts)
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.requests = Counter("edge_anime_http_requests", "HTTP requests answered", ["route", "status"],
                                registry=self.registry)
        self.in_flight = Gauge("edge_anime_http_in_flight", "Requests admitted to the engine and not done",
                               registry=self.registry)
        self.latency = Histogram("edge_anime_http_request_seconds", "Seconds from request to response",
                                 ["route"], buckets=REQUEST_BUCKETS_SECONDS, registry=self.registry)
        body_bytes = Gauge("edge_anime_http_body_bytes", "Bytes set aside for request bodies now (all requests)",
                           registry=self.registry)
        connections = Gauge("edge_anime_http_connections", "Open HTTP connections", registry=self.registry)
        closed = Counter("edge_anime_http_connections_closed", "Connections the server closed unasked",
                         ["reason"], registry=self.registry)
        self.bodies = BodyBudget(lambda: int(self.settings.max_bodies_mb * BYTES_PER_MB), body_bytes.set,
                                 lambda: int(self.settings.max_bodies_per_client_mb * BYTES_PER_MB))
        self.guard = ConnectionGuard(lambda: self.settings, opened=connections.set,
                                     answered=lambda status: self.count("connection", status, 0.0),
                                     dropped=lambda reason: closed.labels(reason=reason).inc())

    def count(self, route: str, status: int, seconds: float) -> None:
        """Every answer, once: the routes', the refusals' and the connection layer's."""
        self.requests.labels(route=route, status=str(status)).inc()
        self.latency.labels(route=route).observe(seconds)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def load(self) -> None:
        """Compile the style (in a thread at start-up: /healthz answers meanwhile, /readyz says 503). A style
        that cannot be built is said once (``on_failure``): `serve` then exits 78 at once rather than
        answering /healthz until systemd's start timeout."""
        if self._given is None:  # a first start may measure variants for a minute: say where it will answer
            log.info("starting: http://%s:%d/ answers /healthz now and /readyz 503 until the style %s is "
                     "compiled", self.settings.host, self.settings.port, self.config.model.path)
        try:
            stylizer = self._given or Stylizer(self.config)
        except UserError as exc:
            self.failure = str(exc)
            log.error("not ready: %s", exc)
            if self._on_failure is not None:
                self._on_failure(self.failure)
            return
        # Admission: what the pipeline keeps in flight, plus the requests allowed to wait for a slot.
        self._capacity = stylizer.max_in_flight + self.settings.max_queue
        self.stylizer = stylizer
        log.info("ready: style %s, http://%s:%d/", stylizer.styles[0], self.settings.host, self.settings.port)
        if self._on_ready is not None:
            self._on_ready()

    def close(self) -> None:
        if self.stylizer is not None and self.stylizer is not self._given:
            self.stylizer.close()

    def reload(self, config: Config) -> None:
        """SIGHUP: the new config's style compiled beside the old one, then swapped in; requests already on
        the old Stylizer finish there (its close drains). A config that fails keeps the old one serving."""
        if config.http.host != self.config.http.host or config.http.port != self.config.http.port:
            log.warning("reload: http.host and http.port apply at the next restart")
        try:
            token = read_token(config.http.auth_token_file) if config.http.auth_token_file else None
            stylizer = Stylizer(config) if self._given is None else self._given
        except UserError as exc:
            log.error("reload failed, still serving the previous config: %s", exc)
            return
        old, self.stylizer, self.config, self.settings = self.stylizer, stylizer, config, config.http
        self.token, self.names = token, own_names(config.http.allowed_hosts)
        with self._lock:
            self._capacity = stylizer.max_in_flight + config.http.max_queue
        if old is not None and old is not stylizer:
            old.close()
        log.info("reloaded: serving %s", ", ".join(stylizer.styles))

    def adopt(self, stylizer: Stylizer, config: Config) -> None:
        """The owner (the watch folder) rebuilt its Stylizer on a reload: serve the new one from now on.
        Requests already on the old one finish there; the owner closes it."""
        self._given = stylizer
        self.reload(config)

    # -- admission ---------------------------------------------------------------------------------------
    def admit(self) -> None:
        with self._lock:
            if self._admitted >= self._capacity:
                raise HttpError(503, "busy", f"{self.settings.max_queue} requests already wait for the engine; "
                                "try again shortly", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            self._admitted += 1
            self.in_flight.set(self._admitted)

    def release(self) -> None:
        with self._lock:
            self._admitted -= 1
            self.in_flight.set(self._admitted)

    def authorized(self, request: HTTPConnection) -> bool:
        """The Bearer token matches (or none is set). The scheme is case-insensitive (RFC 7235, 2.1); the
        token is compared in constant time: no timing oracle."""
        if self.token is None:
            return True
        scheme, _, given = request.headers.get("authorization", "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("latin-1"),
                                                                  self.token.encode("ascii"))

    def authorize(self, request: HTTPConnection) -> None:
        if not self.authorized(request):
            raise HttpError(401, "unauthorized", "send the token of http.auth_token_file as 'Authorization: "
                            "Bearer TOKEN'", headers={"WWW-Authenticate": "Bearer"})


__all__ = ["HttpState"]
