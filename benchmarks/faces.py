"""``image.faces: auto`` measured: recall and false faces, the seam, and the time 4 faces add at 1024 px.

    python benchmarks/faces.py [--groups 24] [--rounds 3] [--crop 320] [--sheet DIR]

- **Recall**: group shots composed from ``../shared/photos`` (tests/facesets.py: 2-6 faces of 60-300 px pasted on a
  scene at 1024 px), faces of >= 80 px found (IoU > 0.3 with the pasted box), false faces on the groups and on the
  scene photos at 1024 px (people in some scenes are real faces; none is >= ``image.faces_min_px``).
- **Time**: one Stylizer per setting, warm, on group shots with exactly 4 faces of 80-200 px (all restyled by
  the bundled styles) at 1024 px; ``stylize`` of each
  shot with faces off, on (drawn: ``image.portrait: auto``, which restyles only a face the mesh does not see) and
  on without the portrait (restyled), alternately,
  ``--rounds`` times; the ratios of the medians to faces off (the issue's <= 1.5x).
- **Seam**: for each face, the PSNR of the 8 px band on both sides of the paste's border against the whole
  picture's result (tests/test_faces.py's check), the minimum over every face.
- ``--sheet DIR``: each shot with faces off and on, side by side, and crops of the faces, for a person to look at.

``--crop``: the face crop's side for the bundled style (its manifest's ``faces.crop_px``), on a copy of the style.
"""
from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from PIL import Image

from _common import PHOTOS_DIR, REPO, machine, markdown_table, write_results

sys.path.insert(0, str(REPO))
from edge_anime.config import load_config
from edge_anime.locations import bundled_models_dir
from edge_anime.stylizer import Stylizer
from tests.facesets import band_psnr, groups, match


def _style_copy(folder: Path, crop: int | None, style: str) -> Path:
    target = folder / style
    shutil.copytree(bundled_models_dir() / style, target)
    if crop is not None:
        manifest = yaml.safe_load((target / "manifest.yaml").read_text(encoding="utf-8"))
        manifest["faces"] = {**manifest.get("faces", {}), "crop_px": crop}
        (target / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return target


def _config(folder: Path, style: Path, faces: str, cache: Path, portrait: str = "auto") -> Any:
    path = folder / f"{faces}_{portrait}.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": str(style)}, "device": {"cache_dir": str(cache)},
                                    "image": {"faces": faces, "portrait": portrait}}), encoding="utf-8")
    return load_config(path)


def recall(stylizer: Stylizer, photos: Path, count: int) -> dict[str, Any]:
    restyler = next(iter(stylizer._compiled.values())).pipeline.faces
    assert restyler is not None
    found = total = false = 0
    detect_s: list[float] = []
    for group in groups(photos, count, seed=1):
        start = time.perf_counter()
        faces = restyler.detector.detect(np.asarray(group.image), min_px=restyler.min_px)
        detect_s.append(time.perf_counter() - start)
        hits, extra = match(group.boxes, [f.box for f in faces])
        found += sum(h for h, b in zip(hits, group.boxes) if b[2] - b[0] >= 80)
        total += sum(1 for b in group.boxes if b[2] - b[0] >= 80)
        false += extra
    scene_false = 0
    scenes = sorted(photos.glob("scene_*.jpg"))
    for scene in scenes:
        with Image.open(scene) as image:
            fitted = image.convert("RGB")
        fitted.thumbnail((1024, 1024))
        scene_false += len(restyler.detector.detect(np.asarray(fitted), min_px=restyler.min_px))
    return {"groups": count, "faces_80_plus": total, "found": found, "recall": round(found / max(total, 1), 4),
            "false_in_groups": false, "scenes": len(scenes), "false_in_scenes": scene_false,
            "false_per_photo": round((false + scene_false) / (count + len(scenes)), 4),
            "detect_ms_median": round(statistics.median(detect_s) * 1000, 1)}


def timing(off: Stylizer, on: Stylizer, shots: list[Path], rounds: int,
           restyled: Stylizer | None = None) -> dict[str, Any]:
    """Faces off and on (and, with ``restyled``, on without the portrait) timed alternately on the same shots."""
    settings = [("off", off), ("on", on)] + ([("restyle_only", restyled)] if restyled is not None else [])
    times: dict[str, list[float]] = {name: [] for name, _ in settings}
    faces_seen: list[int] = []
    for _ in range(rounds):
        for shot in shots:
            for name, stylizer in settings:
                start = time.perf_counter()
                result = stylizer.run(shot)
                times[name].append(time.perf_counter() - start)
                if name == "on":
                    faces_seen.append(len(result.faces))
    medians = {name: statistics.median(values) for name, values in times.items()}
    out = {"shots": len(shots), "rounds": rounds, "faces_per_shot": sorted(set(faces_seen)),
           "off_s_median": round(medians["off"], 3), "on_s_median": round(medians["on"], 3),
           "ratio": round(medians["on"] / medians["off"], 3)}
    if restyled is not None:
        out |= {"restyle_only_s_median": round(medians["restyle_only"], 3),
                "restyle_only_ratio": round(medians["restyle_only"] / medians["off"], 3)}
    return out


