"""The two shortcuts of shrinking a photo, time vs picture: JPEG draft gap and LANCZOS reducing gap.

libjpeg decodes a JPEG at 1/2, 1/4 or 1/8 scale for a fraction of the full cost; the planner's LANCZOS then
takes the rest of the way. The draft gap (``decoder.DRAFT_REDUCING_GAP``) is the least factor the draft
leaves for LANCZOS (decode at >= gap x the target). Pillow's resize can likewise take integer box steps
first and leave LANCZOS the last ``reducing_gap`` (``planner.REDUCING_GAP``). For each resize mode and each
(draft gap, resize gap) this script times decode + plan over the photos (best of ``--repeat``) and compares
the planned input, and optionally the stylized output of ``--model``, with the same photo decoded in full
and shrunk by LANCZOS alone: PSNR min / mean, and the worst photo.

    python benchmarks/draft_gap.py [--gaps 2 1.5 1.25 1] [--resize-gaps 3 2] [--model models/toon]
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import PHOTOS_DIR, REPO, machine, markdown_table, run_static, write_results

sys.path.insert(0, str(REPO))

import edge_anime.imaging.decoder as decoder_module
import edge_anime.imaging.planner as planner_module
from edge_anime.config import parse_config
from edge_anime.imaging import decoder, planner
from edge_anime_converters.samples import psnr_db

NO_DRAFT = 1e6  # a gap no JPEG can meet: always the full decode
MODES = {"max_side 512": {"resize": "max_side", "max_side": 512},
         "fixed 512x512": {"resize": "fixed", "fixed": "512x512"},
         "max_side 1024": {"resize": "max_side", "max_side": 1024}}


def planned(files: dict[Path, bytes], cfg: Any, gap: float, resize_gap: float | None,
            repeat: int) -> tuple[float, dict[Path, np.ndarray]]:
    """Decode + plan every file with these gaps; (best seconds per photo, planned RGB per file)."""
    decoder_module.DRAFT_REDUCING_GAP = gap
    planner_module.REDUCING_GAP = resize_gap
    best, out = float("inf"), {}
    for _ in range(repeat):
        start = time.perf_counter()
        for path, data in files.items():
            out[path] = planner.plan(decoder.decode(path, cfg, data=data), cfg, multiple=4).rgb
        best = min(best, (time.perf_counter() - start) / len(files))
    return best, out


def stylize_all(model_dir: Path, images: dict[Path, np.ndarray]) -> dict[Path, np.ndarray]:
    """The model's output for each planned input (one static compile per size)."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(model_dir / "model.xml")
    compiled: dict[tuple[int, int], Any] = {}
    return {path: run_static(compiled, core, model, rgb) for path, rgb in images.items()}


def compare(ref: dict[Path, np.ndarray], got: dict[Path, np.ndarray]) -> tuple[float, float, str]:
    scores = {p: psnr_db(ref[p], got[p]) for p in ref}
    worst = min(scores, key=scores.__getitem__)
    return scores[worst], statistics.fmean(scores.values()), worst.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--gaps", type=float, nargs="+", default=[2.0, 1.5, 1.25, 1.0], help="JPEG draft gaps")
    parser.add_argument("--resize-gaps", type=float, nargs="+", default=[3.0, 2.0], help="LANCZOS reducing gaps")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--model", type=Path, default=None, help="also compare the stylized outputs of this model folder")
    args = parser.parse_args()
    paths = sorted(p for p in args.photos.iterdir() if p.suffix.lower() in {".jpg", ".jpeg"})
    files = {p: p.read_bytes() for p in paths}
    rows = []
    for mode in args.modes:
        cfg = parse_config({"model": {"path": "x.xml"}, "image": MODES[mode]}, base_dir=REPO).image
        ref_s, ref = planned(files, cfg, NO_DRAFT, None, args.repeat)
        ref_out = stylize_all(args.model, ref) if args.model else None
        rows.append({"mode": mode, "gap": "full decode", "resize gap": "LANCZOS only", "ms per photo": ref_s * 1000,
                     "speed-up": 1.0})
        for gap, resize_gap in itertools.product([NO_DRAFT, *args.gaps], args.resize_gaps):
            seconds, got = planned(files, cfg, gap, resize_gap, args.repeat)
            drafted = sum(ref[p].shape != got[p].shape or not np.array_equal(ref[p], got[p]) for p in paths)
            low, mean, worst = compare(ref, got)
            row = {"mode": mode, "gap": "full decode" if gap == NO_DRAFT else gap, "resize gap": resize_gap, "ms per photo": seconds * 1000, "speed-up": ref_s / seconds,
                   "photos changed": drafted, "input PSNR min": low, "input PSNR mean": mean, "worst": worst}
            if ref_out is not None:
                low, mean, worst = compare(ref_out, stylize_all(args.model, got))
                row.update({"output PSNR min": low, "output PSNR mean": mean, "worst output": worst})
            rows.append(row)
            print(row, flush=True)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = (f"decode + plan of {len(paths)} JPEGs from {args.photos}, best of {args.repeat}; PSNR vs the full "
             f"decode shrunk by LANCZOS alone" + (f"; outputs of {args.model}" if args.model else "")
             + "\n\n" + markdown_table(rows, columns))
    write_results("draft_gap", {"machine": machine(), "rows": rows}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
