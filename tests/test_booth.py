"""The booth (issue 43 item 3): ``/booth``, ``POST /v1/booth/shots`` and ``GET /booth/p/{id}``, driven by real
HTTP clients (urllib) over loopback against the app served in this process; the page itself in real Chromium
with a fake camera (slow). Pictures are real JPEGs; every wait is a poll with a deadline."""
from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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

from conftest import REPO_ROOT, synthetic_photo

pytest.importorskip("starlette")
pytest.importorskip("segno")
from starlette.requests import Request

from edge_anime.http.booth import BoothStore, picture_base

ServeHere = Callable[..., Here]
DEADLINE_S = scaled(30.0)
SVG = "{http://www.w3.org/2000/svg}"
TOKEN = "booth-token-" + "b" * 20
PHOTOS = REPO_ROOT.parent / "shared" / "photos"


def _shot(server: Here, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    status, _, body = server.request("/v1/booth/shots", data=data if data is not None else _jpeg(320, 240),
                                     content_type="image/jpeg", headers=headers)
    return status, json.loads(body)


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    """A second client, as a guest's phone is: a plain GET of the URL, no token, no cookie."""
    try:
        with urllib.request.urlopen(url, timeout=DEADLINE_S) as answer:
            return answer.status, {k.lower(): v for k, v in answer.headers.items()}, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def _token_file(tmp_path: Path) -> str:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n", encoding="utf-8")
    path.chmod(0o600)
    return str(path)


def _wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE_S} s"
        time.sleep(0.05)


# -- the store ----------------------------------------------------------------------------------------------
def test_the_store_drops_pictures_when_they_expire_and_the_oldest_past_its_bounds() -> None:
    now = [1000.0]
    keep = [600.0]
    store = BoothStore(lambda: keep[0], lambda: 3, max_bytes=1000, clock=lambda: now[0])
    first = store.put(b"a" * 100)
    now[0] += 300
    second = store.put(b"b" * 100)
    assert re.fullmatch(r"[A-Za-z0-9_-]{16}", first) and first != second
    assert store.get(first) == b"a" * 100 and store.get("x" * 16) is None
    now[0] += 300  # the first is 600 s old: gone, the second is not
    assert store.get(first) is None and store.get(second) == b"b" * 100
    third, fourth, fifth = store.put(b"c" * 100), store.put(b"d" * 100), store.put(b"e" * 100)
    assert store.get(second) is None and len(store) == 3  # max_pictures: the oldest went first
    big = store.put(b"f" * 801)  # one out for the count, and 200 + 801 > 1000 bytes: another
    assert [store.get(i) is not None for i in (third, fourth, fifth, big)] == [False, False, True, True]
    assert store.held_bytes == 901
    keep[0] = 1.0  # a reload shortened keep_minutes: what is past it goes at the next sweep, unasked
    now[0] += 2
    store.sweep()
    assert len(store) == 0 and store.held_bytes == 0
    with pytest.raises(Exception, match="over the booth's memory"):
        store.put(b"g" * 1001)


def _request(host: str) -> Request:
    return Request({"type": "http", "method": "POST", "path": "/v1/booth/shots", "scheme": "http",
                    "server": ("127.0.0.1", 8080), "headers": [(b"host", host.encode())], "query_string": b""})


def test_the_pictures_url_names_the_box_as_a_phone_can_reach_it() -> None:
    """The Host the page came from, unless it is loopback (the kiosk's own browser: the camera needs a secure
    origin): then the box's network address when the server listens on it, else a loopback URL said to be
    unreachable."""
    assert picture_base(_request("192.168.7.20:8080"), "0.0.0.0") == ("http://192.168.7.20:8080", True)
    assert picture_base(_request("kiosk.lan:8080"), "0.0.0.0") == ("http://kiosk.lan:8080", True)
    assert picture_base(_request("localhost:8080"), "10.1.2.3") == ("http://10.1.2.3:8080", True)
    assert picture_base(_request("[::1]:8080"), "10.1.2.3") == ("http://10.1.2.3:8080", True)
    assert picture_base(_request("127.0.0.1:8080"), "127.0.0.1") == ("http://127.0.0.1:8080", False)
    base, reachable = picture_base(_request("localhost:9000"), "0.0.0.0")
    assert base.endswith(":9000") and (reachable == ("localhost" not in base))


