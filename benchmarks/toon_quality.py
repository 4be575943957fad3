"""How close the shipped "toon" model comes to its own training target, on photos it never saw.

For every photo in ``--photos`` (default ``../shared/photos``, evaluation only, never trained on): resize
to 512 px on the long side (the scale the target is tuned at), crop to a multiple of 4, render the target
with ``training.target.toonify`` and run the shipped IR through OpenVINO; report PSNR and SSIM of model vs
target (u8, all three channels) per photo and overall, and write a contact sheet (photo | target | model)
for a person to judge. Output goes to ``--out`` (default ``benchmarks/results/``, untracked): images made
from ../shared photos are never committed.

    nice -n 10 python benchmarks/toon_quality.py --out benchmarks/results/
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import openvino as ov
from PIL import Image
from skimage.metrics import peak_signal_noise_ratio, structural_similarity

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _common import run_static  # noqa: E402
from training.target import TUNED_LONG_SIDE_PX, resize_long_side, toonify  # noqa: E402

SIZE_MULTIPLE = 4
SHEET_CELL_LONG_SIDE_PX = 320  # contact-sheet cells are shrunk so the sheet stays a few MB
PHOTO_SUFFIXES = {".jpg", ".jpeg", ".png"}


def fit(rgb: np.ndarray, long_side_px: int) -> np.ndarray:
    """Resize to the evaluation scale, then crop to the IR's size multiple (centre crop, <= 3 px)."""
    out = resize_long_side(rgb, long_side_px)
    h, w = out.shape[:2]
    h4, w4 = h - h % SIZE_MULTIPLE, w - w % SIZE_MULTIPLE
    top, left = (h - h4) // 2, (w - w4) // 2
    return np.ascontiguousarray(out[top : top + h4, left : left + w4])


def contact_sheet(rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Image.Image:
    """One row per photo: photo | target | model, each shrunk to SHEET_CELL_LONG_SIDE_PX, on white."""
    cells = [[resize_long_side(im, SHEET_CELL_LONG_SIDE_PX) for im in row] for row in rows]
    cell_h = max(c.shape[0] for row in cells for c in row)
    cell_w = max(c.shape[1] for row in cells for c in row)
    sheet = np.full((cell_h * len(cells), cell_w * 3, 3), 255, np.uint8)
    for r, row in enumerate(cells):
        for c, im in enumerate(row):
            sheet[r * cell_h : r * cell_h + im.shape[0], c * cell_w : c * cell_w + im.shape[1]] = im
    return Image.fromarray(sheet)


def evaluate(*, photos: list[Path], model_dir: Path, long_side_px: int) -> tuple[list[dict], Image.Image]:
    core = ov.Core()
    model = core.read_model(model_dir / "model.xml")
    compiled: dict[tuple[int, int], ov.CompiledModel] = {}
    figures, rows = [], []
    for path in photos:
        rgb = fit(np.asarray(Image.open(path).convert("RGB")), long_side_px)
        target = toonify(rgb)
        pred = run_static(compiled, core, model, rgb)
        figures.append({
            "image": path.name,
            "size": list(rgb.shape[:2]),
            "psnr_db": round(float(peak_signal_noise_ratio(target, pred, data_range=255)), 2),
            "ssim": round(float(structural_similarity(target, pred, channel_axis=2, data_range=255)), 4),
            "psnr_photo_vs_target_db": round(float(peak_signal_noise_ratio(target, rgb, data_range=255)), 2),
        })
        rows.append((rgb, target, pred))
        print(f"{path.name}: PSNR {figures[-1]['psnr_db']} dB, SSIM {figures[-1]['ssim']}", flush=True)
    return figures, contact_sheet(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--photos", type=Path, default=REPO.parent / "shared" / "photos")
    p.add_argument("--model-dir", type=Path, default=REPO / "models" / "toon")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--long-side", type=int, default=TUNED_LONG_SIDE_PX, help="evaluation scale (px)")
    a = p.parse_args(argv)
    if not a.photos.is_dir():
        p.error(f"--photos: {a.photos} is not a folder of photos")
    if not (a.model_dir / "model.xml").is_file():
        p.error(f"--model-dir: {a.model_dir} has no model.xml (convert the toon checkpoint first)")
    photos = sorted(x for x in a.photos.iterdir() if x.suffix.lower() in PHOTO_SUFFIXES)
    figures, sheet = evaluate(photos=photos, model_dir=a.model_dir, long_side_px=a.long_side)
    summary = {
        "photos": len(figures),
        "long_side_px": a.long_side,
        "psnr_db_mean": round(statistics.fmean(f["psnr_db"] for f in figures), 2),
        "psnr_db_min": min(f["psnr_db"] for f in figures),
        "ssim_mean": round(statistics.fmean(f["ssim"] for f in figures), 4),
        "ssim_min": min(f["ssim"] for f in figures),
        "psnr_photo_vs_target_db_mean": round(statistics.fmean(f["psnr_photo_vs_target_db"] for f in figures), 2),
        "per_image": figures,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    for name, write in (("toon_quality.json", lambda t: t.write_text(json.dumps(summary, indent=2))),
                        ("toon_contact_sheet.png", lambda t: sheet.save(t, format="PNG"))):
        tmp = a.out / f".{name}.tmp"
        write(tmp)
        tmp.replace(a.out / name)
    print(json.dumps({k: v for k, v in summary.items() if k != "per_image"}, indent=2))
    print(f"contact sheet: {a.out / 'toon_contact_sheet.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
