"""Clips: made with PyAV itself, stylized through the real pipeline on the seeded-random IR, read back with
PyAV. The service tests run `python -m edge_anime run` as a real process with real signals (test_service's
helpers). Clips are 160x120 at 24 fps and inference runs at 64-96 px, so each test takes seconds. The fast
tier's clips run the quarter-width seeded-random style (``narrow_config``): their claims are the clip's frames,
times, sound and limits, the same through any style (issue 44).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from deadlines import scaled
from test_service import (
    WORK_DEADLINE_S,
    Service,
    assert_decodes,
    claims_left,
    hidden,
    start,
    visible,
    wait_until,
)

av = pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[video]'")


FPS = 24
SAMPLE_RATE = 44_100
WIDTH, HEIGHT = 160, 120


def make_clip(path: Path, *, seconds: float = 2.0, fps: int = FPS, rotation: int = 0, audio: str | None = "aac",
              container: str | None = None, noise: float = 0.0, size: tuple[int, int] = (WIDTH, HEIGHT)) -> Path:
    """A clip of a yellow square moving over a still, smooth background, with a 440 Hz sine tone (mono)."""
    width, height = size
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    background = np.stack([80 + 60 * np.sin(xx / 17), 100 + 50 * np.cos(yy / 13),
                           140 + 40 * np.sin((xx + yy) / 23)], -1)
    frames = int(seconds * fps)
    with av.open(str(path), "w", format=container) as out:
        video = out.add_stream("libx264", rate=fps)
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        if rotation:
            video.set_display_rotation(rotation)
        sound = out.add_stream(audio, rate=SAMPLE_RATE) if audio else None
        if sound is not None:
            sound.layout = "mono"
        for i in range(frames):
            picture = background + (rng.normal(0, noise, background.shape) if noise else 0)
            x = int(i * (width - 24) / frames)
            picture[height // 3: height // 3 + 24, x: x + 24] = (250, 220, 30)
            frame = av.VideoFrame.from_ndarray(np.clip(picture, 0, 255).astype(np.uint8), format="rgb24")
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode())
        if sound is None:
            return path
        total, done = int(seconds * SAMPLE_RATE), 0
        sample_format = sound.codec_context.format.name
        while done < total:
            count = min(1024, total - done)
            tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(done, done + count) / SAMPLE_RATE)).astype(np.float32)
            if sample_format.startswith("s16"):
                chunk = av.AudioFrame.from_ndarray((tone * 32767).astype(np.int16)[None], format="s16", layout="mono")
            else:
                chunk = av.AudioFrame.from_ndarray(tone[None], format=sample_format, layout="mono")
            chunk.sample_rate, chunk.pts = SAMPLE_RATE, done
            out.mux(sound.encode(chunk))
            done += count
        out.mux(sound.encode())
    return path


def read_clip(path: Path) -> dict[str, Any]:
    """What a player sees: frames, rate, durations, rotation, audio streams and their packets."""
    with av.open(str(path)) as clip:
        video = clip.streams.video[0]
        frames = list(clip.decode(video))
        info: dict[str, Any] = {
            "codec": video.codec_context.name, "frames": len(frames), "fps": video.average_rate,
            "seconds": float(video.duration * video.time_base) if video.duration else float(clip.duration) / 1e6,
            "rotation": frames[0].rotation, "size": (frames[0].width, frames[0].height), "audio": [],
        }
        for stream in clip.streams.audio:
            info["audio"].append({"codec": stream.codec_context.name, "rate": stream.sample_rate,
                                  "seconds": float(stream.duration * stream.time_base) if stream.duration else None})
    with av.open(str(path)) as clip:
        info["audio_packets"] = [bytes(p) for p in clip.demux(*clip.streams.audio) if p.size]
    return info


def stylize(config: Path, src: Path, dst: Path) -> Any:
    from edge_anime import Stylizer

    with Stylizer(config) as stylizer:
        return stylizer.run_clip(src, dst)


# --- what comes out ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_clip_keeps_frames_rate_duration_rotation_and_copies_its_audio(
        write_config: Callable[..., Path], tmp_path: Path) -> None:
    src = make_clip(tmp_path / "walk.mp4", seconds=2.0, rotation=90)
    (tmp_path / "out").mkdir()
    result = stylize(write_config({"image": {"max_side": 96}}), src, tmp_path / "out" / "walk_randgen.mp4")
    assert result.ok, result.error
    before, after = read_clip(src), read_clip(tmp_path / "out" / "walk_randgen.mp4")
    assert after["codec"] == "h264"
    assert after["frames"] == before["frames"] == 2 * FPS
    assert after["fps"] == before["fps"] == FPS
    assert abs(after["seconds"] - before["seconds"]) <= 1 / FPS
    assert after["rotation"] == before["rotation"] == 90
    assert after["size"] == (96, 72)                               # image.max_side applied to every frame
    assert [a["codec"] for a in after["audio"]] == ["aac"] and after["audio"][0]["rate"] == SAMPLE_RATE
    assert abs(after["audio"][0]["seconds"] - before["audio"][0]["seconds"]) <= 0.05
    assert after["audio_packets"] == before["audio_packets"]      # copied, not re-encoded
    assert result.audio == "aac copied" and result.frames == 2 * FPS
    assert hidden(tmp_path / "out") == []


def test_sound_mp4_cannot_hold_is_reencoded_to_aac(narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    src = make_clip(tmp_path / "pcm.mkv", seconds=1.5, audio="pcm_s16le", container="matroska")
    result = stylize(narrow_config({"image": {"max_side": 64}}), src, tmp_path / "pcm_randgen.mp4")
    assert result.ok, result.error
    before, after = read_clip(src), read_clip(tmp_path / "pcm_randgen.mp4")
    assert result.audio == "pcm_s16le -> aac"
    assert after["frames"] == before["frames"] == 36
    assert abs(float(after["fps"]) - FPS) < 0.01                  # Matroska's millisecond time base
    assert abs(after["seconds"] - 1.5) <= 1 / FPS
    assert [a["codec"] for a in after["audio"]] == ["aac"] and after["audio"][0]["rate"] == SAMPLE_RATE
    assert abs(after["audio"][0]["seconds"] - 1.5) <= 0.05


def test_static_region_blend_lowers_flicker(narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    """The figure itself (output change / input change on static pixels) before and after the blend."""
    src = make_clip(tmp_path / "noisy.mp4", seconds=1.0, noise=2.0, audio=None)
    result = stylize(narrow_config({"image": {"max_side": 96}, "video": {"temporal_smoothing": 0.6}}), src,
                     tmp_path / "noisy_randgen.mp4")
    assert result.ok, result.error
    assert result.flicker is not None
    before, after = result.flicker
    print(f"flicker (output / input change on static pixels): {before:.2f} -> {after:.2f}")
    assert after < 0.8 * before


def test_stylize_command_takes_clips_beside_photos(narrow_config: Callable[..., Path], tmp_path: Path,
                                                   make_photo: Callable[..., Path]) -> None:
    import subprocess

    folder = tmp_path / "in"
    folder.mkdir()
    make_clip(folder / "clip.mov", seconds=1.0, container="mov")
    make_photo("photo.jpg", 64, 48, folder=folder)
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "stylize", str(folder), "-o", str(tmp_path / "out"),
                           "--config", str(narrow_config({"image": {"max_side": 64}}))],
                          capture_output=True, text=True, timeout=scaled(300), check=False)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["clip_randgen.mp4", "photo_randgen.jpg"]
    assert read_clip(tmp_path / "out" / "clip_randgen.mp4")["frames"] == FPS


# --- refused from the header, or failed with a reason -----------------------------------------------------

@pytest.mark.parametrize(("override", "key"), [({"video": {"max_frames": 10}}, "video.max_frames=10"),
                                               ({"video": {"max_seconds": 0.5}}, "video.max_seconds=0.5"),
                                               ({"image": {"max_pixels": 5000}}, "image.max_pixels=5000")])
def test_oversized_clips_are_refused_from_the_header(write_config: Callable[..., Path], tmp_path: Path,
                                                     override: dict[str, Any], key: str) -> None:
    from edge_anime.errors import InputError

    src = make_clip(tmp_path / "long.mp4", seconds=1.0, audio=None)
    (tmp_path / "out").mkdir()
    result = stylize(write_config(override), src, tmp_path / "out" / "long_randgen.mp4")
    assert isinstance(result.error, InputError) and result.error.stage == "header"
    assert key in str(result.error) and str(src) in str(result.error)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_clip_without_pyav_fails_naming_the_extra(write_config: Callable[..., Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from edge_anime.errors import InputError

    src = make_clip(tmp_path / "a.mp4", seconds=0.5, audio=None)
    monkeypatch.setitem(sys.modules, "av", None)  # what an install without the extra sees: ImportError
    result = stylize(write_config(), src, tmp_path / "a_randgen.mp4")
    assert isinstance(result.error, InputError)
    assert "pip install 'edge-anime[video]'" in str(result.error) and str(src) in str(result.error)


def understated(src: Path, *, header_ms: float) -> Path:
    """``src`` (Matroska) with its segment's Duration and its tracks' DURATION tags rewritten to ``header_ms``:
    a header that lies about the length, frames and packets untouched."""
    data = bytearray(src.read_bytes())
    at = data.find(b"\x44\x89\x88")  # the Duration element: ID 0x4489, an 8-byte float of milliseconds
    assert at > 0
    data[at + 3: at + 11] = struct.pack(">d", header_ms)
    told = f"00:00:{header_ms / 1000:012.9f}".encode()
    lying = re.sub(rb"00:00:\d\d\.\d{9}", told, bytes(data))
    out = src.with_name(f"liar_{src.name}")
    out.write_bytes(lying)
    return out


@pytest.mark.parametrize(("override", "words"), [({"max_frames": 10}, "more than video.max_frames=10 frames"),
                                                 ({"max_seconds": 1.0}, "longer than video.max_seconds=1")])
def test_a_header_that_understates_the_length_is_counted_while_decoding(
        narrow_config: Callable[..., Path], tmp_path: Path, override: dict[str, Any], words: str) -> None:
    """A 2 s Matroska clip (48 frames) whose header says 0.2 s (5 frames): it passed the header's limits and
    every frame was stylized; the reader now counts frames and seconds and stops at the limit."""
    from edge_anime.errors import InputError

    src = understated(make_clip(tmp_path / "long.mkv", seconds=2.0, container="matroska"), header_ms=200.0)
    with av.open(str(src)) as clip:
        assert clip.duration == 200_000 and sum(1 for _ in clip.decode(video=0)) == 2 * FPS
    (tmp_path / "out").mkdir()
    result = stylize(narrow_config({"image": {"max_side": 64}, "video": override}), src,
                     tmp_path / "out" / "liar_randgen.mp4")
    assert isinstance(result.error, InputError) and result.error.stage == "decode", result.error
    assert words in str(result.error) and str(src) in str(result.error) and "header states" in str(result.error)
    if "max_frames" in override:
        assert "refused at frame 11" in str(result.error)
    assert list((tmp_path / "out").iterdir()) == []                   # nothing visible, no temp file left


def test_a_photo_named_as_a_clip_is_called_a_photo(write_config: Callable[..., Path], tmp_path: Path) -> None:
    from PIL import Image

    from edge_anime import Stylizer
    from edge_anime.errors import InputError

    with Stylizer(write_config()) as stylizer:
        for fmt, name in (("JPEG", "photo.mp4"), ("PNG", "photo.mov")):
            Image.new("RGB", (96, 64), (200, 120, 40)).save(tmp_path / name, fmt)
            result = stylizer.run_clip(tmp_path / name, tmp_path / "out.mp4")
            assert isinstance(result.error, InputError), result.error
            assert str(result.error).startswith(f"{tmp_path / name}: a {fmt} picture, not a video clip"), result.error


def test_a_fifo_or_a_device_named_as_a_clip_is_refused(write_config: Callable[..., Path], tmp_path: Path) -> None:
    from edge_anime import Stylizer
    from edge_anime.errors import InputError

    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    with Stylizer(write_config()) as stylizer:
        for src, kind in ((fifo, "a FIFO (named pipe)"), (Path("/dev/zero"), "a character device")):
            result = stylizer.run_clip(src, tmp_path / "out.mp4")
            assert isinstance(result.error, InputError), result.error
            assert str(result.error) == f"{src}: is {kind}, not a regular file; expected a picture or clip file"


# --- the watch folder ---------------------------------------------------------------------------------------

@pytest.fixture
def service_config(write_config: Callable[..., Path]) -> Callable[..., Path]:
    def make(overrides: dict[str, dict[str, Any]] | None = None) -> Path:
        merged: dict[str, dict[str, Any]] = {
            "image": {"max_side": 64},
            "watch": {"retry": {"initial_seconds": 0.2, "max_seconds": 1.0, "max_attempts": 50}},
            "service": {"drain_timeout_seconds": 20.0},
        }
        for section, values in (overrides or {}).items():
            merged.setdefault(section, {}).update(values)
        return write_config(merged)

    return make


def _clip_in_work(svc: Service) -> dict[str, Any] | None:
    clip = (svc.status() or {}).get("clip")
    return clip if isinstance(clip, dict) and clip.get("frames_done", 0) > 0 else None


@pytest.mark.slow
def test_sigkill_mid_clip_then_restart_gives_exactly_one_complete_output(
        service_config: Callable[..., Path], tmp_path: Path, services: list[Service]) -> None:
    cfg = service_config()
    root = Path(yaml.safe_load(cfg.read_text())["watch"]["root"])
    log = tmp_path / "service.log"
    svc = start(services, cfg, log)
    src = make_clip(tmp_path / "long.mp4", seconds=12.0)
    shutil.copyfile(src, root / "inbox" / "long.mp4")
    progress = wait_until(lambda: _clip_in_work(svc), timeout_s=WORK_DEADLINE_S, what="the clip in work",
                          proc=svc.proc, log=log)
    assert progress["file"] == "long.mp4" and progress["frames_total"] == 12 * FPS and progress["frames_per_s"] > 0
    svc.kill()  # SIGKILL mid-clip: no cleanup of any kind
    assert visible(root / "outbox") == []                          # nothing visible; a temp file may be left
    svc = start(services, cfg, log)
    wait_until(lambda: visible(root / "done"), timeout_s=WORK_DEADLINE_S, what="the clip done after restart",
               proc=svc.proc, log=log)
    assert svc.stop() == 0
    assert [p.name for p in visible(root / "outbox")] == ["long_randgen.mp4"]
    assert hidden(root / "outbox") == []                           # the killed writer's temp file removed
    out = read_clip(root / "outbox" / "long_randgen.mp4")
    assert out["frames"] == 12 * FPS and len(out["audio"]) == 1
    assert claims_left(root / "work") == [] and visible(root / "failed") == []


@pytest.mark.slow
def test_a_clip_the_service_dies_on_twice_goes_to_failed_and_the_photo_behind_it_is_done(
        service_config: Callable[..., Path], make_photo: Callable[..., Path], tmp_path: Path,
        services: list[Service]) -> None:
    """Issue 42 item 2 with real processes and SIGKILL: the killer stands in for the OOM killer a decode bomb
    calls. The clip is in flight at two deaths (the second time alone), so the third start sets it aside in
    failed/ with its reason; the photo that came with it is stylized, and nothing stays in work/."""
    cfg = service_config()
    root = Path(yaml.safe_load(cfg.read_text())["watch"]["root"])
    log = tmp_path / "service.log"
    src = make_clip(tmp_path / "long.mp4", seconds=12.0)
    (root / "inbox").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, root / "inbox" / "long.mp4")
    for _ in range(2):
        svc = start(services, cfg, log)
        wait_until(lambda svc=svc: _clip_in_work(svc), timeout_s=WORK_DEADLINE_S, what="the clip in work",
                   proc=svc.proc, log=log)
        svc.kill()  # SIGKILL mid-clip, as the OOM killer would
    shutil.copyfile(make_photo("photo.jpg"), root / "inbox" / "photo.jpg")
    svc = start(services, cfg, log)
    wait_until(lambda: visible(root / "done") and list((root / "failed").glob("*.error.json")),
               timeout_s=WORK_DEADLINE_S, what="the photo done and the clip set aside", proc=svc.proc, log=log)
    assert svc.stop() == 0
    assert [p.name for p in visible(root / "failed")] == ["long.mp4", "long.mp4.error.json"]
    report = json.loads((root / "failed" / "long.mp4.error.json").read_text())
    assert "stopped unexpectedly 2 times" in report["reason"] and report["stage"] == "crash"
    assert [p.name for p in visible(root / "outbox")] == ["photo_randgen.jpg"]
    assert claims_left(root / "work") == [] and hidden(root / "outbox") == []
    assert "runs alone next" in log.read_text()


@pytest.mark.slow
def test_sigterm_past_the_drain_timeout_puts_the_clip_back_untouched(
        service_config: Callable[..., Path], tmp_path: Path, services: list[Service]) -> None:
    cfg = service_config({"service": {"drain_timeout_seconds": 0.5}})
    root = Path(yaml.safe_load(cfg.read_text())["watch"]["root"])
    svc = start(services, cfg, tmp_path / "service.log")
    # far past the drain: on an AMX Xeon the test model ran a 12 s clip (288 frames) in 1.7 s at bf16 and
    # finished inside the 0.5 s; the clip goes back on SIGTERM, so its length costs only its encode here
    src = make_clip(tmp_path / "long.mp4", seconds=60.0)
    shutil.copyfile(src, root / "inbox" / "long.mp4")
    wait_until(lambda: _clip_in_work(svc), timeout_s=WORK_DEADLINE_S, what="the clip in work", proc=svc.proc,
               log=svc.log)
    assert svc.stop(signal.SIGTERM) == 0
    assert (root / "inbox" / "long.mp4").read_bytes() == src.read_bytes()
    assert visible(root / "outbox") == [] and hidden(root / "outbox") == []
    assert claims_left(root / "work") == []
    assert 'returned "long.mp4" to the inbox: stopping: the clip was not finished' in svc.log.read_text()


@pytest.mark.slow
def test_bad_clips_go_to_failed_with_a_reason_and_the_service_keeps_running(
        service_config: Callable[..., Path], tmp_path: Path, services: list[Service],
        make_photo: Callable[..., Path]) -> None:
    svc = start(services, service_config(), tmp_path / "service.log")
    inbox, failed = svc.root / "inbox", svc.root / "failed"
    src = tmp_path / "src"
    src.mkdir()
    good = make_clip(src / "good.mp4", seconds=0.5)
    (src / "zero.mp4").write_bytes(b"")
    (src / "truncated.mp4").write_bytes(good.read_bytes()[: good.stat().st_size // 2])   # no moov index
    whole = make_clip(tmp_path / "whole.mkv", seconds=2.0, container="matroska")
    (src / "cut.mkv").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])       # header whole, data cut
    with av.open(str(src / "sound.m4v"), "w", format="mp4") as out:                      # audio only
        sound = out.add_stream("aac", rate=SAMPLE_RATE)
        frame = av.AudioFrame.from_ndarray(np.zeros((2, 1024), np.float32), format="fltp", layout="stereo")
        frame.sample_rate, frame.pts = SAMPLE_RATE, 0
        out.mux(sound.encode(frame))
        out.mux(sound.encode())
    (src / "text.webm").write_text("not a clip\n")
    with av.open(str(src / "frameless.mp4"), "w") as out:                                # zero-length track
        video = out.add_stream("libx264", rate=FPS)
        video.width, video.height, video.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        out.start_encoding()
    for path in sorted(src.iterdir()):
        shutil.copyfile(path, inbox / path.name)
    expect_failed = {"zero.mp4", "truncated.mp4", "cut.mkv", "sound.m4v", "text.webm", "frameless.mp4"}
    wait_until(lambda: {p.name for p in failed.glob("*.error.json")} == {f"{n}.error.json" for n in expect_failed}
               and [p.name for p in visible(svc.root / "done")] == ["good.mp4"],
               timeout_s=WORK_DEADLINE_S, what="every bad clip in failed/, the good one done", proc=svc.proc,
               log=svc.log)
    reasons = {n: json.loads((failed / f"{n}.error.json").read_text())["reason"] for n in expect_failed}
    assert "empty file" in reasons["zero.mp4"]
    assert "not a readable clip" in reasons["truncated.mp4"] and "not a readable clip" in reasons["text.webm"]
    assert "truncated or damaged" in reasons["cut.mkv"]
    assert "no video stream" in reasons["sound.m4v"] and "zero-length" in reasons["frameless.mp4"]
    assert [p.name for p in visible(svc.root / "outbox")] == ["good_randgen.mp4"]
    assert hidden(svc.root / "outbox") == []
    photo = make_photo("after.jpg", 64, 64, folder=tmp_path)                              # still serving
    shutil.copyfile(photo, inbox / "after.jpg")
    wait_until(lambda: (svc.root / "outbox" / "after_randgen.jpg").exists(), timeout_s=WORK_DEADLINE_S,
               what="a photo after the bad clips", proc=svc.proc, log=svc.log)
    assert_decodes(svc.root / "outbox" / "after_randgen.jpg")
    assert svc.stop() == 0


def test_clip_in_work_shows_in_status_and_metrics_text() -> None:
    """The status command's line for the clip in work (the service writes it; test above reads it live)."""
    from edge_anime.commands.status import describe
    from edge_anime.service.metrics import Metrics

    data = {"state": "ready", "clip": {"file": "a.mp4", "frames_done": 12, "frames_total": 48, "frames_per_s": 6.5}}
    assert 'clip:      "a.mp4" 12/48 frames, 6.5 frames/s' in describe(data, path=Path("s.json"), alive=True)
    metrics = Metrics()
    metrics.clip_progress(data["clip"])  # type: ignore[arg-type]
    assert metrics.registry.get_sample_value("edge_anime_clip_frames_done") == 12
    assert metrics.registry.get_sample_value("edge_anime_clip_frames_total") == 48
    metrics.clip_progress(None)
    assert metrics.registry.get_sample_value("edge_anime_clip_frames_done") == 0


