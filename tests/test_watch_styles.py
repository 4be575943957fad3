"""Several styles in one watch folder: ``inbox/<style>/`` routes to that style, the inbox root gets the default.

Real `edge-anime run` processes, real files and signals (SIGKILL, SIGHUP), as in tests/test_service.py. The
second style is the bundled ``toon``; the default is the session's seeded-random ``randgen``.
"""
from __future__ import annotations

import hashlib
import random
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from deadlines import scaled
from PIL import Image
from test_service import (
    WORK_DEADLINE_S,
    Service,
    _free_port,
    assert_decodes,
    claims_left,
    hidden,
    make_sources,
    start,
    visible,
    wait_until,
)
from test_service_faults import metric


@pytest.fixture
def styled(config: Callable[..., Path]) -> Callable[..., Path]:
    """A service config serving randgen (default) and toon at 64 px."""

    def make(styles: list[str] | None = None, **watch: object) -> Path:
        return config({"model": {"styles": ["toon"] if styles is None else styles},
                       "image": {"max_side": 64}, "watch": dict(watch)})

    return make


def _set_styles(cfg: Path, styles: list[str]) -> None:
    data = yaml.safe_load(cfg.read_text())
    data["model"]["styles"] = styles
    cfg.write_text(yaml.safe_dump(data))


