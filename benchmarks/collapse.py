"""Why photos dominated by one colour came out washed out: the target, the whole picture, its quadrants.

For each photo, the L* contrast ratio (std of L* out / in, ../shared/tools/look.py's measure) of
- the style's training target (training/target.py) at that size: is the *target* washed out?
- the model on the whole picture: what users got;
- the model on each quadrant alone (each with its own GroupNorm statistics): does whole-picture
  normalisation take the contrast?
and the mean L* of photo and output (does the model pull every picture toward middle grey?).

    python benchmarks/collapse.py --model models/toon --style toon scene_1 scene_14 scene_11 street_1

The figures of the first toon (2026-11-30) are in docs/toon.md ("Why one-colour photos washed out").
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from training.target import STYLES, ToonParams, resize_long_side, toonify  # noqa: E402

PHOTOS = REPO.parent / "shared" / "photos"


def lightness(rgb: np.ndarray) -> np.ndarray:
    """CIE L* of sRGB u8, as ../shared/tools/look.py computes it."""
    c = rgb.astype(np.float64) / 255.0
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    y = c @ np.array([0.2126, 0.7152, 0.0722])
    f = np.where(y > 216 / 24389, np.cbrt(y), (24389 / 27 * y + 16) / 116)
    return 116 * f - 16


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("photos", nargs="+", help="stems in --photos-dir")
    p.add_argument("--photos-dir", type=Path, default=PHOTOS)
    p.add_argument("--model", type=Path, default=REPO / "models" / "toon", help="style folder or model.xml")
    p.add_argument("--style", default="", help="target knobs (training/target.py STYLES); default: the first toon's")
    p.add_argument("--sides", default="512,1024")
    a = p.parse_args(argv)
    if not a.photos_dir.is_dir():
        sys.exit(f"{a.photos_dir}: no such folder")
    import openvino as ov

    xml = a.model / "model.xml" if a.model.is_dir() else a.model
    model = ov.Core().compile_model(xml, "CPU")
    params = STYLES[a.style] if a.style else ToonParams()
    print("| photo | px | target | model, whole | model, quadrants | mean L* photo | mean L* out |")
    print("|---|---|---|---|---|---|---|")
    for stem in a.photos:
        path = next(a.photos_dir.glob(f"{stem}.*"))
        img = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
        for side in (int(s) for s in a.sides.split(",")):
            x = resize_long_side(img, side)
            h, w = (s - s % 8 for s in x.shape[:2])
            x = np.ascontiguousarray(x[:h, :w])
            out = model({0: x[None]})[0][0]
            quads = np.zeros_like(out)
            for ys in (slice(0, h // 2), slice(h // 2, h)):
                for xs in (slice(0, w // 2), slice(w // 2, w)):
                    quads[ys, xs] = model({0: np.ascontiguousarray(x[None, ys, xs])})[0][0]
            s0 = lightness(x).std()
            ratio = [lightness(t).std() / s0 for t in (toonify(x, params=params), out, quads)]
            print(f"| {stem} | {side} | {ratio[0]:.2f} | {ratio[1]:.2f} | {ratio[2]:.2f} | "
                  f"{lightness(x).mean():.0f} | {lightness(out).mean():.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
