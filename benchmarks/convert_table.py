"""PSNR and conversion time per precision, for issue 2's closing note.

A seeded-random checkpoint in the published format is converted to fp32, fp16 and int8 with the real
``edge_anime_converters.convert.convert`` (verification on ../shared/photos at 256x256 and 352x480); the table gives
PSNR vs PyTorch (min / mean over every photo and size), INT8's PSNR vs the FP32 IR, wall-clock conversion
time (it includes verification and, for int8, calibration) and the size of model.bin.

    nice -n 10 python benchmarks/convert_table.py --out benchmarks/results/
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SEED = 1234
PRECISIONS = ("fp32", "fp16", "int8")


def measure(checkpoint: Path, precision: str, *, out_dir: Path, photos: Path | None,
            verify_count: int | None, calib_count: int, floor_db: float | None = None) -> dict[str, Any]:
    from edge_anime.models import load_model_info
    from edge_anime_converters.convert import ConversionError, convert

    start = time.perf_counter()
    try:
        folder = convert(checkpoint, name=f"random_{precision}", precision=precision, output_dir=out_dir,
                         verify_dir=photos, verify_limit=verify_count, calib_count=calib_count,
                         floor_db=floor_db)
    except ConversionError as exc:  # a missed floor is a result for this table, not a crash
        return {"precision": precision, "convert_s": round(time.perf_counter() - start, 1), "failed": str(exc)}
    seconds = time.perf_counter() - start
    manifest = load_model_info(folder).manifest
    check = manifest["verification"]
    row = {"precision": precision, "convert_s": round(seconds, 1), "psnr_vs_torch_db": check["psnr_db"],
           "floor_db": check["floor_db"], "images": check["images"], "sizes": check["sizes"],
           "bin_mb": round((folder / "model.bin").stat().st_size / 2**20, 2)}
    if "quantization" in manifest:
        row["psnr_vs_fp32_db"] = manifest["quantization"]["psnr_vs_fp32_db"]
        row["int8_setup"] = {k: manifest["quantization"][k] for k in ("preset", "ignore", "calibration_images")}
    return row


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [f"# Conversion table ({meta['created']})", "",
             f"Seeded-random checkpoint (seed {SEED}); verification: {meta['verification']}; "
             f"command: `{meta['command']}`", "",
             "| precision | PSNR vs PyTorch min / mean (dB) | floor (dB) | PSNR vs FP32 IR min / mean (dB) | "
             "convert time (s) | model.bin (MB) |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "failed" in r:
            lines.append(f"| {r['precision']} | FAILED: {r['failed']} | | | {r['convert_s']:.0f} | |")
            continue
        vs_fp32 = r.get("psnr_vs_fp32_db")
        vs_fp32_text = f"{vs_fp32['min']:.1f} / {vs_fp32['mean']:.1f}" if vs_fp32 else "-"
        lines.append(
            f"| {r['precision']} | {r['psnr_vs_torch_db']['min']:.1f} / {r['psnr_vs_torch_db']['mean']:.1f} | "
            f"{r['floor_db']:.0f} | {vs_fp32_text} | "
            f"{r['convert_s']:.0f} | {r['bin_mb']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--photos", type=Path, default=None, help="default: ../shared/photos")
    parser.add_argument("--verify-count", type=int, default=None, help="photos per size (default: all)")
    parser.add_argument("--calib-count", type=int, default=64)
    parser.add_argument("--precisions", nargs="*", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--int8-floor-db", type=float, default=None,
                        help="override the int8 floor (random weights are harsher than trained ones)")
    args = parser.parse_args(argv)

    import torch

    from edge_anime_converters.generator import seeded_random_generator
    from edge_anime_converters.samples import default_photo_dir

    photos = args.photos or default_photo_dir()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": "python benchmarks/convert_table.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "verification": f"{photos or 'synthetic images'}, {args.verify_count or 'all'} per size"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="convert_table.") as tmp:
        checkpoint = Path(tmp) / "random_generator.pt"
        torch.save(seeded_random_generator(SEED).state_dict(), checkpoint)
        for precision in args.precisions:
            rows.append(measure(checkpoint, precision, out_dir=Path(tmp) / "models", photos=photos,
                                verify_count=args.verify_count, calib_count=args.calib_count,
                                floor_db=args.int8_floor_db if precision == "int8" else None))
            print(json.dumps(rows[-1]), flush=True)
    (args.out / "convert_table.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    (args.out / "convert_table.md").write_text(markdown(rows, meta))
    print(markdown(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
