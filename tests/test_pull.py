"""``models pull`` against a loopback HTTP server in a thread (no outside network): success, a truncated
body, a 404, a file that is not a checkpoint, and a server that fails once before succeeding."""
from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")

from edge_anime.cli import main
from edge_anime.errors import EXIT_CONFIG
from edge_anime_converters.pull import (
    PUBLISHED,
    PUBLISHED_BLOB_SHA1,
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
