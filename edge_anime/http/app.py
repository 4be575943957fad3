"""The HTTP API and upload page: thin async handlers over the thread-backed ``Stylizer``.

Why Starlette on uvicorn and not FastAPI: six routes, raw bodies and one multipart field need no request
models or generated schema, and Starlette is what FastAPI is built on, so the install stays small (the
``http`` extra: starlette, uvicorn, python-multipart). Inference never runs on the event loop: each request
is one ``Stylizer.run_encoded`` call in a worker thread, so many requests overlap on the engine's async
requests exactly as the files of a batch do.

One door for pictures: an upload is checked by the decoder's own header read (``decode_header``: its format
allow-list, ``image.max_pixels``, a JPEG's scans) and answered with the bytes ``Stylizer.run_encoded`` makes
by the file path's encoder and ``output`` settings, so the same photo and config give the same bytes over
HTTP as from `edge-anime stylize` (transparency flattened on white for JPEG, 4:4:4 chroma at quality >= 90,
ICC kept, EXIF as ``output.keep_exif``/``strip_gps`` say, ``format: same`` the upload's own format). What a
failure means to the client is read from its type in the error taxonomy (``_fault``), never from its text.

Every limit is checked before work starts, and every answer is JSON, counted and logged once (``front``):
the connection (``connections``: header deadline, connection bounds), the Host and the origin, the token, the
body's size (from Content-Length, then while it streams) and the room for it among all bodies in memory
(``body``), its type, the picture's header (before decoding), and the queue (503 with Retry-After when
``http.max_queue`` requests already wait for the engine). An upload's file name is only ever a label in
error messages, never a path, and nothing of an upload touches the disk.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import logging
import re
import threading
from collections.abc import AsyncIterator, Callable
from importlib import resources
from pathlib import Path

import anyio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..config import Config
from ..core.stylizer import MEMORY_LABEL, Encoded, Stylizer, StylizerClosed
from ..errors import InputError, TransientError, UserError
from ..imaging.decoded import Decoded
from ..imaging.decoder import decode_header
from ..imaging.encoder import EXT_BY_CONFIG_FORMAT
from .body import Pace, Reservation, Upload, declared_length, read_upload
from .booth import BoothStore, booth_routes
from .errors import BYTES_PER_MB, RETRY_AFTER_SECONDS, HttpError
from .front import Front
from .live import LiveHub, live_routes
from .state import HttpState

log = logging.getLogger("edge_anime.http")

FORMATS = (*EXT_BY_CONFIG_FORMAT, "same")  # what ?format= and output.format take


def _faces_header(faces: list[tuple[int, int, int, int]]) -> dict[str, str]:
    """``X-Edge-Anime-Faces: x,y,w,h;x,y,w,h`` (output pixels, largest first) when faces were restyled
    (``image.faces: auto``); no header when none were. A header, not a JSON body: the answer is the picture."""
    return {"X-Edge-Anime-Faces": ";".join(",".join(str(v) for v in box) for box in faces)} if faces else {}


def _server_timing(timings_s: dict[str, float]) -> str:
    return ", ".join(f"{stage};dur={seconds * 1000:.1f}" for stage, seconds in timings_s.items() if seconds > 0)


def _format_for(request: Request, config: Config) -> str:
    """``?format=``, else ``output.format``; ``same`` is the upload's own format, as for files."""
    fmt = (request.query_params.get("format") or config.output.format).lower()
    if fmt not in FORMATS:
        raise HttpError(400, "bad format", f"format={fmt[:40]}: expected one of {', '.join(FORMATS)}")
    return fmt


def _page_csp(page: str, *, img: str = "'self' blob:", connect: str = "'self'", media: str | None = None) -> str:
    """The page's Content-Security-Policy: its one inline script and style allowed by their digests, pictures
    from the box or the page's own blobs, fetches to the box only, and nothing else. The booth's page widens
    ``img``, ``connect`` and ``media`` for its camera, WebSocket and QR code (``booth.booth_csp``)."""
    def digests(tag: str) -> str:
        blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, flags=re.DOTALL)
        return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)

    return (f"default-src 'none'; script-src {digests('script')}; style-src {digests('style')}; "
            f"img-src {img}; connect-src {connect}; {f'media-src {media}; ' if media else ''}base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")


