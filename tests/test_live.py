"""``GET /v1/live`` (issue 43): a real WebSocket client (the websockets library) on a loopback port, the app
served in this process on the random IR. Frames are real JPEGs; every wait is bounded."""
from __future__ import annotations

import io
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from deadlines import scaled
from PIL import Image
from test_http import (  # noqa: F401 - the *_fixture are test_http's fixtures, shared here by their names
    Here,
    _jpeg,
    box_fixture,
    serve_here_fixture,
    stylizer_fixture,
)

pytest.importorskip("starlette")
websockets_sync = pytest.importorskip("websockets.sync.client")
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

ServeHere = Callable[..., Here]
DEADLINE_S = scaled(30.0)


def _frame(width: int = 320, height: int = 240, *, seed: int = 0, noise: float = 0.0) -> bytes:
    """A camera-like frame: a smooth scene (the same for a seed) plus sensor noise of ``noise`` levels."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([128 + 90 * np.sin(xx / 37 + seed), 128 + 80 * np.cos(yy / 29), 100 + 0.3 * xx], axis=-1)
    if noise:
        base = base + np.random.default_rng().normal(0, noise, base.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(base, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _url(server: Here, path: str = "/v1/live") -> str:
    return server.url.replace("http://", "ws://") + path


@pytest.fixture
def live(serve_here: ServeHere) -> Callable[..., Here]:
    """``live(**http_live)``: a server whose ``http.live`` has these settings (max_side 128 by default: fast)."""
    def start(**settings: Any) -> Here:
        return serve_here({"live": {"max_side": 128, **settings}})
    return start


def _answer(ws: Any) -> Image.Image:
    message = ws.recv(timeout=DEADLINE_S)
    assert isinstance(message, bytes), message
    return Image.open(io.BytesIO(message))


def test_a_frame_comes_back_stylized_at_the_live_size_and_the_same_frame_the_same(
        live: Callable[..., Here]) -> None:
    server = live()
    frame = _frame()
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        ws.send(frame)
        first = ws.recv(timeout=DEADLINE_S)
        ws.send(frame)
        second = ws.recv(timeout=DEADLINE_S)
    assert isinstance(first, bytes) and first == second  # a still frame does not flicker
    picture = Image.open(io.BytesIO(first))
    assert picture.format == "JPEG" and max(picture.size) == 128 and picture.size == (128, 96)
    assert np.asarray(picture).std() > 1.0


def test_a_still_scene_with_sensor_noise_stays_steady(live: Callable[..., Here]) -> None:
    """Consecutive frames of a still scene (the same scene, fresh camera noise each) are >= 35 dB apart."""
    server = live()
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        answers = []
        for _ in range(4):
            ws.send(_frame(seed=3, noise=2.0))
            answers.append(np.asarray(_answer(ws), np.float64))
    for a, b in itertools.pairwise(answers):
        psnr = 10 * np.log10(255.0 ** 2 / max(float(np.mean((a - b) ** 2)), 1e-9))
        assert psnr >= 35.0, psnr


def test_the_newest_frame_wins_and_nothing_queues(live: Callable[..., Here]) -> None:
    """Frames sent faster than the box stylizes them: fewer answers than frames, and the last answer is the
    last frame's (the ones in between were replaced while they waited)."""
    server = live()
    frames = [_frame(seed=i) for i in range(30)]
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        for frame in frames:
            ws.send(frame)
        answers: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                message = ws.recv(timeout=2.0)
            except TimeoutError:
                break  # quiet for 2 s: everything there was to answer is answered
            assert isinstance(message, bytes)
            answers.append(message)
        ws.send(frames[-1])
        last_alone = ws.recv(timeout=DEADLINE_S)
    assert 1 <= len(answers) < len(frames), len(answers)
    assert answers[-1] == last_alone


