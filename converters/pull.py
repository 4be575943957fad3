"""``edge-anime models pull NAME|URL``: fetch a published checkpoint, check it, and only then keep it.

Why urllib and not requests: the download is one GET with a timeout, a Content-Length check and retries,
which the standard library does in a few lines; requests is not installed in this environment and would be
a dependency for nothing else. The file is streamed to a hidden temp file in the destination folder (same
filesystem, so the final rename is atomic), loaded as a strict state dict, hashed, and renamed into place;
a cut-short or wrong download never appears under the final name.

A published name is pinned: its content must have the git blob id (SHA-1 of ``"blob <size>\0" + content``)
that the file has in bryandlee/animegan2-pytorch, so a changed or substituted upstream file is refused before
torch ever loads it. Git blob ids are what the repository itself records, so anyone can check the pins with
``git ls-tree``; the sha256 is still recorded beside the file, as before.

Every download is bounded, because a server (or whoever sits between) may never end, lie about its length or
drip: in bytes (a published name by ``PUBLISHED_MAX_BYTES``, any URL by ``max_bytes``, refused from the
Content-Length before a byte is written and counted while streaming), in room (the destination's free space
against the announced length; a disk that fills anyway is a clear error, not a crash), in time (``max_seconds``
per attempt, and at least ``min_bytes_per_s`` over every ``RATE_WINDOW_SECONDS``) and in memory (a zip
archive, which a .pt is, is refused from its directory when it would unpack to more than ``UNPACK_FACTOR``
times its size: torch would inflate a zip bomb in memory before refusing it).
"""
from __future__ import annotations

import errno
import hashlib
import http.client
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from edge_anime.errors import UserError
from edge_anime.models import HASH_CHUNK_BYTES, sha256_file

PUBLISHED_BASE_URL = "https://github.com/bryandlee/animegan2-pytorch/raw/main/weights"
PUBLISHED = ("face_paint_512_v1", "face_paint_512_v2", "celeba_distill", "paprika")
# name -> git blob id of weights/<name>.pt in bryandlee/animegan2-pytorch (see the module docstring).
PUBLISHED_BLOB_SHA1: Mapping[str, str] = {
    "celeba_distill": "3b7ea61b02254980831cc3bc77af30666dbc999c",
    "face_paint_512_v1": "19c1a1da4d9580186109a2b055d91044e5127de6",
    "face_paint_512_v2": "d75102f8f201ddaf8dbe6b913b1a97585b55f838",
    "paprika": "58086c9db9fc7a9e5c2876ca31b8079599352643",
}
_MIT = "MIT (bryandlee/animegan2-pytorch, the code and these weights)"
# What a shop owner must know before using a style commercially; printed by `models pull`.
PUBLISHED_LICENCE: Mapping[str, str] = {
    "celeba_distill": _MIT,
    "face_paint_512_v1": _MIT,
    "face_paint_512_v2": _MIT,
    "paprika": (
        "MIT as code (bryandlee/animegan2-pytorch), but the weights are converted from TachibanaYoshino/"
        "AnimeGANv2, whose authors allow non-commercial use only: ask them before using paprika in a business"
    ),
}
UNKNOWN_LICENCE = "unknown (not a published checkpoint): check the terms with whoever published it"
MIB = 1 << 20
# The published checkpoints are one AnimeGANv2 generator's state dict each: 2.15 M float32 weights, ~8.6 MB
# (a seeded one saved by torch 2.13 is 8,601,916 bytes). Their exact sizes are in git's tree (``git ls-tree
# -l``), not in the blob ids pinned here; this bound is what no published file can exceed, so a server that
# sends more (or announces more) is refused at once.
PUBLISHED_MAX_BYTES: Mapping[str, int] = {name: 16 * MIB for name in PUBLISHED}
MAX_BYTES = 512 * MIB           # any other URL: `models pull --max-mb`
MAX_SECONDS = 600.0             # one attempt, start to end: `models pull --max-seconds`
MIN_BYTES_PER_S = 1024          # slower than this over a whole RATE_WINDOW_SECONDS is a drip, not a download
RATE_WINDOW_SECONDS = 30.0
UNPACK_FACTOR = 4               # a zip that unpacks to more than this times its size is refused (torch stores)
UNPACK_SLACK_BYTES = 1 * MIB    # plus this, for small archives with deflated text entries
NAME_MAX_BYTES = 200            # the saved name, leaving room for the temp name's prefix and suffix
DEFAULT_DEST = Path("checkpoints")
TIMEOUT_SECONDS = 30.0          # per socket operation, not the whole download
RETRIES = 3                     # attempts after the first
BACKOFF_SECONDS = 1.0           # doubled after each failed attempt
CHUNK_BYTES = 1 << 16
USER_AGENT = "edge-anime-pull/1"
RETRYABLE_HTTP = {408, 429, 500, 502, 503, 504}


