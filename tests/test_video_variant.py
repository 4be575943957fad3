"""``video.variant`` (issue 43, "clips get the speed too"): a clip may run another IR of its style than the
photos do (toon's live student), compiled on the style's first clip, kept in the Stylizer's LRU, and chosen
again for each clip from the ``video`` settings it is given, so a reload that changes only ``video.variant``
takes effect at the next clip.

Real OpenVINO, real clips made with PyAV (test_video's helper: 160x120, half a second, no sound), the
session's quarter-width seeded-random IR (``narrow_ir``: which IR runs is the claim, not its pixels) at 64 px.
Its style copy here gets a second IR entry, ``student``, made for live frames (``uses: [live]``, as
training/ship_student.py writes toon's): the same weights under another name, so which IR ran is told by name
(``ClipResult.variant``, ``Stylizer.model_of``), never by timing.
"""
from __future__ import annotations

import hashlib
import logging
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_anime.config import load_config
from edge_anime.errors import ConfigError

av = pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[video]'")
from test_video import make_clip  # noqa: E402  (needs PyAV)

STUDENT = "student"
CLIP_SECONDS = 0.5  # 12 frames: the clip's path, not its length, is what is tested


def _style_with_student(random_ir: Path, folder: Path, *, mean_db: float = 31.0) -> Path:
    """A copy of the session's style with a live-only variant ``student`` (its own files, the same bytes)."""
    style = folder / "models" / random_ir.name
    shutil.copytree(random_ir, style)
    manifest = yaml.safe_load((style / "manifest.yaml").read_text(encoding="utf-8"))
    ir: dict[str, Any] = {}
    for kind, name in (("xml", "model.xml"), ("bin", "model.bin")):
        target = style / f"model_{STUDENT}.{kind}"
        shutil.copyfile(style / name, target)
        ir[kind], ir[f"{kind}_sha256"] = target.name, hashlib.sha256(target.read_bytes()).hexdigest()
    manifest.setdefault("variants", {})[STUDENT] = {
        "precision": "fp32", "uses": ["live"], "ir": ir,
        "quality": {"reference": "teacher: the style's default IR at f32", "psnr_db": {"min": 22.0, "mean": mean_db}}}
    (style / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return style


@pytest.fixture
def student_style(narrow_ir: Path, tmp_path: Path) -> Path:
    return _style_with_student(narrow_ir, tmp_path)


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    return make_clip(tmp_path / "walk.mp4", seconds=CLIP_SECONDS, audio=None)


def _config(write_config: Callable[..., Path], style: Path, variant: str, **extra: dict[str, Any]) -> Path:
    return write_config({"model": {"path": str(style)}, "image": {"max_side": 64},
                         "video": {"variant": variant}, **extra})


@pytest.mark.parametrize("setting", [STUDENT, "live"])
def test_a_clip_runs_the_student_while_a_photo_on_the_same_stylizer_runs_the_photos_variant(
        write_config: Callable[..., Path], student_style: Path, clip: Path, make_photo: Callable[..., Path],
        tmp_path: Path, setting: str) -> None:
    from edge_anime import Stylizer

    with Stylizer(_config(write_config, student_style, setting)) as stylizer:
        style = stylizer.styles[0]
        assert stylizer.clip_model_of(style) is None  # lazily: nothing for clips before the first clip
        photo = stylizer.run(make_photo("a.jpg"))
        assert photo.ok and stylizer.clip_model_of(style) is None
        result = stylizer.run_clip(clip, tmp_path / "walk_out.mp4")
        assert result.ok, result.error
        assert result.variant == STUDENT and result.frames == int(CLIP_SECONDS * 24)
        clips, photos = stylizer.clip_model_of(style), stylizer.model_of(style)
        assert clips is not None and photos is not None
        assert (clips.variant_name, photos.variant_name) == (STUDENT, "fp32")
        assert stylizer.compiled_styles() == (style,)  # the clips' IR is no style of its own
        # a photo submitted after the clip (and through submit_file, as the watch folder does) keeps the photos'
        again = stylizer.submit_file(make_photo("b.jpg"), tmp_path / "b_out.jpg").result()
        assert again.ok and (tmp_path / "b_out.jpg").is_file()
        assert stylizer.model_of(style) is photos  # the same compiled entry ran it: no recompile, no swap
        second = stylizer.run_clip(clip, tmp_path / "walk_again.mp4")
        assert second.ok and second.variant == STUDENT and stylizer.clip_model_of(style) is clips  # compiled once


def test_auto_runs_clips_on_the_photos_variant_and_compiles_nothing_more(
        write_config: Callable[..., Path], student_style: Path, clip: Path, tmp_path: Path) -> None:
    from edge_anime import Stylizer

    with Stylizer(_config(write_config, student_style, "auto")) as stylizer:
        compiles = stylizer.engine.compiles
        result = stylizer.run_clip(clip, tmp_path / "out.mp4")
        assert result.ok, result.error
        assert result.variant == "fp32" and stylizer.clip_model_of(stylizer.styles[0]) is None
        assert stylizer.engine.compiles - compiles <= 1  # the clip's one shape on the photos' own engine


def test_a_named_variant_the_photos_run_already_shares_their_engine(
        write_config: Callable[..., Path], student_style: Path, clip: Path, tmp_path: Path) -> None:
    from edge_anime import Stylizer

    with Stylizer(_config(write_config, student_style, "fp32")) as stylizer:
        result = stylizer.run_clip(clip, tmp_path / "out.mp4")
        assert result.ok and result.variant == "fp32" and stylizer.clip_model_of(stylizer.styles[0]) is None


def test_live_on_a_style_without_a_live_variant_runs_the_photos_variant_and_says_so_once(
        write_config: Callable[..., Path], narrow_ir: Path, tmp_path: Path, clip: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    from edge_anime import Stylizer

    weak = _style_with_student(narrow_ir, tmp_path, mean_db=27.0)  # under the live floor: no live variant
    with caplog.at_level(logging.INFO, logger="edge_anime.stylizer"), \
            Stylizer(_config(write_config, weak, "live")) as stylizer:
        for name in ("one.mp4", "two.mp4"):
            result = stylizer.run_clip(clip, tmp_path / name)
            assert result.ok and result.variant == "fp32"
    said = [r.getMessage() for r in caplog.records if "has no live variant" in r.getMessage()]
    assert len(said) == 1 and "video.variant: live" in said[0], said


def test_a_variant_the_style_lacks_is_refused_at_start_naming_video_variant_and_the_styles_variants(
        write_config: Callable[..., Path], student_style: Path, clip: Path, tmp_path: Path) -> None:
    from edge_anime import Stylizer

    with pytest.raises(ConfigError, match=r"video\.variant: 'int8' is not a variant of style randgen .*expected "
                                          r"one of: fp32, student, or auto or live"):
        Stylizer(_config(write_config, student_style, "int8"))
    with pytest.raises(ConfigError, match=r"video\.variant: expected \"auto\" or a variant name"):
        load_config(_config(write_config, student_style, "student int8"))
    # given with a clip (a reload's settings): refused there, before anything is queued
    with Stylizer(_config(write_config, student_style, "auto")) as stylizer:
        bad = stylizer.config.video.model_copy(update={"variant": "int8"})
        with pytest.raises(ConfigError, match=r"video\.variant: 'int8'"):
            stylizer.submit_file(clip, tmp_path / "out.mp4", video=bad)
        assert stylizer.clip_progress() is None and not (tmp_path / "out.mp4").exists()


def test_a_changed_video_variant_applies_to_the_next_clip(
        write_config: Callable[..., Path], student_style: Path, clip: Path, tmp_path: Path,
        make_photo: Callable[..., Path]) -> None:
    """What a reload that changed only ``video.*`` does: the running Stylizer gets the new section with each
    clip (``submit_file(video=...)``, the watch folder's ``_submit``), and the next clip runs what it says."""
    from edge_anime import Stylizer

    with Stylizer(_config(write_config, student_style, "auto")) as stylizer:
        settings = stylizer.config.video
        style = stylizer.styles[0]
        assert stylizer.run_clip(clip, tmp_path / "1.mp4", video=settings).variant == "fp32"
        student = settings.model_copy(update={"variant": STUDENT})
        assert stylizer.run_clip(clip, tmp_path / "2.mp4", video=student).variant == STUDENT
        assert stylizer.clip_model_of(style) is not None
        assert stylizer.run_clip(clip, tmp_path / "3.mp4", video=settings).variant == "fp32"
        assert stylizer.clip_model_of(style) is None  # the student given back once auto came back
        assert stylizer.run(make_photo("still.jpg")).ok and stylizer.model_of(style) is not None


@pytest.mark.slow
def test_a_reload_of_the_service_that_changes_only_video_variant_runs_the_next_clip_on_it(
        config: Callable[..., Path], student_style: Path, tmp_path: Path, services: list[Any]) -> None:
    """The watch folder end to end: SIGHUP with only ``video.variant`` changed rebuilds nothing ("no
    recompile") and the next clip's done line names the student."""
    from deadlines import scaled
    from test_service import WORK_DEADLINE_S, start, visible, wait_until

    cfg = config({"model": {"path": str(student_style)}, "image": {"max_side": 64}})
    svc = start(services, cfg, tmp_path / "service.log")
    src = make_clip(tmp_path / "src.mp4", seconds=CLIP_SECONDS, audio=None)
    shutil.copyfile(src, svc.root / "inbox" / "one.mp4")
    # the clip's line is logged once its output is in place: wait for the line, not the file
    wait_until(lambda: 'clip "one.mp4"' in svc.log.read_text(), timeout_s=WORK_DEADLINE_S, what="the first clip",
               proc=svc.proc, log=svc.log)
    assert "variant fp32)" in svc.log.read_text()
    data = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    data["video"] = {"variant": STUDENT}
    cfg.write_text(yaml.safe_dump(data), encoding="utf-8")
    svc.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "reloaded" in svc.log.read_text(), timeout_s=scaled(60), what="the reload", proc=svc.proc,
               log=svc.log)
    shutil.copyfile(src, svc.root / "inbox" / "two.mp4")
    wait_until(lambda: 'clip "two.mp4"' in svc.log.read_text(), timeout_s=WORK_DEADLINE_S, what="the second clip",
               proc=svc.proc, log=svc.log)
    text = svc.log.read_text()
    assert f"variant {STUDENT})" in text.split('clip "two.mp4"')[1] and "no recompile" in text, text[-3000:]
    assert len(visible(svc.root / "outbox")) == 2
