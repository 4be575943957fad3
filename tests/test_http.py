"""`edge-anime serve` as a real process on a loopback port, driven by a real HTTP client (urllib): every
status code from a real request, a burst against a small queue, SIGTERM with requests in flight, the page."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image

from conftest import synthetic_photo

pytest.importorskip("starlette")
pytestmark = pytest.mark.slow

READY_DEADLINE_SECONDS = 120.0


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    log: Path

    def request(self, path: str, *, data: bytes | None = None, content_type: str | None = None,
                timeout: float = 60, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url + path, data=data, method="POST" if data is not None else "GET")
        if content_type:
            request.add_header("Content-Type", content_type)
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()

    def wait_ready(self) -> Server:
        """Poll /readyz until it answers 200 (the process must stay up meanwhile), within the deadline."""
        end = time.monotonic() + READY_DEADLINE_SECONDS
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if self.request("/readyz", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"not ready within {READY_DEADLINE_SECONDS} s: {self.log.read_text()}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def serve(write_config: Callable[..., Path], tmp_path: Path) -> Iterator[Callable[..., Server]]:
    started: list[Server] = []

    def start(http: dict[str, object] | None = None, **sections: dict[str, object]) -> Server:
        port = _free_port()
        config = write_config({"http": {"port": port, **(http or {})},
                               "device": {"inference_precision": "f32"}, **sections})
        log = tmp_path / f"serve-{port}.log"
        proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "serve", "--config", str(config)],
                                stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True)  # noqa: SIM115
        server = Server(proc, f"http://127.0.0.1:{port}", log)
        started.append(server)
        return server.wait_ready()

    yield start
    for server in started:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


def _jpeg(width: int = 96, height: int = 64, seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    synthetic_photo(width, height, seed=seed).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _json(body: bytes) -> dict[str, str]:
    data = json.loads(body)
    assert set(data) == {"error", "detail"}, data
    return data  # type: ignore[no-any-return]


def test_every_answer_from_a_real_request(serve: Callable[..., Server]) -> None:
    server = serve({"max_body_mb": 0.05}, image={"max_pixels": 20_000, "resize": "max_side", "max_side": 128})
    status, headers, body = server.request("/v1/stylize?format=png", data=_jpeg(), content_type="image/jpeg")
    assert status == 200 and headers["content-type"] == "image/png", body[:200]
    assert Image.open(io.BytesIO(body)).size == (96, 64) and "infer;dur=" in headers["server-timing"]
    assert server.request("/v1/styles")[2] == b'{"styles":["randgen"],"default":"randgen"}'
    assert server.request("/healthz")[0] == 200
    cases = [
        (b"not a picture at all", "image/jpeg", "", 400),
        (_jpeg(), "image/jpeg", "?style=paprika", 404),
        (os.urandom(60_000), "image/jpeg", "", 413),
        (b"hello", "text/plain", "", 415),
        (_jpeg(200, 150), "image/jpeg", "", 422),  # 30,000 pixels: refused from the header
        (_jpeg(), "image/jpeg", "?format=gif", 400),
    ]
    for data, kind, query, expected in cases:
        status, headers, body = server.request("/v1/stylize" + query, data=data, content_type=kind)
        assert status == expected, (expected, body)
        assert headers["content-type"] == "application/json" and _json(body)["detail"]
    assert server.request("/nowhere")[0] == 404
    metrics = server.request("/metrics")[2].decode()
    assert 'edge_anime_http_requests_total{route="stylize",status="413"} 1.0' in metrics
    page = server.request("/")[2].decode()
    assert "<title>edge-anime</title>" in page and "/v1/stylize" in page
    assert "http://" not in page and "https://" not in page and "//" + "cdn" not in page  # nothing from outside


def test_multipart_upload_and_a_timeout(serve: Callable[..., Server]) -> None:
    server = serve({"request_timeout_seconds": 0.001})
    boundary = "edgeanimeboundary"
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"../../etc/x.jpg\"\r\n"
            f"Content-Type: image/jpeg\r\n\r\n").encode() + _jpeg() + f"\r\n--{boundary}--\r\n".encode()
    status, _, answer = server.request("/v1/stylize", data=body,
                                       content_type=f"multipart/form-data; boundary={boundary}")
    assert status == 504 and "request_timeout_seconds" in _json(answer)["detail"]


def test_fifty_uploads_against_a_queue_of_four_get_only_200_and_503_then_all_200(serve: Callable[..., Server]) -> None:
    server = serve({"max_queue": 4}, pipeline={"max_in_flight": 1})
    photo = _jpeg(128, 96)
    for _ in range(3):  # warm: the shape compiled, the threads and buffers made
        assert server.request("/v1/stylize", data=photo, content_type="image/jpeg")[0] == 200
    rss_before = _rss_kb(server.proc.pid)
    statuses: list[int] = []
    retry_after: list[str] = []
    lock = threading.Lock()

    def client() -> None:
        status, headers, _ = server.request("/v1/stylize", data=photo, content_type="image/jpeg", timeout=120)
        with lock:
            statuses.append(status)
            if status == 503:
                retry_after.append(headers.get("retry-after", ""))

    threads = [threading.Thread(target=client) for _ in range(50)]  # 50 uploads at once, 5 may wait or run
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert len(statuses) == 50 and set(statuses) <= {200, 503} and 200 in statuses, statuses
    assert 503 in statuses and all(value.isdigit() for value in retry_after)
    for _ in range(3):  # the burst is over: nothing is left holding a slot
        assert server.request("/v1/stylize", data=photo, content_type="image/jpeg")[0] == 200
    rss_after = _rss_kb(server.proc.pid)
    assert rss_after <= rss_before * 1.10, (rss_before, rss_after)  # the burst left no memory behind


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/PID/status")


def test_sigterm_finishes_the_requests_in_flight_and_exits_0(serve: Callable[..., Server]) -> None:
    server = serve({"max_queue": 16}, image={"resize": "keep"})
    photo = _jpeg(320, 240)
    statuses: list[int] = []

    def client(seed: int) -> None:
        statuses.append(server.request("/v1/stylize", data=photo, content_type="image/jpeg", timeout=120)[0])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    end = time.monotonic() + 60
    while time.monotonic() < end:  # all eight admitted to the engine, none answered yet: in flight
        metrics = server.request("/metrics")[2].decode()
        if "edge_anime_http_in_flight 8.0" in metrics:
            break
    else:
        raise AssertionError("the eight requests never were in flight together")
    server.proc.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=120)
    assert server.proc.wait(timeout=60) == 0, server.log.read_text()
    assert statuses == [200] * 8, statuses


def _browser() -> object:
    """Headless Chromium from Debian, driven by Selenium; skipped with the reason where it is not installed."""
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        pytest.skip("chromium and chromedriver are not installed (Debian: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))


def upload_in_page(driver: Any, wait: Any, photo: Path) -> None:
    """What a person does on the page: wait for the styles, choose the file, press the button; returns once the
    stylized picture has loaded."""
    from selenium.webdriver.common.by import By

    wait.until(lambda d: [o.text for o in d.find_elements(By.CSS_SELECTOR, "#style option")] == ["randgen"])
    chooser = driver.find_element(By.ID, "file")
    driver.execute_script("arguments[0].hidden = false", chooser)
    chooser.send_keys(str(photo))
    driver.find_element(By.ID, "go").click()
    wait.until(lambda d: d.execute_script("const i = document.getElementById('after');"
                                          "return i.complete && i.naturalWidth > 0"))


def test_the_page_in_a_real_browser(serve: Callable[..., Server], tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = serve()
    photo = tmp_path / "kiosk.jpg"
    photo.write_bytes(_jpeg(160, 120))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a photo", encoding="utf-8")
    driver = _browser()
    try:
        driver.get(server.url + "/")  # type: ignore[attr-defined]
        wait = WebDriverWait(driver, 60)
        upload_in_page(driver, wait, photo)
        assert driver.find_element(By.ID, "took").text.endswith(" s")  # type: ignore[attr-defined]
        link = driver.find_element(By.ID, "download")  # type: ignore[attr-defined]
        assert link.is_displayed() and link.get_attribute("download") == "kiosk_randgen.jpg"
        driver.save_screenshot(str(tmp_path / "page.png"))  # type: ignore[attr-defined]
        driver.find_element(By.ID, "file").send_keys(str(notes))  # type: ignore[attr-defined]
        driver.find_element(By.ID, "go").click()  # type: ignore[attr-defined]
        wait.until(lambda d: d.find_element(By.ID, "error").text != "")
        error = driver.find_element(By.ID, "error").text  # type: ignore[attr-defined]
        assert error.startswith("Could not stylize this file:") and "text/plain" in error, error
    finally:
        driver.quit()  # type: ignore[attr-defined]


def test_a_stalled_upload_gets_408_and_holds_nothing(serve: Callable[..., Server]) -> None:
    """A client that announces a body and stops sending: answered 408 at the timeout, while another client
    is served meanwhile (the stalled one never reached the engine)."""
    server = serve({"request_timeout_seconds": 2.0})
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as stalled:
        stalled.sendall(b"POST /v1/stylize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: image/jpeg\r\n"
                        b"Content-Length: 100000\r\n\r\n" + _jpeg()[:100])
        assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200
        answer = _whole_answer(stalled)
    assert answer.startswith("HTTP/1.1 408") and "request_timeout_seconds" in answer


def _whole_answer(sock: socket.socket) -> str:
    """Headers and the body its Content-Length announces (they may come in separate packets)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(4096)
        if not chunk:
            break
        body += chunk
    return (head + b"\r\n\r\n" + body).decode("latin-1")


