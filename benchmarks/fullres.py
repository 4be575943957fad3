"""Full resolution (issue #17): seams of tiled vs whole inference, cost per megapixel and peak RSS by size,
and the guided upscale vs Lanczos (edge alignment) and vs tiled full resolution (time).

    python benchmarks/fullres.py [--model DIR] [--parts seams scale guided drift margin] [--sizes-mp 0.3 1 3 12 24]
                                 [--rounds N]

``--model``: a style folder with the tiling pair (default: the bundled toon, which ships it). Everything runs
through the runtime's own ``twopass.TwoPass`` / ``Stylizer``; each scale point runs in its own process (peak
RSS is per process and never goes down).

Parts:
- seams: a photo of ../shared/photos upscaled (Lanczos) to 2048x1536; whole-picture inference (one piece,
  ~3.5 GB of activations: fine on a 24 GB box) vs tiles with pass-1 statistics (the default plan), tiles
  with the exact whole-picture statistics (pass 1 at full size: isolates the tiling) and tiles each
  normalised on its own (the naive baseline). PSNR vs whole, and a seam score: mean |gradient across the
  line| on the lines where tiles hand over (the centres of the overlaps) / the same over the whole picture,
  as a ratio to the whole-picture output's score on the same lines (1.0: no seam).
- scale: seconds per megapixel and peak RSS at each size (synthetic upscales of one photo, saved as JPEG
  q92, decoded by the runtime), ``image.memory_budget_mb`` at its default 1024. The picture's shapes (tile,
  pass 1) are compiled before the clock starts (``compile_s``: a camera's photos share them); the table ends
  with the spread max/min of s/MP from 1 MP up (goal <= 1.15), by wall clock and by the process's CPU time
  (the work itself: on a shared box the wall clock moves with the neighbours' load). ``--rounds N`` runs
  every size N times, sizes alternating, and reports the median round (one round moved by 10-35 % here).
- guided: per photo of ../shared/photos, inference at max_side 1024 then back to the photo's size by
  Lanczos and by the guided filter: edge alignment (``imaging.guided.edge_alignment``) of each vs the
  photo. Time: ``--guided-timed`` photos upscaled (Lanczos, JPEG q92) to ``--timed-mp`` megapixels, each run
  the guided way (``upscale_method: guided``, whole pipeline) and at tiled full resolution, interleaved; a
  contact sheet photo | lanczos | guided | tiled full into benchmarks/results/ (untracked).
- margin: tiles blended at margins below the exact reach vs the whole picture at 1632x1224, with the exact
  statistics (isolates the margin) and with the default pass 1, and the share of pixels the tiles infer:
  what the converter's blend margin (``tiling.margin_px``, ``measure_blend_margin``) was checked against.
- drift: the statistics from a downscaled pass 1: tiles with pass 1 at several downscales vs the whole-picture
  run (PSNR), per ``--drift-cases`` photo and size (default scene_0 at 1632x1224).
- shipped: issue 41's figure, through the whole pipeline at the shipped settings (variant auto, palette and tone
  guard on): per ``--drift-cases`` photo and size (the issue's is scene_0 at 2048x1536), the picture tiled at
  ``image.memory_budget_mb: 300`` vs the same picture run whole (a budget it fits), PSNR of the stylized
  pictures, with ``palette: on`` and ``off``, and the same averaged over 4 x 4 pixels (``pooled_psnr``). ``python benchmarks/fullres.py --parts shipped --drift-cases
  0:2048x1536``
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from _common import PHOTOS_DIR, REPO, RESULTS_DIR, machine, markdown_table, run_worker, write_results

sys.path.insert(0, str(REPO))
from PIL import Image

DEFAULT_MODEL = REPO / "models" / "toon"
DRIFT_SIZE = (1632, 1224)
SEAM_SIZE = (2048, 1536)
SHEET_SIDE = 640


def ensure_model(folder: Path) -> Path:
    from edge_anime.models import load_model_info

    if (folder / "manifest.yaml").is_file() and load_model_info(folder).tiling_pair() is not None:
        return folder
    from edge_anime_converters.convert import convert

    folder = RESULTS_DIR / "models" / "toon_pair"
    if (folder / "manifest.yaml").is_file():
        return folder
    print(f"converting training/checkpoints/toon.pt with its tiling pair into {folder} (once)", flush=True)
    return convert(REPO / "training" / "checkpoints" / "toon.pt", name=folder.name, precision="fp16",
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


def pooled_psnr(a: np.ndarray, b: np.ndarray, k: int = 4) -> float:
    """PSNR of the two pictures averaged over k x k blocks: the picture as seen at 1/k of its size. Why beside the
    plain PSNR: the palette paints each pixel with its nearest entry, so a drift of one or two levels flips pixels on
    an entry's border to the next entry (10-20 levels away). Those flips are single pixels in foliage and band
    edges, which a person does not see at any size (docs/fullres.md, "What the palette's PSNR counts"); averaged
    over 4 x 4 pixels they mostly cancel, while a real shift of tone or a seam survives the average."""
    height, width = a.shape[0] // k * k, a.shape[1] // k * k

    def pooled(x: np.ndarray) -> np.ndarray:
        blocks: np.ndarray = x[:height, :width].astype(np.float64).reshape(height // k, k, width // k, k, -1)
        return blocks.mean(axis=(1, 3))  # type: ignore[no-any-return]
    return psnr(pooled(a), pooled(b))


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


def scene_photos() -> list[Path]:
    return sorted(PHOTOS_DIR.glob("scene_*.jpg")) or sorted(PHOTOS_DIR.glob("*.jpg"))


def photo_name(index: int) -> str:
    paths = scene_photos()
    return paths[index % len(paths)].stem


def photo_at(size: tuple[int, int], index: int = 0) -> np.ndarray:
    paths = scene_photos()
    photo = Image.open(paths[index % len(paths)]).convert("RGB")
    return np.asarray(photo.resize(size, Image.Resampling.LANCZOS))


# -- seams ----------------------------------------------------------------------------------------------
def part_seams(model: Path, tmp: Path) -> list[dict[str, Any]]:
    from edge_anime import Stylizer
    from edge_anime.imaging.fullres import plan_full
    from edge_anime.imaging.tiling import plan_tiles
    from edge_anime.runtime.two_pass import TwoPass

    rgb = photo_at(SEAM_SIZE)
    rows: list[dict[str, Any]] = []
    with Stylizer(config_for(model, tmp, resize="full")) as stylizer:
        runner = TwoPass(stylizer.engine)
        full = plan_full(SEAM_SIZE, stylizer.config.image, requests=runner.streams())  # as the pipeline plans
        assert full is not None and full.tiled
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
        compile_s, full = warm_shapes(stylizer, (width, height))
        before = reference_s_per_mp(stylizer)
        start_peak = rss_mb("VmHWM")  # ru_maxrss would carry the parent's peak across fork and exec
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here: this picture's peak, not the start's
        base = rss_mb()
        start, cpu_start = time.perf_counter(), cpu_seconds()
        result = stylizer.run(path)
        seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
        peak = rss_mb("VmHWM")
        reference = (reference_s_per_mp(stylizer) + before) / 2
    return {"mp": round(width * height / 1e6, 2), "size": f"{width}x{height}", "s": round(seconds, 2),
            "s_per_mp": round(seconds / (width * height / 1e6), 2),
            "cpu_s_per_mp": round(cpu / (width * height / 1e6), 2),
            "ref_s_per_mp": round(reference, 2), "vs_ref": round(seconds / (width * height / 1e6) / reference, 3),
            "tile": full.tile_px or "whole",
            "tile_hw": tile_shape(full, model), "pass1": "x".join(map(str, full.pass1_size)),
            "compile_s": round(compile_s, 1),
            "start_peak_mb": round(start_peak), "base_rss_mb": round(base), "peak_rss_mb": round(peak),
            "peak_over_base_mb": round(peak - base),
            "budget_mb": stylizer.config.image.memory_budget_mb, "plan_mb": round(full.budget_mb),
            "out": list(result.out_size or ())}


REFERENCE_HW = (384, 512)
REFERENCE_ROUNDS = 2


def reference_s_per_mp(stylizer: Any) -> float:
    """Wall seconds per MP of a fixed job run just before and after the picture: ``engine.num_requests``
    plain 512x384 inferences at once, every core busy as the tiles keep them. On this shared VM the same run
    moved by up to 35 % from one minute to the next (CPU seconds too: the host's clock, not the neighbours),
    so each size's cost is also given as a ratio to this reference (``vs_ref``), which the drift cancels."""
    compiled = stylizer.engine.compiled(*REFERENCE_HW)
    count = max(1, stylizer.engine.num_requests)
    requests = [compiled.create_infer_request() for _ in range(count)]
    image = photo_at((REFERENCE_HW[1], REFERENCE_HW[0]))[None]
    requests[0].infer({0: image})  # first inference allocates: outside the clock
    start = time.perf_counter()
    for _ in range(REFERENCE_ROUNDS):
        for request in requests:
            request.start_async({0: image})
        for request in requests:
            request.wait()
    seconds = time.perf_counter() - start
    del requests
    compiled.release_memory()  # else the picture's base and peak RSS hold the reference's activations too
    return seconds / (REFERENCE_ROUNDS * count * REFERENCE_HW[0] * REFERENCE_HW[1] / 1e6)


def warm_shapes(stylizer: Any, size: tuple[int, int]) -> tuple[float, Any]:
    """Compile the shapes ``size`` runs at (pass 1 and the tile, or the whole picture); returns the seconds
    and the plan, made as the pipeline makes it."""
    from edge_anime.imaging.fullres import plan_full
    from edge_anime.imaging.tiling import padded_side, plan_tiles
    from edge_anime.runtime.two_pass import TwoPass

    start = time.perf_counter()
    with stylizer.pipeline_for() as pipeline:  # the engines the pictures run on: separate ones were compiled
        runner: TwoPass = pipeline.twopass     # again (from OpenVINO's cache) inside the clock, 1-2 s at 1 MP
        full = plan_full(size, stylizer.config.image, requests=runner.streams())
        assert full is not None
        if not full.tiled:
            runner.whole_engine().compiled(padded_side(size[1]), padded_side(size[0]))
            return time.perf_counter() - start, full
        first, second = runner.pair()
        plan = plan_tiles(*size, tile=full.tile_px, margin=runner.margin_px)
        second.compiled(plan.tile_h, plan.tile_w)
        first.compiled(padded_side(full.pass1_size[1]), padded_side(full.pass1_size[0]))
    return time.perf_counter() - start, full


def tile_shape(full: Any, model: Path) -> str:
    from edge_anime.imaging.tiling import plan_tiles
    from edge_anime.models import load_model_info

    if not full.tiled:
        return ""
    pair = load_model_info(model).tiling_pair(verify=False)
    assert pair is not None
    plan = plan_tiles(*full.size, tile=full.tile_px, margin=int(pair[1].manifest["tiling"]["margin_px"]))
    return f"{plan.count} x {plan.tile_h}x{plan.tile_w}"


def cpu_seconds() -> float:
    """This process's CPU time (user + system, all threads): the work done, whatever else the box runs."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One size's rounds as one row: the median round's figures (by ``vs_ref``), every round's s/MP and
    vs_ref, and the highest peak RSS of any round."""
    ordered = sorted(runs, key=lambda r: r["vs_ref"])
    row = dict(ordered[len(ordered) // 2])
    row["rounds_s_per_mp"] = "/".join(str(r["s_per_mp"]) for r in runs)
    row["rounds_vs_ref"] = "/".join(str(r["vs_ref"]) for r in runs)
    row["peak_over_base_mb"] = max(r["peak_over_base_mb"] for r in runs)
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return row


def spread(rows: list[dict[str, Any]], key: str = "s_per_mp", from_mp: float = 1.0) -> float:
    """max / min of ``key`` over the sizes from ``from_mp`` up: 1.0 is perfectly flat."""
    values = [r[key] for r in rows if r["mp"] >= from_mp * 0.95]
    return round(max(values) / min(values), 3) if values else float("nan")


def rss_mb(key: str = "VmRSS") -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- guided ---------------------------------------------------------------------------------------------
def part_guided(model: Path, tmp: Path, timed: int, timed_mp: float, limit: int | None,
                pattern: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(edge rows: every photo at its own size; timed rows: photos upscaled to ``timed_mp``)."""
    from edge_anime import Stylizer
    from edge_anime.imaging.guided import edge_alignment, guided_upscale
    from edge_anime.imaging.planner import resize_image

    paths = sorted(PHOTOS_DIR.glob(pattern))[:limit]
    edges: list[dict[str, Any]] = []
    with Stylizer(config_for(model, tmp, resize="max_side", max_side=1024)) as low_stylizer:
        for path in paths:
            photo = np.asarray(Image.open(path).convert("RGB"))
            low = np.asarray(low_stylizer.stylize(path).convert("RGB"))
            start = time.perf_counter()
            guided = guided_upscale(low, photo)
            guided_s = time.perf_counter() - start
            lanczos = np.asarray(resize_image(Image.fromarray(low), (photo.shape[1], photo.shape[0])))
            row = {"photo": path.name, "size": f"{photo.shape[1]}x{photo.shape[0]}",
                   "edge_lanczos": round(edge_alignment(lanczos, photo), 3),
                   "edge_guided": round(edge_alignment(guided, photo), 3), "guided_filter_s": round(guided_s, 2)}
            row["guided_better"] = row["edge_guided"] > row["edge_lanczos"]
            edges.append(row)
            print(row, flush=True)
        rows: list[dict[str, Any]] = []
        sheet: list[np.ndarray] = []
        guided_cfg = config_for(model, tmp, resize="max_side", max_side=1024, upscale_to_original=True,
                                upscale_method="guided", max_pixels=100_000_000)
        full_cfg = config_for(model, tmp, resize="full", max_pixels=100_000_000)
        with Stylizer(guided_cfg) as guided_stylizer, Stylizer(full_cfg) as full_stylizer:
            for index, path in enumerate(paths[:: max(1, len(paths) // max(1, timed))][:timed]):
                big = upscaled(path, timed_mp, tmp)
                photo = np.asarray(Image.open(big).convert("RGB"))
                size = (photo.shape[1], photo.shape[0])
                if index == 0:
                    guided_stylizer.stylize(big)  # compiles max_side's shape outside the clock
                compile_s, _ = warm_shapes(full_stylizer, size)
                start = time.perf_counter()
                guided = np.asarray(guided_stylizer.stylize(big).convert("RGB"))
                guided_s = time.perf_counter() - start
                start = time.perf_counter()
                tiled = np.asarray(full_stylizer.stylize(big).convert("RGB"))
                full_s = time.perf_counter() - start
                low = np.asarray(low_stylizer.stylize(big).convert("RGB"))
                lanczos = np.asarray(resize_image(Image.fromarray(low), size))
                row = {"photo": path.name, "size": f"{size[0]}x{size[1]}", "guided_s": round(guided_s, 2),
                       "full_s": round(full_s, 2), "guided_vs_full_time": round(guided_s / full_s, 3),
                       "edge_lanczos": round(edge_alignment(lanczos, photo), 3),
                       "edge_guided": round(edge_alignment(guided, photo), 3),
                       "edge_full": round(edge_alignment(tiled, photo), 3), "compile_s": round(compile_s, 1)}
                rows.append(row)
                print(row, flush=True)
                sheet.append(_sheet_row(photo, lanczos, guided, tiled))
    if sheet:
        width = max(r.shape[1] for r in sheet)
        padded = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0))) for r in sheet]
        out = RESULTS_DIR / "fullres_contact_sheet.jpg"
        Image.fromarray(np.concatenate(padded, axis=0)).save(out, quality=90)
        print(f"contact sheet: {out} (photo | lanczos | guided | tiled full)")
    return edges, rows


def upscaled(path: Path, megapixels: float, tmp: Path) -> Path:
    """``path`` brought to about ``megapixels`` (Lanczos, its aspect kept), saved as JPEG q92 once."""
    with Image.open(path) as im:
        photo = im.convert("RGB")
    scale = (megapixels * 1e6 / (photo.width * photo.height)) ** 0.5
    size = (round(photo.width * scale / 4) * 4, round(photo.height * scale / 4) * 4)
    out = tmp / f"{path.stem}_{megapixels:g}mp.jpg"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        photo.resize(size, Image.Resampling.LANCZOS).save(out, quality=92)
    return out


# -- drift ----------------------------------------------------------------------------------------------
def part_drift(model: Path, tmp: Path, cases: list[str], downscales: list[float]) -> list[dict[str, Any]]:
    """Per case ``N:WxH`` (the N-th scene photo at W x H): tiles with pass 1 at each downscale and at the
    default plan's, vs the whole picture."""
    rows: list[dict[str, Any]] = []
    for case in cases:
        number, _, dims = case.partition(":")
        index, (width, height) = int(number), map(int, dims.split("x"))
        size = (width, height)
        with whole_and_tiled(model, tmp, size, index) as (runner, rgb, full, whole):
            sides = sorted({round(width / factor) for factor in downscales} | {full.pass1_size[0]}, reverse=True)
            for side in sides:
                pass1 = (side // 4 * 4, round(side * height / width / 4) * 4)
                out = runner.run(rgb, replace(full, pass1_size=pass1))
                rows.append({"photo": photo_name(index), "size": dims, "pass1": f"{pass1[0]}x{pass1[1]}",
                             "downscale": round(width / pass1[0], 2), "default": pass1 == full.pass1_size,
                             "psnr_vs_whole_db": round(psnr(out, whole), 2)})
                print(rows[-1], flush=True)
    return rows


@contextmanager
def whole_and_tiled(model: Path, tmp: Path, size: tuple[int, int] = DRIFT_SIZE,
                    index: int = 0) -> Iterator[tuple[Any, np.ndarray, Any, np.ndarray]]:
    """(the style's TwoPass, the ``index``-th photo at ``size``, its default tiled plan, its whole-picture
    output)."""
    from edge_anime import Stylizer
    from edge_anime.imaging.fullres import plan_full
    from edge_anime.runtime.two_pass import TwoPass

    with Stylizer(config_for(model, tmp, resize="full", max_pixels=100_000_000)) as stylizer:
        runner = TwoPass(stylizer.engine)
        rgb = photo_at(size, index)
        full = plan_full(size, stylizer.config.image, requests=runner.streams())
        assert full is not None and full.tiled
        try:
            yield runner, rgb, full, runner.run(rgb, replace(full, tile_px=0))
        finally:
            runner.close()


SHIPPED_TILED_MB = 300
SHIPPED_WHOLE_MB = 16_000  # the whole 2048x1536 picture fits (about 3.5 GB of activations at f32)


def part_shipped(tmp: Path, cases: list[str], tiled_mb: int = SHIPPED_TILED_MB,
                 variant: str = "auto") -> list[dict[str, Any]]:
    """Issue 41: tiled (``tiled_mb``, the issue's 300) vs whole, through ``Stylizer.stylize`` with the shipped config but for
    ``resize: full`` and the budget (``tiled_mb`` for the tiled run): the style's auto variant, its palette and
    tone guard. The photo goes in as a PNG (lossless), so both runs decode the same pixels.

    ``variant`` other than auto pins ``model.variant`` and f32 for both runs (``fp16``: the weights of the tiling
    pair, so what is left is the tiling's own drift; at auto the whole picture runs the INT8 the box chose)."""
    import yaml

    from edge_anime import Stylizer
    from edge_anime.imaging.fullres import plan_full

    rows: list[dict[str, Any]] = []
    for case in cases:
        number, _, dims = case.partition(":")
        index, (width, height) = int(number), map(int, dims.split("x"))
        path = tmp / f"shipped_{photo_name(index)}_{dims}.png"
        Image.fromarray(photo_at((width, height), index)).save(path)
        out: dict[tuple[str, int], np.ndarray] = {}
        plans: dict[int, str] = {}
        for palette in ("auto", "off"):
            for budget in (SHIPPED_WHOLE_MB, tiled_mb):
                image = {"resize": "full", "memory_budget_mb": budget, "palette": palette,
                         "max_pixels": 100_000_000}
                yaml_path = tmp / f"shipped-{palette}-{budget}.yaml"
                pinned = {} if variant == "auto" else {"model": {"variant": variant},
                                                       "device": {"inference_precision": "f32"}}
                yaml_path.write_text(yaml.safe_dump({"image": image, **pinned}), encoding="utf-8")
                with Stylizer(yaml_path) as stylizer:
                    full = plan_full((width, height), stylizer.config.image, requests=1)  # pass 2: one stream here
                    assert full is not None and full.tiled == (budget == tiled_mb), full
                    plans[budget] = (f"{stylizer.engine.model_info.variant or 'the default IR'}, whole" if not full.tiled else
                                     f"tiles of {full.tile_px} px, pass 1 {full.pass1_size[0]}x{full.pass1_size[1]}")
                    start = time.perf_counter()
                    out[palette, budget] = np.asarray(stylizer.stylize(path).convert("RGB"))
                    print(palette, budget, plans[budget], round(time.perf_counter() - start, 1), flush=True)
            rows.append({"photo": photo_name(index), "size": dims, "palette": palette,
                         "whole": plans[SHIPPED_WHOLE_MB], "tiled": plans[tiled_mb],
                         "psnr_tiled_vs_whole_db": round(psnr(out[palette, tiled_mb],
                                                              out[palette, SHIPPED_WHOLE_MB]), 2),
                         "psnr_4x4_pooled_db": round(pooled_psnr(out[palette, tiled_mb],
                                                                 out[palette, SHIPPED_WHOLE_MB]), 2)})
            print(rows[-1], flush=True)
    return rows


def part_margin(model: Path, tmp: Path, margins: list[int]) -> list[dict[str, Any]]:
    """Tiles vs the whole picture at DRIFT_SIZE with blend margins below the exact reach: with the exact
    statistics (isolates the margin) and with the default pass 1, plus the tiles' cost in inferred pixels."""
    from edge_anime.imaging.tiling import plan_tiles

    rows: list[dict[str, Any]] = []
    with whole_and_tiled(model, tmp) as (runner, rgb, full, whole):
        exact_reach = runner.pair()[1].model_info.manifest["tiling"].get("reach_px", runner.margin_px)
        for margin in margins:
            runner.margin_px = margin
            plan = plan_tiles(*DRIFT_SIZE, tile=full.tile_px, margin=margin)
            exact = runner.run(rgb, replace(full, pass1_size=full.size))
            default = runner.run(rgb, full)
            lines = seam_lines(plan)
            share = plan.count * plan.tile_h * plan.tile_w / (DRIFT_SIZE[0] * DRIFT_SIZE[1])
            rows.append({"margin": margin, "exact_reach": exact_reach, "tiled_px_share": round(share, 3),
                         "exact_stats_db": round(psnr(exact, whole), 2),
                         "pass1_stats_db": round(psnr(default, whole), 2),
                         "seam_vs_whole": round(seam_score(default, *lines) / seam_score(whole, *lines), 3)})
            print(rows[-1], flush=True)
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
    parser.add_argument("--parts", nargs="+", default=["seams", "scale", "guided", "drift"])
    parser.add_argument("--sizes-mp", type=float, nargs="+", default=[0.3, 1.0, 3.0, 12.0, 24.0])
    parser.add_argument("--rounds", type=int, default=1, help="scale: runs per size (the median is reported)")
    parser.add_argument("--guided-timed", type=int, default=3,
                        help="N photos (spread over the set) upscaled to --timed-mp: guided vs tiled full, timed")
    parser.add_argument("--timed-mp", type=float, default=12.0)
    parser.add_argument("--guided-limit", type=int, default=None, help="at most this many photos")
    parser.add_argument("--guided-glob", default="*.jpg", help="which photos of ../shared/photos (scene_*.jpg: "
                        "the large ones, where the upscale matters)")
    parser.add_argument("--margins", type=int, nargs="+", default=[56, 48, 40, 32, 24, 16],
                        help="blend margins tried by --parts margin")
    parser.add_argument("--drift-cases", nargs="+", default=["0:1632x1224"],
                        help="drift: N:WxH, the N-th scene photo (sorted) at W x H (0:2048x1536 3:1632x1224 ...)")
    parser.add_argument("--drift-downscales", type=float, nargs="+", default=[1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 6.4])
    parser.add_argument("--tiled-budget-mb", type=int, default=SHIPPED_TILED_MB,
                        help="shipped: image.memory_budget_mb of the tiled run (the issue's 300)")
    parser.add_argument("--shipped-variant", default="auto",
                        help="shipped: model.variant of both runs (auto: the box's choice; fp16: the tiling pair's weights, at f32)")
    parser.add_argument("--worker-mp", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    tmp = RESULTS_DIR / "fullres_tmp"
    tmp.mkdir(parents=True, exist_ok=True)  # a fresh checkout has no results folder yet
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
        rounds: list[list[dict[str, Any]]] = [[] for _ in args.sizes_mp]
        for _ in range(args.rounds):  # sizes alternate within a round: a drifting box moves all of them
            for runs, mp in zip(rounds, args.sizes_mp):
                runs.append(run_worker(__file__, ["--model", str(model), "--worker-mp", str(mp)]))
                print(runs[-1], flush=True)
        data["scale"] = [median_run(runs) for runs in rounds]
        data["scale_spread_from_1mp"] = {key: spread(data["scale"], key)
                                         for key in ("s_per_mp", "cpu_s_per_mp", "vs_ref")}
        table += ("## Scale\n" + markdown_table(data["scale"], list(data["scale"][0]))
                  + f"\nmax/min from 1 MP (goal <= 1.15): {data['scale_spread_from_1mp']} (vs_ref: s/MP over the "
                  "reference job's s/MP around it, which cancels the box's drift)\n")
    if "guided" in args.parts:
        data["guided_edges"], data["guided_timed"] = part_guided(model, tmp, args.guided_timed, args.timed_mp,
                                                                 args.guided_limit, args.guided_glob)
        better = sum(r["guided_better"] for r in data["guided_edges"])
        table += ("## Guided vs lanczos: edge alignment, every photo\n"
                  + markdown_table(data["guided_edges"], list(data["guided_edges"][0]))
                  + f"\nguided better on {better} of {len(data['guided_edges'])} photos\n"
                  + f"## Guided vs tiled full resolution at {args.timed_mp:g} MP\n"
                  + markdown_table(data["guided_timed"], list(data["guided_timed"][0])) + "\n")
    if "margin" in args.parts:
        data["margin"] = part_margin(model, tmp, args.margins)
        table += "## Blend margin at 1632x1224\n" + markdown_table(data["margin"], list(data["margin"][0])) + "\n"
    if "drift" in args.parts:
        data["drift"] = part_drift(model, tmp, args.drift_cases, args.drift_downscales)
        table += "## Pass-1 statistics drift\n" + markdown_table(data["drift"], list(data["drift"][0]))
    if "shipped" in args.parts:
        data["shipped"] = part_shipped(tmp, args.drift_cases, args.tiled_budget_mb, args.shipped_variant)
        table += ("## Tiled vs whole, shipped settings (issue 41)\n"
                  + markdown_table(data["shipped"], list(data["shipped"][0])))
    data["machine_after"] = machine()
    write_results("fullres" if len(args.parts) > 1 else f"fullres_{args.parts[0]}", data, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
