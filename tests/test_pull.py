"""``models pull`` against a loopback HTTP server in a thread (no outside network): success, a truncated
body, a 404, a file that is not a checkpoint, and a server that fails once before succeeding; and hostile
servers (issue 28): a body that never ends, a lying Content-Length, a drip, a full disk, a zip bomb."""
from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deadlines import scaled

pytest.importorskip("torch")

from edge_anime.cli import main
from edge_anime.errors import EXIT_CONFIG
from edge_anime_converters.pull import (
    PUBLISHED,
    PUBLISHED_BLOB_SHA1,
    Limits,
    PullError,
    git_blob_sha1,
    pull,
    resolve,
)

FAST = {"retries": 1, "timeout_s": 5.0, "backoff_s": 0.01, "progress": False}


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, bytes] = {}
    hits: dict[str, int] = {}

    def log_message(self, format: str, *args: object) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self.hits[self.path] = self.hits.get(self.path, 0) + 1
        hostile = HOSTILE.get(self.path.split("?")[0])
        if hostile is not None:
            try:
                hostile(self)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up, as it should
                pass
            self.close_connection = True
            return
        body = self.routes.get(self.path.split("?")[0].replace("/flaky", ""))
        if self.path.startswith("/truncated"):
            body = self.routes["/good.pt"]
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 4096))  # announces more than it sends
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        if self.path.startswith("/flaky") and self.hits[self.path] == 1:
            self.send_error(503, "try again")
            return
        if body is None:
            self.send_error(404, "no such checkpoint")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


# --- hostile servers (issue 28 item 11): each bounded in bytes and time on the server's side too ---------------
SERVER_CAP_BYTES = 16 << 20     # an "endless" body ends here if the client never stops reading
DRIP_STEP_S = 0.05              # a dripping server sends one byte this often...
DRIP_CAP_BYTES = 400            # ...for at most this many (20 s)


def _endless(handler: http.server.BaseHTTPRequestHandler) -> None:
    """No Content-Length and a body that does not end (HTTP/1.0: the end would be the close)."""
    handler.send_response(200)
    handler.end_headers()
    block = b"\0" * 65536
    for _ in range(SERVER_CAP_BYTES // len(block)):
        handler.wfile.write(block)


def _liar(handler: http.server.BaseHTTPRequestHandler) -> None:
    """Announces a terabyte, sends a kilobyte."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(10 ** 12))
    handler.end_headers()
    handler.wfile.write(b"\0" * 1024)


def _drip(handler: http.server.BaseHTTPRequestHandler) -> None:
    """An honest Content-Length, then a byte every DRIP_STEP_S: each socket read succeeds, the file never ends."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(100_000))
    handler.end_headers()
    for _ in range(DRIP_CAP_BYTES):
        handler.wfile.write(b"\0")
        handler.wfile.flush()
        time.sleep(DRIP_STEP_S)  # the server's pace is what the test is about


def _sized(size: int) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    def send(handler: http.server.BaseHTTPRequestHandler) -> None:
        """``size`` bytes, announced truthfully."""
        handler.send_response(200)
        handler.send_header("Content-Length", str(size))
        handler.end_headers()
        block = b"\0" * 65536
        for start in range(0, size, len(block)):
            handler.wfile.write(block[: min(len(block), size - start)])

    return send


def _bomb(handler: http.server.BaseHTTPRequestHandler) -> None:
    body = BOMB[0]
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


BOMB: list[bytes] = []
# The CLI's main in a child that prints its own peak RSS (VmHWM) at exit: wait4's ru_maxrss would also count
# the pytest process the child was forked from, which has torch loaded.
PEAK_RSS_MAIN = """
import atexit, sys
def peak():
    rss = [line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
    print(f"peak-rss-kb {rss}", file=sys.stderr, end="")
atexit.register(peak)
from edge_anime.cli import main
sys.exit(main(sys.argv[1:]))
"""
HOSTILE: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]] = {
    "/endless.pt": _endless, "/liar.pt": _liar, "/drip.pt": _drip, "/bomb.pt": _bomb,
    "/four-mib.pt": _sized(4 << 20), "/big/paprika.pt": _sized(20 << 20),
}
BOMB_UNPACKED_BYTES = 1 << 30