# -- the routes ---------------------------------------------------------------------------------------------
def test_a_public_url_names_the_pictures_for_phones(serve_here: ServeHere) -> None:
    """http.booth.public_url (a reverse proxy, a name the LAN knows) is what the QR code holds, whatever Host
    the kiosk opened the page with."""
    server = serve_here({"booth": {"public_url": "http://kiosk.lan:8080/"}})
    status, shot = _shot(server, headers={"Origin": server.url})
    assert status == 200, shot
    assert shot["url"] == f"http://kiosk.lan:8080/booth/p/{shot['id']}" and shot["reachable"] is True


def test_a_shot_is_stylized_kept_and_fetched_by_a_second_client_without_the_token(
        serve_here: ServeHere, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="edge_anime.http.access")
    server = serve_here({"auth_token_file": _token_file(tmp_path)})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert _shot(server)[0] == 401
    assert _shot(server, headers={"Authorization": "Bearer nope"})[0] == 401
    foreign = _shot(server, headers={**auth, "Origin": "http://evil.example"})
    assert foreign[0] == 403 and foreign[1]["error"] == "cross-origin request"
    status, shot = _shot(server, headers={**auth, "Origin": server.url})  # the page's own origin
    assert status == 200, shot
    assert set(shot) >= {"id", "url", "expires_in_s", "qr_svg"} and shot["expires_in_s"] == 600
    assert shot["url"] == f"{server.url}/booth/p/{shot['id']}" and shot["path"] == f"/booth/p/{shot['id']}"
    assert shot["reachable"] is False  # served on 127.0.0.1 only: no phone can open it, and the page says so
    svg = ET.fromstring(shot["qr_svg"])
    assert svg.tag == f"{SVG}svg" and svg.find(f"{SVG}path") is not None
    status, headers, body = _get(shot["url"])  # no token: the id is the key
    assert status == 200 and headers["content-type"] == "image/jpeg" and headers["cache-control"] == "no-store"
    assert headers["content-disposition"] == f'attachment; filename="edge-anime-{shot["id"][:8]}.jpg"'
    picture = Image.open(io.BytesIO(body))
    picture.load()
    assert picture.format == "JPEG" and picture.size == (128, 96)  # the API's own settings (max_side 128 here)
    assert _get(shot["url"])[0] == 200  # fetched again: kept until it expires, not until the first download

    def logged() -> list[str]:  # a line is written once the answer is sent: it may trail the client's read
        return [r.getMessage() for r in caplog.records if r.name == "edge_anime.http.access"]

    _wait_for(lambda: sum("GET /booth/p/<id> 200" in line for line in logged()) == 2, "both downloads logged")
    assert not any(shot["id"] in line for line in logged())  # the picture's only key stays out of the logs
    status, _, metrics = server.request("/metrics", headers=auth)
    text = metrics.decode()
    assert 'route="booth_shot",status="200"} 1.0' in text and 'route="booth_picture",status="200"} 2.0' in text


def test_a_picture_is_gone_after_keep_minutes_even_unasked(serve_here: ServeHere) -> None:
    server = serve_here({"booth": {"keep_minutes": 0.01}})  # 0.6 s
    store: BoothStore = server.app.state.booth
    status, asked = _shot(server)
    assert status == 200 and _get(asked["url"])[0] == 200
    _wait_for(lambda: _get(asked["url"])[0] == 404, "expired on access")
    status, unasked = _shot(server)
    assert status == 200
    _wait_for(lambda: len(store) == 0, "dropped by the periodic sweep")  # nobody asked for it
    status, _, body = _get(unasked["url"])
    assert status == 404 and json.loads(body)["error"] == "not found" and "minutes" in json.loads(body)["detail"]


def test_past_max_pictures_the_oldest_goes(serve_here: ServeHere) -> None:
    server = serve_here({"booth": {"max_pictures": 2}})
    urls = [_shot(server, _jpeg(160, 120, seed=i))[1]["url"] for i in range(3)]
    assert [_get(url)[0] for url in urls] == [404, 200, 200]


@pytest.mark.parametrize("path", ["/booth/p/AAAAAAAAAAAAAAAA", "/booth/p/short", "/booth/p/..%2F..%2Fetc%2Fpasswd",
                                  "/booth/p/" + "A" * 300, "/booth/p/", "/booth/p/index.html"])
