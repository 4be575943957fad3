"""A stand-in photo folder for boxes without ``../shared/photos``: scikit-image's bundled photos as camera JPEGs.

Why: speed depends on the sizes a box sees (each distinct shape is a compile, bigger files take longer to
decode), not on what is in the picture, so a benchmark on a machine that lacks the shared photos (the lent
16-core machine, a customer's box) needs files with real camera sizes and aspect ratios, not real content.
The sizes below are common camera and phone outputs; the pictures are the CC0/public-domain photos that
ship inside the scikit-image wheel (the training set's licence notes are in docs/toon.md), cropped to each
aspect and resized, saved as JPEG quality 90.

    python benchmarks/make_photo_set.py --out /tmp/photos --count 24
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from _common import REPO

sys.path.insert(0, str(REPO))
from training.data import load_photo

# (W, H): phones (4:3, 16:9, portrait), DSLRs (3:2), webcams and scans; mixed on purpose.
CAMERA_SIZES: tuple[tuple[int, int], ...] = (
    (4032, 3024), (3024, 4032), (6000, 4000), (4000, 6000), (1920, 1080), (1080, 1920), (1600, 1200),
    (2048, 1365), (1080, 1350), (1280, 853), (3264, 2448), (2560, 1440), (1024, 768), (2592, 1944),
    (1200, 1600), (3000, 2000),
)
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket")


def fit_aspect(rgb: np.ndarray, size: tuple[int, int]) -> Image.Image:
    """Centre-crop to ``size``'s aspect ratio, then resize to ``size``."""
    height, width = rgb.shape[:2]
    want = size[0] / size[1]
    if width / height > want:
        new_w = int(round(height * want))
        left = (width - new_w) // 2
        rgb = rgb[:, left:left + new_w]
    else:
        new_h = int(round(width / want))
        top = (height - new_h) // 2
        rgb = rgb[top:top + new_h]
    return Image.fromarray(np.ascontiguousarray(rgb)).resize(size, Image.Resampling.BICUBIC)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--count", type=int, default=24)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sources = {name: load_photo(name) for name in PHOTOS}
    for i in range(args.count):
        size = CAMERA_SIZES[i % len(CAMERA_SIZES)]
        name = PHOTOS[i % len(PHOTOS)]
        fit_aspect(sources[name], size).save(args.out / f"{i:03d}_{name}_{size[0]}x{size[1]}.jpg", quality=90)
    print(f"{args.count} photos in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
