"""The booth (issue 43): ``GET /booth``, a full-screen camera page with one button; ``POST /v1/booth/shots``,
the picture it takes, stylized through the API's own path and kept here for a guest's phone; and
``GET /booth/p/{id}``, that picture, which the page shows as a QR code.

Why in memory only (``BoothStore``): the guests are strangers in front of a camera. A picture that reached
the disk could outlive its ``http.booth.keep_minutes`` (a crash, a backup, a disk sold later); one held in a
dict is gone when it expires, when the store is full, or when the process ends. The store is bounded by
count (``http.booth.max_pictures``) and by bytes (``MAX_STORE_BYTES``), the oldest dropped first, and swept on
every access and periodically, so an expired picture is not even held in memory for long.

Why the picture's URL needs no token: it is opened by a guest's phone from a QR code, and a phone has no
token. The id is the key: 96 random bits from ``secrets``, valid for minutes, so it cannot be guessed in
that time, and the route serves booth pictures and nothing else. Taking a picture (the POST) is the API's
business and keeps its rules: the Bearer token when one is set, the Origin check (``Front``), the body's
limits and the engine's admission.
"""
from __future__ import annotations

import asyncio
import io
import ipaddress
import re
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from .errors import BYTES_PER_MB, HttpError

if TYPE_CHECKING:
    from ..core.stylizer import Encoded
    from .state import HttpState

ID_BYTES = 12  # 96 random bits, 16 URL-safe characters: short enough to type, far too many to guess
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{16}")
MAX_STORE_BYTES = 128 * BYTES_PER_MB  # a 1024 px picture is ~0.1-0.4 MB: 100 of them fit many times over
SWEEP_MAX_SECONDS = 30.0  # the periodic sweep's longest pause (a quarter of keep_minutes when that is shorter)
SWEEP_MIN_SECONDS = 0.05
KEEP_PLACEHOLDER = "__KEEP_MINUTES__"  # in booth.html, outside its script and style (their CSP digests hold)
SANE_HOST = re.compile(r"[A-Za-z0-9.:\[\]-]{1,255}")  # a Host fit to be repeated in a CSP or a URL

Stylize = Callable[[Request, str], Awaitable["Encoded"]]  # (request, fmt) -> the stylized upload
PageCsp = Callable[..., str]  # app._page_csp: (page, *, img, connect, media) -> the page's CSP


@dataclass(frozen=True)
class Kept:
    """A picture in the store: its JPEG and when it came (on the store's clock)."""

    data: bytes
    stored_at: float


class BoothStore:
    """The booth's pictures, in memory only, under unguessable ids; each dropped ``keep_seconds()`` after it
    came, and the oldest first past ``max_pictures()`` or ``max_bytes``. The limits are read at each use, so a
    reload applies at once (a shorter ``keep_minutes`` drops the pictures already past it). ``clock`` is
    injectable so expiry is tested without waiting."""

    def __init__(self, keep_seconds: Callable[[], float], max_pictures: Callable[[], int],
                 max_bytes: int = MAX_STORE_BYTES, clock: Callable[[], float] = time.monotonic) -> None:
        self._keep_seconds, self._max_pictures, self.max_bytes, self._clock = \
            keep_seconds, max_pictures, max_bytes, clock
        self._pictures: OrderedDict[str, Kept] = OrderedDict()  # oldest first
        self._lock = threading.Lock()
        self.held_bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._pictures)

    def put(self, data: bytes) -> str:
        """Keep ``data``; its id. Makes room by dropping the oldest pictures first."""
        if len(data) > self.max_bytes:
            raise HttpError(507, "too large to keep", f"the picture ({len(data) / BYTES_PER_MB:.1f} MB) is over "
                            f"the booth's memory ({self.max_bytes / BYTES_PER_MB:g} MB)")
        picture_id = secrets.token_urlsafe(ID_BYTES)
        with self._lock:
            self._expire()
            while self._pictures and (len(self._pictures) >= self._max_pictures()
                                      or self.held_bytes + len(data) > self.max_bytes):
                self._drop(next(iter(self._pictures)))
            self._pictures[picture_id] = Kept(data, self._clock())
            self.held_bytes += len(data)
        return picture_id

    def get(self, picture_id: str) -> bytes | None:
        """The picture, or None once it expired or was dropped, or when it never was."""
        with self._lock:
            self._expire()
            kept = self._pictures.get(picture_id)
            return None if kept is None else kept.data

    def sweep(self) -> None:
        """Drop what has expired (the periodic sweep: a picture nobody asks for goes on time too)."""
        with self._lock:
            self._expire()

    def clear(self) -> None:
        with self._lock:
            self._pictures.clear()
            self.held_bytes = 0

    def sweep_interval(self) -> float:
        return min(SWEEP_MAX_SECONDS, max(SWEEP_MIN_SECONDS, self._keep_seconds() / 4))

    async def sweep_forever(self) -> None:
        """The periodic sweep, for the server's lifetime (a task of the app's lifespan)."""
        while True:
            await asyncio.sleep(self.sweep_interval())
            self.sweep()

    def _expire(self) -> None:
        deadline = self._clock() - self._keep_seconds()
        while self._pictures:
            oldest = next(iter(self._pictures))
            if self._pictures[oldest].stored_at > deadline:
                return
            self._drop(oldest)

    def _drop(self, picture_id: str) -> None:
        kept = self._pictures.pop(picture_id)
        self.held_bytes -= len(kept.data)


