"""Several styles in one watch folder: ``inbox/<style>/`` routes to that style, the inbox root gets the default.

Real `edge-anime run` processes, real files and signals (SIGKILL, SIGHUP), as in tests/test_service.py. The
second style is the bundled ``toon``; the default is the session's seeded-random ``randgen``.
"""
from __future__ import annotations

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
from PIL import Image
from test_service import (
    WORK_DEADLINE_S,
    Service,
    assert_decodes,
    claims_left,
    hidden,
    make_sources,
    start,
    visible,
    wait_until,
)


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


def test_two_styles_route_by_folder_exactly_once_across_sigkill(
        styled: Callable[..., Path], make_photo: Callable[..., Path], tmp_path: Path, services: list[Service]) -> None:
    cfg = styled()
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
                         capture_output=True, text=True, timeout=60)
    assert "toon: 12 done, 0 failed" in out.stdout and "randgen: 12 done, 0 failed (default" in out.stdout


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