def seams(stylizer: Stylizer, shots: list[Path]) -> dict[str, Any]:
    restyler = next(iter(stylizer._compiled.values())).pipeline.faces
    assert restyler is not None
    worst = worst_box = math.inf
    count = 0
    for shot in shots:
        with Image.open(shot) as image:
            rgb = np.asarray(image.convert("RGB"))
        rgb = rgb[:rgb.shape[0] // 8 * 8, :rgb.shape[1] // 8 * 8]
        whole = stylizer.engine.infer(rgb)
        for face in restyler.detect(rgb):
            result = whole.copy()
            (box,) = restyler.apply(result, rgb, [face])
            worst = min(worst, band_psnr(result, whole, box))
            x, y, w, h = face.xywh(rgb.shape[1], rgb.shape[0])
            worst_box = min(worst_box, band_psnr(result, whole, (x, y, x + w, y + h)))
            count += 1
    # band_psnr: around the paste's border (the feather is zero there, so the whole picture's own pixels);
    # face_box_band_psnr: around the detector's face box, inside the paste: how far the restyled face's
    # surroundings are from the whole picture's (not a seam: the two styles of one face differ there).
    return {"faces": count, "band_psnr_db_min": round(worst, 2), "face_box_band_psnr_db_min": round(worst_box, 2)}


def sheet(off: Stylizer, on: Stylizer, shots: list[Path], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for shot in shots:
        a, b = off.run(shot), on.run(shot)
        assert a.image is not None and b.image is not None
        pair = Image.new("RGB", (a.image.width * 2 + 8, a.image.height), "white")
        pair.paste(a.image, (0, 0))
        pair.paste(b.image, (a.image.width + 8, 0))
        pair.save(folder / f"{shot.stem}_off_on.jpg", quality=90)
        for index, (x, y, w, h) in enumerate(b.faces):
            pad = w // 2
            box = (max(0, x - pad), max(0, y - pad), x + w + pad, y + h + pad)
            with Image.open(shot) as source:
                row = [source.convert("RGB").crop(box), a.image.crop(box), b.image.crop(box)]
            row = [r.resize((256, 256)) for r in row]
            strip = Image.new("RGB", (3 * 256 + 16, 256), "white")
            for k, r in enumerate(row):
                strip.paste(r, (k * 264, 0))
            strip.save(folder / f"{shot.stem}_face{index}.jpg", quality=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shots", type=int, default=4, help="4-face group shots timed")
    parser.add_argument("--crop", type=int, default=None, help="faces.crop_px of the style (default: its manifest)")
    parser.add_argument("--style", default="toon")
    parser.add_argument("--sheet", type=Path, default=None)
    args = parser.parse_args()
    if not PHOTOS_DIR.is_dir():
        parser.error(f"needs the shared photos at {PHOTOS_DIR}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        style = _style_copy(folder, args.crop, args.style)
        cache = REPO / "benchmarks" / "results" / "ovcache"
        shots = []
        for index, group in enumerate(groups(PHOTOS_DIR, args.shots, seed=11, faces=(4, 4), sizes=(80.0, 200.0))):
            shots.append(folder / f"four_{index}.jpg")
            group.image.save(shots[-1], quality=95)
        with Stylizer(_config(folder, style, "off", cache)) as off, Stylizer(_config(folder, style, "auto", cache)) as on, \
                Stylizer(_config(folder, style, "auto", cache, portrait="off")) as restyled:
            restyler = next(iter(on._compiled.values())).pipeline.faces
            assert restyler is not None
            for shot in shots:  # warm: every shape compiled before timing
                off.run(shot)
                on.run(shot)
                restyled.run(shot)
            data = {"machine": machine(), "style": args.style, "crop_px": restyler.crop_px,
                    "variant": on.engine.model_info.variant_name,
                    "precision": on.engine.effective.get("INFERENCE_PRECISION_HINT"),
                    "recall": recall(on, PHOTOS_DIR, args.groups),
                    "time": timing(off, on, shots, args.rounds, restyled),
                    "seam": seams(restyled, shots)}  # the restyle's paste (drawn faces are not restyled)
            if args.sheet is not None:
                sheet(off, on, shots, args.sheet)
    rows = [{"what": "recall", **data["recall"]},
            {"what": "time", "variant": data["variant"], "precision": data["precision"], **data["time"]},
            {"what": "seam", **data["seam"]}]
    table = "\n\n".join(markdown_table([row], list(row)) for row in rows)
    write_results(f"faces_{args.style}_{data['crop_px']}", data, table)


if __name__ == "__main__":
    main()
