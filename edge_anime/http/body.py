"""Upload bodies: read in memory only, bounded while they stream, set aside for before they are read.

Why not Starlette's ``request.form()``: it spools a multipart file part to a temporary file with no bound of
its own (a chunked upload wrote 314 MB to disk before the 413, issue 28), and it reads the whole part before
anyone can count it. Here one loop reads every encoding (Content-Length, chunked, raw or multipart) and counts
the bytes as they come, ``http.max_body_mb`` at most; a multipart body goes through python-multipart's
streaming parser and only its ``file`` part is kept, in memory.

Why a budget (``BodyBudget``): 150 concurrent 20 MB uploads once held 3.9 GB before the queue could refuse
any of them. The bodies of all requests together stay within ``http.max_bodies_mb``, and one client
address's within ``http.max_bodies_per_client_mb``. A request whose Content-Length (``http.max_body_mb``
when chunked) does not fit in what is free gets a 503 with Retry-After before a byte is read (a client that
sends ``Expect: 100-continue`` then never sends the body); one admitted is charged as its bytes arrive, and
gets the same 503 mid-body should the bodies streaming beside it fill the budget first.
Why charged as they arrive, not at admission (issue 42): a body's declared size used to be held from the
first byte, so 8 connections declaring 25 MB and sending a byte a second held the whole budget, and every
real upload got 503 for a minute. Now a body holds what it has sent, and must keep sending: past
``http.upload_grace_seconds`` it must average ``http.min_upload_kb_per_second`` or get a 408.
Once the last body is released the allocator's free pages go back to the system (``memory``).

A raw body is taken whatever its image type says, and also as ``application/octet-stream``, without a type,
and as ``application/x-www-form-urlencoded``: that is what ``curl --data-binary @photo.jpg URL`` sends when
told nothing, and its bytes are a picture, never form fields. The decoder sniffs the format from the bytes
either way (its allow-list decides, not the label). A multipart file part's name travels with the bytes, only
ever as a label in error messages (``upload_name``), never as a path.
"""
from __future__ import annotations

import io
import math
import threading
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from . import memory
from .errors import BYTES_PER_MB, RETRY_AFTER_SECONDS, HttpError

MAX_PARTS = 4  # the page sends one part; a form with a field or two beside the file is still served
MAX_NAME_CHARS = 120  # an upload's file name, as far as error messages repeat it
# Raw-body types taken as a picture: curl's default for --data-binary, and what a client sends that does not
# know (or will not say) which image type it has; the decoder reads the format from the bytes.
RAW_TYPES = frozenset({"", "application/octet-stream", "application/x-www-form-urlencoded"})
TRIM_DELAY_SECONDS = 1.0  # after the last body is released: the handlers drop their references meanwhile


def too_large(limit_bytes: int) -> HttpError:
    return HttpError(413, "too large", f"the body is over http.max_body_mb ({limit_bytes / BYTES_PER_MB:g} MB)")