def _zip_bomb(small_checkpoint: bytes) -> bytes:
    """A real torch checkpoint whose one storage entry is 1 GiB of zeros, deflated to ~1 MB: torch inflates an
    entry in memory when it loads it, before any check of what it holds."""
    import io
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(small_checkpoint))
    out = io.BytesIO()
    block = bytes(64 << 20)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as bomb:
        for info in source.infolist():
            if info.filename.endswith("/data/0"):
                with bomb.open(info.filename, "w", force_zip64=True) as entry:
                    for _ in range(BOMB_UNPACKED_BYTES // len(block)):
                        entry.write(block)
            else:
                bomb.writestr(info.filename, source.read(info.filename))
    return out.getvalue()


@pytest.fixture(scope="module")
def server(seeded_checkpoint: Path) -> Iterator[str]:
    # /mirror/paprika.pt: a real checkpoint served under a published name, but not the published content.
    _Handler.routes = {"/good.pt": seeded_checkpoint.read_bytes(), "/readme.pt": b"# not weights\n" * 100,
                       "/mirror/paprika.pt": seeded_checkpoint.read_bytes()}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_success_writes_checkpoint_and_sha256_sidecar(server: str, tmp_path: Path, seeded_checkpoint: Path) -> None:
    pulled = pull(f"{server}/good.pt", dest=tmp_path, **FAST)
    expected = hashlib.sha256(seeded_checkpoint.read_bytes()).hexdigest()
    assert pulled.path == tmp_path / "good.pt" and pulled.sha256 == expected
    assert pulled.path.read_bytes() == seeded_checkpoint.read_bytes()
    assert (tmp_path / "good.pt.sha256").read_text() == f"{expected}  good.pt\n"
    assert sorted(os.listdir(tmp_path)) == ["good.pt", "good.pt.sha256"]


def test_truncated_body_is_retried_then_refused(server: str, tmp_path: Path) -> None:
    with pytest.raises(PullError, match="failed after 2 attempts: .*(cut short|closed after)"):
        pull(f"{server}/truncated.pt", dest=tmp_path, **FAST)
    assert os.listdir(tmp_path) == []


def test_404_fails_at_once(server: str, tmp_path: Path) -> None:
    with pytest.raises(PullError, match="HTTP 404"):
        pull(f"{server}/missing.pt", dest=tmp_path, **FAST)
    assert _Handler.hits["/missing.pt"] == 1  # a 404 is not worth a retry
    assert os.listdir(tmp_path) == []


def test_non_checkpoint_is_not_kept(server: str, tmp_path: Path) -> None:
    with pytest.raises(PullError, match="not a usable checkpoint.*text"):
        pull(f"{server}/readme.pt", dest=tmp_path, **FAST)
    assert os.listdir(tmp_path) == []


def test_server_error_is_retried_with_backoff(server: str, tmp_path: Path) -> None:
    pulled = pull(f"{server}/flaky/good.pt", dest=tmp_path, **FAST)
    assert pulled.path.name == "good.pt" and _Handler.hits["/flaky/good.pt"] == 2


def test_cli_pull_prints_sha256_and_fails_with_reason(server: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", f"{server}/good.pt", "--dest", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "sha256 " in out and (tmp_path / "good.pt").is_file()
    assert main(["models", "pull", f"{server}/nothing.pt", "--dest", str(tmp_path), "--no-progress",
                 "--retries", "0"]) == EXIT_CONFIG
    assert "HTTP 404" in capsys.readouterr().err


def test_published_names_resolve_to_github_urls() -> None:
    for name in PUBLISHED:
        url, filename = resolve(name)
        assert url == f"https://github.com/bryandlee/animegan2-pytorch/raw/main/weights/{name}.pt"
        assert filename == f"{name}.pt"
    with pytest.raises(PullError, match="neither a published checkpoint"):
        resolve("face_paint_512_v3")


def test_git_blob_id_is_the_one_git_computes(seeded_checkpoint: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed here, so there is nothing to compare the blob id with")
    expected = subprocess.run(["git", "hash-object", str(seeded_checkpoint)], capture_output=True, text=True,
                              check=True).stdout.strip()
    assert git_blob_sha1(seeded_checkpoint) == expected


def test_published_name_with_other_content_is_refused_and_nothing_kept(server: str, tmp_path: Path,
                                                                        seeded_checkpoint: Path) -> None:
    actual = git_blob_sha1(seeded_checkpoint)
    with pytest.raises(PullError) as info:
        pull("paprika", base_url=f"{server}/mirror", dest=tmp_path, **FAST)
    message = str(info.value)
    assert f"expected git blob {PUBLISHED_BLOB_SHA1['paprika']}, got {actual}" in message
    assert "paprika.pt does not match its pinned digest, not kept" in message
    assert os.listdir(tmp_path) == []


def test_published_name_matching_its_pin_is_kept_with_its_licence(server: str, tmp_path: Path,
                                                                  seeded_checkpoint: Path) -> None:
    """The real pins cannot be met here (no published weights offline): pin the served file instead."""
    pins = {"paprika": git_blob_sha1(seeded_checkpoint)}
    pulled = pull("paprika", base_url=f"{server}/mirror", dest=tmp_path, pinned=pins, **FAST)
    assert pulled.path.read_bytes() == seeded_checkpoint.read_bytes()
    assert "non-commercial use only" in pulled.licence
    assert sorted(os.listdir(tmp_path)) == ["paprika.pt", "paprika.pt.sha256"]


def test_cli_mirror_pull_says_expected_and_got(server: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "pull", "paprika", "--mirror", f"{server}/mirror", "--dest", str(tmp_path),
                 "--no-progress"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"expected git blob {PUBLISHED_BLOB_SHA1['paprika']}, got " in err and err.count("\n") == 1
    assert os.listdir(tmp_path) == []
    assert main(["models", "pull", f"{server}/good.pt", "--dest", str(tmp_path), "--no-progress"]) == 0
    assert "licence: unknown (not a published checkpoint)" in capsys.readouterr().out


# --- bounded in size, time and memory (issue 28 item 11) --------------------------------------------------------
def _refused(spec: str, dest: Path, **options: object) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(PullError) as info:
        pull(spec, dest=dest, **{**FAST, **options})  # type: ignore[arg-type]
    assert os.listdir(dest) == [], "a refused download left something behind"
    return str(info.value), time.monotonic() - started


def test_a_body_that_never_ends_is_cut_at_the_limit(server: str, tmp_path: Path) -> None:
    message, elapsed = _refused(f"{server}/endless.pt", tmp_path, limits=Limits(max_bytes=1 << 20))
    assert "the server sent more than 1048576 bytes" in message and "--max-mb" in message
    assert _Handler.hits["/endless.pt"] == 1 and elapsed < 10  # a limit is not worth a retry


def test_a_lying_content_length_is_refused_before_a_byte_is_written(server: str, tmp_path: Path) -> None:
    message, elapsed = _refused(f"{server}/liar.pt", tmp_path)
    assert "announces 1000000000000 bytes (Content-Length), over the limit of 536870912" in message
    assert elapsed < 10


def test_a_published_name_larger_than_any_published_file_is_refused(server: str, tmp_path: Path) -> None:
    message, _ = _refused("paprika", tmp_path, base_url=f"{server}/big")
    assert "announces 20971520 bytes" in message and "no published checkpoint is that large" in message


def test_a_dripping_server_is_given_up_on(server: str, tmp_path: Path) -> None:
    message, elapsed = _refused(f"{server}/drip.pt", tmp_path, limits=Limits(max_seconds=1.0))
    assert "not complete after 1 s" in message and "--max-seconds" in message
    assert elapsed < 8
    message, elapsed = _refused(f"{server}/drip.pt", tmp_path,
                                limits=Limits(min_bytes_per_s=1000, rate_window_s=0.5))
    assert "slower than 1000 bytes/s: the server drips" in message and elapsed < 8


@pytest.mark.parametrize("tail", ["a%00b.pt", "a%0Ab.pt", "%2e%2e", "x%ff.pt"])
def test_a_url_with_a_control_character_is_a_clear_error(server: str, tmp_path: Path, tail: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(PullError, match="control character|file name to save|not UTF-8"):
        resolve(f"{server}/{tail}")
    assert main(["models", "pull", f"{server}/{tail}", "--dest", str(tmp_path), "--no-progress"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err and err.count("\n") == 1, err


def test_no_room_and_a_disk_filling_up_are_clear_errors_not_exit_70(server: str, tmpfs: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A 2 MiB destination: an announced 4 MiB is refused before the download; a body without a length fills
    the disk and is said so. Both exit 78 with one line; nothing is kept."""
    assert main(["models", "pull", f"{server}/four-mib.pt", "--dest", str(tmpfs), "--no-progress"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "bytes free, and the download announces 4194304" in err and err.count("\n") == 1, err
    assert main(["models", "pull", f"{server}/endless.pt", "--dest", str(tmpfs), "--no-progress"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "cannot write the download (No space left on device)" in err and err.count("\n") == 1, err
    assert os.listdir(tmpfs) == []


@pytest.mark.slow
def test_a_zip_bomb_checkpoint_is_refused_without_inflating_it(server: str, tmp_path: Path) -> None:
    """A real process and its own peak RSS: main inflated the bomb in torch (1.26 GB peak here) before refusing."""
    import io

    import torch

    if not BOMB:
        small = io.BytesIO()
        torch.save({"weight": torch.zeros(16)}, small)
        BOMB.append(_zip_bomb(small.getvalue()))
    assert len(BOMB[0]) < 8 << 20
    proc = subprocess.run([sys.executable, "-c", PEAK_RSS_MAIN, "models", "pull", f"{server}/bomb.pt", "--dest",
                           str(tmp_path / "dest"), "--no-progress"], capture_output=True, text=True,
                           timeout=scaled(120))
    err, _, peak = proc.stderr.rpartition("peak-rss-kb ")
    assert proc.returncode == EXIT_CONFIG, proc.stderr
    assert "unpacks to 10737420" in err and "a decompression bomb" in err and err.count("\n") == 1, err
    peak_mb = int(peak) / 1024
    print(f"peak RSS of `models pull` on a {len(BOMB[0]) / 1e6:.1f} MB bomb of 1 GiB: {peak_mb:.0f} MB")
    assert peak_mb < 400, peak_mb
    assert os.listdir(tmp_path / "dest") == []
