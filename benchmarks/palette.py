"""Cost of the cel palette (``edge_anime.imaging.palette.apply_palette``) at 1024 x 768 and 4000 x 3000.

Per size, the median of ``--runs`` calls (wall and this thread's CPU time, which other processes' load changes
far less), split into its parts: choosing the palette (sample, median cut, k-means rounds) and the whole
step (that plus the blur the entries are read from and the mapping of every pixel). The picture is the
bundled toon's output for a real photo of ``../shared/photos`` when there is one (through ``Stylizer``, the
product path, with the palette and the tone guard off), else a synthetic noisy gradient with ink lines;
either way resized to the size, since the cost is the pixels'.

    python benchmarks/palette.py [--runs 15] [--photo FILE]
"""
from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from _common import PHOTOS_DIR, REPO, cpu_model, machine, markdown_table, timed_call, write_results

sys.path.insert(0, str(REPO))
from edge_anime.imaging.palette import apply_palette, choose_palette

SIZES = ((1024, 768), (4000, 3000))  # (W, H)
COLOURS = 256


def synthetic(width: int, height: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    y = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None, None]
    x = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :, None]
    zero = np.zeros((height, width, 1), np.float32)
    rgb = np.concatenate([70 + 110 * y + 30 * x + zero, 130 + 90 * x + zero, 235 - 60 * y + zero], axis=2)
    rgb += rng.normal(0.0, 1.5, rgb.shape).astype(np.float32)
    rgb[:: max(1, height // 12), :] = 15  # ink
    return np.clip(rgb, 0, 255).astype(np.uint8)


def stylized(path: Path) -> np.ndarray:
    """The bundled default style's output for ``path``, palette and tone guard off: what the palette gets."""
    from edge_anime import Stylizer

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "c.yaml"
        config.write_text('image:\n  palette: "off"\n  tone: "off"\n', encoding="utf-8")
        with Stylizer(config) as stylizer:
            return np.asarray(stylizer.stylize(path).convert("RGB"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--photo", type=Path, default=None, help="default: scene_1 of ../shared/photos, if any")
    args = parser.parse_args()
    photo_path = args.photo
    if photo_path is None and (PHOTOS_DIR / "scene_1.jpg").is_file():
        photo_path = PHOTOS_DIR / "scene_1.jpg"
    base = stylized(photo_path) if photo_path is not None else None
    name = photo_path.name if photo_path is not None else "synthetic gradient"
    rows: list[dict[str, Any]] = []
    for width, height in SIZES:
        picture = (synthetic(width, height) if base is None
                   else np.asarray(Image.fromarray(base).resize((width, height), Image.Resampling.LANCZOS)))
        for part, call in (("choose", functools.partial(choose_palette, picture, COLOURS)),
                           ("whole step", functools.partial(apply_palette, picture, COLOURS))):
            wall_ms, cpu_ms = timed_call(call, args.runs)
            rows.append({"size": f"{width}x{height}", "part": part, "picture": name, "wall_ms": wall_ms,
                         "cpu_ms": cpu_ms})
            print(f"{width}x{height} {part:10s} {wall_ms:7.1f} ms wall {cpu_ms:7.1f} ms cpu", flush=True)
    table = f"CPU: {cpu_model()}\n\n" + markdown_table(rows, ["size", "part", "picture", "wall_ms", "cpu_ms"])
    write_results("palette", {"machine": machine(), "runs": args.runs, "colours": COLOURS, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
