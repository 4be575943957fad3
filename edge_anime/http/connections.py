"""The connection layer under uvicorn's h11 protocol: the bounds uvicorn does not have.

Why hand-written: uvicorn has no timeout for a request's headers (its keep-alive timer runs only between
requests and any byte cancels it: encode/uvicorn#157, open since 2018), and its one connection bound,
``limit_concurrency``, answers every request with a plain-text 503 once that many sockets are open, idle or
not: ~160 idle sockets took the service down for everyone (issue 28). A subclass of its h11 protocol (the
documented ``http=`` class knob of ``uvicorn.Config``) adds, per server:

- a deadline for the request's headers (``http.header_timeout_seconds``), from the connection's opening and
  from the end of each answer (keep-alive): past it, a connection mid-request gets a JSON 408 and is closed,
  one that sent nothing is closed;
- a bound on open connections (``http.max_connections``) and on those of one client address
  (``http.max_connections_per_client``): past either, the oldest idle connection (no request in progress)
  is closed to make room, so idle sockets never stand in the way of a real upload; when none is idle the new
  connection's request is answered 503 by the app (``Front`` asks ``refused``);
- uvicorn's own 400 for a malformed request, in JSON and counted like every answer.

It leans on uvicorn's ``H11Protocol`` attributes ``cycle``, ``conn``, ``transport``, ``client`` and
``on_response_complete``/``send_400_response``, unchanged from uvicorn 0.13 to 0.54.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..config import HttpSection
from ..errors import BYTES_PER_MB


def raw_json_answer(status: int, reason: str, error: str, detail: str, *,
                    extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, for the moments h11 cannot frame one (no request
    was read, so its state machine has nothing to answer)."""
    body = json.dumps({"error": error, "detail": detail}).encode()
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
            "connection: close", "x-content-type-options: nosniff", *(f"{k}: {v}" for k, v in extra)]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


MAX_HEAD_BYTES = 16 * 1024  # request line and headers (h11's default, said here); 431 past it
LINGER_SECONDS = 2.0  # a lingering close waits this long at most for the client to finish sending
LINGER_MAX_BYTES = BYTES_PER_MB  # ... and drops at most this much of what it sends meanwhile


