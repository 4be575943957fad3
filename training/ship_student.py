"""Ship a distilled student (training/distill.py) into its teacher's style folder as a live-frames variant.

    python -m training.ship_student --student /work/runs/distill_toon/student.pt --style-dir models/toon

The student is converted to INT8 (the converter's own verification: NNCF against its FP32 IR on the photos),
then measured against its teacher, the style's default IR at f32, on every photo at the booth's frame size
(``--side``, http.live.max_side's default): that mean is what ``LIVE_QUALITY_FLOOR_DB`` holds it to. It goes in
as ``variants.student_int8`` with ``uses: [live]``, so the pictures' start-up choice passes it by (it is not the
same picture as the teacher at 35 dB) and ``http.live.variant: auto`` runs it.

Why INT8 only: on the 2-vCPU EPYC it answered 9.75 live frames/s against the FP16 student's 8.95 (benchmarks/
live.py, one session, 384 px), and models/ holds a 24 MB budget (issue 41) that both would pass.

Why the decoder's last three convolutions stay float (``STUDENT_INT8_SETUPS``): all-INT8, the student held the
35 dB floor against its own FP32 (35.8 dB worst photo) but drew a fine grain, look.py's texture 34 % over the
teacher's on the 31 photos at 384 px (raw IR outputs: 0.143 against 0.107; the FP32 student 0.105). Measured per
setup, the same photos and size:

    setup (NNCF, every one MINMAX ranges but the last)       texture   vs FP32 worst / mean   vs teacher mean
    all-INT8 (norm, first and last conv float)               0.143      35.8 / 38.4 dB          30.15 dB
    + block_d.1, block_e.1 float                             0.135      36.4 / 39.2             30.33
    + block_d.1, block_e.1, block_e.2 float (shipped)        0.112      37.4 / 40.5             30.50
    all-INT8, NNCF's default ranges                          0.115      29.5 / 41.6             30.16
    QAT (training/qat_toon.py --checkpoint, 100 steps)       0.163      34.5 / 37.7             29.96

The shipped setup costs 1.2x the all-INT8 latency of a 384x288 frame (alternating rounds); the figures with the
whole live path are in docs/styles.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
import yaml
from PIL import Image

from edge_anime_converters.convert import convert
from edge_anime_converters.quantize import DECODER_FLOAT3_SETUPS, Int8Setup

REPO = Path(__file__).resolve().parents[1]
PHOTOS = REPO.parent / "shared" / "photos"
VARIANT = "student_int8"
FRAME_SIDE_PX = 384
# the converter's candidates from the one with block_d.1, block_e.1 and block_e.2 float (the docstring's table)
STUDENT_INT8_SETUPS: tuple[Int8Setup, ...] = DECODER_FLOAT3_SETUPS


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def psnr_vs_teacher(teacher_xml: Path, student_xml: Path, photos: list[Path], side: int
                    ) -> list[tuple[str, float]]:
    """(photo, dB) of the student's raw output against the teacher's, both at f32, each photo at ``side``."""
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}
    teacher, student = (core.compile_model(str(x), "CPU", config) for x in (teacher_xml, student_xml))
    found = []
    for photo in photos:
        with Image.open(photo) as im:
            rgb = im.convert("RGB")
        scale = side / max(rgb.size)
        rgb = rgb.resize((max(4, round(rgb.width * scale / 4) * 4), max(4, round(rgb.height * scale / 4) * 4)),
                         Image.Resampling.LANCZOS)
        x = np.asarray(rgb)[None]
        a, b = (np.asarray(m(x)[0], dtype=np.float64) for m in (teacher, student))
        mse = max(float(np.mean((a - b) ** 2)), 1e-10)
        found.append((photo.name, float(10 * np.log10(255.0**2 / mse))))
    return found


def ship(student: Path, style_dir: Path, *, photos_dir: Path, side: int) -> dict[str, Any]:
    """Convert, measure, copy the IR in and add the manifest entry; returns the entry.

    The photos are named relative to the working folder (``../shared/photos`` from the repository, as
    ``ship_style --calib`` is given them), so the manifest records no machine's absolute path."""
    photos_dir = Path(os.path.relpath(photos_dir))
    manifest_path = style_dir / "manifest.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    photos = sorted(p for p in photos_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    with tempfile.TemporaryDirectory() as tmp:
        built = convert(student, name="student", precision="int8", output_dir=Path(tmp), calib_dir=photos_dir,
                        upsample_align=True, style=str(manifest["style"]), two_pass=False,
                        int8_setups=STUDENT_INT8_SETUPS)
        written: dict[str, Any] = yaml.safe_load((built / "manifest.yaml").read_text())
        # an INT8 conversion into an empty folder writes INT8 as the folder's default; beside FP16, a variant
        converted: dict[str, Any] = (written.get("variants") or {}).get("int8", written)
        ir = built / str(converted["ir"]["xml"])
        figures = psnr_vs_teacher(style_dir / manifest["ir"]["xml"], ir, photos, side)
        for suffix in (".xml", ".bin"):
            shutil.copyfile(ir.with_suffix(suffix), style_dir / f"model_{VARIANT}{suffix}")
    values = [db for _, db in figures]
    worst = min(figures, key=lambda f: f[1])
    entry: dict[str, Any] = {
        "precision": "int8",
        "uses": ["live"],
        "ir": {"xml": f"model_{VARIANT}.xml", "bin": f"model_{VARIANT}.bin",
               "xml_sha256": _sha256(style_dir / f"model_{VARIANT}.xml"),
               "bin_sha256": _sha256(style_dir / f"model_{VARIANT}.bin")},
        "distilled": {"source": {"file": student.name, "sha256": _sha256(student)}, "width": 0.5,
                      "teacher": {"xml_sha256": manifest["ir"]["xml_sha256"],
                                  "bin_sha256": manifest["ir"]["bin_sha256"]},
                      "recipe": "training/distill.py"},
        "quality": {"reference": "teacher: the style's default IR at f32", "image_source": f"photos:{photos_dir}",
                    "images": len(values), "side_px": side, "worst_image": worst[0],
                    "psnr_db": {"min": round(min(values), 2), "mean": round(float(np.mean(values)), 2)}},
        # its side-by-side stays in the scratch folder: it shows the calibration photos (ship_style's drop_photo_pictures)
        "verification": {**(converted.get("verification") or {}), "side_by_side": None},
        "quantization": converted.get("quantization"),
        "versions": converted.get("versions"),
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    write_entry(manifest_path, manifest, entry)
    return entry


def write_entry(manifest_path: Path, manifest: dict[str, Any], entry: dict[str, Any]) -> None:
    """Add (or replace) the entry, leaving the rest of the manifest as the converter wrote it: appended under
    ``variants:`` when that is the last key (as the converter writes it), else the whole file dumped again."""
    text = manifest_path.read_text()
    had = VARIANT in (manifest.get("variants") or {})
    last_key = [line for line in text.splitlines() if line[:1].isalpha()][-1]
    if not had and last_key == "variants:":
        block = yaml.safe_dump({VARIANT: entry}, sort_keys=False, width=120)
        text = text.rstrip("\n") + "\n" + "".join(f"  {line}\n" for line in block.splitlines())
    else:
        manifest.setdefault("variants", {})[VARIANT] = entry
        text = yaml.safe_dump(manifest, sort_keys=False, width=120)
    manifest_path.write_text(text)
    if yaml.safe_load(text)["variants"][VARIANT] != entry:
        raise RuntimeError(f"{manifest_path}: the {VARIANT} entry did not read back as written")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--student", type=Path, required=True, help="training/distill.py's student.pt")
    p.add_argument("--style-dir", type=Path, required=True, help="the teacher's style folder (models/toon)")
    p.add_argument("--photos", type=Path, default=PHOTOS)
    p.add_argument("--side", type=int, default=FRAME_SIDE_PX, help="long side the photos are compared at")
    args = p.parse_args(argv)
    entry = ship(args.student, args.style_dir, photos_dir=args.photos, side=args.side)
    q = entry["quality"]
    print(f"{args.style_dir}: {VARIANT} vs its teacher at {q['side_px']} px on {q['images']} photos: mean "
          f"{q['psnr_db']['mean']} dB, worst {q['psnr_db']['min']} dB ({q['worst_image']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
