"""``GET /v1/live``: the booth's mirror. A WebSocket: the client sends camera frames as binary JPEG messages and
gets each back stylized, as a binary JPEG at ``http.live.max_side``; errors come as JSON text messages
(``{"error": ..., "detail": ...}``), the same words as the HTTP API's.

Why the newest frame wins: a camera makes 30 frames a second and a 2-core box stylizes a fraction of that. A
queue would grow without end and the mirror would show the past; so each session has at most two frames being
stylized (``FRAMES_IN_FLIGHT``: the pipeline's stages overlap) and one waiting, and a frame that arrives while
those two run replaces the one waiting (``Session``). What the client sees is always the most recent frame the
box could finish, in the order the frames came.

Why a Stylizer of its own (``LiveHub``): the frames run at a size of their own (384 px by default, one static
shape for the whole session), with the faces pass off (its cost per frame is the mirror's frame rate) and the
palette off (a palette chosen per frame flickers, as a clip's would). It is the same core, configured for
frames, built on the first session and rebuilt after a reload changes the config; the API's own Stylizer
keeps serving uploads and the booth's pictures at full settings.

The rules of the HTTP API hold: ``Host`` and ``Origin`` are checked as ``Front`` checks a POST (a WebSocket
is not subject to CORS, so any page the kiosk's browser opens could otherwise watch the camera through the
box); a Bearer token is sent as ``Authorization`` or, from a browser (which cannot set headers on a
WebSocket), as the first message, ``{"token": "..."}``. Sessions are bounded (``http.live.max_sessions``,
503 past it, before the upgrade), a session without a frame for ``idle_seconds`` is closed, a frame over
``max_frame_mb`` closes its session (uvicorn's ``ws_max_size``, set from it), and a client that does not read
its answers is closed after ``SEND_TIMEOUT_SECONDS`` instead of holding the worker.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import json
import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..errors import InputError, UserError
from .errors import RETRY_AFTER_SECONDS, HttpError
from .front import check_host, check_origin

if TYPE_CHECKING:
    from concurrent.futures import Future

    from ..config import Config
    from ..core.pipeline import JobResult
    from ..core.stylizer import Stylizer
    from .state import HttpState

log = logging.getLogger("edge_anime.http")

TOKEN_WAIT_SECONDS = 5.0  # a browser's first message, with the token, must come within this
SEND_TIMEOUT_SECONDS = 10.0  # an answer the client does not take within this closes the session
FRAME_TIMEOUT_SECONDS = 30.0  # one frame's stylizing; past it the session is closed as the box's fault
# Frames of one session being stylized at once (the waiting one not counted): two keep the pipeline's stages
# busy (one frame inferring while the other is decoded or encoded); a third would only wait for the inference.
FRAMES_IN_FLIGHT = 2
POLICY_VIOLATION = 1008  # WebSocket close codes (RFC 6455, 7.4.1)
TRY_AGAIN_LATER = 1013
GOING_AWAY = 1001
FRAME_LABEL = Path("<frame>")  # how a frame is named in errors: it has no file name


def live_variant(config: Config) -> str:
    """The variant the frames run (``http.live.variant``): auto takes the style's IR made for live frames
    (``ModelInfo.live_variant``: ``uses: [live]``, holding LIVE_QUALITY_FLOOR_DB against its teacher), else
    what the pictures run.

    Why not the start-up choice over every variant: a distilled student is not the same picture as its teacher
    (30 dB, not 35), so it may not stand in for it on a photo; on a frame it is what makes a mirror (3x)."""
    live = config.http.live
    if live.variant != "auto":
        return live.variant
    from ..models import resolve_model

    style = resolve_model(config.model.path, search_dirs=list(config.model.dirs), verify=False)
    return style.live_variant() or config.model.variant


def live_config(config: Config) -> Config:
    """The config the frames run with: ``http.live``'s size, quality, variant and performance hint, the faces
    pass, palette and ink off."""
    live = config.http.live
    image = config.image.model_copy(update={"resize": "max_side", "max_side": live.max_side, "faces": "off",
                                            "portrait": "off", "palette": "off", "ink": "off"})
    output = config.output.model_copy(update={"format": "jpeg", "quality": live.quality, "keep_exif": False,
                                              "keep_icc": False})
    model = config.model.model_copy(update={"variant": live_variant(config)})
    device = config.device.model_copy(update={"performance_hint": live.performance_hint})
    return config.model_copy(update={"image": image, "output": output, "model": model, "device": device})


class LiveHub:
    """The live sessions of one server: their count (bounded) and the Stylizer their frames share."""

    def __init__(self, service: HttpState) -> None:
        self.service = service
        self.sessions = 0
        self._lock = threading.Lock()
        self._build_lock = threading.Lock()
        self._stylizer: Stylizer | None = None
        self._built_for: Config | None = None

    def enter(self) -> None:
        """Count a new session in, or 503 past ``http.live.max_sessions`` (said before the upgrade)."""
        bound = self.service.settings.live.max_sessions
        with self._lock:
            if self.sessions >= bound:
                raise HttpError(503, "busy", f"{self.sessions} live sessions already run (http.live.max_sessions: "
                                f"{bound}); try again shortly", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            self.sessions += 1

    def leave(self) -> None:
        with self._lock:
            self.sessions -= 1

    def stylizer(self) -> Stylizer:
        """The frames' Stylizer, built (compiled) on first use and again once a reload changed the config;
        in a worker thread: a compile takes seconds."""
        from ..core.stylizer import Stylizer

        config = self.service.config
        with self._build_lock:  # not the count's lock: the event loop takes that one, never for a compile
            if self._stylizer is not None and self._built_for is config:
                return self._stylizer
            old, self._stylizer, self._built_for = self._stylizer, Stylizer(live_config(config)), config
        if old is not None:  # sessions still on it finish their frame; its close drains
            threading.Thread(target=old.close, name="edge-anime-live-close", daemon=True).start()
        log.info("live: frames at %d px (http.live), style %s", config.http.live.max_side, self._stylizer.styles[0])
        return self._stylizer

    def close(self) -> None:
        with self._build_lock:
            stylizer, self._stylizer = self._stylizer, None
        if stylizer is not None:
            stylizer.close()


class Session:
    """One client's frames: at most one waiting (the newest), up to ``FRAMES_IN_FLIGHT`` being stylized."""

    def __init__(self, websocket: WebSocket, hub: LiveHub, style: str | None) -> None:
        self.websocket, self.hub, self.style = websocket, hub, style
        self.waiting: bytes | None = None
        self.arrived = asyncio.Event()
        self.closed = False
        self.busy = False  # a frame is being stylized
        self.frames_in = self.frames_out = self.replaced = 0

    async def receive(self) -> None:
        """Take frames until the client goes: each replaces the one waiting. Closes an idle session."""
        idle = self.hub.service.settings.live.idle_seconds
        while True:
            try:
                message = await asyncio.wait_for(self.websocket.receive(), timeout=idle)
            except TimeoutError:
                if self.busy or self.waiting is not None:  # waiting for its answer is not idle (a first
                    continue  # frame may wait for the style's compile and variant measurement)
                await self._close(GOING_AWAY, f"no frame for {idle:g} s (http.live.idle_seconds)")
                return
            if message["type"] == "websocket.disconnect":
                self.closed = True
                return
            data = message.get("bytes")
            if data is None:  # a text message: the protocol has none after the token
                await self._error("not a frame", "send each frame as a binary message holding a JPEG")
                continue
            self.frames_in += 1
            self.replaced += self.waiting is not None
            self.waiting = data
            self.arrived.set()

    async def answer(self) -> None:
        """Stylize the newest frames, send the answers in the frames' order, repeat; a bad frame gets a JSON
        error and the session goes on.

        Why more than one frame in flight: a frame's decode, resize, tone and encode run on one core beside
        the inference, and with one frame at a time the inference waits for them (on a 16-core Xeon they were
        23 of a 40 ms frame); with two the pipeline's stages overlap as they do for a batch of photos."""
        in_flight: collections.deque[tuple[float, asyncio.Future[JobResult]]] = collections.deque()
        while True:
            self.arrived.clear()  # cleared before the look below: a frame arriving after it sets it again
            while self.waiting is not None and len(in_flight) < FRAMES_IN_FLIGHT:
                frame, self.waiting = self.waiting, None
                self.busy = True  # a first frame's compile can outlast idle_seconds: the session is not idle
                try:
                    submitted = await asyncio.to_thread(self._submit, frame)  # may compile, or wait for a slot
                except UserError as exc:  # the style cannot be compiled: no frame of this session can be
                    await self._error("not available", str(exc))
                    await self._close(TRY_AGAIN_LATER, "the box cannot stylize frames now")
                    return
                in_flight.append((time.monotonic(), asyncio.wrap_future(submitted)))
            self.busy = bool(in_flight)
            if not in_flight:
                await self.arrived.wait()
                continue
            started, oldest = in_flight[0]
            wait_for: set[asyncio.Future[Any]] = {oldest}
            if len(in_flight) < FRAMES_IN_FLIGHT:  # room for one more: a frame arriving meanwhile starts now
                wait_for.add(asyncio.ensure_future(self.arrived.wait()))
            remaining = max(0.0, started + FRAME_TIMEOUT_SECONDS - time.monotonic())
            try:
                await asyncio.wait(wait_for, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in wait_for - {oldest}:
                    waiter.cancel()
            if not oldest.done():
                if time.monotonic() - started < FRAME_TIMEOUT_SECONDS:
                    continue  # a frame arrived: start it, then wait on the oldest again
                await self._error("not available", "the frame took too long")
                await self._close(TRY_AGAIN_LATER, "the box cannot stylize frames now")
                return
            in_flight.popleft()
            self.busy = bool(in_flight)
            result = oldest.result()
            if isinstance(result.error, InputError):
                await self._error("cannot stylize this frame", str(result.error))
                continue
            if result.error is not None:  # the style or the box, not the frame: the session ends
                await self._error("not available", str(result.error) or "the frame could not be stylized")
                await self._close(TRY_AGAIN_LATER, "the box cannot stylize frames now")
                return
            assert result.data is not None
            try:
                await asyncio.wait_for(self.websocket.send_bytes(result.data), timeout=SEND_TIMEOUT_SECONDS)
            except TimeoutError:  # the client reads nothing: its answers would pile up in the kernel
                await self._close(POLICY_VIOLATION, f"answers not read for {SEND_TIMEOUT_SECONDS:g} s")
                return
            self.frames_out += 1

    def _submit(self, frame: bytes) -> Future[JobResult]:
        from ..core.pipeline import Job

        return self.hub.stylizer().submit(Job(src=FRAME_LABEL, dst=None, data=frame, encode_as="jpg",
                                              palette=False), style=self.style)

    async def _error(self, error: str, detail: str) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.websocket.send_text(json.dumps({"error": error, "detail": detail})),
                                   timeout=SEND_TIMEOUT_SECONDS)

    async def _close(self, code: int, reason: str) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(Exception):  # a client that reads nothing may not take the close either
                await asyncio.wait_for(self.websocket.close(code=code, reason=reason[:120]),
                                       timeout=SEND_TIMEOUT_SECONDS)