def qr_svg(text: str) -> str:
    """``text`` as a QR code, an SVG document (dark modules on white, with the quiet zone scanners need).
    segno: pure Python, made here so the page loads nothing from outside the box."""
    import segno

    out = io.BytesIO()
    segno.make(text, error="m", micro=False).save(out, kind="svg", scale=1, border=4, xmldecl=False,
                                                  light="#fff", dark="#000", nl=False)
    return out.getvalue().decode("utf-8")


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _lan_address() -> str | None:
    """This box's address on its default route (a UDP socket's route lookup: no packet is sent); None
    without a network."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only the route to it matters
            address = str(probe.getsockname()[0])
        except OSError:
            return None
    return None if ipaddress.ip_address(address).is_loopback else address


def picture_base(request: Request, bind_host: str) -> tuple[str, bool]:
    """The scheme and host a guest's phone should open a picture on, and whether it can.

    The Host the page was loaded from, as a rule (Front has checked it is this box). But a kiosk's browser
    gets the camera only on a secure origin, and plain HTTP is one only on loopback: the kiosk usually opens
    http://localhost:PORT/booth, a name that on the phone is the phone. Then the URL names this box by its
    address on the network, when the server listens there (``http.host`` 0.0.0.0 or that address); when it
    listens on loopback only, no phone can reach it, and the answer says so."""
    host = request.headers.get("host", "")
    if not SANE_HOST.fullmatch(host):
        host = f"{request.url.hostname}:{request.url.port}" if request.url.port else str(request.url.hostname)
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:]
    elif host.count(":") == 1:
        name, _, port = host.partition(":")
    else:
        name, port = host, ""
    if not _is_loopback(name.lower().rstrip(".")):
        return f"{request.url.scheme}://{host}", True
    bind = ipaddress.ip_address(bind_host)
    if bind.is_loopback:
        return f"{request.url.scheme}://{host}", False
    lan = _lan_address() if bind.is_unspecified else str(bind)
    if lan is None:
        return f"{request.url.scheme}://{host}", False
    lan_host = f"[{lan}]" if ":" in lan else lan
    return f"{request.url.scheme}://{lan_host}{':' + port if port else ''}", True


def booth_csp(page_csp: PageCsp, page: str, host: str) -> str:
    """The booth page's CSP: the upload page's (its inline script and style by digest, nothing from outside),
    plus what the booth needs: its WebSocket to the box (named by Host, since ``'self'`` covers ws: only in
    CSP Level 3 browsers), the camera's stream, its QR code and frames as blob: and data: images."""
    ws = f" ws://{host} wss://{host}" if SANE_HOST.fullmatch(host) else ""
    return page_csp(page, img="'self' blob: data:", connect=f"'self'{ws}", media="'self' blob: mediastream:")


def booth_routes(service: HttpState, store: BoothStore, stylize: Stylize, page_csp: PageCsp) -> list[BaseRoute]:
    """The booth's three routes, on ``service``'s Stylizer and limits; ``stylize`` is the API's own path for
    an upload (body limits, header check, admission, the worker thread), ``page_csp`` the upload page's CSP
    for a page."""
    page = (resources.files("edge_anime.http") / "page" / "booth.html").read_text(encoding="utf-8")

    async def booth_page(request: Request) -> Response:
        keep = f"{service.settings.booth.keep_minutes:g}"
        return HTMLResponse(page.replace(KEEP_PLACEHOLDER, keep), headers={
            "Cache-Control": "no-store", "Permissions-Policy": "camera=(self), microphone=()",
            "Content-Security-Policy": booth_csp(page_csp, page, request.headers.get("host", ""))})

    async def shot(request: Request) -> Response:
        service.authorize(request)  # before a byte of the body is read, as POST /v1/stylize
        encoded = await stylize(request, "jpeg")  # a JPEG whatever output.format says: phones open it
        picture_id = store.put(encoded.data)
        del encoded
        public = service.settings.booth.public_url
        base, reachable = (public, True) if public else picture_base(request, service.settings.host)
        url = f"{base}/booth/p/{picture_id}"
        return JSONResponse({"id": picture_id, "url": url, "path": f"/booth/p/{picture_id}",
                             "expires_in_s": round(service.settings.booth.keep_minutes * 60),
                             "reachable": reachable, "qr_svg": qr_svg(url)},
                            headers={"Cache-Control": "no-store"})

    async def picture(request: Request) -> Response:
        picture_id = request.path_params["picture_id"]
        found = store.get(picture_id) if ID_PATTERN.fullmatch(picture_id) else None
        if found is None:
            raise HttpError(404, "not found", "no such picture: booth pictures are deleted "
                            f"{service.settings.booth.keep_minutes:g} minutes after they are taken")
        return Response(found, media_type="image/jpeg", headers={
            "Content-Disposition": f'attachment; filename="edge-anime-{picture_id[:8]}.jpg"',
            "Cache-Control": "no-store"})

    return [Route("/booth", booth_page, methods=["GET"]),
            Route("/v1/booth/shots", shot, methods=["POST"]),
            Route("/booth/p/{picture_id}", picture, methods=["GET"])]


__all__ = ["BoothStore", "booth_routes", "picture_base", "qr_svg"]
