"""The door every request passes: refusals before any route, web hardening headers, JSON for every error,
and one count and one access-log line per answer.

Why one pure ASGI middleware and not Starlette's TrustedHostMiddleware and ``exception_handlers``: those
answer in plain text, and an answer made outside the routes was never counted in
``edge_anime_http_requests_total`` (issue 28). Here every answer, the refusals and the bugs included, is
JSON, carries the same headers and is counted once, under its route.

The access log (logger ``edge_anime.http.access``, INFO, through the service's handler and form): method,
path, status, bytes of the answer's body, milliseconds, client address; in the JSON form the same as fields.
Never a query string, a header (the token), a booth picture's id (its only key) or a byte of a body.

The refusals, in order:
- a connection opened over ``http.max_connections`` with nothing idle to close (``ConnectionGuard``): 503;
- a ``Host`` that is no IP address, ``localhost``, this box's own name or one of ``http.allowed_hosts``: 400.
  DNS rebinding gives an attacker's page a name that resolves to 127.0.0.1, and the browser then treats the
  box as that page's own origin; the name in ``Host`` is what gives it away;
- a POST from another origin (``Origin``, ``Sec-Fetch-Site``): 403. A multipart form is a "simple" request
  that any page the kiosk's browser visits may send without asking; clients without a browser send neither
  header and are served.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..logs import FIELDS_ATTR
from .errors import RETRY_AFTER_SECONDS, HttpError

log = logging.getLogger("edge_anime.http")
access_log = logging.getLogger("edge_anime.http.access")

ROUTES = {"/v1/stylize": "stylize", "/v1/styles": "styles", "/healthz": "healthz", "/readyz": "readyz",
          "/metrics": "metrics", "/": "page", "/booth": "booth", "/v1/booth/shots": "booth_shot"}
BOOTH_PICTURES = "/booth/p/"  # a booth picture's path holds its id: one route name for all, never the id
# On every answer: no MIME sniffing of a picture into a script, no framing (clickjacking the page's button),
# no Referer leaving the box, no other origin embedding an answer. The page sets its own, wider, CSP.
HARDENING = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
             (b"referrer-policy", b"no-referrer"), (b"cross-origin-resource-policy", b"same-origin")]
API_CSP = (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})  # "none": typed in the address bar, a bookmark


def error_response(exc: HttpError) -> JSONResponse:
    return JSONResponse({"error": exc.error, "detail": exc.detail}, status_code=exc.status, headers=exc.headers)


def own_names(allowed: Iterable[str]) -> frozenset[str]:
    """The host names this box answers to: localhost, its own name (and the mDNS ``.local`` form), the
    configured ones."""
    name = socket.gethostname().lower().rstrip(".")
    return frozenset({"localhost", name, name.split(".")[0] + ".local", *allowed})


def _host_name(host: str) -> str:
    """``Host`` without its port, brackets or trailing dot, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0].rstrip(".") if host.count(":") == 1 else host.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_host(headers: Headers, names: frozenset[str]) -> None:
    """400 for a ``Host`` naming another site (DNS rebinding); an IP address is always fine (a rebinding
    needs a name), and so is no Host at all (HTTP/1.0: nothing named)."""
    host = headers.get("host")
    if host is None or "*" in names:
        return
    name = _host_name(host)
    if _is_ip(name) or name in names:
        return
    raise HttpError(400, "unknown host", f"Host {host[:100]!r} is not this box; use its address, or add the name "
                    "to http.allowed_hosts")


def check_origin(method: str, headers: Headers) -> None:
    """403 for a state-changing request a page of another origin sent (CSRF); see the module docstring."""
    if method in SAFE_METHODS:
        return
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    foreign = site is not None and site.lower() not in SAME_SITE_FETCHES
    if origin is not None and not foreign:
        parts = urlsplit(origin)
        foreign = origin == "null" or parts.scheme not in ("http", "https") or \
            (parts.netloc or "").lower() != headers.get("host", "").lower()
    if foreign:
        raise HttpError(403, "cross-origin request", f"a {method} from {(origin or site or '?')[:100]} is refused: "
                        "only the box's own page and clients outside a browser may send pictures")


