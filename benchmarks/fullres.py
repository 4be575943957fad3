"""Full resolution (issue #17): seams of tiled vs whole inference, cost per megapixel and peak RSS by size,
and the guided upscale vs Lanczos (edge alignment) and vs tiled full resolution (time).

    python benchmarks/fullres.py [--model DIR] [--parts seams scale guided] [--sizes-mp 0.3 1 3 12]

``--model``: a style folder with the tiling pair (default: the bundled toon converted once, with its pair,
into benchmarks/results/models/toon_pair). Everything runs through the runtime's own ``twopass.TwoPass`` /
``Stylizer``; each scale point runs in its own process (peak RSS is per process and never goes down).

Parts:
- seams: a photo of ../shared/photos upscaled (Lanczos) to 2048x1536; whole-picture inference (one piece,
  ~3.5 GB of activations: fine on a 24 GB box) vs tiles with pass-1 statistics (the default plan), tiles
  with the exact whole-picture statistics (pass 1 at full size: isolates the tiling) and tiles each
  normalised on its own (the naive baseline). PSNR vs whole, and a seam score: mean |gradient across the
  line| on the lines where tiles hand over (the centres of the overlaps) / the same over the whole picture,
  as a ratio to the whole-picture output's score on the same lines (1.0: no seam).
- scale: seconds per megapixel and peak RSS at each size (synthetic upscales of one photo, saved as JPEG
  q92, decoded by the runtime), ``image.memory_budget_mb`` at its default 1024.
- guided: per photo of ../shared/photos, inference at max_side 1024 then back to the photo's size by
  Lanczos and by the guided filter: edge alignment (``imaging.guided.edge_alignment``) of each vs the
  photo; time of guided vs tiled full resolution on the first ``--guided-timed`` photos; a contact sheet
  photo | lanczos | guided | tiled full into benchmarks/results/ (untracked) for a person to look at.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import PHOTOS_DIR, REPO, RESULTS_DIR, machine, markdown_table, run_worker, write_results

sys.path.insert(0, str(REPO))
from PIL import Image

DEFAULT_MODEL = RESULTS_DIR / "models" / "toon_pair"
SEAM_SIZE = (2048, 1536)
SHEET_SIDE = 640


def ensure_model(folder: Path) -> Path:
    if (folder / "manifest.yaml").is_file():
        return folder
    from edge_anime_converters.convert import convert

    print(f"converting models/toon/toon.pt with its tiling pair into {folder} (once)", flush=True)
    return convert(REPO / "models" / "toon" / "toon.pt", name=folder.name, precision="fp16",
                   output_dir=folder.parent, style="toon", verify_limit=2)


def config_for(model: Path, tmp: Path, **image: Any) -> Path:
    import yaml

    data = {"model": {"path": str(model / "model.xml"), "variant": "fp16"},
            "device": {"cache_dir": str(RESULTS_DIR / "ovcache"), "inference_precision": "f32"},
            "image": image}
    path = tmp / f"fullres-{abs(hash(json.dumps(image, sort_keys=True)))}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 100.0 if mse == 0 else 10 * float(np.log10(255.0 ** 2 / mse))


def seam_lines(plan: Any) -> tuple[list[int], list[int]]:
    """Rows and columns where one tile hands over to the next: the centres of the overlaps."""
    rows = [(plan.tops[i] + plan.tile_h + plan.tops[i + 1]) // 2 for i in range(len(plan.tops) - 1)]
    cols = [(plan.lefts[i] + plan.tile_w + plan.lefts[i + 1]) // 2 for i in range(len(plan.lefts) - 1)]
    return rows, cols


def seam_score(rgb: np.ndarray, rows: list[int], cols: list[int]) -> float:
    """Mean |gradient across| the seam lines / mean |gradient| over the picture (same directions)."""
    y = rgb.astype(np.float32).mean(axis=2)
    gx, gy = np.abs(np.diff(y, axis=1)), np.abs(np.diff(y, axis=0))
    on_lines = np.concatenate([gx[:, c - 1] for c in cols] + [gy[r - 1] for r in rows])
    return float(on_lines.mean() / ((gx.mean() + gy.mean()) / 2))


def photo_at(size: tuple[int, int], index: int = 0) -> np.ndarray:
    paths = sorted(PHOTOS_DIR.glob("scene_*.jpg")) or sorted(PHOTOS_DIR.glob("*.jpg"))
    photo = Image.open(paths[index % len(paths)]).convert("RGB")
    return np.asarray(photo.resize(size, Image.Resampling.LANCZOS))


# -- seams ----------------------------------------------------------------------------------------------
def part_seams(model: Path, tmp: Path) -> list[dict[str, Any]]:
    from dataclasses import replace

    from edge_anime import Stylizer
    from edge_anime.imaging.fullres import plan_full
    from edge_anime.imaging.tiling import plan_tiles
    from edge_anime.twopass import TwoPass

    rgb = photo_at(SEAM_SIZE)
    rows: list[dict[str, Any]] = []
    with Stylizer(config_for(model, tmp, resize="full")) as stylizer:
        full = plan_full(SEAM_SIZE, stylizer.config.image, requests=stylizer.engine.num_requests)
        assert full is not None and full.tiled
        runner = TwoPass(stylizer.engine)
        start = time.perf_counter()
        whole = runner.run(rgb, replace(full, tile_px=0))
        whole_s = time.perf_counter() - start
        runner.pair()
        plan = plan_tiles(*SEAM_SIZE, tile=full.tile_px, margin=runner.margin_px)
        lines = seam_lines(plan)
        whole_score = seam_score(whole, *lines)
        rows.append({"run": "whole picture", "s": round(whole_s, 1), "psnr_vs_whole_db": "", "seam_score": whole_score,
                     "seam_vs_whole": 1.0, "tile": "", "pass1": ""})
        cases = [("tiles, pass-1 statistics (default)", full, "whole"),
                 ("tiles, exact whole statistics", replace(full, pass1_size=full.size), "whole"),
                 ("tiles, each its own statistics", full, "own")]
        for label, case, stats in cases:
            start = time.perf_counter()
            out = runner.run(rgb, case, stats=stats)
            seconds = time.perf_counter() - start
            score = seam_score(out, *lines)
            rows.append({"run": label, "s": round(seconds, 1), "psnr_vs_whole_db": round(psnr(out, whole), 2),
                         "seam_score": score, "seam_vs_whole": round(score / whole_score, 3),
                         "tile": full.tile_px, "pass1": "x".join(map(str, case.pass1_size)) if stats == "whole" else ""})
            print(rows[-1], flush=True)
        runner.close()
    return rows


# -- scale ----------------------------------------------------------------------------------------------
def worker_scale(model: Path, tmp: Path, megapixels: float) -> dict[str, Any]:
    from edge_anime import Stylizer

    width = int(round((megapixels * 1e6 * 4 / 3) ** 0.5 / 4) * 4)
    height = int(round(width * 3 / 4 / 4) * 4)
    path = tmp / f"scale_{width}x{height}.jpg"
    if not path.is_file():
        Image.fromarray(photo_at((width, height))).save(path, quality=92)
    config = config_for(model, tmp, resize="full", max_pixels=100_000_000)
    with Stylizer(config) as stylizer:
        start_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here: this picture's peak, not the start's
        base = rss_mb()
        start = time.perf_counter()
        result = stylizer.run(path)
        seconds = time.perf_counter() - start
        peak = rss_mb("VmHWM")
    from edge_anime.imaging.fullres import plan_full

    full = plan_full((width, height), stylizer.config.image, requests=stylizer.engine.num_requests)
    assert full is not None
    return {"mp": round(width * height / 1e6, 2), "size": f"{width}x{height}", "s": round(seconds, 2),
            "s_per_mp": round(seconds / (width * height / 1e6), 2), "tile": full.tile_px or "whole",
            "start_peak_mb": round(start_peak), "base_rss_mb": round(base), "peak_rss_mb": round(peak),
            "peak_over_base_mb": round(peak - base),
            "budget_mb": stylizer.config.image.memory_budget_mb, "plan_mb": round(full.budget_mb),
            "out": list(result.out_size or ())}


def rss_mb(key: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- guided ---------------------------------------------------------------------------------------------
def part_guided(model: Path, tmp: Path, timed: int, limit: int | None, pattern: str) -> list[dict[str, Any]]:
    from edge_anime import Stylizer
    from edge_anime.imaging.guided import edge_alignment, guided_upscale
    from edge_anime.imaging.planner import resize_image

    paths = sorted(PHOTOS_DIR.glob(pattern))[:limit]
    # tiled full resolution is timed on the smallest photos: the slowest part of the run by far
    timed_paths = set(sorted(paths, key=lambda p: Image.open(p).size[0] * Image.open(p).size[1])[:timed])
    rows: list[dict[str, Any]] = []
    sheet: list[np.ndarray] = []
    low_config = config_for(model, tmp, resize="max_side", max_side=1024)
    full_config = config_for(model, tmp, resize="full")
    with Stylizer(low_config) as low_stylizer, Stylizer(full_config) as full_stylizer:
        for path in paths:
            photo = np.asarray(Image.open(path).convert("RGB"))
            start = time.perf_counter()
            low = np.asarray(low_stylizer.stylize(path).convert("RGB"))
            infer_s = time.perf_counter() - start
            start = time.perf_counter()
            guided = guided_upscale(low, photo)
            guided_s = time.perf_counter() - start
            lanczos = np.asarray(resize_image(Image.fromarray(low), (photo.shape[1], photo.shape[0])))
            row = {"photo": path.name, "size": f"{photo.shape[1]}x{photo.shape[0]}",
                   "edge_lanczos": round(edge_alignment(lanczos, photo), 3),
                   "edge_guided": round(edge_alignment(guided, photo), 3),
                   "guided_total_s": round(infer_s + guided_s, 2), "guided_filter_s": round(guided_s, 2)}
            if path in timed_paths:
                start = time.perf_counter()
                tiled = np.asarray(full_stylizer.stylize(path).convert("RGB"))
                row["full_s"] = round(time.perf_counter() - start, 2)
                row["guided_vs_full_time"] = round(row["guided_total_s"] / row["full_s"], 3)
                row["edge_full"] = round(edge_alignment(tiled, photo), 3)
                sheet.append(_sheet_row(photo, lanczos, guided, tiled))
            rows.append(row)
            print(row, flush=True)
    if sheet:
        width = max(r.shape[1] for r in sheet)
        padded = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0))) for r in sheet]
        out = RESULTS_DIR / "fullres_contact_sheet.jpg"
        Image.fromarray(np.concatenate(padded, axis=0)).save(out, quality=90)
        print(f"contact sheet: {out} (photo | lanczos | guided | tiled full)")
    return rows


def _sheet_row(*images: np.ndarray) -> np.ndarray:
    """A centre crop of each at full resolution (where softness shows), side by side."""
    h, w = images[0].shape[:2]
    side = min(SHEET_SIDE, h, w)
    top, left = (h - side) // 2, (w - side) // 2
    return np.concatenate([im[top:top + side, left:left + side] for im in images], axis=1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--parts", nargs="+", default=["seams", "scale", "guided"])
    parser.add_argument("--sizes-mp", type=float, nargs="+", default=[0.3, 1.0, 3.0, 12.0])
    parser.add_argument("--guided-timed", type=int, default=2,
                        help="the N smallest photos also run at full resolution (timed)")
    parser.add_argument("--guided-limit", type=int, default=None, help="at most this many photos")
    parser.add_argument("--guided-glob", default="*.jpg", help="which photos of ../shared/photos (scene_*.jpg: "
                        "the large ones, where the upscale matters)")
    parser.add_argument("--worker-mp", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    tmp = RESULTS_DIR / "fullres_tmp"
    model = ensure_model(args.model or DEFAULT_MODEL)
    if args.worker_mp is not None:
        print(json.dumps(worker_scale(model, tmp, args.worker_mp)))
        return 0
    data: dict[str, Any] = {"machine": machine(), "model": str(model)}
    table = f"machine: {data['machine']}\n\n"
    if "seams" in args.parts:
        data["seams"] = part_seams(model, tmp)
        table += "## Seams at 2048x1536\n" + markdown_table(data["seams"], list(data["seams"][0])) + "\n"
    if "scale" in args.parts:
        data["scale"] = []
        for mp in args.sizes_mp:
            data["scale"].append(run_worker(__file__, ["--model", str(model), "--worker-mp", str(mp)]))
            print(data["scale"][-1], flush=True)
        table += "## Scale\n" + markdown_table(data["scale"], list(data["scale"][0])) + "\n"
    if "guided" in args.parts:
        data["guided"] = part_guided(model, tmp, args.guided_timed, args.guided_limit, args.guided_glob)
        columns = sorted({k for r in data["guided"] for k in r}, key=lambda k: list(data["guided"][0]).index(k)
                         if k in data["guided"][0] else 99)
        table += "## Guided vs lanczos vs tiled full\n" + markdown_table(data["guided"], columns) + "\n"
    data["machine_after"] = machine()
    write_results("fullres", data, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