def test_input_rule_takes_clip_extensions_beside_photos() -> None:
    from edge_anime.config import parse_config
    from edge_anime.inputs import InputFilter

    config = parse_config({"video": {"extensions": ["MP4", ".mkv"]}}, base_dir=Path("."))
    accept = InputFilter(config.watch, also=config.video.extensions)
    assert accept.accepts("a.mp4") and accept.accepts("b.MKV") and accept.accepts("c.jpg")
    assert not accept.accepts("d.mov") and not accept.accepts(".hidden.mp4")


def test_frames_are_converted_at_twice_the_planned_size_not_at_full_size() -> None:
    """Like a large JPEG's draft decode: FFmpeg's scaler does the big step, LANCZOS the last factor of 2."""
    from edge_anime.config import parse_config
    from edge_anime.video.job import scaled_size

    def config(image: dict[str, Any]) -> Any:
        return parse_config({"image": image}, base_dir=Path("."))

    assert scaled_size((1280, 720), config({"max_side": 256}), multiple=8) == (512, 288)
    assert scaled_size((1280, 720), config({"max_side": 1024}), multiple=8) is None      # 2x would enlarge
    assert scaled_size((1280, 720), config({"resize": "keep"}), multiple=8) is None
    assert scaled_size((1280, 720), config({"resize": "center_square", "center_square": 128}), multiple=8) \
        == (456, 256)                                                                   # the crop keeps 256
