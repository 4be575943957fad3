"""The watch folder's clip thread (``service.clips.ClipRunner``) goes through ``Stylizer.run_clip``, the one clip
path, and survives what happens between a clip's queueing and its start: a reload that closed the Stylizer it
was queued under (the clip goes to the new one), and a style that cannot be served (a StyleFault verdict that
keeps the input, and the next clip still runs). Before, an error there ended the thread until a restart.

Real Stylizers on the seeded-random IR, real clips written with PyAV, the real runner thread.
"""
from __future__ import annotations

import queue
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_anime.service.clips import ClipRunner
from edge_anime.stylizer import Stylizer
from edge_anime.watch.claim import INPUT_DIR, Claim
from edge_anime.watch.faults import StyleFault

av = pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[video]'")
from test_video import make_clip  # noqa: E402  (needs PyAV)

VERDICT_TIMEOUT_S = 180  # a loaded 2-core box; reached only when the verdict never comes


def _claim(tmp_path: Path, name: str, *, style: str = "") -> Claim:
    folder = tmp_path / "work" / name.replace(".", "_")
    (folder / INPUT_DIR).mkdir(parents=True)
    make_clip(folder / INPUT_DIR / name, seconds=0.5, audio=None)
    return Claim(folder=folder, rel=name, style=style)


def _runner(stylizers: list[Stylizer], verdicts: queue.Queue[tuple[Claim, BaseException | None, Any]]) -> ClipRunner:
    """A runner whose ``stylizer()`` hands out ``stylizers`` in turn, then keeps giving the last one."""
    handed: list[Stylizer] = []

    def current() -> Stylizer:
        handed.append(stylizers[min(len(handed), len(stylizers) - 1)])
        return handed[-1]

    return ClipRunner(stylizer=current, config=lambda: stylizers[-1].config,
                      done=lambda claim, error, result: verdicts.put((claim, error, result)))


def test_a_clip_queued_under_a_stylizer_a_reload_closed_runs_on_the_new_one(
        write_config: Callable[..., Path], tmp_path: Path) -> None:
    config = write_config({"image": {"max_side": 64}})
    closed = Stylizer(config)
    closed.close()
    verdicts: queue.Queue[tuple[Claim, BaseException | None, Any]] = queue.Queue()
    with Stylizer(config) as current:
        runner = _runner([closed, current], verdicts)
        claim = _claim(tmp_path, "clip.mp4")
        dst = tmp_path / "out" / "clip.mp4"
        dst.parent.mkdir()
        runner.submit(claim, dst)
        got, error, result = verdicts.get(timeout=VERDICT_TIMEOUT_S)
        runner.stop()
    assert got is claim and error is None, error
    assert result.frames > 0 and dst.is_file()


def test_a_style_that_cannot_be_served_is_a_style_fault_and_the_next_clip_still_runs(
        write_config: Callable[..., Path], tmp_path: Path) -> None:
    verdicts: queue.Queue[tuple[Claim, BaseException | None, Any]] = queue.Queue()
    with Stylizer(write_config({"image": {"max_side": 64}})) as stylizer:
        runner = _runner([stylizer], verdicts)
        gone = _claim(tmp_path, "gone.mp4", style="no-such-style")
        good = _claim(tmp_path, "good.mp4")
        out = tmp_path / "out"
        out.mkdir()
        runner.submit(gone, out / "gone.mp4")
        runner.submit(good, out / "good.mp4")
        first = verdicts.get(timeout=VERDICT_TIMEOUT_S)
        second = verdicts.get(timeout=VERDICT_TIMEOUT_S)
        runner.stop()
    assert first[0] is gone and isinstance(first[1], StyleFault) and "no-such-style" in str(first[1])
    assert gone.path.is_file() and not (out / "gone.mp4").exists()  # kept for when the style is served again
    assert second[0] is good and second[1] is None and (out / "good.mp4").is_file()