@pytest.mark.slow
def test_two_styles_route_by_folder_exactly_once_across_sigkill(
        styled: Callable[..., Path], make_photo: Callable[..., Path], tmp_path: Path, services: list[Service]) -> None:
    # more deaths allowed than the test deals: a photo in flight at two of its kills would be set aside as a
    # poison pill (watch.retry.max_crashes), and this test is about routing exactly once across them
    cfg = styled(retry={"initial_seconds": 0.2, "max_seconds": 1.0, "max_attempts": 50, "max_crashes": 11})
    log = tmp_path / "service.log"
    svc = start(services, cfg, log)
    root = svc.root
    # The routing folders exist before any file arrives: an integrator can see where to put files.
    for folder in ("inbox/toon", "inbox/randgen", "outbox/toon", "outbox/randgen"):
        assert (root / folder).is_dir(), folder
    toon_sources = make_sources(make_photo, tmp_path / "src_toon", 12, prefix="t")
    root_sources = make_sources(make_photo, tmp_path / "src_root", 12, prefix="r")
    for src in toon_sources:
        shutil.copyfile(src, root / "inbox" / "toon" / src.name)
    for src in root_sources:
        shutil.copyfile(src, root / "inbox" / src.name)

    rng = random.Random(20261130)
    for _ in range(3):  # SIGKILL at random moments while both styles are being worked on
        with pytest.raises(subprocess.TimeoutExpired):
            svc.proc.wait(timeout=rng.uniform(0.2, 1.5))
        svc.kill()
        svc = start(services, cfg, log)
    wait_until(lambda: len(visible(root / "done")) == 24, timeout_s=WORK_DEADLINE_S, what="all 24 inputs done",
               proc=svc.proc, log=log)
    status = wait_until(lambda: (svc.status() or {}).get("styles", {}).get("toon", {}).get("compiled")
                        and svc.status(), timeout_s=10, what="the status file listing toon", proc=svc.proc, log=log)
    assert list(status["styles"]) == ["randgen", "toon"]
    assert svc.stop() == 0

    assert sorted(p.name for p in visible(root / "outbox" / "toon")) == \
        sorted(f"{s.stem}_toon.jpg" for s in toon_sources)
    assert sorted(p.name for p in visible(root / "outbox") if p.parent == root / "outbox") == \
        sorted(f"{s.stem}_randgen.jpg" for s in root_sources)
    assert sorted(p.name for p in visible(root / "done" / "toon")) == sorted(s.name for s in toon_sources)
    assert visible(root / "inbox") == [] and visible(root / "failed") == []
    assert hidden(root / "outbox") == [] and claims_left(root / "work") == []
    for path in visible(root / "outbox"):
        assert_decodes(path)

    # The routed output is the toon style's picture, pixel for pixel what the Python API gives for it.
    from edge_anime import Stylizer

    with Stylizer(config=cfg) as stylizer:
        expected = stylizer.run(toon_sources[0], style="toon").image
        default = stylizer.run(toon_sources[0]).image
    assert expected is not None and default is not None
    encoded = tmp_path / "expected.jpg"
    expected.save(encoded, quality=90)
    with Image.open(root / "outbox" / "toon" / f"{toon_sources[0].stem}_toon.jpg") as got:
        routed = np.asarray(got.convert("RGB"), np.int16)
    api_toon = np.asarray(Image.open(encoded).convert("RGB"), np.int16)
    default_jpg = tmp_path / "default.jpg"
    default.save(default_jpg, quality=90)
    api_default = np.asarray(Image.open(default_jpg).convert("RGB"), np.int16)
    assert np.abs(routed - api_toon).mean() < np.abs(routed - api_default).mean() / 4

    out = subprocess.run([sys.executable, "-m", "edge_anime", "status", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=scaled(60))
    assert "toon: 12 done, 0 failed" in out.stdout and "randgen: 12 done, 0 failed (default" in out.stdout


@pytest.mark.slow
def test_sighup_drops_and_adds_a_style_and_its_waiting_files_stay_untouched(
        styled: Callable[..., Path], make_photo: Callable[..., Path], tmp_path: Path, services: list[Service]) -> None:
    cfg = styled()
    log = tmp_path / "service.log"
    svc = start(services, cfg, log)
    root = svc.root
    first = make_photo("first.jpg", 64, 64, folder=tmp_path / "src")
    shutil.copyfile(first, root / "inbox" / "toon" / "first.jpg")
    wait_until(lambda: (root / "outbox" / "toon" / "first_toon.jpg").exists(), timeout_s=WORK_DEADLINE_S,
               what="toon output before the reload", proc=svc.proc, log=log)

    _set_styles(cfg, [])
    svc.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "(styles -toon)" in log.read_text(), timeout_s=WORK_DEADLINE_S,
               what="the reload dropping toon alone (nothing recompiled)", proc=svc.proc, log=log)
    assert "style toon is no longer served" in log.read_text()
    waiting = make_photo("waiting.jpg", 64, 64, seed=3, folder=tmp_path / "src")
    shutil.copyfile(waiting, root / "inbox" / "toon" / "waiting.jpg")
    later = make_photo("later.jpg", 64, 64, seed=4, folder=tmp_path / "src")
    shutil.copyfile(later, root / "inbox" / "later.jpg")  # arrives after: done proves the inbox was looked at
    wait_until(lambda: (root / "outbox" / "later_randgen.jpg").exists(), timeout_s=WORK_DEADLINE_S,
               what="the root file done while toon is dropped", proc=svc.proc, log=log)
    assert (root / "inbox" / "toon" / "waiting.jpg").read_bytes() == waiting.read_bytes()
    assert not (root / "outbox" / "toon" / "waiting_toon.jpg").exists()
    assert not (root / "outbox" / "toon" / "waiting_randgen.jpg").exists()
    status = wait_until(lambda: (svc.status() or {}).get("styles", {}).get("toon", {}).get("served") is False
                        and svc.status(), timeout_s=10, what="the status file saying toon is dropped",
                        proc=svc.proc, log=log)  # the status file is rewritten every second
    assert status["styles"]["toon"]["processed"] == 1

    _set_styles(cfg, ["toon"])
    svc.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: (root / "outbox" / "toon" / "waiting_toon.jpg").exists(), timeout_s=WORK_DEADLINE_S,
               what="the waiting file done once toon is served again", proc=svc.proc, log=log)
    assert "(styles +toon)" in log.read_text()
    assert svc.stop() == 0
    assert visible(root / "inbox") == [] and visible(root / "failed") == []
    assert claims_left(root / "work") == []