def _token_ok(service: HttpState, given: str) -> bool:
    assert service.token is not None
    return hmac.compare_digest(given.strip().encode("utf-8"), service.token.encode("ascii"))


async def live(websocket: WebSocket) -> None:
    """The route: the checks before the upgrade (denied as JSON answers), the token, then the session."""
    service: HttpState = websocket.app.state.service
    hub: LiveHub = websocket.app.state.live
    headers = Headers(scope=websocket.scope)
    try:
        check_host(headers, service.names)
        check_origin("WEBSOCKET", headers)
        if service.stylizer is None:
            raise HttpError(503, "not ready", service.failure or "the style is still compiling",
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        style = websocket.query_params.get("style") or service.stylizer.styles[0]
        if style not in service.stylizer.styles:
            raise HttpError(404, "unknown style", f"style={style}: this box serves "
                            f"{', '.join(service.stylizer.styles)}")
        in_header = service.authorized(websocket)
        if service.token is not None and "authorization" in headers and not in_header:
            raise HttpError(401, "unauthorized", "the token of http.auth_token_file does not match",
                            headers={"WWW-Authenticate": "Bearer"})
        hub.enter()
    except HttpError as exc:
        await websocket.send_denial_response(JSONResponse({"error": exc.error, "detail": exc.detail},
                                                          status_code=exc.status, headers=exc.headers))
        service.count("live", exc.status, 0.0)
        return
    service.count("live", 101, 0.0)
    try:
        await websocket.accept()
        if not in_header and not await _token_message(websocket, service):
            return
        session = Session(websocket, hub, style)
        tasks = [asyncio.create_task(session.receive()), asyncio.create_task(session.answer())]
        try:  # either ends the session: the client went (or idled), or the answers cannot go out
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                    await task
        log.info("live: session ended: %d frames in, %d answered, %d replaced by a newer one", session.frames_in,
                 session.frames_out, session.replaced)
    except WebSocketDisconnect:
        pass
    finally:
        hub.leave()


async def _token_message(websocket: WebSocket, service: HttpState) -> bool:
    """With a token set and no Authorization header: the first message must be ``{"token": "..."}``."""
    if service.token is None:
        return True
    try:
        message = await asyncio.wait_for(websocket.receive_text(), timeout=TOKEN_WAIT_SECONDS)
        given = json.loads(message).get("token", "") if message.startswith("{") else ""
    except (TimeoutError, ValueError, KeyError, AttributeError):
        given = ""
    if isinstance(given, str) and given and _token_ok(service, given):
        return True
    with contextlib.suppress(Exception):
        await websocket.send_text(json.dumps({"error": "unauthorized", "detail": "send the token of "
                                              "http.auth_token_file first, as {\"token\": \"...\"}, or as "
                                              "'Authorization: Bearer TOKEN'"}))
        await websocket.close(code=POLICY_VIOLATION, reason="unauthorized")
    return False


def live_routes() -> list[WebSocketRoute]:
    return [WebSocketRoute("/v1/live", live)]


__all__ = ["LiveHub", "live_config", "live_routes"]