class PullError(UserError):
    """A download that failed or fetched something that is not a checkpoint; says which and why."""


class _Retryable(Exception):
    """A failure worth another attempt (timeout, connection reset, short body, 5xx)."""


@dataclass(frozen=True)
class Limits:
    """What one download may cost (see the module docstring); ``max_bytes`` None: the spec's own bound."""

    max_bytes: int | None = None
    max_seconds: float = MAX_SECONDS
    min_bytes_per_s: float = MIN_BYTES_PER_S
    rate_window_s: float = RATE_WINDOW_SECONDS


@dataclass(frozen=True)
class Pulled:
    path: Path
    sha256: str
    url: str
    size_bytes: int
    licence: str


def resolve(spec: str, *, base_url: str = PUBLISHED_BASE_URL) -> tuple[str, str]:
    """``(url, file name)`` for a published name (from ``base_url``, a mirror) or any http(s) URL."""
    if spec in PUBLISHED:
        return f"{base_url.rstrip('/')}/{spec}.pt", f"{spec}.pt"
    if any(ord(c) < 32 or ord(c) == 127 for c in spec):
        raise PullError(f"{spec!r}: the URL holds a control character; expected a plain http(s) URL")
    try:
        parsed = urllib.parse.urlparse(spec)
        netloc_ok = parsed.port is None or parsed.port > 0  # reading the port checks it
        netloc_ok = netloc_ok and bool(parsed.hostname)
    except ValueError as exc:  # a bad port or an unclosed [IPv6 literal
        raise PullError(f"{spec!r}: not a usable URL ({exc})") from None
    if parsed.scheme in ("http", "https") and netloc_ok:
        return spec, _file_name(spec, parsed.path)
    raise PullError(f"'{spec}' is neither a published checkpoint ({', '.join(PUBLISHED)}) nor an http(s) URL")


def _file_name(spec: str, url_path: str) -> str:
    """The name to save a URL's file as: its last path segment, decoded, and one plain file name (no control
    character such as a ``%00``, no hidden name, no path, short enough for the temp name beside it)."""
    try:
        decoded = urllib.parse.unquote(url_path, errors="strict")
    except UnicodeDecodeError:
        raise PullError(f"{spec}: the URL's file name is not UTF-8 once decoded; expected a plain file name") from None
    filename = decoded.rpartition("/")[2]
    if not filename or filename in (".", "..") or filename.startswith("."):
        raise PullError(f"{spec}: the URL does not end in a file name to save it as")
    if any(ord(c) < 32 or ord(c) == 127 for c in filename) or "\\" in filename:
        raise PullError(f"{spec}: the URL's file name {filename!r} holds a control character or a backslash "
                        "(a %00 or %0A in the URL); expected a plain file name")
    if len(os.fsencode(filename)) > NAME_MAX_BYTES:
        raise PullError(f"{spec}: the URL's file name is {len(os.fsencode(filename))} bytes; expected at most "
                        f"{NAME_MAX_BYTES}")
    return filename