async def drain(receive: Receive, limit_bytes: int, seconds: float) -> None:
    """Read and drop what is left of a request body (``limit_bytes`` at most, within ``seconds``) before an
    early error answer. Why: most clients send the whole body before they read (urllib, requests, a browser's
    fetch), and when they asked for ``Connection: close`` uvicorn closes right after the answer; a close with
    unread bytes is a TCP reset, and the client sees "connection reset" instead of the 503 or 413 that says
    what happened. Nothing is kept, so no memory is held."""
    total = 0
    with anyio.move_on_after(seconds):
        while total <= limit_bytes:
            message = await receive()
            total += len(message.get("body", b""))
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                return


def route_name(path: str) -> str:
    """The route's name in the metrics: a known path's, else ``other`` (a label per unknown path would let
    any client grow the registry without bound)."""
    return "booth_picture" if path.startswith(BOOTH_PICTURES) else ROUTES.get(path, "other")


def _access(scope: Scope, status: int, sent_bytes: int, seconds: float) -> None:
    """One access-log line (see the module docstring); its arguments are escaped by the service's formatter,
    so a path cannot forge a line."""
    client = scope.get("client")
    who = f"{client[0]}:{client[1]}" if client else "-"
    method, path, ms = scope.get("method", "-"), scope.get("path", "-"), seconds * 1000
    if path.startswith(BOOTH_PICTURES):  # the id is a guest's picture's only key, and logs reach the disk
        path = BOOTH_PICTURES + "<id>"
    access_log.info("%s %s %d %d B %.1f ms %s", method, path, status, sent_bytes, ms, who,
                    extra={FIELDS_ATTR: {"method": method, "path": path, "status": status, "bytes": sent_bytes,
                                         "ms": round(ms, 1), "client": who}})


class Front:
    """The middleware: see the module docstring. ``count(route, status, seconds)`` records every answer;
    ``refused(client)`` says whether the connection layer refused this connection; ``limits()`` gives the
    bytes and seconds a refused body may be drained for (``http.max_body_mb``, ``request_timeout_seconds``)."""

    def __init__(self, app: ASGIApp, *, count: Callable[[str, int, float], None],
                 refused: Callable[[Any], bool], names: Callable[[], frozenset[str]],
                 limits: Callable[[], tuple[int, float]]) -> None:
        self.app, self._count, self._refused, self._names, self._limits = app, count, refused, names, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = sent_bytes = 0
        body_done = scope.get("method") in SAFE_METHODS

        async def receive_watched() -> Message:
            nonlocal body_done
            message = await receive()
            body_done = body_done or message["type"] == "http.disconnect" or not message.get("more_body", False)
            return message

        async def send_hardened(message: Message) -> None:
            nonlocal status, sent_bytes
            if message["type"] == "http.response.body":
                sent_bytes += len(message.get("body", b""))
            elif message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                message["headers"] = headers + [h for h in (*HARDENING, API_CSP) if h[0] not in present]
            await send(message)

        try:
            self._refuse(scope)
            await self.app(scope, receive_watched, send_hardened)
        except HttpError as exc:
            if status == 0:
                headers = Headers(scope=scope)
                if not body_done and exc.status != 408 and "100-continue" not in headers.get("expect", "").lower():
                    await drain(receive_watched, *self._limits())  # a client that waits for 100 sent none
                await error_response(exc)(scope, receive, send_hardened)
        except ClientDisconnect:
            status = status or 499  # nobody to answer; counted as nginx names it
        except Exception as exc:
            if status != 0:
                raise  # the answer had begun: uvicorn closes the connection
            log.exception("a bug answering %s %s", scope.get("method"), scope.get("path"))
            await error_response(HttpError(
                500, "internal error", f"a bug in edge-anime ({type(exc).__name__}), logged with its traceback; "
                "please report it"))(scope, receive, send_hardened)
        finally:
            if status:
                seconds = time.perf_counter() - started
                self._count(route_name(scope.get("path", "")), status, seconds)
                _access(scope, status, sent_bytes, seconds)

    def _refuse(self, scope: Scope) -> None:
        if self._refused(scope.get("client")):
            raise HttpError(503, "too many connections", "this box holds http.max_connections busy connections; "
                            "try again shortly", headers={"Retry-After": str(RETRY_AFTER_SECONDS),
                                                          "Connection": "close"})
        headers = Headers(scope=scope)
        check_host(headers, self._names())
        check_origin(scope.get("method", "GET"), headers)


__all__ = ["Front", "check_host", "check_origin", "error_response", "own_names"]