def test_a_token_is_required_when_one_is_set(serve: Callable[..., Server], tmp_path: Path) -> None:
    token = "k" * 32
    (tmp_path / "token").write_text(token + "\n", encoding="utf-8")
    (tmp_path / "token").chmod(0o600)  # a token every user may read is refused (test_http_hardening.py)
    server = serve({"auth_token_file": str(tmp_path / "token")})
    status, headers, body = server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")
    assert status == 401 and headers["www-authenticate"] == "Bearer" and "auth_token_file" in _json(body)["detail"]
    assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg",
                          headers={"Authorization": "Bearer " + "k" * 31 + "j"})[0] == 401
    assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg",
                          headers={"Authorization": f"Bearer {token}"})[0] == 200
    assert server.request("/healthz")[0] == 200  # probes stay open: they say nothing about the pictures


def test_run_serves_http_beside_the_watch_folder_on_one_engine(write_config: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    """http.enabled: one process takes a file from the inbox and answers a POST, then SIGTERM -> 0."""
    port = _free_port()
    config = write_config({"http": {"enabled": True, "port": port}, "device": {"inference_precision": "f32"}})
    log = tmp_path / "run.log"
    proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "run", "--config", str(config)],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True)  # noqa: SIM115
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    try:
        end = time.monotonic() + READY_DEADLINE_SECONDS
        while time.monotonic() < end and "ready: worker" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            time.sleep(0.05)
        assert server.request("/readyz")[0] == 200
        inbox = tmp_path / "watch" / "inbox"
        (tmp_path / ".drop.jpg").write_bytes(_jpeg())
        os.replace(tmp_path / ".drop.jpg", inbox / "drop.jpg")
        status, _, body = server.request("/v1/stylize", data=_jpeg(seed=1), content_type="image/jpeg")
        assert status == 200 and Image.open(io.BytesIO(body)).size == (96, 64)
        done = tmp_path / "watch" / "done" / "drop.jpg"
        while time.monotonic() < end and not done.exists():
            time.sleep(0.05)
        assert done.exists() and len(list((tmp_path / "watch" / "outbox").iterdir())) == 1
        assert log.read_text().count("engine: randgen (fp32) on CPU") == 1  # compiled once, shared
        # One registry: the watch folder's and HTTP's. The counter moves just after the original reaches
        # done/ (the commit's last step), so it is polled for with the deadline.
        metrics = server.request("/metrics")[2].decode()
        while time.monotonic() < end and 'edge_anime_processed_total{style="randgen"} 1.0' not in metrics:
            time.sleep(0.05)
            metrics = server.request("/metrics")[2].decode()
        assert 'edge_anime_processed_total{style="randgen"} 1.0' in metrics
        assert "edge_anime_http_requests_total" in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sighup_swaps_in_the_new_style_and_a_bad_config_keeps_the_old(serve: Callable[..., Server]) -> None:
    server = serve()
    config_path = Path(server.proc.args[-1])  # type: ignore[index]
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config["model"] = {"path": "toon"}  # the bundled style
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    server.proc.send_signal(signal.SIGHUP)
    end = time.monotonic() + READY_DEADLINE_SECONDS
    while time.monotonic() < end and json.loads(server.request("/v1/styles")[2])["styles"] != ["toon"]:
        time.sleep(0.1)
    assert json.loads(server.request("/v1/styles")[2])["styles"] == ["toon"]
    assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200
    config_path.write_text("image: {resize: stretch}\n", encoding="utf-8")
    server.proc.send_signal(signal.SIGHUP)
    while time.monotonic() < end and "reload failed" not in server.log.read_text():
        time.sleep(0.1)
    assert "reload failed, still serving the previous config" in server.log.read_text()
    assert server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200