def test_an_unknown_picture_is_a_json_404(serve_here: ServeHere, path: str) -> None:
    server = serve_here()
    status, headers, body = server.request(path)
    assert status == 404 and headers["content-type"] == "application/json", (path, body)
    assert set(json.loads(body)) == {"error", "detail"}


def test_bad_shots_get_json_errors_and_the_service_goes_on(serve_here: ServeHere) -> None:
    server = serve_here({"max_body_mb": 0.5})
    status, error = _shot(server, b"this is not a picture")
    assert status == 422 and error["error"] == "cannot stylize this picture", error
    status, error = _shot(server, b"")
    assert status in (400, 422) and error["detail"], error
    status, error = _shot(server, b"\xff\xd8" + bytes(600 * 1024))
    assert status == 413 and "max_body_mb" in error["detail"], error
    status, _, body = server.request("/v1/booth/shots", data=b"{}", content_type="application/json")
    assert status == 415 and json.loads(body)["detail"]
    status, _, body = server.request("/v1/booth/shots?style=nope", data=_jpeg(), content_type="image/jpeg")
    assert status == 404 and json.loads(body)["error"] == "unknown style"
    assert server.request("/v1/booth/shots")[0] == 405  # a GET
    assert len(server.app.state.booth) == 0
    assert _shot(server)[0] == 200 and server.request("/v1/stylize", data=_jpeg(), content_type="image/jpeg")[0] == 200


def _files(*roots: Path) -> set[str]:
    return {os.path.join(folder, name) for root in roots for folder, _, names in os.walk(root) for name in names}