def _fault(exc: Exception, style: str, stylizer: Stylizer | None) -> HttpError:
    """What a failure of the work means to the client, from its type in the error taxonomy (never its text):
    the picture's fault (``InputError``: 422, the decoder's or the planner's message, as the file path says
    it), a style a reload dropped while the request was on its way (404), or the box's fault, said as such
    (503): never a bare 500."""
    if isinstance(exc, InputError):
        return HttpError(422, "cannot stylize this picture", str(exc))
    if stylizer is not None and style not in stylizer.styles:
        return HttpError(404, "unknown style", f"style={style} was dropped by a reload while this request was on "
                         f"its way; this box serves {', '.join(stylizer.styles)}")
    retry = {"Retry-After": str(RETRY_AFTER_SECONDS)}
    if isinstance(exc, StylizerClosed) or stylizer is None:
        return HttpError(503, "shutting down", "the service is stopping or reloading; try again shortly",
                         headers=retry)
    if isinstance(exc, TransientError):
        return HttpError(503, "busy", f"{exc}; try again shortly", headers=retry)
    return HttpError(503, "style unavailable", f"style {style} cannot be served now: {exc}", headers=retry)


def create_app(config: Config, *, registry: CollectorRegistry | None = None,
               on_ready: Callable[[], None] | None = None, on_failure: Callable[[str], None] | None = None,
               stylizer: Stylizer | None = None) -> Starlette:
    """The ASGI app; ``on_ready`` runs once the style is compiled (the CLI sends sd_notify READY=1 there),
    ``on_failure`` with the reason when it cannot be (the CLI stops then). ``stylizer``: one its owner built
    and closes (the watch folder's, shared); else the app builds its own at start-up and closes it at
    shutdown. ``app.state.service.guard`` is what ``server.make_server`` gives the connections."""
    service = HttpState(config, registry=registry, on_ready=on_ready, on_failure=on_failure, stylizer=stylizer)
    hub = LiveHub(service)
    booth = BoothStore(lambda: service.settings.booth.keep_minutes * 60, lambda: service.settings.booth.max_pictures)

    async def stylized(request: Request, fmt: str | None = None) -> Encoded:
        """The upload stylized, every limit checked before the work it would waste: the body's size and room,
        its header, the queue. ``fmt``: None for ``?format=`` or ``output.format``; the booth asks for jpeg.
        The caller has checked the token."""
        stylizer, config = service.stylizer, service.config  # one request, one config: a reload swaps both
        if stylizer is None:
            raise HttpError(503, "not ready", service.failure or "the style is still compiling",
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        style = request.query_params.get("style") or stylizer.styles[0]
        if style not in stylizer.styles:
            raise HttpError(404, "unknown style", f"style={style}: this box serves {', '.join(stylizer.styles)}")
        fmt = fmt or _format_for(request, config)
        limit_bytes = int(config.http.max_body_mb * BYTES_PER_MB)
        declared = declared_length(request, limit_bytes)
        client = request.client.host if request.client else ""
        reservation = service.bodies.reserve(limit_bytes if declared is None else declared, client)
        handed_over = False
        try:
            upload = await _receive(request, config, limit_bytes, reservation)
            header = await _check_header(upload, stylizer)
            service.admit()
            handed_over = True  # from here the work's thread releases the body's share, when it is done
            encoded = await _work(service, stylizer, config, upload, header, style, fmt, reservation)
        finally:
            if not handed_over:
                reservation.release()
        del upload  # its share of http.max_bodies_mb is free: so is its memory
        return encoded

    async def stylize(request: Request) -> Response:
        service.authorize(request)  # before a byte of the body is read: no token, no memory
        encoded = await stylized(request)
        return Response(encoded.data, media_type=encoded.media_type,
                        headers={"Server-Timing": _server_timing(encoded.timings_s), "Cache-Control": "no-store",
                                 **_faces_header(encoded.faces)})

    async def styles(request: Request) -> Response:
        service.authorize(request)
        names = list(service.stylizer.styles) if service.stylizer is not None else []
        return JSONResponse({"styles": names, "default": names[0] if names else None})

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(request: Request) -> Response:
        """Open to probes without the token, so it names no style and no path then: why a style failed
        (its model's path, OpenVINO's words) is for the authorized."""
        told = service.authorized(request)
        if service.stylizer is None:
            detail = service.failure or "the style is still compiling"
            if not told:
                detail = "the style failed to load; the log says why" if service.failure else \
                    "the style is still compiling"
            raise HttpError(503, "not ready", detail)
        return JSONResponse({"status": "ready", **({"styles": list(service.stylizer.styles)} if told else {})})

    async def metrics(request: Request) -> Response:
        service.authorize(request)
        return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)

    page = (resources.files("edge_anime.http") / "page" / "index.html").read_text(encoding="utf-8")
    page_headers = {"Cache-Control": "no-store", "Content-Security-Policy": _page_csp(page)}

    async def index(_request: Request) -> Response:
        return HTMLResponse(page, headers=page_headers)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        loader = threading.Thread(target=service.load, name="edge-anime-load", daemon=True)
        loader.start()
        sweeper = asyncio.create_task(booth.sweep_forever())
        try:
            yield
        finally:
            sweeper.cancel()
            booth.clear()  # the guests' pictures end with the process, as promised
            await asyncio.to_thread(loader.join)
            await asyncio.to_thread(hub.close)
            await asyncio.to_thread(service.close)

    routes = [
        Route("/v1/stylize", stylize, methods=["POST"]),
        Route("/v1/styles", styles, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/", index, methods=["GET"]),
        *live_routes(),
        *booth_routes(service, booth, stylized, _page_csp),
    ]
    front = Middleware(Front, count=service.count, refused=service.guard.refused, names=lambda: service.names,
                       limits=lambda: (int(service.settings.max_body_mb * BYTES_PER_MB),
                                       service.settings.request_timeout_seconds))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[front],
                    exception_handlers={404: _not_found, 405: _not_allowed})
    app.state.service = service
    app.state.live = hub
    app.state.booth = booth
    return app