def test_frames_stylized_two_at_a_time_come_back_in_their_order(live: Callable[..., Here]) -> None:
    """Two frames of a session are stylized at once (FRAMES_IN_FLIGHT), but an answer never overtakes an
    older frame's: the answers to frames sent back to back are those frames' own, in the order sent."""
    server = live()
    frames = [_frame(seed=i) for i in range(8)]
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        alone: dict[bytes, int] = {}
        for i, frame in enumerate(frames):  # one at a time: each frame's own answer
            ws.send(frame)
            answer = ws.recv(timeout=DEADLINE_S)
            assert isinstance(answer, bytes)
            alone[answer] = i
        assert len(alone) == len(frames)
        for frame in frames:
            ws.send(frame)
        order: list[int] = []
        while not order or order[-1] != len(frames) - 1:  # the last frame is never replaced: it is answered
            message = ws.recv(timeout=DEADLINE_S)
            assert isinstance(message, bytes) and message in alone
            order.append(alone[message])
    assert order == sorted(set(order)), order
    assert len(order) >= 2


def test_a_first_frame_waiting_for_the_compile_is_not_idle(live: Callable[..., Here]) -> None:
    """The session's first frame builds (compiles) the live Stylizer, which takes far longer than this
    idle_seconds: a session waiting for its answer is not idle, so the answer comes instead of a close."""
    server = live(idle_seconds=0.05)
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        ws.send(_frame())
        assert _answer(ws).format == "JPEG"


def test_a_frame_that_is_not_a_jpeg_gets_a_json_error_and_the_session_goes_on(live: Callable[..., Here]) -> None:
    server = live()
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        ws.send(b"this is not a picture")
        error = json.loads(ws.recv(timeout=DEADLINE_S))
        assert error["error"] == "cannot stylize this frame" and "<frame>" in error["detail"]
        ws.send("hello")  # text: not a frame
        assert json.loads(ws.recv(timeout=DEADLINE_S))["error"] == "not a frame"
        ws.send(_frame())
        assert _answer(ws).format == "JPEG"


def test_a_frame_over_max_frame_mb_closes_the_session_and_uploads_go_on(live: Callable[..., Here]) -> None:
    server = live(max_frame_mb=0.5)
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S, max_size=None) as ws:
        ws.send(bytes(2 * 1024 * 1024))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=DEADLINE_S)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # "message too big"
    assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200


def test_sessions_past_the_bound_get_503_and_an_idle_one_is_closed(live: Callable[..., Here]) -> None:
    server = live(max_sessions=2, idle_seconds=1.0)
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as one, \
            websockets_sync.connect(_url(server), open_timeout=DEADLINE_S):
        with pytest.raises(InvalidStatus) as refused:
            websockets_sync.connect(_url(server), open_timeout=DEADLINE_S)
        assert refused.value.response.status_code == 503
        assert json.loads(refused.value.response.body)["error"] == "busy"
        with pytest.raises(ConnectionClosed) as idle:
            one.recv(timeout=DEADLINE_S)  # nothing sent: closed after idle_seconds
        assert idle.value.rcvd is not None and idle.value.rcvd.code == 1001
    deadline = time.monotonic() + DEADLINE_S
    while server.app.state.live.sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.app.state.live.sessions == 0  # both counted out: a new one is welcome
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as again:
        again.send(_frame())
        assert _answer(again).format == "JPEG"


