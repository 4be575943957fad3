"""Clips: frames/s vs `edge-anime bench` images/s at the same size, peak RSS vs clip length, flicker.

The clip is a real 1280x720 photo (../shared/photos/scene_18.jpg, else a synthetic picture) with a square
moving over it and a little sensor noise per frame (sigma 2 levels, as a phone's), 24 fps, a 440 Hz tone.
  speed: per round and size (max_side 256 and 512), `edge-anime bench` on 16 of the clip's frames saved as
         JPEGs (same pixels, same planned size, one warm-up pass) and the clip through `Stylizer.run_clip`
         (after a 6-frame warm-up clip), each in a fresh process, alternating the order every round; the
         ratio is taken per round;
  memory: peak RSS (ru_maxrss of the worker) for the same clip at --short and --long seconds (max_side 256):
         the window of frames in flight bounds it, so the two should match;
  flicker: ClipResult.flicker of the speed runs: output change / input change on static pixels, before and
         after the static-region blend (video.temporal_smoothing).
  variants (--variants auto fp16 student_int8): instead of the above, the same clip through `Stylizer.run_clip`
         once per ``video.variant`` (auto: what the photos run on this box; a name: that IR for clips, as
         issue 43's clips running toon's live student), each in a fresh process after the same warm-up clip,
         the order reversed every other round; frames/s per variant and each one's ratio to the first, per
         round. ``ClipResult.variant`` says which IR the frames ran.

    python benchmarks/video.py [--rounds 2] [--sizes 256 512] [--short 10] [--long 60] [--mem-fps 24]
    python benchmarks/video.py --variants auto fp16 student_int8 --rounds 3 --sizes 384 --speed-seconds 4
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import PHOTOS_DIR, REPO, machine, markdown_table, product_environment, run_worker, write_results

FPS = 24
SIZE = (1280, 720)
BENCH_FRAMES = 16


def background() -> np.ndarray:
    from PIL import Image

    photo = PHOTOS_DIR / "scene_18.jpg"
    if photo.is_file():
        return np.asarray(Image.open(photo).convert("RGB").resize(SIZE), dtype=np.float32)
    yy, xx = np.mgrid[0:SIZE[1], 0:SIZE[0]].astype(np.float32)
    return np.stack([100 + 80 * np.sin(xx / 90), 110 + 70 * np.cos(yy / 70), 120 + 60 * np.sin((xx + yy) / 120)], -1)


def frame_at(base: np.ndarray, i: int, frames: int, rng: np.random.Generator) -> np.ndarray:
    picture = base + rng.normal(0, 2.0, base.shape).astype(np.float32)
    x = int(i * (SIZE[0] - 160) / max(frames, 1))
    picture[260:420, x:x + 160] = (240, 200, 40)
    return np.clip(picture, 0, 255).astype(np.uint8)


def make_clip(path: Path, seconds: float, fps: int = FPS) -> Path:
    import av

    base, rng, frames = background(), np.random.default_rng(0), int(seconds * fps)
    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=fps, options={"crf": "18", "preset": "ultrafast"})
        video.width, video.height, video.pix_fmt = SIZE[0], SIZE[1], "yuv420p"
        sound = out.add_stream("aac", rate=44_100)
        sound.layout = "mono"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(frame_at(base, i, frames, rng), format="rgb24")
            frame.pts = i
            out.mux(video.encode(frame))
        out.mux(video.encode())
        for start in range(0, int(seconds * 44_100), 1024):
            tone = (0.3 * np.sin(2 * np.pi * 440 * np.arange(start, start + 1024) / 44_100)).astype(np.float32)
            chunk = av.AudioFrame.from_ndarray(tone[None], format="fltp", layout="mono")
            chunk.sample_rate, chunk.pts = 44_100, start
            out.mux(sound.encode(chunk))
        out.mux(sound.encode())
    return path


def save_frames(folder: Path) -> Path:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    base, rng = background(), np.random.default_rng(0)
    for i in range(BENCH_FRAMES):
        Image.fromarray(frame_at(base, i, BENCH_FRAMES, rng)).save(folder / f"f{i:02d}.jpg", quality=95)
    return folder


def worker(clip: Path, max_side: int, out: Path, variant: str = "auto") -> dict[str, Any]:
    """One clip in this (fresh) process: frames/s, flicker, peak RSS; ``variant`` is ``video.variant``."""
    sys.path.insert(0, str(REPO))
    from edge_anime import Stylizer
    from edge_anime.config import load_config

    config = load_config(None)
    config = config.model_copy(update={"image": config.image.model_copy(update={"resize": "max_side",
                                                                                  "max_side": max_side}),
                                       "video": config.video.model_copy(update={"variant": variant})})
    with Stylizer(config) as stylizer:
        # bench's warm-up pass, here too: the clip's shape compiled and each stream's first inference run
        warm = stylizer.run_clip(clip.with_name("warmup.mp4"), out)
        if warm.error is not None:
            raise warm.error
        out.unlink()
        result = stylizer.run_clip(clip, out)
    if result.error is not None:
        raise result.error
    return {"frames": result.frames, "frames_per_s": result.frames_per_s, "flicker": result.flicker,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "out_size": result.out_size,
            "audio": result.audio, "variant": (stylizer.engine.choice or {}).get("summary", ""),
            "clip_variant": result.variant}


def bench_images(frames: Path, max_side: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "bench.json"
        subprocess.run([sys.executable, "-m", "edge_anime", "bench", str(frames), "--max-side", str(max_side),
                        "--json", str(report)], cwd=REPO, check=True, capture_output=True)
        return float(json.loads(report.read_text())["images_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--speed-seconds", type=float, default=4.0, help="length of the speed runs' clip")
    parser.add_argument("--short", type=float, default=10.0)
    parser.add_argument("--long", type=float, default=60.0)
    parser.add_argument("--mem-fps", type=int, default=FPS, help="frame rate of the memory runs' clips")
    parser.add_argument("--mem-side", type=int, default=256, help="max_side of the memory runs")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--variants", nargs="+", metavar="VIDEO_VARIANT",
                        help="time clips per video.variant (auto, live or a variant name) instead of clip vs bench")
    parser.add_argument("--worker", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        clip, side, out, *variant = args.worker
        print(json.dumps(worker(Path(clip), int(side), Path(out), *variant)))
        return
    env = product_environment()
    if args.variants:
        variants_main(args, env)
        return
    rows: list[dict[str, Any]] = []
    data: dict[str, Any] = {"machine_start": machine(), "speed": [], "memory": []}
    with tempfile.TemporaryDirectory(prefix="edge-anime-video-") as tmp:
        folder = Path(tmp)
        clip = make_clip(folder / "speed.mp4", args.speed_seconds)
        make_clip(folder / "warmup.mp4", 0.25)
        frames = save_frames(folder / "frames")
        for r in range(args.rounds):
            for size in args.sizes:
                order = ["bench", "clip"] if r % 2 == 0 else ["clip", "bench"]
                got: dict[str, Any] = {}
                for side in order:
                    if side == "bench":
                        got["images_per_s"] = bench_images(frames, size)
                    else:
                        got.update(run_worker(__file__, ["--worker", str(clip), str(size), str(folder / "o.mp4")], env))
                ratio = got["frames_per_s"] / got["images_per_s"]
                before, after = got["flicker"] or (float("nan"), float("nan"))
                row = {"round": r + 1, "max_side": size, "out_size": "x".join(map(str, got["out_size"])),
                       "bench images/s": round(got["images_per_s"], 3), "clip frames/s": round(got["frames_per_s"], 3),
                       "ratio": round(ratio, 3), "flicker before": round(before, 3), "flicker after": round(after, 3)}
                print(json.dumps(row), flush=True)
                rows.append(row)
                data["speed"].append({**row, "variant": got["variant"], "audio": got["audio"]})
        memory_rows: list[dict[str, Any]] = []
        if not args.skip_memory:
            for seconds in (args.short, args.long):
                path = make_clip(folder / f"mem{seconds:g}.mp4", seconds, args.mem_fps)
                make_clip(folder / "warmup.mp4", 0.25, args.mem_fps)
                started = time.perf_counter()
                got = run_worker(__file__, ["--worker", str(path), str(args.mem_side), str(folder / "m.mp4")], env)
                row = {"seconds": seconds, "fps": args.mem_fps, "max_side": args.mem_side, "frames": got["frames"],
                       "peak RSS MB": round(got["peak_rss_mb"], 1),
                       "frames/s": round(got["frames_per_s"], 3), "wall s": round(time.perf_counter() - started, 1)}
                print(json.dumps(row), flush=True)
                memory_rows.append(row)
                path.unlink()
        data["memory"] = memory_rows
    data["machine_end"] = machine()
    table = markdown_table(rows, list(rows[0])) + ("\n" + markdown_table(memory_rows, list(memory_rows[0]))
                                                   if memory_rows else "")
    print(table)
    print(write_results("video", data, table))


def variants_main(args: argparse.Namespace, env: dict[str, str]) -> None:
    """frames/s of one clip per ``video.variant``, alternating the order every round; ratios to the first."""
    rows: list[dict[str, Any]] = []
    data: dict[str, Any] = {"machine_start": machine(), "variants": []}
    with tempfile.TemporaryDirectory(prefix="edge-anime-video-") as tmp:
        folder = Path(tmp)
        clip = make_clip(folder / "speed.mp4", args.speed_seconds)
        make_clip(folder / "warmup.mp4", 0.25)
        for r in range(args.rounds):
            for size in args.sizes:
                order = args.variants if r % 2 == 0 else list(reversed(args.variants))
                got = {v: run_worker(__file__, ["--worker", str(clip), str(size), str(folder / "o.mp4"), v], env)
                       for v in order}
                first = got[args.variants[0]]["frames_per_s"]
                for v in args.variants:
                    row = {"round": r + 1, "max_side": size, "out_size": "x".join(map(str, got[v]["out_size"])),
                           "video.variant": v, "ran": got[v]["clip_variant"], "frames": got[v]["frames"],
                           "clip frames/s": round(got[v]["frames_per_s"], 3),
                           f"x {args.variants[0]}": round(got[v]["frames_per_s"] / first, 2),
                           "flicker after": round((got[v]["flicker"] or (0.0, float("nan")))[1], 3)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
                    data["variants"].append({**row, "photos": got[v]["variant"], "peak_rss_mb": got[v]["peak_rss_mb"]})
    data["machine_end"] = machine()
    table = markdown_table(rows, list(rows[0]))
    print(table)
    print(write_results("video_variants", data, table))


if __name__ == "__main__":
    main()