class ConnectionGuard:
    """What the connections of one server share: the live settings (a reload applies them to the next
    connection), the open connections by client address, and the callbacks that count answers and drops."""

    def __init__(self, settings: Callable[[], HttpSection], *, answered: Callable[[int], None],
                 dropped: Callable[[str], None], opened: Callable[[int], None]) -> None:
        self.settings = settings
        self._answered, self._dropped, self._opened = answered, dropped, opened
        self.open: set[GuardedH11Protocol] = set()
        self._per_client: dict[str, int] = {}
        self._refused: set[tuple[str, int]] = set()

    def refused(self, client: tuple[str, int] | None) -> bool:
        """True for a connection opened over the bounds with nothing idle to close: its request gets a 503."""
        return client is not None and client in self._refused

    def add(self, conn: GuardedH11Protocol) -> None:
        settings = self.settings()
        host = conn.client_host
        self.open.add(conn)
        self._per_client[host] = self._per_client.get(host, 0) + 1
        self._opened(len(self.open))
        if self._per_client[host] > settings.max_connections_per_client:
            self._make_room(conn, same_client=True)
        if len(self.open) > settings.max_connections:
            self._make_room(conn, same_client=False)

    def discard(self, conn: GuardedH11Protocol) -> None:
        if conn not in self.open:
            return
        self.open.discard(conn)
        host = conn.client_host
        self._per_client[host] -= 1
        if not self._per_client[host]:
            del self._per_client[host]
        if conn.client is not None:
            self._refused.discard(conn.client)
        self._opened(len(self.open))

    def _make_room(self, new: GuardedH11Protocol, *, same_client: bool) -> None:
        """Close the connection idle the longest (among the new one's client's when ``same_client``); with
        none idle, the new connection is refused (its request answered 503), never a request in progress."""
        idle = [c for c in self.open if c is not new and c.idle and not c.transport.is_closing()
                and (not same_client or c.client_host == new.client_host)]
        if idle:
            oldest = min(idle, key=lambda c: c.idle_since)
            self._dropped("evicted")
            self.discard(oldest)  # counted out now: its connection_lost comes later, on the loop
            oldest.transport.close()
        elif new.client is not None:
            self._refused.add(new.client)

    def answered(self, status: int) -> None:
        self._answered(status)

    def dropped(self, reason: str) -> None:
        self._dropped(reason)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline, connection bounds and JSON for its own answers."""

    guard: ClassVar[ConnectionGuard]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.lingering: int | None = None  # bytes dropped since the answer, while closing (``_linger``)
        super().connection_made(transport)
        self.idle_since = self.loop.time()
        self._deadline: asyncio.TimerHandle | None = None
        self._armed_cycle: Any = None
        self.guard.add(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.discard(self)
        super().connection_lost(exc)

    @property
    def client_host(self) -> str:
        return self.client[0] if self.client else ""

    @property
    def idle(self) -> bool:
        """No request in progress: none yet, or the last one answered (its body may still be draining)."""
        return self.cycle is None or self.cycle.response_complete

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        """The connection becomes a WebSocket (``/v1/live``): the header deadline, armed when it opened, would
        close it 10 s into the session, so it is disarmed; and the connection leaves the guard's count here,
        since from now on its close reaches the WebSocket protocol, never ``connection_lost`` here. Live
        sessions are bounded by themselves (``http.live.max_sessions``, ``idle_seconds``)."""
        self._disarm()
        self.guard.discard(self)
        super().handle_websocket_upgrade(event)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self.idle_since = self.loop.time()
            self._arm()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes h11 cannot parse, in JSON and counted (uvicorn's is plain text); a head
        over h11's bound is a 431, as h11 itself hints. Then a lingering close (``_linger``)."""
        limit = MAX_HEAD_BYTES
        if len(self.conn.trailing_data[0]) > limit:
            self.guard.answered(431)
            answer = raw_json_answer(431, "Request Header Fields Too Large", "headers too large",
                                     f"the request line and headers are over {limit // 1024} KiB")
        else:
            self.guard.answered(400)
            answer = raw_json_answer(400, "Bad Request", "malformed request",
                                     f"{msg} (HTTP/1.1 with headers under {limit // 1024} KiB expected)")
        self.transport.write(answer)
        self._linger()

    def _linger(self) -> None:
        """Half-close after an answer to a request still arriving, and read and drop what comes for a while:
        a close with unread bytes makes the kernel send a reset, and the client then loses the answer it
        has not read yet (issue 42: headers over ~150 KB got a reset instead of the answer). Bounded in
        bytes and time, so a client that keeps sending cannot hold the connection."""
        self._disarm()
        self.lingering = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if self.lingering is None:
            super().data_received(data)
            return
        self.lingering += len(data)
        if self.lingering > LINGER_MAX_BYTES:
            self.transport.close()

    def eof_received(self) -> None:
        if self.lingering is None:
            super().eof_received()
            return
        self.transport.close()  # the client has sent everything and read the answer: nothing to wait for

    def _arm(self) -> None:
        self._disarm()
        self._armed_cycle = self.cycle
        self._deadline = self.loop.call_later(self.guard.settings().header_timeout_seconds, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        """The deadline passed: unless a request's headers arrived since it was armed, close the connection,
        with a 408 when the client had started sending one."""
        self._deadline = None
        if self.transport.is_closing() or self.cycle is not self._armed_cycle or not self.idle:
            return
        mid_head = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])
        if mid_head:
            self.guard.answered(408)
            seconds = self.guard.settings().header_timeout_seconds
            self.transport.write(raw_json_answer(
                408, "Request Timeout", "headers too slow",
                f"the request's headers did not arrive within http.header_timeout_seconds ({seconds:g} s)"))
        # Neither mid-head nor idle: a body still streaming in after its early answer (uvicorn drains it).
        busy = mid_head or self.conn.their_state is not h11.IDLE
        self.guard.dropped("header timeout" if busy else "idle")
        self.transport.close()


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedH11Protocol]:
    """The protocol class for one server (uvicorn builds one instance per connection from the class)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"guard": guard})


__all__ = ["MAX_HEAD_BYTES", "ConnectionGuard", "GuardedH11Protocol", "guarded_protocol", "raw_json_answer"]
