"""Clips in the watch folder when the disk runs full under them (issue 28 item 7), and a clip's done line.

A real `edge-anime run` on a real tmpfs, a real clip made with PyAV (test_video's helper), the seeded-random IR.
Before the fix the 64 KiB probe succeeded as soon as the failed clip's temp file was removed, intake resumed, the
clip restarted at frame 0 and filled the disk again, forever.
"""
from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deadlines import scaled
from test_service import WORK_DEADLINE_S, Service, _free_port, claims_left, hidden, start, visible, wait_until
from test_service_faults import metric

from conftest import mounted_tmpfs

av = pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[video]'")
from test_video import FPS, make_clip, read_clip  # noqa: E402  (needs PyAV)

CLIP_SECONDS = 4.0          # 96 frames; at crf 0 and 128 px the output is ~1 MB, the input ~0.4 MB
ROOM_LEFT_BYTES = 300_000   # free beside the input when the clip starts: about a quarter of its output
QUIET_WINDOW_S = scaled(4.0)  # longer than a restart of the clip would take to fill the disk again


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", "size=8m") as mount:
        yield mount
        for entry in mount.iterdir():
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink()


def _fill_leaving(folder: Path, leave: int) -> Path:
    """A file that leaves ``leave`` bytes free on ``folder``'s filesystem."""
    filler = folder / "filler"
    size = shutil.disk_usage(folder).free - leave
    with open(filler, "wb") as fh:
        fh.write(b"\1" * size)
    return filler


def _pauses(port: int) -> float:
    return metric(port, "edge_anime_intake_pauses_total") or 0.0


@pytest.mark.slow
def test_a_clip_the_disk_ran_full_under_waits_for_room_instead_of_refilling_it(
        config: Callable[..., Path], tmp_path: Path, services: list[Service], small_disk: Path) -> None:
    port = _free_port()
    cfg = config({"watch": {"root": str(small_disk / "watch")}, "image": {"max_side": 128},
                  "video": {"crf": 0}, "service": {"metrics": {"enabled": True, "port": port}}})
    svc = start(services, cfg, tmp_path / "service.log")
    root = svc.root
    src = make_clip(tmp_path / "clip.mp4", seconds=CLIP_SECONDS, noise=20.0)
    filler = _fill_leaving(small_disk, src.stat().st_size + ROOM_LEFT_BYTES)
    shutil.copyfile(src, root / "inbox" / "clip.mp4")

    def held_or_looping() -> bool:
        return "holding \"clip.mp4\" until" in svc.log.read_text() or _pauses(port) >= 3

    wait_until(held_or_looping, timeout_s=WORK_DEADLINE_S, what="the clip held for room (or restarting)",
               proc=svc.proc, log=svc.log)
    assert _pauses(port) == 1, f"the clip restarted and filled the disk again:\n{svc.log.read_text()[-3000:]}"
    status = wait_until(lambda: (svc.status() or {}).get("room") and svc.status(), timeout_s=10,
                        what="the status file saying the clip waits for room", proc=svc.proc, log=svc.log)
    wait = status["room"][0]
    assert wait["file"] == "clip.mp4" and wait["needed_bytes"] > wait["free_bytes"] + ROOM_LEFT_BYTES // 2
    assert metric(port, "edge_anime_waiting_for_room") == 1.0
    quiet_until = time.monotonic() + QUIET_WINDOW_S
    while time.monotonic() < quiet_until:  # nothing may happen here: a restart would pause intake again
        assert _pauses(port) == 1 and not (svc.status() or {}).get("clip"), svc.log.read_text()[-3000:]
        time.sleep(0.2)
    assert (root / "inbox" / "clip.mp4").exists() is False and visible(root / "failed") == []

    filler.unlink()  # room again: the clip starts by itself, once, and completes
    wait_until(lambda: (root / "outbox" / "clip_randgen.mp4").exists(), timeout_s=WORK_DEADLINE_S,
               what="the clip done once the disk had room", proc=svc.proc, log=svc.log)
    assert read_clip(root / "outbox" / "clip_randgen.mp4")["frames"] == int(CLIP_SECONDS * FPS)
    assert _pauses(port) == 1 and "resuming \"clip.mp4\": its outbox has" in svc.log.read_text()
    wait_until(lambda: metric(port, "edge_anime_waiting_for_room") == 0.0, timeout_s=10,
               what="the metric back to 0", proc=svc.proc, log=svc.log)
    done = [line for line in svc.log.read_text().splitlines() if line.split(" ", 3)[2:3] == ["done"]
            or " done \"clip.mp4\"" in line]
    assert done and done[-1].endswith(f"({int(CLIP_SECONDS * FPS)} frames)"), done  # was "... s ()"
    assert svc.stop() == 0
    assert visible(root / "failed") == [] and hidden(root / "outbox") == [] and claims_left(root / "work") == []
