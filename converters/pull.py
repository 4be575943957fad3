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
"""
from __future__ import annotations

import hashlib
import http.client
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

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
    parsed = urllib.parse.urlparse(spec)
    if parsed.scheme in ("http", "https") and parsed.netloc:
        filename = Path(urllib.parse.unquote(parsed.path)).name
        if not filename or filename.startswith("."):
            raise PullError(f"{spec}: the URL does not end in a file name to save it as")
        return spec, filename
    raise PullError(f"'{spec}' is neither a published checkpoint ({', '.join(PUBLISHED)}) nor an http(s) URL")


def pull(spec: str, *, dest: Path = DEFAULT_DEST, retries: int = RETRIES, timeout_s: float = TIMEOUT_SECONDS,
         backoff_s: float = BACKOFF_SECONDS, progress: bool = True, base_url: str = PUBLISHED_BASE_URL,
         pinned: Mapping[str, str] = PUBLISHED_BLOB_SHA1) -> Pulled:
    """Download, check the pin and the structure (strict state dict), hash and rename into ``dest``.

    A ``.sha256`` sidecar goes with it. ``pinned`` maps published names to their git blob ids; a published
    name without a pin there is refused rather than taken unchecked.
    """
    url, filename = resolve(spec, base_url=base_url)
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest / f".{filename}.{os.getpid()}.part"
    try:
        _download_with_retries(url, tmp, retries=retries, timeout_s=timeout_s, backoff_s=backoff_s,
                               progress=progress)
        if spec in PUBLISHED:
            _check_pin(tmp, url=url, filename=filename, expected=pinned.get(spec))
        _structural_check(tmp, url=url, filename=filename)
        digest = sha256_file(tmp)
        final = dest / filename
        _write_sidecar(final, digest)
        tmp.replace(final)
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
                           progress: bool) -> None:
    delay_s = backoff_s
    for attempt in range(retries + 1):
        try:
            _download_once(url, tmp, timeout_s=timeout_s, progress=progress)
            return
        except _Retryable as exc:
            if attempt == retries:
                raise PullError(f"{url}: failed after {retries + 1} attempts: {exc}") from exc
            time.sleep(delay_s)  # backoff between attempts of a CLI command; nothing to interrupt early
            delay_s *= 2


def _download_once(url: str, tmp: Path, *, timeout_s: float, progress: bool) -> None:
    from tqdm import tqdm

    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response, open(tmp, "wb") as out:
            expected = response.length  # None without Content-Length (then the structural check decides)
            received = 0
            with tqdm(total=expected, unit="B", unit_scale=True, desc=Path(url).name, disable=not progress,
                      leave=False) as bar:
                while chunk := response.read(CHUNK_BYTES):
                    out.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
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