class BodyBudget:
    """Bytes of request bodies in memory, all requests together and per client address. Charged on the event
    loop as bytes arrive, released there or on the worker thread that finished the picture (hence the lock)."""

    def __init__(self, limit_bytes: Callable[[], int], on_change: Callable[[int], None],
                 client_limit_bytes: Callable[[], int] | None = None) -> None:
        self._limit_bytes = limit_bytes  # read at each check, so a reload applies at once
        self._client_limit_bytes = client_limit_bytes or limit_bytes
        self._on_change = on_change
        self._lock = threading.Lock()
        self._trim_pending = False
        self.held = 0
        self._by_client: dict[str, int] = {}

    def reserve(self, nbytes: int, client: str = "") -> Reservation:
        """Admit a body of ``nbytes`` (its Content-Length, or the most a chunked one may be) when it fits in
        what is free now, for all and for ``client``; 503 before it is read otherwise. Nothing is held yet."""
        with self._lock:
            self._check(nbytes, client)
        return Reservation(self, client)

    def _check(self, nbytes: int, client: str) -> None:
        limit, client_limit = self._limit_bytes(), self._client_limit_bytes()
        if self.held + nbytes > limit:
            raise HttpError(503, "busy", f"uploads in progress already hold {self.held / BYTES_PER_MB:.1f} MB of "
                            f"http.max_bodies_mb ({limit / BYTES_PER_MB:g} MB); try again shortly",
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        mine = self._by_client.get(client, 0)
        if mine + nbytes > client_limit:
            raise HttpError(503, "busy", f"this client's uploads in progress already hold {mine / BYTES_PER_MB:.1f} "
                            f"MB of http.max_bodies_per_client_mb ({client_limit / BYTES_PER_MB:g} MB); try "
                            "again shortly", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    def _charge(self, nbytes: int, client: str) -> None:
        with self._lock:
            self._check(nbytes, client)
            self._by_client[client] = self._by_client.get(client, 0) + nbytes
        self._move(nbytes)

    def _refund(self, nbytes: int, client: str) -> None:
        with self._lock:
            left = self._by_client.get(client, 0) - nbytes
            if left > 0:
                self._by_client[client] = left
            else:
                self._by_client.pop(client, None)
        self._move(-nbytes)

    def _move(self, nbytes: int) -> None:
        with self._lock:
            self.held += nbytes
            held = self.held
            trim = held == 0 and not self._trim_pending
            self._trim_pending = self._trim_pending or trim
        self._on_change(held)
        if trim:
            timer = threading.Timer(TRIM_DELAY_SECONDS, self._trim)
            timer.daemon = True
            timer.start()

    def _trim(self) -> None:
        """The bodies are gone: give their pages back to the system (``memory`` says why)."""
        with self._lock:
            self._trim_pending = False
            if self.held:
                return
        memory.trim()


class Reservation:
    """One request's share of the budget: the bytes its body has brought so far, released once."""

    def __init__(self, budget: BodyBudget, client: str) -> None:
        self._budget, self._client, self.nbytes = budget, client, 0

    def grow(self, nbytes: int) -> None:
        """``nbytes`` more have arrived: charged, or 503 when the budget (all, or this client's) is full."""
        self._budget._charge(nbytes, self._client)
        self.nbytes += nbytes

    def release(self) -> None:
        if self.nbytes:
            self._budget._refund(self.nbytes, self._client)
            self.nbytes = 0


@dataclass(frozen=True)
class Pace:
    """The slowest a body may arrive: ``min_bytes_per_s`` on average once ``grace_s`` have passed (a phone on
    a poor uplink sends a photo at 50-200 KB/s; a connection that trickles holds a slot and memory for it)."""

    grace_s: float
    min_bytes_per_s: float

    def deadline(self, started: float, received: int) -> float:
        """When the next bytes must have come, on the clock ``started`` is on."""
        return started + self.grace_s + received / self.min_bytes_per_s if self.min_bytes_per_s > 0 else math.inf


def declared_length(request: Request, limit_bytes: int) -> int | None:
    """The body's Content-Length (None when chunked); 413 at once when it is over the limit."""
    value = request.headers.get("content-length")
    if value is None or not value.isdigit():
        return None  # h11 has refused a malformed Content-Length already; chunked bodies have none
    if int(value) > limit_bytes:
        raise too_large(limit_bytes)
    return int(value)


@dataclass
class Upload:
    """The picture's bytes and, from a multipart part, its file name (``upload_name``), or None."""

    data: bytes
    name: str | None = None


def upload_name(raw: bytes | None) -> str | None:
    """A multipart ``filename`` as a label for error messages: its last path component (a browser may send a
    whole path), without control characters, at most ``MAX_NAME_CHARS``; None when nothing is left. Never a
    path: nothing of an upload is written anywhere."""
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace").replace("\\", "/").rsplit("/", 1)[-1]
    text = "".join(c for c in text if unicodedata.category(c)[0] != "C").strip()
    if len(text) > MAX_NAME_CHARS:
        text = text[:MAX_NAME_CHARS - 3] + "..."
    return text or None


async def read_upload(request: Request, limit_bytes: int, reservation: Reservation, pace: Pace) -> Upload:
    """A raw body (see the module docstring for its types) or the ``file`` part of a multipart form, in
    memory, each chunk charged to ``reservation`` as it comes; 413 as soon as more than ``limit_bytes`` have
    come, whatever the encoding; 408 when it falls behind ``pace``; 415 for any other type, with a request
    that works."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind.startswith("image/") or kind in RAW_TYPES:
        buffer = io.BytesIO()  # grows in place; getvalue() hands its bytes over without a copy
        await _stream(request, limit_bytes, reservation, pace, buffer.write)
        return Upload(buffer.getvalue())
    if kind == "multipart/form-data":
        form = FilePart(request.headers.get("content-type", ""))
        await _stream(request, limit_bytes, reservation, pace, form.feed)
        return Upload(form.finish(), upload_name(form.filename))
    url = f"{request.base_url}v1/stylize"
    raise HttpError(415, "unsupported type", f"Content-Type {kind}: send the picture as the body (any image/* "
                    f"type, or application/octet-stream), e.g. curl --data-binary @photo.jpg {url} -o out.jpg, "
                    f"or as multipart/form-data with a field 'file', e.g. curl -F file=@photo.jpg {url} -o out.jpg")


async def _stream(request: Request, limit_bytes: int, reservation: Reservation, pace: Pace,
                  sink: Callable[[bytes], object]) -> None:
    size, started = 0, time.monotonic()
    chunks = request.stream().__aiter__()
    while True:
        wait_s = pace.deadline(started, size) - time.monotonic()
        try:
            with anyio.fail_after(max(wait_s, 0.0)):
                chunk = await chunks.__anext__()
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise HttpError(408, "upload too slow", f"{size} bytes in {time.monotonic() - started:.1f} s: a body "
                            f"must average http.min_upload_kb_per_second ({pace.min_bytes_per_s / 1024:g}) after "
                            f"http.upload_grace_seconds ({pace.grace_s:g} s)") from None
        size += len(chunk)
        if size > limit_bytes:
            raise too_large(limit_bytes)
        reservation.grow(len(chunk))
        sink(chunk)


class FilePart:
    """The ``file`` part of a multipart/form-data body, fed chunk by chunk, kept in memory; other parts are
    parsed and dropped. python-multipart bounds each part's header lines (count and size)."""

    def __init__(self, content_type: str) -> None:
        boundary = parse_options_header(content_type)[1].get(b"boundary")
        if not boundary:
            raise HttpError(400, "bad multipart", "the multipart Content-Type has no boundary")
        self.data: io.BytesIO | None = None
        self.filename: bytes | None = None  # the file part's, as sent
        self._parts = 0
        self._in_file = self._ended = False
        self._name = self._value = self._disposition = b""
        try:
            self._parser = MultipartParser(boundary, {
                "on_part_begin": self._part_begin, "on_part_data": self._part_data,
                "on_header_field": self._header_field, "on_header_value": self._header_value,
                "on_header_end": self._header_end, "on_headers_finished": self._headers_finished,
                "on_end": self._end})
        except FormParserError as exc:
            raise HttpError(400, "bad multipart", f"the multipart body cannot be read: {exc}") from None

    def feed(self, chunk: bytes) -> None:
        try:
            self._parser.write(chunk)
        except FormParserError as exc:
            raise HttpError(400, "bad multipart", f"the multipart body cannot be read: {exc}") from None

    def finish(self) -> bytes:
        if not self._ended:
            raise HttpError(400, "bad multipart", "the multipart body ends before its closing boundary")
        if self.data is None:
            raise HttpError(400, "no file", "the multipart form has no file field named 'file'")
        return self.data.getvalue()

    def _part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise HttpError(400, "bad multipart", f"more than {MAX_PARTS} parts; send one field 'file'")
        self._in_file, self._disposition = False, b""

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._name += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._value += data[start:end]

    def _header_end(self) -> None:
        if self._name.strip().lower() == b"content-disposition":
            self._disposition = self._value
        self._name = self._value = b""

    def _headers_finished(self) -> None:
        options = parse_options_header(self._disposition)[1]
        if options.get(b"name") == b"file":
            if self.data is not None:
                raise HttpError(400, "bad multipart", "two fields named 'file'; send one picture per request")
            self.data, self._in_file = io.BytesIO(), True
            self.filename = options.get(b"filename")

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file and self.data is not None:
            self.data.write(memoryview(data)[start:end])

    def _end(self) -> None:
        self._ended = True


__all__ = ["BodyBudget", "FilePart", "Pace", "Reservation", "Upload", "declared_length", "read_upload", "too_large",
           "upload_name"]
