"""The HTTP API and upload page: thin async handlers over the thread-backed ``Stylizer``.

Why Starlette on uvicorn and not FastAPI: six routes, raw bodies and one multipart field need no request
models or generated schema, and Starlette is what FastAPI is built on, so the install stays small (the
``http`` extra: starlette, uvicorn, python-multipart). Inference never runs on the event loop: each request
is one ``Stylizer.run`` call in a worker thread, so many requests overlap on the engine's async requests
exactly as the files of a batch do.

Every limit is checked before work starts: the body's size (from Content-Length, then while reading), its
type, the picture's pixel count from its header (before decoding), and the queue (503 with Retry-After when
``http.max_queue`` requests already wait for the engine). Uploaded names never become paths and nothing is
written to disk; responses carry no EXIF at all, so no GPS position either.
"""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import io
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

import anyio
from PIL import Image
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..config import Config
from ..errors import InputError, UserError
from ..stylizer import Stylizer, StylizerClosed

log = logging.getLogger("edge_anime.http")

BYTES_PER_MB = 1024 * 1024
RETRY_AFTER_SECONDS = 2  # what a 503 asks the client to wait: about one picture's time on a busy box
FORMATS = {"jpeg": ("JPEG", "image/jpeg"), "png": ("PNG", "image/png"), "webp": ("WEBP", "image/webp")}
REQUEST_BUCKETS_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class HttpError(Exception):
    """An answer other than 200: the status, a short reason and the detail a person can act on."""

    def __init__(self, status: int, error: str, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers or {}


class Service:
    """What the routes share: the Stylizer (built in the background at start), the queue count, metrics."""

    def __init__(self, config: Config, *, registry: CollectorRegistry | None = None,
                 on_ready: Callable[[], None] | None = None, stylizer: Stylizer | None = None) -> None:
        self.config = config
        self.settings = config.http
        self.stylizer: Stylizer | None = None
        self._given = stylizer  # owned by the caller: used, never closed here
        self.failure: str | None = None  # why the Stylizer could not be built (readyz says it)
        self._on_ready = on_ready
        self._admitted = 0  # requests between admission and their thread's end (waiting or running)
        self._lock = threading.Lock()
        self._capacity = 0
        self.token = _read_token(config)
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.requests = Counter("edge_anime_http_requests", "HTTP requests answered", ["route", "status"],
                                registry=self.registry)
        self.in_flight = Gauge("edge_anime_http_in_flight", "Requests admitted to the engine and not done",
                               registry=self.registry)
        self.latency = Histogram("edge_anime_http_request_seconds", "Seconds from request to response",
                                 ["route"], buckets=REQUEST_BUCKETS_SECONDS, registry=self.registry)

    # -- lifecycle ---------------------------------------------------------------------------------------
    def load(self) -> None:
        """Compile the style (in a thread at start-up: /healthz answers meanwhile, /readyz says 503)."""
        try:
            stylizer = self._given or Stylizer(self.config)
        except UserError as exc:
            self.failure = str(exc)
            log.error("not ready: %s", exc)
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
            stylizer = Stylizer(config) if self._given is None else self._given
        except UserError as exc:
            log.error("reload failed, still serving the previous config: %s", exc)
            return
        old, self.stylizer, self.config, self.settings = self.stylizer, stylizer, config, config.http
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


def _read_token(config: Config) -> str | None:
    path = config.http.auth_token_file
    if path is None:
        return None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise UserError(f"http.auth_token_file: {path}: cannot read it ({exc.strerror})") from None
    if len(token) < 16:
        raise UserError(f"http.auth_token_file: {path}: the token is shorter than 16 characters")
    return token


def _error(exc: HttpError) -> JSONResponse:
    return JSONResponse({"error": exc.error, "detail": exc.detail}, status_code=exc.status, headers=exc.headers)


def _authorize(service: Service, request: Request) -> None:
    if service.token is None:
        return
    given = request.headers.get("authorization", "")
    expected = f"Bearer {service.token}"
    if not hmac.compare_digest(given.encode(), expected.encode()):  # constant time: no timing oracle
        raise HttpError(401, "unauthorized", "send the token of http.auth_token_file as 'Authorization: Bearer "
                        "TOKEN'", headers={"WWW-Authenticate": "Bearer"})


async def _read_body(request: Request, limit_bytes: int) -> bytes:
    """The whole body, refused with 413 as soon as it is known to be too large (header first, then bytes)."""
    declared = request.headers.get("content-length")
    too_large = HttpError(413, "too large", f"the body is over http.max_body_mb ({limit_bytes / BYTES_PER_MB:g} MB)")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit_bytes:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _upload(request: Request, limit_bytes: int) -> bytes:
    """A raw ``image/*`` body or the ``file`` field of a multipart form (its name is never used)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind.startswith("image/"):
        return await _read_body(request, limit_bytes)
    if kind == "multipart/form-data":
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
            raise HttpError(413, "too large", f"the body is over http.max_body_mb ({limit_bytes / BYTES_PER_MB:g} MB)")
        async with request.form(max_files=1, max_fields=4, max_part_size=limit_bytes) as form:
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise HttpError(400, "no file", "the multipart form has no file field named 'file'")
            data = await upload.read(limit_bytes + 1)
        if len(data) > limit_bytes:
            raise HttpError(413, "too large", f"the file is over http.max_body_mb ({limit_bytes / BYTES_PER_MB:g} MB)")
        return data
    raise HttpError(415, "unsupported type", f"Content-Type {kind or '(none)'}: send the picture as image/* "
                    "(raw body) or multipart/form-data with a field 'file'")


def _check_header(data: bytes, config: Config) -> None:
    """422 from the picture's header alone, before any pixel is decoded; 400 is left to the decoder."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
    except Exception:  # noqa: BLE001 - whatever it is, the decoder will name it in its 400
        return
    if width * height > config.image.max_pixels:
        raise HttpError(422, "too many pixels", f"{width}x{height} is {width * height} pixels, over "
                        f"image.max_pixels={config.image.max_pixels}")


def _encode(image: Image.Image, fmt: str, quality: int) -> bytes:
    pil_format, _ = FORMATS[fmt]
    if pil_format == "JPEG" and image.mode != "RGB":
        image = image.convert("RGB")  # JPEG has no alpha: the picture's own colours, flattened
    buffer = io.BytesIO()
    image.save(buffer, format=pil_format, quality=quality)
    return buffer.getvalue()


def _server_timing(timings_s: dict[str, float]) -> str:
    return ", ".join(f"{stage};dur={seconds * 1000:.1f}" for stage, seconds in timings_s.items() if seconds > 0)


def _format_for(request: Request, config: Config) -> str:
    fmt = request.query_params.get("format") or config.output.format
    fmt = "jpeg" if fmt == "same" else fmt.lower()
    if fmt not in FORMATS:
        raise HttpError(400, "bad format", f"format={fmt}: expected one of {', '.join(FORMATS)}")
    return fmt


def create_app(config: Config, *, registry: CollectorRegistry | None = None,
               on_ready: Callable[[], None] | None = None, stylizer: Stylizer | None = None) -> Starlette:
    """The ASGI app; ``on_ready`` runs once the style is compiled (the CLI sends sd_notify READY=1 there).
    ``stylizer``: one its owner built and closes (the watch folder's, shared); else the app builds its own at
    start-up and closes it at shutdown."""
    service = Service(config, registry=registry, on_ready=on_ready, stylizer=stylizer)

    def measured(route: str, handler: Callable[[Request], Awaitable[Response]]
                 ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            try:
                response = await handler(request)
            except HttpError as exc:
                response = _error(exc)
            except ClientDisconnect:
                response = Response(status_code=499)
            service.requests.labels(route=route, status=str(response.status_code)).inc()
            service.latency.labels(route=route).observe(time.perf_counter() - started)
            return response
        return endpoint

    async def stylize(request: Request) -> Response:
        _authorize(service, request)
        stylizer, config = service.stylizer, service.config  # one request, one config: a reload swaps both
        if stylizer is None:
            raise HttpError(503, "not ready", service.failure or "the style is still compiling",
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        style = request.query_params.get("style") or stylizer.styles[0]
        if style not in stylizer.styles:
            raise HttpError(404, "unknown style", f"style={style}: this box serves {', '.join(stylizer.styles)}")
        fmt = _format_for(request, config)
        try:  # a client that stalls mid-upload holds a connection, never an engine slot, and not for long
            with anyio.fail_after(config.http.request_timeout_seconds):
                data = await _upload(request, int(config.http.max_body_mb * BYTES_PER_MB))
        except TimeoutError:
            raise HttpError(408, "upload too slow", f"the body did not arrive within http.request_timeout_seconds "
                            f"({config.http.request_timeout_seconds:g} s)") from None
        _check_header(data, config)
        service.admit()

        def work() -> Any:
            try:
                try:
                    return stylizer.run(data, style=style)
                except StylizerClosed:  # a reload swapped it out between admission and here
                    current = service.stylizer
                    assert current is not None
                    return current.run(data, style=style)
            finally:
                service.release()  # when the picture is done, not at a 504: the engine was busy until then

        try:
            with anyio.fail_after(config.http.request_timeout_seconds):
                result = await anyio.to_thread.run_sync(work, abandon_on_cancel=True)
        except TimeoutError:
            raise HttpError(504, "timeout", f"no picture within http.request_timeout_seconds "
                            f"({config.http.request_timeout_seconds:g} s); it is finished in the background") from None
        except InputError as exc:
            status = 422 if exc.stage == "plan" or "max_pixels" in str(exc) else 400
            raise HttpError(status, "not a picture it can stylize" if status == 400 else "over a limit",
                            str(exc)) from None
        body = await anyio.to_thread.run_sync(_encode, result.image, fmt, config.output.quality)
        return Response(body, media_type=FORMATS[fmt][1],
                        headers={"Server-Timing": _server_timing(result.timings_s), "Cache-Control": "no-store"})

    async def styles(request: Request) -> Response:
        _authorize(service, request)
        names = list(service.stylizer.styles) if service.stylizer is not None else []
        return JSONResponse({"styles": names, "default": names[0] if names else None})

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "alive"})

    async def readyz(_request: Request) -> Response:
        if service.stylizer is None:
            raise HttpError(503, "not ready", service.failure or "the style is still compiling")
        return JSONResponse({"status": "ready", "styles": list(service.stylizer.styles)})

    async def metrics(request: Request) -> Response:
        _authorize(service, request)
        return Response(generate_latest(service.registry), media_type=CONTENT_TYPE_LATEST)

    page = (resources.files("edge_anime.http") / "page" / "index.html").read_text(encoding="utf-8")

    async def index(_request: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        loader = threading.Thread(target=service.load, name="edge-anime-load", daemon=True)
        loader.start()
        try:
            yield
        finally:
            await asyncio.to_thread(loader.join)
            await asyncio.to_thread(service.close)

    routes = [
        Route("/v1/stylize", measured("stylize", stylize), methods=["POST"]),
        Route("/v1/styles", measured("styles", styles), methods=["GET"]),
        Route("/healthz", measured("healthz", healthz), methods=["GET"]),
        Route("/readyz", measured("readyz", readyz), methods=["GET"]),
        Route("/metrics", measured("metrics", metrics), methods=["GET"]),
        Route("/", measured("page", index), methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={404: _not_found, 405: _not_allowed})
    app.state.service = service
    return app


async def _not_found(_request: Request, _exc: Exception) -> Response:
    return JSONResponse({"error": "not found", "detail": "see GET / for the page, POST /v1/stylize for the API"},
                        status_code=404)


async def _not_allowed(request: Request, _exc: Exception) -> Response:
    return JSONResponse({"error": "method not allowed", "detail": f"{request.method} {request.url.path}"},
                        status_code=405)


__all__ = ["HttpError", "create_app"]