def pull(spec: str, *, dest: Path = DEFAULT_DEST, retries: int = RETRIES, timeout_s: float = TIMEOUT_SECONDS,
         backoff_s: float = BACKOFF_SECONDS, progress: bool = True, base_url: str = PUBLISHED_BASE_URL,
         pinned: Mapping[str, str] = PUBLISHED_BLOB_SHA1, limits: Limits = Limits()) -> Pulled:
    """Download, check the pin and the structure (strict state dict), hash and rename into ``dest``.

    A ``.sha256`` sidecar goes with it. ``pinned`` maps published names to their git blob ids; a published
    name without a pin there is refused rather than taken unchecked. ``limits`` bounds the download's bytes,
    time and rate (a published name is never allowed more than ``PUBLISHED_MAX_BYTES``).
    """
    url, filename = resolve(spec, base_url=base_url)
    bound = PUBLISHED_MAX_BYTES.get(spec, MAX_BYTES)
    max_bytes = bound if limits.max_bytes is None else (min(bound, limits.max_bytes) if spec in PUBLISHED
                                                         else limits.max_bytes)
    limits = Limits(max_bytes=max_bytes, max_seconds=limits.max_seconds, min_bytes_per_s=limits.min_bytes_per_s,
                    rate_window_s=limits.rate_window_s)
    try:
        dest.mkdir(parents=True, exist_ok=True)
        tmp = dest / f".{filename}.{os.getpid()}.part"
        tmp.touch()  # here, so that a folder we cannot write is said as such, not as a failed download
    except OSError as exc:
        raise PullError(f"--dest {dest}: cannot write there ({exc.strerror})") from None
    try:
        _download_with_retries(url, tmp, retries=retries, timeout_s=timeout_s, backoff_s=backoff_s,
                               progress=progress, limits=limits)
        if spec in PUBLISHED:
            _check_pin(tmp, url=url, filename=filename, expected=pinned.get(spec))
        _check_unpacked_size(tmp, url=url, filename=filename)
        _structural_check(tmp, url=url, filename=filename)
        digest = sha256_file(tmp)
        final = dest / filename
        try:
            _write_sidecar(final, digest)
            tmp.replace(final)
        except OSError as exc:
            raise PullError(f"{final}: cannot keep it ({exc.strerror})") from None
        return Pulled(path=final, sha256=digest, url=url, size_bytes=final.stat().st_size,
                      licence=PUBLISHED_LICENCE.get(spec, UNKNOWN_LICENCE))
    finally:
        tmp.unlink(missing_ok=True)


def git_blob_sha1(path: Path) -> str:
    """The id git gives the file's content: SHA-1 of ``"blob <size>\0"`` followed by the bytes."""
    digest = hashlib.sha1(f"blob {path.stat().st_size}\0".encode(), usedforsecurity=False)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _check_pin(path: Path, *, url: str, filename: str, expected: str | None) -> None:
    """Refuse a published checkpoint whose content is not the pinned one (nothing is kept)."""
    actual = git_blob_sha1(path)
    if expected is None or actual != expected:
        raise PullError(
            f"{url}: {filename} does not match its pinned digest, not kept: expected git blob "
            f"{expected or '(no pin)'}, got {actual} ({path.stat().st_size} bytes, sha256 {sha256_file(path)}). "
            "The file changed upstream or was substituted on the way; to take a file you have checked "
            "yourself, pull it by its URL instead of by name"
        )


def _download_with_retries(url: str, tmp: Path, *, retries: int, timeout_s: float, backoff_s: float,
                           progress: bool, limits: Limits) -> None:
    delay_s = backoff_s
    for attempt in range(retries + 1):
        try:
            _download_once(url, tmp, timeout_s=timeout_s, progress=progress, limits=limits)
            return
        except _Retryable as exc:
            if attempt == retries:
                raise PullError(f"{url}: failed after {retries + 1} attempts: {exc}") from exc
            time.sleep(delay_s)  # backoff between attempts of a CLI command; nothing to interrupt early
            delay_s *= 2