def test_nothing_of_a_guest_touches_the_disk(serve_here: ServeHere, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch and state folders of the config, the working directory and the temporary directory hold the
    same files after shots and downloads as before."""
    cwd, temp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    temp.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    server = serve_here()
    config = server.app.state.service.config
    roots = [config.watch.root, Path(config.watch.root).parent, cwd, temp]
    before = _files(*roots)
    shots = [_shot(server, _jpeg(320, 240, seed=i))[1] for i in range(3)]
    assert all(_get(shot["url"])[0] == 200 for shot in shots)
    assert _files(*roots) == before


def test_the_page_is_served_whole_with_its_csp(serve_here: ServeHere) -> None:
    server = serve_here({"booth": {"keep_minutes": 7}})
    status, headers, body = server.request("/booth")
    page = body.decode()
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert "kept for <span id=\"keep\">7</span> minutes in this box's memory only" in page
    csp = headers["content-security-policy"]
    host = server.url.removeprefix("http://")
    assert f"connect-src 'self' ws://{host} wss://{host};" in csp and "img-src 'self' blob: data:;" in csp
    assert "script-src 'sha256-" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert headers["permissions-policy"].startswith("camera=(self)")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "nothing from outside the box"


# -- the page in real Chromium with a fake camera (slow) ----------------------------------------------------
def _y4m(path: Path, frames: int = 4) -> Path:
    """A Y4M clip (4:2:0) of a face at 640x480 for Chromium's fake camera: a photo of ../shared/photos, or a
    synthetic one where that folder is missing, shifted a little each frame so the camera shows motion."""
    source = PHOTOS / "face_2.jpg"
    photo = Image.open(source).convert("RGB") if source.is_file() else synthetic_photo(640, 480, seed=5)
    photo = photo.resize((680, 510))
    with open(path, "wb") as out:
        out.write(b"YUV4MPEG2 W640 H480 F10:1 Ip A1:1 C420jpeg\n")
        for i in range(frames):
            y, cb, cr = photo.crop((i * 8, i * 6, i * 8 + 640, i * 6 + 480)).convert("YCbCr").split()
            out.write(b"FRAME\n" + y.tobytes() + cb.resize((320, 240)).tobytes() + cr.resize((320, 240)).tobytes())
    return path


@pytest.fixture
def chromium() -> Iterator[Callable[..., Any]]:
    """``chromium(*flags)``: headless Debian Chromium driven by Selenium, quit at the end."""
    webdriver = pytest.importorskip("selenium.webdriver")
    binary, driver_path = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("chromium and chromedriver are not installed (Debian: apt-get install chromium chromium-driver)")
    drivers: list[Any] = []

    def start(*flags: str) -> Any:
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800",
                     *flags):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.quit()


@pytest.mark.slow
def test_the_booth_in_chromium_with_a_fake_camera(serve_here: ServeHere, chromium: Callable[..., Any],
                                                  tmp_path: Path) -> None:
    """Stylized frames arrive, the button counts down and takes the picture, the page shows it with its QR
    code and URL, and a second client downloads it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = serve_here({"auth_token_file": _token_file(tmp_path), "live": {"max_side": 128}})
    driver = chromium("--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                      f"--use-file-for-fake-video-capture={_y4m(tmp_path / 'face.y4m')}")
    driver.get(server.url + "/booth")
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: d.find_element(By.ID, "auth").is_displayed())  # the token is asked for once
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.CSS_SELECTOR, "#auth button").click()
    frames = "return Number(document.getElementById('live').dataset.frames || 0)"
    sources: set[str] = set()

    def two_frames(d: Any) -> bool:
        src = d.find_element(By.ID, "live").get_attribute("src") or ""
        if src.startswith("blob:"):
            sources.add(src)
        return len(sources) >= 2

    wait.until(two_frames)
    started, first = time.monotonic(), driver.execute_script(frames)
    wait.until(lambda d: d.execute_script(frames) >= first + 10)
    fps = (driver.execute_script(frames) - first) / (time.monotonic() - started)
    print(f"booth page: {fps:.1f} stylized frames/s at 640x480 in, 128 px out")
    assert driver.execute_script("return [document.getElementById('camera').videoWidth, "
                                 "document.getElementById('camera').videoHeight]") == [640, 480]
    driver.save_screenshot(str(tmp_path / "live.png"))
    driver.find_element(By.ID, "shoot").click()
    assert driver.find_element(By.ID, "count").text == "3"
    WebDriverWait(driver, 90).until(lambda d: d.find_element(By.ID, "result").is_displayed())
    wait.until(lambda d: d.execute_script("const i = document.getElementById('picture');"
                                          "return i.complete && i.naturalWidth > 0"))
    wait.until(lambda d: d.execute_script("const i = document.getElementById('qr');"
                                          "return i.complete && i.naturalWidth > 0"))
    url = driver.find_element(By.ID, "link").text
    assert re.fullmatch(re.escape(server.url) + r"/booth/p/[A-Za-z0-9_-]{16}", url), url
    assert driver.find_element(By.ID, "unreachable").is_displayed()  # served on loopback only: said
    driver.save_screenshot(str(tmp_path / "booth.png"))
    status, headers, body = _get(url)  # a second client, no token
    assert status == 200 and headers["content-type"] == "image/jpeg"
    picture = Image.open(io.BytesIO(body))
    picture.load()
    assert picture.format == "JPEG" and picture.size == (128, 96)  # the full 640x480 frame, at max_side
    print(f"booth picture: {len(body)} bytes, {picture.size[0]}x{picture.size[1]}")
    driver.find_element(By.ID, "back").click()
    assert not driver.find_element(By.ID, "result").is_displayed()
    now = driver.execute_script(frames)
    wait.until(lambda d: d.execute_script(frames) > now)  # the mirror runs again


@pytest.mark.slow
@pytest.mark.box
@pytest.mark.parametrize(("flags", "said"), [
    (("--use-fake-ui-for-media-stream",), "No camera found. Plug one in, then touch Retry."),
    (("--use-fake-device-for-media-stream", "--deny-permission-prompts"),
     "The camera was refused. Allow it for this page in the browser, then touch Retry."),
], ids=["missing", "refused"])
def test_the_booth_says_when_the_camera_is_missing_or_refused(serve_here: ServeHere, chromium: Callable[..., Any],
                                                              flags: tuple[str, ...], said: str) -> None:
    """Missing: no fake device and the permission granted, so on a box without a camera getUserMedia fails with
    NotFoundError. Refused: a (fake) camera, and the permission denied: NotAllowedError. Either way the page
    says so in words, with a Retry button, instead of a black screen."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    if "--use-fake-device-for-media-stream" not in flags and any(Path("/dev").glob("video*")):
        pytest.skip("this box has a camera (/dev/video*): the missing-camera case cannot happen here")
    server = serve_here()
    driver = chromium(*flags)
    driver.get(server.url + "/booth")
    WebDriverWait(driver, 60).until(lambda d: d.find_element(By.ID, "retry").is_displayed())
    assert driver.find_element(By.ID, "status").text == said
    assert driver.find_element(By.ID, "shoot").get_attribute("disabled") is not None