def test_another_origin_is_refused_and_the_token_rules_are_the_apis(
        serve_here: ServeHere, tmp_path: Any) -> None:
    token = "s3cret-" + "q" * 20
    (tmp_path / "token").write_text(token, encoding="utf-8")
    (tmp_path / "token").chmod(0o600)
    server = serve_here({"auth_token_file": str(tmp_path / "token"), "live": {"max_side": 128}})
    with pytest.raises(InvalidStatus) as foreign:
        websockets_sync.connect(_url(server), open_timeout=DEADLINE_S, origin="http://evil.example")  # type: ignore[arg-type]
    assert foreign.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as wrong:
        websockets_sync.connect(_url(server), open_timeout=DEADLINE_S,
                                additional_headers={"Authorization": "Bearer nope"})
    assert wrong.value.response.status_code == 401
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S,
                                 additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        ws.send(_frame())
        assert _answer(ws).format == "JPEG"
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as browser:  # a page: token first
        browser.send(json.dumps({"token": token}))
        browser.send(_frame())
        assert _answer(browser).format == "JPEG"
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as guess:
        guess.send(json.dumps({"token": "wrong"}))
        assert json.loads(guess.recv(timeout=DEADLINE_S))["error"] == "unauthorized"
        with pytest.raises(ConnectionClosed) as closed:
            guess.recv(timeout=DEADLINE_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_a_client_that_drops_mid_frame_leaves_the_service_answering(live: Callable[..., Here]) -> None:
    import socket

    server = live()
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        raw: socket.socket = ws.socket
        # a masked binary frame's header announcing 16 KiB (a client's frames are masked: RFC 6455, 5.3), then
        # 100 bytes of it, then the client is gone
        raw.sendall(b"\x82\xfe\x40\x00" + b"\x01\x02\x03\x04" + b"\x00" * 100)
        raw.shutdown(socket.SHUT_RDWR)
    deadline = time.monotonic() + DEADLINE_S
    while server.app.state.live.sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.app.state.live.sessions == 0
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as again:
        again.send(_frame())
        assert _answer(again).format == "JPEG"
    assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200



def test_a_session_outlives_the_header_timeout(serve_here: ServeHere) -> None:
    """The connection guard's header deadline (armed when a connection opens) closed every live session
    http.header_timeout_seconds after its start: an upgraded connection is no longer the guard's."""
    server = serve_here({"header_timeout_seconds": 1.0, "live": {"max_side": 128}})
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as ws:
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # past the 1 s deadline, frames all along
            ws.send(_frame())
            assert _answer(ws).format == "JPEG"
    deadline = time.monotonic() + DEADLINE_S  # and it left the guard's count: no connection is held for it
    while server.app.state.service.guard.open and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.app.state.service.guard.open == set()


@pytest.mark.slow  # the server's buffers must fill before its send blocks, then its send times out
def test_a_client_that_never_reads_is_closed_and_frees_its_session(live: Callable[..., Here],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Backpressure: a client that sends frames and reads nothing. The answers fill the kernel's buffers, the
    server's send blocks, and after SEND_TIMEOUT_SECONDS the session is closed instead of holding its worker;
    the session count comes back and uploads are answered all along."""
    import socket

    from edge_anime.http import live as live_module

    # The server runs in this process: a 2 s send timeout instead of 10 s proves the same close, 8 s sooner
    # (the send reads the constant at each answer).
    monkeypatch.setattr(live_module, "SEND_TIMEOUT_SECONDS", 2.0)
    server = live(max_side=512, quality=100, max_sessions=1)
    noise = io.BytesIO()
    Image.fromarray(np.random.default_rng(9).integers(0, 256, (480, 640, 3), dtype=np.uint8)).save(
        noise, "JPEG", quality=100)  # answers of ~0.5 MB each: a few fill any buffer
    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S, max_size=None) as ws:
        raw: socket.socket = ws.socket
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        deadline = time.monotonic() + scaled(120)
        while server.app.state.live.sessions and time.monotonic() < deadline:
            try:
                ws.send(noise.getvalue())  # and never recv
            except ConnectionClosed:
                break
            assert server.request("/healthz")[0] == 200
            time.sleep(0.2)  # a camera's pace; the loop ends on the server's close, bounded by the deadline
    while server.app.state.live.sessions and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.app.state.live.sessions == 0, "the session that read nothing was not closed"
    assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200


@pytest.mark.slow  # ~20 s: a thousand handshakes
def test_a_thousand_sessions_get_503_past_the_bound_and_uploads_go_on(live: Callable[..., Here]) -> None:
    from concurrent.futures import ThreadPoolExecutor

    server = live(max_sessions=2)

    def attempt(_: int) -> int:
        try:
            with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S):
                return 101
        except InvalidStatus as exc:
            return int(exc.response.status_code)

    with websockets_sync.connect(_url(server), open_timeout=DEADLINE_S) as one, \
            websockets_sync.connect(_url(server), open_timeout=DEADLINE_S):
        with ThreadPoolExecutor(max_workers=16) as pool:
            statuses = list(pool.map(attempt, range(1000)))
        assert statuses.count(503) == 1000, {s: statuses.count(s) for s in set(statuses)}
        assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200
        one.send(_frame())
        assert _answer(one).format == "JPEG"  # the sessions inside the bound were served all along
    assert server.app.state.live.sessions <= 2