def _download_once(url: str, tmp: Path, *, timeout_s: float, progress: bool, limits: Limits) -> None:
    from tqdm import tqdm

    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            expected = response.length  # None without Content-Length (then the limits and the checks decide)
            _check_announced(url, tmp, expected, limits)
            bar = tqdm(total=expected, unit="B", unit_scale=True, desc=Path(url).name, disable=not progress,
                       leave=False)
            # Unbuffered: a buffered file flushes on close, and a disk that filled would raise ENOSPC again from
            # there, over the clear PullError of the write that failed (exit 70 instead of 78).
            with open(tmp, "wb", buffering=0) as out, bar:
                received = _stream(url, response, out, limits, bar.update)
            if expected is not None and response.length:  # http.client counts down what is still owed
                raise _Retryable(f"connection closed after {received} bytes, {response.length} more announced")
    except urllib.error.HTTPError as exc:
        if exc.code in RETRYABLE_HTTP:
            raise _Retryable(f"HTTP {exc.code} {exc.reason}") from exc
        raise PullError(f"{url}: HTTP {exc.code} {exc.reason}") from exc
    except http.client.IncompleteRead as exc:
        raise _Retryable(f"body cut short: {len(exc.partial)} bytes read, "
                         f"{exc.expected} more announced by Content-Length") from exc
    except (TimeoutError, urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:
        raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
    except ValueError as exc:  # urllib's own refusal of a URL it cannot send (a control character, a bad host)
        raise PullError(f"{url}: cannot request it ({exc})") from None


def _check_announced(url: str, tmp: Path, expected: int | None, limits: Limits) -> None:
    """Refuse before writing a byte: more than the limit, or more than the destination has room for."""
    assert limits.max_bytes is not None
    if expected is not None and expected > limits.max_bytes:
        raise PullError(f"{url}: the server announces {expected} bytes (Content-Length), over the limit of "
                        f"{limits.max_bytes} for this file ({_limit_hint(url)}); not downloaded")
    if expected is not None:
        free = shutil.disk_usage(tmp.parent).free
        if expected + MIB > free:
            raise PullError(f"{tmp.parent}: {free} bytes free, and the download announces {expected}; "
                            "free some room or choose another --dest")


def _stream(url: str, response: http.client.HTTPResponse, out: BinaryIO, limits: Limits,
            update: Callable[[int], object]) -> int:
    """Copy the body to ``out`` within ``limits``; returns the bytes received. ``read1`` returns what one
    socket read gave, so a server that drips a byte at a time cannot hold one call for hours."""
    assert limits.max_bytes is not None
    start = time.monotonic()
    window_start, window_bytes, received = start, 0, 0
    while chunk := response.read1(CHUNK_BYTES):
        received += len(chunk)
        window_bytes += len(chunk)
        if received > limits.max_bytes:
            raise PullError(f"{url}: the server sent more than {limits.max_bytes} bytes, the limit for this file "
                            f"({_limit_hint(url)}); stopped and kept nothing")
        try:
            view = memoryview(chunk)
            while view:  # an unbuffered write may take part of the chunk (a disk about to fill)
                written = out.write(view)
                if not written:  # no progress: as good as a full disk, never a loop
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
        except OSError as exc:
            raise PullError(f"{out.name}: cannot write the download ({exc.strerror}) after {received} bytes; "
                            "nothing was kept: free some room or choose another --dest") from None
        update(len(chunk))
        now = time.monotonic()
        if now - start > limits.max_seconds:
            raise PullError(f"{url}: not complete after {limits.max_seconds:g} s ({received} bytes so far), the "
                            "limit for one attempt (models pull --max-seconds); kept nothing")
        if now - window_start >= limits.rate_window_s:
            if window_bytes < limits.min_bytes_per_s * (now - window_start):
                raise PullError(f"{url}: {window_bytes} bytes in the last {now - window_start:.0f} s, slower than "
                                f"{limits.min_bytes_per_s:g} bytes/s: the server drips; kept nothing")
            window_start, window_bytes = now, 0
    return received


def _limit_hint(url: str) -> str:
    published = any(url.endswith(f"/{name}.pt") for name in PUBLISHED)
    return "no published checkpoint is that large" if published else "models pull --max-mb"


def _check_unpacked_size(path: Path, *, url: str, filename: str) -> None:
    """A .pt is a zip archive: refuse one whose directory says it unpacks to far more than its size before
    torch reads it, because torch inflates each entry in memory first (a 3.9 MB bomb took 4.1 GB of RSS)."""
    if not zipfile.is_zipfile(path):
        return
    size = path.stat().st_size
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise PullError(f"{url}: {filename} is a damaged zip archive ({exc}), not kept") from None
    unpacked = sum(entry.file_size for entry in entries)
    allowed = UNPACK_FACTOR * size + UNPACK_SLACK_BYTES
    if unpacked > allowed:
        raise PullError(f"{url}: {filename} is a zip archive of {size} bytes that unpacks to {unpacked} bytes "
                        f"(over {UNPACK_FACTOR}x its size): a decompression bomb, not a checkpoint (torch stores "
                        "its weights uncompressed); not kept")


def _structural_check(path: Path, *, url: str, filename: str) -> None:
    """Load the file as convert would (a state dict strictly, weights_only) before keeping it."""
    from .sources import SourceError, load_source

    try:
        source = load_source(path, name=Path(filename).stem)
        if source.kind == "onnx":  # nothing loads an ONNX file's graph until it is converted
            source.float_ov_model()
    except SourceError as exc:
        detail = str(exc).replace(str(path), filename)
        raise PullError(f"{url}: downloaded file is not a usable checkpoint, not kept: {detail}") from exc


def _write_sidecar(final: Path, digest: str) -> Path:
    """``NAME.sha256`` in ``sha256sum`` format, so ``sha256sum -c`` checks the checkpoint later."""
    sidecar = final.with_name(final.name + ".sha256")
    tmp = sidecar.with_name(f".{sidecar.name}.tmp")
    tmp.write_text(f"{digest}  {final.name}\n", encoding="utf-8")
    tmp.replace(sidecar)
    return sidecar
