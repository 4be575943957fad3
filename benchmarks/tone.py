"""Cost of the tone guard (``edge_anime.imaging.tone.restore_tone``) at 1024 x 768 and 4000 x 3000.

Three cases per size, each the median of ``--runs`` calls (wall and this thread's CPU time, which other
processes' load changes far less):
  repair     a washed-out output (L* contrast 0.3 of the photo's) with a cyan cast: both steps run
  no cast    the same washed-out output without the cast: the range step only
  unchanged  an output with the photo's contrast and grey greys: statistics only, the array comes back as is
The photo is a real one from ``../shared/photos`` resized to the size when there is one (its share of
neutral pixels sets the neutral step's cost), else a synthetic sky with a white wall.

    python benchmarks/tone.py [--runs 15] [--photo FILE]
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from _common import PHOTOS_DIR, REPO, cpu_model, machine, markdown_table, timed_call, write_results

sys.path.insert(0, str(REPO))
from edge_anime.imaging.tone import restore_tone

SIZES = ((1024, 768), (4000, 3000))  # (W, H)


def synthetic(width: int, height: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    rgb = np.broadcast_to(np.concatenate([70 + 110 * y, 130 + 90 * y, 235 - 15 * y], axis=2),
                          (height, width, 3)).copy()
    rgb[height // 2: height * 7 // 8, width // 4: width * 5 // 8] = 243
    rgb += rng.normal(0.0, 2.0, rgb.shape).astype(np.float32)
    return np.clip(rgb, 0, 255).astype(np.uint8)


def photo_at(path: Path | None, width: int, height: int) -> tuple[np.ndarray, str]:
    if path is None:
        return synthetic(width, height), "synthetic sky"
    image = Image.open(path).convert("RGB").resize((width, height), Image.Resampling.LANCZOS)
    return np.asarray(image), path.name


def washed(photo: np.ndarray, cast: tuple[float, float, float]) -> np.ndarray:
    f = photo.astype(np.float32)
    mean = f.mean()
    return np.clip((f - mean) * 0.3 + mean + np.array(cast, np.float32), 0, 255).astype(np.uint8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--photo", type=Path, default=None, help="default: the first of ../shared/photos, if any")
    args = parser.parse_args()
    photo_path = args.photo
    if photo_path is None and PHOTOS_DIR.is_dir():
        photo_path = next(iter(sorted(PHOTOS_DIR.glob("scene_*.jpg")) or sorted(PHOTOS_DIR.glob("*.jpg"))), None)
    rows: list[dict[str, Any]] = []
    for width, height in SIZES:
        photo, name = photo_at(photo_path, width, height)
        cases = {"repair": washed(photo, (-22, 0, -6)), "no cast": washed(photo, (0, 0, 0)), "unchanged": photo}
        for case, output in cases.items():
            wall_ms, cpu_ms = timed_call(functools.partial(restore_tone, output, photo), args.runs)
            rows.append({"size": f"{width}x{height}", "case": case, "photo": name, "wall_ms": wall_ms,
                         "cpu_ms": cpu_ms})
            print(f"{width}x{height} {case:9s} {wall_ms:7.1f} ms wall {cpu_ms:7.1f} ms cpu", flush=True)
    table = f"CPU: {cpu_model()}\n\n" + markdown_table(rows, ["size", "case", "photo", "wall_ms", "cpu_ms"])
    write_results("tone", {"machine": machine(), "runs": args.runs, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
