"""Decode cost of a 12 MP photo as JPEG, HEIC and AVIF through ``edge_anime.imaging.decode`` (the product path:
header guards, orientation, colour management), at the default config (the long side planned at 1024 px: a
JPEG is drafted, libjpeg-turbo's DCT scaling decodes it at 1/2 scale; HEVC and AV1 have no such shortcut) and
at ``resize: keep`` (every pixel decoded).

The photo is a real one of ``../shared/photos`` resized to 4000 x 3000 (LANCZOS), else a synthetic gradient with
noise; each format written at the quality a phone uses (JPEG 92, HEIC 90 with pillow-heif's x265, AVIF 90 with
Pillow's libaom at speed 8). Per case, the median of ``--runs`` calls after one untimed call, as wall time
(libheif and libavif decode on threads of their own, so the calling thread's CPU time would miss their work)
and as this process's CPU time (all its threads).

    python benchmarks/decode_formats.py [--runs 5] [--photo FILE]
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from _common import PHOTOS_DIR, REPO, machine, markdown_table

sys.path.insert(0, str(REPO))
from edge_anime.config import ImageSection
from edge_anime.imaging import decode, heif

SIZE = (4000, 3000)  # (W, H): 12 MP, a phone's main camera
QUALITY = {"JPEG": 92, "HEIF": 90, "AVIF": 90}
CONFIGS = {"default (max_side 1024)": ImageSection(), "resize: keep": ImageSection(resize="keep")}


def _photo(given: Path | None) -> tuple[Image.Image, str]:
    path = given or next(iter(sorted(PHOTOS_DIR.glob("scene_*.jpg"))), None)
    if path is not None and path.is_file():
        with Image.open(path) as opened:
            return opened.convert("RGB").resize(SIZE, Image.Resampling.LANCZOS), str(path.name)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:SIZE[1], 0:SIZE[0]].astype(np.float32)
    base = np.stack([xx / SIZE[0], yy / SIZE[1], (xx + yy) / sum(SIZE)], axis=-1) * 255
    noisy = np.clip(base + rng.normal(0, 8, base.shape), 0, 255).astype(np.uint8)
    return Image.fromarray(noisy, "RGB"), "synthetic"


def _encoded(image: Image.Image, fmt: str) -> bytes:
    options: dict[str, Any] = {"quality": QUALITY[fmt]}
    if fmt == "AVIF":
        options["speed"] = 8
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def _timed(call: Callable[[], object], runs: int) -> tuple[float, float]:
    """(median wall ms, median process CPU ms) over ``runs`` calls after one untimed call."""
    call()
    wall, cpu = [], []
    for _ in range(runs):
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        call()
        wall.append((time.perf_counter() - start_wall) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--photo", type=Path)
    args = parser.parse_args()
    heif.ensure_registered()
    image, source = _photo(args.photo)
    rows = []
    for fmt in ("JPEG", "HEIF", "AVIF"):
        data = _encoded(image, fmt)
        for label, cfg in CONFIGS.items():
            name = Path(f"photo.{fmt.lower()}")
            wall_ms, cpu_ms = _timed(lambda data=data, cfg=cfg, name=name: decode(name, cfg, data=data),
                                     args.runs)
            rows.append({"format": fmt, "config": label, "file_kb": round(len(data) / 1024),
                         "wall_ms": round(wall_ms), "cpu_ms": round(cpu_ms)})
    for row in rows:
        jpeg = next(r for r in rows if r["format"] == "JPEG" and r["config"] == row["config"])
        row["vs_jpeg"] = f"{row['wall_ms'] / jpeg['wall_ms']:.1f}x"
    print(markdown_table(rows, ["format", "config", "file_kb", "wall_ms", "cpu_ms", "vs_jpeg"]))
    print(json.dumps({"machine": machine(), "photo": source, "size": SIZE, "runs": args.runs, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