async def _receive(request: Request, config: Config, limit_bytes: int, reservation: Reservation) -> Upload:
    """The upload within ``http.request_timeout_seconds`` and at ``http.min_upload_kb_per_second``: a client
    that stalls mid-upload holds a connection and the bytes it sent, never an engine slot, and not for long
    (408)."""
    pace = Pace(config.http.upload_grace_seconds, config.http.min_upload_kb_per_second * 1024)
    try:
        with anyio.fail_after(config.http.request_timeout_seconds):
            return await read_upload(request, limit_bytes, reservation, pace)
    except TimeoutError:
        raise HttpError(408, "upload too slow", f"the body did not arrive within http.request_timeout_seconds "
                        f"({config.http.request_timeout_seconds:g} s)") from None


async def _check_header(upload: Upload, stylizer: Stylizer) -> Decoded:
    """422 from the picture's header alone, before it takes a queue slot: the decoder's own check (its format
    allow-list, ``image.max_pixels``, a JPEG's scans) with its own message, naming the upload. In a thread:
    counting a large progressive JPEG's scans takes milliseconds. The header read is the job's one: it goes
    with the upload into ``run_encoded`` (its format, its decode lane), not read again there."""
    label = Path(upload.name) if upload.name else MEMORY_LABEL
    try:
        return await anyio.to_thread.run_sync(lambda: decode_header(label, stylizer.config.image, data=upload.data))
    except InputError as exc:
        raise _fault(exc, "", stylizer) from None


async def _work(service: HttpState, stylizer: Stylizer, config: Config, upload: Upload, header: Decoded,
                style: str, fmt: str, reservation: Reservation) -> Encoded:
    """The encoded picture, from a worker thread; 504 past the timeout, the picture still finished in the
    background (its queue slot and its body's share freed then: the engine and the memory are busy until
    then)."""
    outcome: dict[str, Exception] = {}

    def work() -> Encoded | None:
        try:
            try:
                return stylizer.run_encoded(upload.data, fmt=fmt, name=upload.name, style=style, header=header)
            except StylizerClosed:  # a reload swapped it out between admission and here
                current = service.stylizer
                if current is None:
                    raise
                return current.run_encoded(upload.data, fmt=fmt, name=upload.name, style=style, header=header)
        except Exception as exc:  # noqa: BLE001 - judged by _fault on the event loop, never a bare 500
            outcome["error"] = exc
            return None
        finally:
            service.release()
            reservation.release()

    timeout = config.http.request_timeout_seconds
    try:
        with anyio.fail_after(timeout):
            done = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
    except TimeoutError:
        raise HttpError(504, "timeout", f"no picture within http.request_timeout_seconds ({timeout:g} s); it is "
                        "finished in the background") from None
    if "error" in outcome:
        error = outcome["error"]
        if not isinstance(error, (InputError, UserError, TransientError, StylizerClosed)):
            raise error  # a bug: Front logs it with its traceback and answers a JSON 500
        raise _fault(error, style, service.stylizer)
    assert done is not None
    return done


async def _not_found(_request: Request, _exc: Exception) -> Response:
    return JSONResponse({"error": "not found", "detail": "see GET / for the page, POST /v1/stylize for the API"},
                        status_code=404)


async def _not_allowed(request: Request, _exc: Exception) -> Response:
    return JSONResponse({"error": "method not allowed", "detail": f"{request.method} {request.url.path}"},
                        status_code=405)


__all__ = ["HttpError", "HttpState", "create_app"]
