"""Clips on the Stylizer's clip lane (``Stylizer.submit_file``, the one place that tells a photo from a clip),
as the watch folder uses it (``service.clips.ClipRunner``): a clip queued when the Stylizer is closed still
finishes (a reload drains before it swaps the Stylizer, and a clip holds its style until it ends), a style
that cannot be served is said at submit and the next clip still runs, and a stop hands back the clip in work
and the ones queued behind it untouched. Before, an error between a clip's queueing and its start ended the
clip thread until a restart.

Real Stylizers on the seeded-random IR, real clips written with PyAV, the real lane thread.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from edge_anime.core.stylizer import Stylizer
from edge_anime.errors import UserError
from edge_anime.service.clips import ClipRunner
from edge_anime.watch.claim import INPUT_DIR, Claim

av = pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[video]'")
from test_video import make_clip  # noqa: E402  (needs PyAV)

from edge_anime.video.job import ClipResult, ClipStopped  # noqa: E402  (needs PyAV)

VERDICT_TIMEOUT_S = 180  # a loaded 2-core box; reached only when the verdict never comes


def _claim(tmp_path: Path, name: str, *, style: str = "") -> Claim:
    folder = tmp_path / "work" / name.replace(".", "_")
    (folder / INPUT_DIR).mkdir(parents=True)
    make_clip(folder / INPUT_DIR / name, seconds=0.5, audio=None)
    return Claim(folder=folder, rel=name, style=style)


def test_a_photo_and_a_clip_take_one_verb_and_a_queued_clip_finishes_before_close(
        write_config: Callable[..., Path], tmp_path: Path, make_photo: Callable[..., Path]) -> None:
    photo_path = make_photo("photo.jpg")
    out = tmp_path / "out"
    out.mkdir()
    first, second = _claim(tmp_path, "first.mp4"), _claim(tmp_path, "second.mp4")
    stylizer = Stylizer(write_config({"image": {"max_side": 64}}))
    try:
        photo = stylizer.submit_file(photo_path, out / "photo.png")
        clips = [stylizer.submit_file(c.path, out / c.path.name, name=c.rel) for c in (first, second)]
    finally:
        stylizer.close()  # the lane's queued clip finishes first: it holds its style's pipeline until it ends
    assert photo.result(timeout=VERDICT_TIMEOUT_S).ok and not isinstance(photo.result(), ClipResult)
    for future, claim in zip(clips, (first, second)):
        result = future.result(timeout=VERDICT_TIMEOUT_S)
        assert isinstance(result, ClipResult) and result.ok, result.error
        assert result.frames > 0 and (out / claim.path.name).is_file()
    assert stylizer.clip_progress() is None


def test_a_style_that_cannot_be_served_is_said_at_submit_and_the_next_clip_still_runs(
        write_config: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    gone, good = _claim(tmp_path, "gone.mp4", style="no-such-style"), _claim(tmp_path, "good.mp4")
    with Stylizer(write_config({"image": {"max_side": 64}})) as stylizer:
        with pytest.raises(UserError, match="no-such-style"):
            stylizer.submit_file(gone.path, out / "gone.mp4", style=gone.style)
        result = stylizer.submit_file(good.path, out / "good.mp4").result(timeout=VERDICT_TIMEOUT_S)
    assert gone.path.is_file() and not (out / "gone.mp4").exists()  # kept for when the style is served again
    assert result.ok and (out / "good.mp4").is_file()


def test_a_stop_hands_back_the_clip_in_work_and_the_queued_ones_untouched(
        write_config: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    claims = [_claim(tmp_path, f"clip{i}.mp4") for i in range(3)]
    runner = ClipRunner()
    verdicts: list[Claim] = []
    with Stylizer(write_config({"image": {"max_side": 64}})) as stylizer:
        runner.cancel.set()  # a stop before any clip started: none of them may start
        for claim in claims:
            future = stylizer.submit_file(claim.path, out / claim.path.name, name=claim.rel, cancel=runner.cancel,
                                          on_frame=runner.on_frame)
            future.add_done_callback(lambda done, c=claim: verdicts.append(c) if runner.ended(c, done.result())
                                     else None)
        stopped = runner.stop(stylizer)
    assert sorted(c.rel for c in stopped) == sorted(c.rel for c in claims) and not verdicts
    assert all(c.path.is_file() for c in claims) and not list(out.iterdir())  # untouched, no temp left
    result = ClipResult(job=None, error=ClipStopped("x"), timings_s={})  # type: ignore[arg-type]
    assert not ClipRunner().ended(claims[0], result)