def _style_copy(random_ir: Path, folder: Path, *, style: str, damaged: bool) -> Path:
    """The session's IR as style ``style``; ``damaged``: its graph cut in half and the manifest's digest made to
    match, so the start's digest check passes and the compile on first use fails (what a model fault is)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("model.xml", "model.bin"):
        shutil.copyfile(random_ir / name, folder / name)
    manifest = yaml.safe_load((random_ir / "manifest.yaml").read_text())
    manifest["style"] = style
    if damaged:
        xml = (random_ir / "model.xml").read_bytes()
        (folder / "model.xml").write_bytes(xml[: len(xml) // 2])
    manifest["ir"]["xml_sha256"] = hashlib.sha256((folder / "model.xml").read_bytes()).hexdigest()
    (folder / "manifest.yaml").write_text(yaml.safe_dump(manifest))
    return folder


@pytest.mark.slow
def test_a_style_that_cannot_compile_holds_its_folder_and_a_reload_brings_it_back(
        config: Callable[..., Path], random_ir: Path, make_photo: Callable[..., Path], tmp_path: Path,
        services: list[Service]) -> None:
    """Issue 28 item 6: a style whose IR failed to compile sent a good photo through 10 retries into failed/.
    A model fault is the box's: the photo stays, the style's folder is held, log, status and metrics say so,
    the default style goes on, and a reload after the model is fixed stylizes what waited."""
    port = _free_port()
    model = _style_copy(random_ir, tmp_path / "models" / "broken", style="broken", damaged=True)
    cfg = config({"model": {"styles": [str(model)]}, "image": {"max_side": 64},
                  "service": {"metrics": {"enabled": True, "port": port}}})
    log = tmp_path / "service.log"
    svc = start(services, cfg, log)
    root = svc.root
    src = tmp_path / "src"
    held = [make_photo(f"held{i}.jpg", 64, 64, seed=i, folder=src) for i in range(2)]
    shutil.copyfile(held[0], root / "inbox" / "broken" / held[0].name)
    wait_until(lambda: "broken" in log.read_text() and "compile" in log.read_text(), timeout_s=WORK_DEADLINE_S,
               what="the style's compile failing", proc=svc.proc, log=log)
    shutil.copyfile(held[1], root / "inbox" / "broken" / held[1].name)  # arrives while the folder is held
    other = make_photo("other.jpg", 64, 64, seed=9, folder=src)
    shutil.copyfile(other, root / "inbox" / "other.jpg")
    wait_until(lambda: (root / "outbox" / "other_randgen.jpg").exists(), timeout_s=WORK_DEADLINE_S,
               what="the default style still serving", proc=svc.proc, log=log)
    text = log.read_text()
    assert "style broken cannot be compiled: " in text and f"its folder {root / 'inbox' / 'broken'} is held" in text
    assert "retry " not in text and "failed " not in text, text
    for photo in held:  # untouched, where they were put
        assert (root / "inbox" / "broken" / photo.name).read_bytes() == photo.read_bytes()
    assert visible(root / "failed") == [] and visible(root / "outbox" / "broken") == []
    status = wait_until(lambda: ((svc.status() or {}).get("styles", {}).get("broken") or {}).get("broken")
                        and svc.status(), timeout_s=10, what="the status file saying the style is broken",
                        proc=svc.proc, log=log)
    assert "OpenVINO cannot read" in status["styles"]["broken"]["broken"] and status["state"] == "ready"
    assert metric(port, 'edge_anime_style_broken{style="broken"}') == 1.0
    assert (metric(port, "edge_anime_retries_total") or 0.0) == 0.0
    out = subprocess.run([sys.executable, "-m", "edge_anime", "status", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=scaled(60))
    assert "broken: 0 done, 0 failed; cannot be compiled, its folder held until a reload" in out.stdout

    _style_copy(random_ir, model, style="broken", damaged=False)  # the operator fixes the model...
    svc.proc.send_signal(signal.SIGHUP)  # ...and reloads
    for photo in held:
        wait_until(lambda p=photo: (root / "outbox" / "broken" / f"{p.stem}_broken.jpg").exists(),
                   timeout_s=WORK_DEADLINE_S, what=f"{photo.name} stylized after the reload", proc=svc.proc, log=log)
    assert "reload: style(s) broken could not be compiled before; tried again" in log.read_text()
    wait_until(lambda: metric(port, 'edge_anime_style_broken{style="broken"}') == 0.0, timeout_s=10,
               what="the metric back to 0", proc=svc.proc, log=log)
    assert svc.stop() == 0
    assert visible(root / "failed") == [] and visible(root / "inbox") == [] and claims_left(root / "work") == []
    for path in visible(root / "outbox"):
        assert_decodes(path)