def test_ready_is_sent_to_systemd_when_readyz_says_ready(write_config: Callable[..., Path], tmp_path: Path) -> None:
    port = _free_port()
    config = write_config({"http": {"port": port}, "device": {"inference_precision": "f32"}})
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(tmp_path / "notify.sock"))
        notify.settimeout(READY_DEADLINE_SECONDS)
        log = tmp_path / "serve.log"
        proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "serve", "--config", str(config)],
                                env={**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify.sock")},
                                stdout=open(log, "w"), stderr=subprocess.STDOUT, text=True)  # noqa: SIM115
        try:
            message = notify.recv(4096).decode()
            assert message.startswith("READY=1\nSTATUS=serving http://127.0.0.1:"), message
            assert Server(proc, f"http://127.0.0.1:{port}", log).request("/readyz")[0] == 200
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log.read_text()


def test_several_styles_over_http(serve: Callable[..., Server]) -> None:
    server = serve(model={"styles": ["toon"]})
    assert json.loads(server.request("/v1/styles")[2]) == {"styles": ["randgen", "toon"], "default": "randgen"}
    answers = {style: server.request(f"/v1/stylize?style={style}&format=png", data=_jpeg(),
                                     content_type="image/jpeg") for style in ("randgen", "toon")}
    assert all(status == 200 for status, _, _ in answers.values())
    assert answers["randgen"][2] != answers["toon"][2]
