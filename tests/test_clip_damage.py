"""Clips whose timing or picture size a user's tools broke (issue 42 items 11 and 13), through the real CLI.

The hostile clips are built here with PyAV as the tools that make them do: an AVI's B-frames remuxed with
``ffmpeg -fflags +genpts -c copy`` (times generated in decode order, so the decoded frames carry them
permuted), recordings joined byte-wise (``cat a.ts b.ts``: the times jump back at the seam, sound too), a
Matroska file whose times repeat, and a WebM whose VP8 stream turns from landscape to 200x900 portrait
mid-way (a WebRTC recording when the phone is turned). Before the fix the first three ended in a traceback
from the muxer (exit 70) and the last had its portrait frames squeezed into the landscape picture.
The commands run the quarter-width seeded-random style (``narrow_config``): the times and the picture's
placement are the claim, the same through any style, and the full width's inference was most of each command.
"""
from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deadlines import scaled
from test_service import hidden

av = pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[video]'")
from test_video import FPS, make_clip, read_clip  # noqa: E402  (needs PyAV)

CLI_TIMEOUT_S = scaled(300)  # a loaded 2-core box; reached only when something hangs


def stylize_cli(config: Path, src: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``edge-anime stylize SRC -o OUT`` as a user runs it."""
    return subprocess.run([sys.executable, "-m", "edge_anime", "stylize", str(src), "-o", str(out),
                           "--config", str(config)], capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                          check=False)


def frame_times(path: Path) -> list[int]:
    """The decoded frames' pts, in the order a player shows them."""
    with av.open(str(path)) as clip:
        return [int(f.pts) for f in clip.decode(video=0)]


def remux(src: Path, dst: Path, *, video_times: Callable[[int, Any], tuple[int, int]],
          container: str | None = None) -> Path:
    """``src``'s packets copied into ``dst``, each video packet's (pts, dts) replaced by ``video_times(n,
    packet)`` (n: its place in decode order); the audio packets as they were."""
    with av.open(str(src)) as inp, av.open(str(dst), "w", format=container) as out:
        streams = {s.index: out.add_stream_from_template(s) for s in (*inp.streams.video, *inp.streams.audio)}
        n = 0
        for packet in inp.demux():
            if packet.size == 0:  # the demuxer's end-of-stream marker, not data
                continue
            if packet.stream.type == "video":
                packet.pts, packet.dts = video_times(n, packet)
                n += 1
            packet.stream = streams[packet.stream.index]
            out.mux(packet)
    return dst


def assert_clean_output(proc: subprocess.CompletedProcess[str], out: Path, name: str) -> dict[str, Any]:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    assert "re-timed" in proc.stderr, proc.stderr  # the user is told what was wrong and what was done
    assert [p.name for p in out.iterdir()] == [name] and hidden(out) == []
    times = frame_times(out / name)
    assert all(b > a for a, b in itertools.pairwise(times)), times
    return read_clip(out / name)


# --- item 11: out-of-order, reset and repeated timestamps ----------------------------------------------------

@pytest.mark.parametrize("source", ["avi", "h264"])
def test_item11_a_genpts_remux_of_b_frames_is_retimed_to_its_true_times(
        narrow_config: Callable[..., Path], tmp_path: Path, source: str) -> None:
    """What ``ffmpeg -fflags +genpts -i in.avi -c copy out.mp4`` writes: an AVI stores no pts, so each packet
    gets its dts (from 0) plus one frame, in decode order, and the decoder's display-order frames carry the
    times permuted. From a raw ``.h264`` the pts are the dts themselves, from two frames before 0, so the MP4
    muxer also writes an edit list that cuts two frames (46 of the 48 its header counts are shown, by every
    player). Before: exit 70, "ArgumentError: Invalid argument" from the muxer. After: the times sorted back,
    so the output has every frame shown at the original's times, its duration and its sound, copied."""
    made = make_clip(tmp_path / "made.mp4", seconds=2.0)
    step = frame_times(made)[1] - frame_times(made)[0]
    with av.open(str(made)) as clip:
        first = next(p.dts for p in clip.demux(video=0) if p.dts is not None)
    if source == "avi":
        src = remux(made, tmp_path / "genpts.mp4", video_times=lambda n, p: (p.dts - first + step, p.dts - first))
    else:
        src = remux(made, tmp_path / "genpts.mp4", video_times=lambda n, p: (p.dts, p.dts))
    told = frame_times(src)
    assert told != sorted(told)                               # the damage: decoded times out of order
    assert len(told) == (2 * FPS if source == "avi" else 2 * FPS - 2)
    out = tmp_path / "out"
    proc = stylize_cli(narrow_config({"image": {"max_side": 64}}), src, out)
    after, before = assert_clean_output(proc, out, "genpts_randgen.mp4"), read_clip(src)
    assert "out of display order" in proc.stderr
    assert frame_times(out / "genpts_randgen.mp4") == sorted(told)   # each frame at its true time
    assert after["frames"] == before["frames"] == len(told)
    assert abs(after["seconds"] - before["seconds"]) <= 1 / FPS
    assert after["audio_packets"] == before["audio_packets"]          # the sound copied, untouched


def test_item11_joined_recordings_whose_times_jump_back_play_one_after_the_other(
        narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    """``cat a.ts a.ts > joined.ts`` (camcorder .MTS segments are joined so): frames and sound both restart
    at the seam. Before: exit 70 from the muxer. After: the second part follows the first, 2 s of picture and
    of sound, every frame kept."""
    part = make_clip(tmp_path / "part.ts", seconds=1.0, container="mpegts")
    src = tmp_path / "joined.ts"
    src.write_bytes(part.read_bytes() * 2)
    told = frame_times(src)
    assert len(told) == 2 * FPS and told[FPS] < told[FPS - 1]  # the damage: back to the start at the seam
    out = tmp_path / "out"
    proc = stylize_cli(narrow_config({"image": {"max_side": 64}, "video": {"extensions": ["mp4", "ts"]}}), src, out)
    after = assert_clean_output(proc, out, "joined_randgen.mp4")
    assert "jump(s) back in time" in proc.stderr
    assert after["frames"] == 2 * FPS
    assert abs(after["seconds"] - 2.0) <= 1 / FPS
    assert abs(after["audio"][0]["seconds"] - 2 * read_clip(part)["audio"][0]["seconds"]) <= 0.05


def test_item11_repeated_times_keep_every_frame(narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    """A Matroska file whose frames come in pairs with one time each (its muxer takes equal times). Before:
    exit 70 from the muxer. After: every frame kept, in order, each repeat one tick after its twin."""
    made = make_clip(tmp_path / "made.mkv", seconds=1.0, container="matroska", audio=None)

    def pairs(n: int, packet: Any) -> tuple[int, int]:  # Matroska's milliseconds: frame n - n % 2's time
        time = round((n - n % 2) * 1000 / FPS)
        return time, time

    src = remux(made, tmp_path / "pairs.mkv", container="matroska", video_times=pairs)
    told = frame_times(src)
    assert len(set(told)) < len(told)                         # the damage: repeated times
    out = tmp_path / "out"
    proc = stylize_cli(narrow_config({"image": {"max_side": 64}}), src, out)
    after = assert_clean_output(proc, out, "pairs_randgen.mp4")
    assert "repeated time(s)" in proc.stderr
    assert after["frames"] == FPS


def test_item11_retimer_rules_on_plain_sequences() -> None:
    """The rules the clips above run through, on their times alone: in order unchanged, a permutation sorted,
    a reset continued one frame on, a repeat a tick on, a missing time a frame on."""
    from edge_anime.video.retime import Retimer, frame_step

    def run(times: list[int | None], step: int = 10) -> list[int]:
        retimer = Retimer(step=step, depth=3)
        out = [t for pts in times for t in retimer.push(pts)]
        return out + retimer.finish()

    assert frame_step(Fraction(24), Fraction(1, 12288)) == 512 and frame_step(Fraction(0), Fraction(1, 9)) == 1
    assert run([0, 10, 20, 30, 40]) == [0, 10, 20, 30, 40]
    assert run([0, 10, 30, 20, 50, 40, 60]) == [0, 10, 20, 30, 40, 50, 60]
    assert run([0, 10, 20, 30, 40, 50, 60, 0, 10, 20]) == [0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
    assert run([0, 0, 10, 10, 20]) == [0, 1, 10, 11, 20]
    assert run([0, None, 20]) == [0, 10, 20]


# --- item 13: a frame size that changes mid-stream ----------------------------------------------------------

def turning_webm(path: Path, *, landscape: tuple[int, int] = (320, 180), portrait: tuple[int, int] = (200, 900),
                 frames: int = 12, fps: int = 12) -> Path:
    """A VP8 WebM whose frames turn from ``landscape`` to ``portrait`` after ``frames`` (each keyframe of VP8
    carries its own size, as in a WebRTC recording): a grey field with a white middle half, each part."""
    base = Fraction(1, 1000)

    def segment(size: tuple[int, int], first: int) -> list[Any]:
        encoder = av.CodecContext.create("libvpx", "w")
        encoder.width, encoder.height, encoder.pix_fmt = size[0], size[1], "yuv420p"
        encoder.time_base, encoder.framerate = base, fps
        picture = np.full((size[1], size[0], 3), 90, np.uint8)
        picture[size[1] // 4: 3 * size[1] // 4, size[0] // 4: 3 * size[0] // 4] = 250
        packets: list[Any] = []
        for i in range(first, first + frames):
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts, frame.time_base = i * 1000 // fps, base
            packets += encoder.encode(frame)
        return packets + list(encoder.encode(None))

    with av.open(str(path), "w", format="webm") as out:
        stream = out.add_stream("libvpx", rate=fps)
        stream.width, stream.height, stream.pix_fmt = landscape[0], landscape[1], "yuv420p"
        stream.time_base = base
        for packet in segment(landscape, 0) + segment(portrait, frames):
            packet.stream, packet.time_base = stream, base
            out.mux(packet)
    return path


def test_item13_a_clip_turning_portrait_mid_stream_is_pillarboxed_not_squeezed(
        narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    """Landscape 320x180 then 200x900 frames. Before: the portrait frames stretched over the whole 96x54
    output (the white middle half spanned half its width). After: each shown whole at its own aspect, 12x54
    in the middle, black bars either side; the landscape frames fill the picture as before."""
    src = turning_webm(tmp_path / "turned.webm")
    with av.open(str(src)) as clip:
        assert {(f.width, f.height) for f in clip.decode(video=0)} == {(320, 180), (200, 900)}
    out = tmp_path / "out"
    proc = stylize_cli(narrow_config({"image": {"max_side": 96}}), src, out)
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in out.iterdir()] == ["turned_randgen.mp4"]
    with av.open(str(out / "turned_randgen.mp4")) as clip:
        shown = [f.to_ndarray(format="rgb24") for f in clip.decode(video=0)]
    assert len(shown) == 24 and {s.shape for s in shown} == {(54, 96, 3)}
    landscape, portrait = shown[6], shown[-1]
    assert landscape[:, :8].max() > 40 and landscape[:, -8:].max() > 40       # fills the picture
    lit = np.flatnonzero(portrait.max(axis=(0, 2)) > 40)                       # columns with picture in them
    assert 10 <= len(lit) <= 14 and lit[0] >= 40 and lit[-1] <= 56, lit     # 54 * 200 / 900 = 12 px, centred
    assert portrait[:, :36].max() <= 24 and portrait[:, 60:].max() <= 24      # black bars (H.264's ringing)


def test_item13_fit_box_keeps_the_aspect_and_centres() -> None:
    from edge_anime.video.job import fit_box

    assert fit_box((200, 900), (320, 180)) == (140, 0, 40, 180)
    assert fit_box((1920, 1080), (640, 360)) == (0, 0, 640, 360)            # same aspect: fills, no bars
    assert fit_box((180, 320), (180, 320)) == (0, 0, 180, 320)
    assert fit_box((400, 100), (320, 180)) == (0, 50, 320, 80)
