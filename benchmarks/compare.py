"""Interleaved A/B of whole-pipeline configs on real photos: the experiments behind the defaults.

Each variant runs ``edge_anime.measure.throughput.measure`` in its own process; variants alternate for ``--rounds``
rounds (ABC, CBA, ...) so load from other processes hits them alike, and each variant's images/s is quoted
relative to the first variant in the same round.

Experiments:
  streams  THROUGHPUT (2 streams) vs LATENCY (1 stream) with 2 and 1 requests, fixed 512x512
  shapes   static with shape cache 4 / 1 vs dynamic, on the photos at max_side 512 (mixed sizes)
  threads  decode/encode threads 1 vs 2, fixed 512x512
  pages    huge pages (the environment edge-anime runs in) vs glibc's default pages, fixed 512x512 and
           mixed sizes
  hint     THROUGHPUT vs LATENCY with 1 and 2 requests on the photos at max_side 512 (mixed sizes): the
           default config's hint
  pinning  THROUGHPUT with CPU pinning auto (on) vs off, on the photos at max_side 512 (mixed sizes: several
           compiled shapes, each with its own pinned streams, share the cores) and at a fixed 512x512
  scaling  THROUGHPUT with 1, 2, 4, 8, 16 streams and auto, LATENCY, pinning off, one decode/encode thread,
           fixed 512x512: how a box with more cores than ours scales (run it there; variants with more
           streams than the box has cores are skipped)

``--cpus 0-1`` runs every variant pinned to those CPUs (sched_setaffinity before OpenVINO loads; the plugin
sizes its streams from the affinity mask), which turns a big idle machine into a clean 2-core box.
``--busy N`` keeps N single-thread spinning processes running for the whole run: a shop PC or kiosk whose
other programs take a core now and then.

    python benchmarks/compare.py streams [--rounds 2] [--limit 12] [--precision auto] [--cpus 0-1] [--busy 1]

Blind page (issue 41): when the first argument is not an experiment but two folders of stylized outputs, the
script writes an HTML page on which a person rates them without knowing which folder is which:

    python benchmarks/compare.py BEFORE AFTER [--photos DIR] [--out DIR] [--seed N] [--sheet]

Per photo the page shows the photo and the two outputs as "A" and "B" (the order drawn per photo from a seeded
RNG), 100 % crops of the eyes, a cheek, hair, sky and foliage (where the photo has them), and 1-5 radio buttons
per output; a button shows and downloads the ratings as JSON. Which of A/B is BEFORE goes to ``key.json``
beside the page, never into it. ``--sheet`` also writes a small photo | A | B contact sheet.

A rater's own calibration moves the scores more than most changes do: the same 31 pictures rated on both sides
(BEFORE and AFTER the same folder, an A/A page, cmp23 on 2026-12-04) got faces 3.06 and all 2.85 from one rater,
where three other raters gave the same pictures faces 3.44-3.50 and all 3.02-3.11 (cmp21, cmp24, cmp25). Compare
scores within a page (before against after, one rater), not across pages; an A/A page tells how a new rater
scores before a real round.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import random
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image, ImageDraw, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _common, look, gallery when imported from elsewhere

from gallery import inside, save_jpeg, shrink
from look import photo_files, write_atomic

from _common import (
    PHOTOS_DIR,
    REPO,
    RESULTS_DIR,
    alternating_rounds,
    ensure_seeded_ir,
    machine,
    markdown_table,
    median,
    other_load,
    photos_or_skip,
    product_environment,
    run_worker,
    write_results,
)

if TYPE_CHECKING:
    from edge_anime.faces.detect import Face

FIXED_512 = {"resize": "fixed", "fixed": "512x512"}
MAX_512 = {"resize": "max_side", "max_side": 512}
EXPERIMENTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "streams": [
        ("THROUGHPUT (auto streams, auto requests)", {"device": {"performance_hint": "THROUGHPUT"}, "image": FIXED_512}),
        ("LATENCY, 2 requests", {"device": {"performance_hint": "LATENCY", "num_requests": 2}, "image": FIXED_512}),
        ("LATENCY, 1 request", {"device": {"performance_hint": "LATENCY"}, "image": FIXED_512}),
    ],
    "shapes": [
        ("static, cache 4", {"device": {"shape_policy": "static", "shape_cache_size": 4}, "image": MAX_512}),
        ("static, cache 16", {"device": {"shape_policy": "static", "shape_cache_size": 16}, "image": MAX_512}),
        ("static, cache 16, 16 GB", {"device": {"shape_policy": "static", "shape_cache_size": 16,
                                                "shape_cache_mb": 16384}, "image": MAX_512}),
        ("static, cache 1", {"device": {"shape_policy": "static", "shape_cache_size": 1}, "image": MAX_512}),
        ("dynamic", {"device": {"shape_policy": "dynamic"}, "image": MAX_512}),
    ],
    "scaling": [
        ("THROUGHPUT auto", {"device": {"performance_hint": "THROUGHPUT"}, "image": FIXED_512}),
        *[(f"THROUGHPUT {n} streams", {"device": {"performance_hint": "THROUGHPUT", "num_streams": n},
                                       "image": FIXED_512}) for n in (1, 2, 4, 8, 16)],
        ("THROUGHPUT auto, pinning off", {"device": {"performance_hint": "THROUGHPUT", "enable_cpu_pinning": False},
                                          "image": FIXED_512}),
        ("LATENCY", {"device": {"performance_hint": "LATENCY"}, "image": FIXED_512}),
        ("THROUGHPUT auto, decode 1 / encode 1", {"device": {"performance_hint": "THROUGHPUT"}, "image": FIXED_512,
                                                  "pipeline": {"decode_threads": 1, "encode_threads": 1}}),
    ],
    "pinning": [
        ("pinning auto", {"device": {"performance_hint": "THROUGHPUT", "enable_cpu_pinning": "auto"},
                          "image": MAX_512}),
        ("pinning off", {"device": {"performance_hint": "THROUGHPUT", "enable_cpu_pinning": False}, "image": MAX_512}),
        ("pinning auto, 512x512", {"device": {"performance_hint": "THROUGHPUT", "enable_cpu_pinning": "auto"},
                                   "image": FIXED_512}),
        ("pinning off, 512x512", {"device": {"performance_hint": "THROUGHPUT", "enable_cpu_pinning": False},
                                  "image": FIXED_512}),
    ],
    "pages": [
        ("huge pages, 512x512", {"image": FIXED_512}),
        ("default pages, 512x512", {"image": FIXED_512, "_pages": "default"}),
        ("huge pages, mixed sizes", {"image": MAX_512}),
        ("default pages, mixed sizes", {"image": MAX_512, "_pages": "default"}),
    ],
    "hint": [
        ("THROUGHPUT", {"device": {"performance_hint": "THROUGHPUT"}, "image": MAX_512}),
        ("LATENCY, 1 request", {"device": {"performance_hint": "LATENCY", "num_requests": 1}, "image": MAX_512}),
        ("LATENCY, 2 requests", {"device": {"performance_hint": "LATENCY", "num_requests": 2}, "image": MAX_512}),
    ],
    "threads": [
        ("decode 1 / encode 1", {"pipeline": {"decode_threads": 1, "encode_threads": 1}, "image": FIXED_512}),
        ("decode 2 / encode 2", {"pipeline": {"decode_threads": 2, "encode_threads": 2}, "image": FIXED_512}),
    ],
}


def parse_cpus(text: str) -> set[int]:
    """"0-1,4" -> {0, 1, 4}: the taskset list syntax."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def worker(model_dir: Path, overrides: dict[str, Any], photos: Path, limit: int | None,
           precision: str) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from edge_anime.config import parse_config
    from edge_anime.measure.throughput import input_files, measure

    raw: dict[str, Any] = {"model": {"path": str(model_dir / "model.xml")},
                           "device": {"cache_dir": str(RESULTS_DIR / "ovcache"), "inference_precision": precision},
                           "output": {"quality": 92}}
    for section, values in overrides.items():
        if section.startswith("_"):  # how the worker process is started, not config
            continue
        raw.setdefault(section, {}).update(values)
    config = parse_config(raw, base_dir=REPO)
    files = input_files(photos, config.watch)[:limit]
    report = measure(config, files, repeat=1, warmup=1)
    eff = report["plugin"]["effective"]
    return {"images_per_s": report["images_per_s"], "latency_p50_s": report["latency_s"]["p50"],
            "cpu_utilisation_pct": report["cpu_utilisation_pct"], "peak_rss_mb": report["peak_rss_mb"],
            "streams": eff.get("NUM_STREAMS"), "requests": report["plugin"]["num_requests"],
            "precision": eff.get("INFERENCE_PRECISION_HINT"), "failed": report["failed"],
            "compile_s_per_image": report["stages_s_per_image"]["compile"]}


def experiment_main(argv: list[str] | None = None) -> int:
    """The interleaved A/B of configs (``compare.py EXPERIMENT``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="compare.py BEFORE AFTER "
                                     "[--photos DIR] [--out DIR] [--seed N] [--sheet]: the blind rating page of "
                                     "two folders of outputs (see its --help)")
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS))
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit", type=int, default=12, help="first N photos")
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--cpus", default=None, help="pin every variant to these CPUs (taskset syntax: 0-1)")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes kept running alongside (other load)")
    parser.add_argument("--variants", nargs="+", default=None, help="only these variants (names as listed; the first is the base)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    variants = EXPERIMENTS[args.experiment]
    if args.variants:
        unknown = set(args.variants) - {name for name, _ in variants}
        if unknown:
            parser.error(f"--variants: no {sorted(unknown)} in {args.experiment}: {[name for name, _ in variants]}")
        variants = [next(v for v in variants if v[0] == name) for name in args.variants]
    cpus = parse_cpus(args.cpus) if args.cpus else None
    cores = len(cpus) if cpus else os.cpu_count() or 1
    variants = [(name, v) for name, v in variants if v.get("device", {}).get("num_streams", 1) <= cores]
    if args.worker is not None:
        if cpus:
            os.sched_setaffinity(0, cpus)  # before openvino is imported by the worker
        print(json.dumps(worker(args.model, dict(variants)[args.worker], args.photos, args.limit, args.precision)))
        return 0
    model = (args.model or ensure_seeded_ir()).resolve()
    config_of = dict(variants)
    huge = product_environment()
    cpu_args = ["--cpus", args.cpus] if args.cpus else []

    def run(name: str) -> dict[str, Any]:
        env = dict(os.environ) if config_of[name].get("_pages") == "default" else huge
        return run_worker(__file__, [args.experiment, "--worker", name, "--model", str(model), "--photos",
                                     str(args.photos), "--limit", str(args.limit), "--precision", args.precision,
                                     *cpu_args], env)

    with other_load(args.busy):
        rounds = alternating_rounds([name for name, _ in variants], args.rounds, run)
    base = variants[0][0]
    rows = []
    for name, _ in variants:
        ratios = [rd[name]["images_per_s"] / rd[base]["images_per_s"] for rd in rounds]
        first = rounds[0][name]
        rows.append({"variant": name, "images/s": median([rd[name]["images_per_s"] for rd in rounds]),
                     f"x '{base}'": median(ratios), "per-round": ", ".join(f"{x:.2f}" for x in ratios),
                     "p50 s": median([rd[name]["latency_p50_s"] for rd in rounds]),
                     "CPU %": median([rd[name]["cpu_utilisation_pct"] for rd in rounds]),
                     "peak RSS MB": median([rd[name]["peak_rss_mb"] for rd in rounds]),
                     "compile s/img": median([rd[name]["compile_s_per_image"] for rd in rounds]),
                     "streams/requests": f"{first['streams']}/{first['requests']}", "precision": first["precision"]})
    pinned = (f", pinned to CPUs {args.cpus}" if args.cpus else "") + (f", {args.busy} busy" if args.busy else "")
    box = machine()
    table = (f"experiment {args.experiment}: {args.limit} photos from {args.photos}, {args.rounds} alternating "
             f"rounds, precision {args.precision}{pinned}, {box['cpu_model']}\n\n"
             + markdown_table(rows, list(rows[0])))
    suffix = (f"_cpus{args.cpus}" if args.cpus else "") + (f"_busy{args.busy}" if args.busy else "")
    write_results(f"compare_{args.experiment}_{args.precision}{suffix}",
                  {"machine": box, "cpus": args.cpus, "rounds": rounds, "rows": rows}, table)
    return 0


# ---------------------------------------------------------------------------------------- blind page (issue 41)

CROP_MIN_PX, CROP_MAX_PX = 128, 192  # a crop's sides in its own picture's pixels; the page shows it at 2x
BLOCK_PX, BLOCK_STEP_PX = 128, 32  # sky and foliage are looked for in these blocks, at the smaller output's scale
SKY_LUMA_MIN = 0.45  # mean luma (0-1) of a sky block: brighter than shade, walls in the dark, water
SKY_TEXTURE_MAX = 0.03  # mean |Laplacian| of luma (0-1) of a sky block: grain and clouds pass, branches do not
SKY_COOL_MIN = -0.03  # mean blue minus red (0-1) of a sky block: blue or grey; a table top was -0.055
PORTRAIT_FACE = 0.25  # a face this share of the photo's shorter side: the flat top is a backdrop, not sky
FACE_SCORE_MIN = 0.7  # the detector's score; a face crop wants a face for sure (clouds scored 0.61)
FOLIAGE_GREEN_MIN = 0.4  # share of a foliage block's pixels whose green leads red and blue
FOLIAGE_TEXTURE_MIN = 0.03  # mean |Laplacian|: leaves, not a green wall or lawn in the blur
TILE_PX = 440  # the whole pictures on the page (JPEG, shrunk); detail is judged on the crops
SHEET_ROW_PX = 160
COLUMNS = ("photo", "A", "B")
SCALE = {1: "photo filter", 3: "painted photo", 5: "frame of an anime film"}  # "a person would call this anime"
DEFAULT_PAGE_OUT = RESULTS_DIR / "compare"


@dataclass(frozen=True)
class Region:
    """What to crop, in the photo's pixels: a centre and the size aimed at. Each picture clamps the size to
    CROP_MIN_PX..CROP_MAX_PX of its own pixels, so every crop is at 100 % whatever size the output is."""

    kind: str
    cx: float
    cy: float
    w: float
    h: float


@dataclass(frozen=True)
class Entry:
    """One photo on the page and its output in each folder."""

    photo: Path
    before: Path
    after: Path


FindFaces = Callable[[np.ndarray], "list[Face]"]


def outputs_by_stem(folder: Path, stems: list[str]) -> dict[str, Path]:
    """Photo stem -> its output in ``folder`` (``edge-anime stylize`` names it STEM_STYLE.jpg). An output goes to
    the longest stem that prefixes it, followed by "_", so face_10_toon.jpg is face_10's and not face_1's; the
    first by name wins when a photo has several."""
    longest_first = sorted(stems, key=len, reverse=True)
    found: dict[str, Path] = {}
    for out in photo_files(folder, None):
        stem = next((s for s in longest_first if out.stem.startswith(f"{s}_")), None)
        if stem is not None and stem not in found:
            found[stem] = out
    return found


def entries(photos_dir: Path, before: Path, after: Path) -> tuple[list[Entry], list[str]]:
    """The photos with an output in both folders, and the stems with an output in only one (said, not shown:
    a photo rated on one side only would tell the rater nothing)."""
    photos = photo_files(photos_dir, None)
    stems = [p.stem for p in photos]
    old, new = outputs_by_stem(before, stems), outputs_by_stem(after, stems)
    kept = [Entry(p, old[p.stem], new[p.stem]) for p in photos if p.stem in old and p.stem in new]
    return kept, sorted(s for s in stems if (s in old) != (s in new))


def a_is_before(stems: list[str], seed: int) -> dict[str, bool]:
    """Per photo, whether "A" is the BEFORE output: one draw per photo from ``random.Random(seed)`` in name
    order, so the seed gives the same page again and one photo's order says nothing about another's."""
    rng = random.Random(seed)
    return {stem: rng.random() < 0.5 for stem in sorted(stems)}


def load_rgb(path: Path) -> Image.Image:
    """Upright RGB, as the product reads a picture (EXIF orientation applied)."""
    with Image.open(path) as im:
        return ImageOps.exif_transpose(im).convert("RGB")


def face_regions(face: Face, scale: float) -> list[Region]:
    """Eyes, a cheek and hair of one face, from its landmarks (right eye, left eye, nose, ...) and box: where a
    style shows whether it draws eyes, paints skin flat and groups hair into strands. No hair when the box
    touches the top of the photo. A face too small for that at ``scale`` (its eyes would not fill the smallest
    crop) gets one "face" crop instead of three that show the same head."""
    right, left, nose = (np.asarray(face.landmarks[i], np.float64) for i in range(3))
    d = float(np.hypot(*(left - right)))
    x0, y0, x1, y1 = (float(v) for v in face.box)
    if 2.4 * d * scale < CROP_MIN_PX:
        return [Region("face", (x0 + x1) / 2, (y0 + y1) / 2, 1.3 * (x1 - x0), 1.3 * (y1 - y0))]
    mid = (right + left) / 2
    regions = [Region("eyes", float(mid[0]), float(mid[1]), 2.4 * d, 1.2 * d),
               Region("skin", float(right[0] + 0.3 * (right[0] - nose[0])), float(right[1] + 0.7 * d), 0.8 * d,
                      0.8 * d)]
    if y0 > 0.15 * (y1 - y0):
        regions.append(Region("hair", (x0 + x1) / 2, y0 - 0.15 * (y1 - y0), 0.8 * (x1 - x0), 0.4 * (y1 - y0)))
    return regions


def block_means(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean of ``values`` over every BLOCK_PX square at BLOCK_STEP_PX: (means [rows, cols], tops, lefts), from one
    integral image; empty when the picture is smaller than a block."""
    h, w = values.shape
    integral = np.pad(values.astype(np.float64).cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    tops, lefts = np.arange(0, h - BLOCK_PX + 1, BLOCK_STEP_PX), np.arange(0, w - BLOCK_PX + 1, BLOCK_STEP_PX)
    t, left = tops[:, None], lefts[None, :]
    b = BLOCK_PX
    sums = integral[t + b, left + b] - integral[t, left + b] - integral[t + b, left] + integral[t, left]
    return sums / b**2, tops, lefts


def scene_maps(photo: Image.Image, scale: float) -> dict[str, np.ndarray]:
    """Per-block luma, texture (mean |Laplacian| of luma), blue minus red and share of leaf-green pixels of the
    photo at ``scale``, plus the blocks' tops and lefts there."""
    size = (max(1, round(photo.width * scale)), max(1, round(photo.height * scale)))
    x = np.asarray(photo.resize(size, Image.Resampling.BOX) if scale < 1 else photo, np.float32) / 255.0
    luma = x @ np.array([0.299, 0.587, 0.114], np.float32)
    lap = np.zeros_like(luma)
    lap[1:-1, 1:-1] = np.abs(4 * luma[1:-1, 1:-1] - luma[:-2, 1:-1] - luma[2:, 1:-1] - luma[1:-1, :-2]
                             - luma[1:-1, 2:])
    green = ((x[..., 1] > x[..., 0] + 0.02) & (x[..., 1] > x[..., 2] + 0.08)).astype(np.float32)  # not teal paint
    maps = {"luma": block_means(luma)[0], "texture": block_means(lap)[0], "cool": block_means(x[..., 2] - x[..., 0])[0]}
    maps["green"], maps["tops"], maps["lefts"] = block_means(green)
    maps["height"] = np.array(luma.shape[0])
    return maps


def best_block(kind: str, score: np.ndarray, ok: np.ndarray, maps: dict[str, np.ndarray],
               scale: float) -> list[Region]:
    """The block with the highest ``score`` among the ``ok`` ones, as a region in the photo's pixels ([] when
    none is ok: that crop kind does not apply to this photo)."""
    if not ok.any():
        return []
    row, col = np.unravel_index(int(np.argmax(np.where(ok, score, -np.inf))), score.shape)
    half = BLOCK_PX / 2
    side = BLOCK_PX / scale
    return [Region(kind, (maps["lefts"][col] + half) / scale, (maps["tops"][row] + half) / scale, side, side)]


def scene_regions(photo: Image.Image, scale: float) -> list[Region]:
    """Sky (the brightest low-texture blue or grey block in the top third) and foliage (the most green-and-textured block),
    looked for at ``scale`` times the photo's size: the smaller output's, so a block is BLOCK_PX there."""
    maps = scene_maps(photo, scale)
    if maps["luma"].size == 0:
        return []
    top_third = (maps["tops"][:, None] + BLOCK_PX / 2) < maps["height"] / 3
    sky = (top_third & (maps["texture"] < SKY_TEXTURE_MAX) & (maps["luma"] > SKY_LUMA_MIN)
           & (maps["cool"] > SKY_COOL_MIN) & (maps["green"] < 0.1))
    foliage = (maps["green"] > FOLIAGE_GREEN_MIN) & (maps["texture"] > FOLIAGE_TEXTURE_MIN)
    return [*best_block("sky", maps["luma"], sky, maps, scale),
            *best_block("foliage", maps["green"] * maps["texture"], foliage, maps, scale)]


def regions_of(photo: Image.Image, scale: float, find_faces: FindFaces | None) -> list[Region]:
    """Every crop kind that applies to this photo: the largest sure face's eyes, cheek and hair, then sky (not in
    a portrait, whose flat top is a backdrop) and foliage."""
    found = find_faces(np.asarray(photo)) if find_faces is not None else []
    face = max((f for f in found if f.score >= FACE_SCORE_MIN), key=lambda f: f.size, default=None)
    if face is None:
        return scene_regions(photo, scale)
    scene = scene_regions(photo, scale)
    if face.size > PORTRAIT_FACE * min(photo.size):
        scene = [r for r in scene if r.kind != "sky"]
    return face_regions(face, scale) + scene


def clamp(value: float, low: int, high: int) -> int:
    """``value`` rounded to whole pixels and held within [low, high]."""
    return int(min(max(round(value), low), high))


def crop_box(region: Region, photo_size: tuple[int, int], size: tuple[int, int]) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of ``region`` in a picture of ``size`` made from a photo of ``photo_size``: the
    centre scaled by the size ratio, the sides CROP_MIN_PX..CROP_MAX_PX of this picture's own pixels, the box
    moved inside the picture."""
    sx, sy = size[0] / photo_size[0], size[1] / photo_size[1]
    w = min(size[0], clamp(region.w * sx, CROP_MIN_PX, CROP_MAX_PX))
    h = min(size[1], clamp(region.h * sy, CROP_MIN_PX, CROP_MAX_PX))
    left = clamp(region.cx * sx - w / 2, 0, size[0] - w)
    top = clamp(region.cy * sy - h / 2, 0, size[1] - h)
    return left, top, left + w, top + h


def write_entry(name: str, pictures: dict[str, Image.Image], regions: list[Region], img_dir: Path) -> dict[str, Any]:
    """The photo, A and B shrunk for the page (JPEG) and their crops pixel for pixel (PNG) under ``img_dir``;
    returns the file names and each crop's box per column."""
    photo_size = pictures["photo"].size
    done: dict[str, Any] = {"name": name, "whole": {}, "crops": []}
    for col, pic in pictures.items():
        save_jpeg(shrink(pic, TILE_PX), img_dir / f"{name}_{col}.jpg", 88)
        done["whole"][col] = f"{name}_{col}.jpg"
    for region in regions:
        crop: dict[str, Any] = {"kind": region.kind, "files": {}, "boxes": {}}
        for col, pic in pictures.items():
            box = crop_box(region, photo_size, pic.size)
            pic.crop(box).save(img_dir / f"{name}_{region.kind}_{col}.png")
            crop["files"][col], crop["boxes"][col] = f"{name}_{region.kind}_{col}.png", list(box)
        done["crops"].append(crop)
    return done


def rating_html(stem: str, col: str) -> str:
    """1-5 radio buttons for one output; the photo and A/B ride on data attributes for the page's script."""
    attrs = f'name="{html.escape(f"r_{stem}_{col}")}" data-photo="{html.escape(stem)}" data-out="{col}"'
    buttons = "".join(f'<label title="{SCALE.get(n, "")}"><input type="radio" {attrs} value="{n}"> {n}</label>'
                      for n in range(1, 6))
    return f'<div class="rate"><b>{col}</b> {buttons}</div>'


def section_html(index: int, stem: str, done: dict[str, Any]) -> str:
    """One photo's block: photo | A | B, the crops at 2x (pixelated), the rating form. No picture's size or
    crop position is printed: where BEFORE and AFTER differ in size, that would tell them apart (key.json has
    the boxes)."""
    figures = "".join(f'<figure><figcaption>{col}</figcaption><img class="whole" src="img/{done["whole"][col]}" '
                      f'alt="{col}"></figure>' for col in COLUMNS)
    rows = []
    for crop in done["crops"]:
        cells = []
        for col in COLUMNS:
            x0, y0, x1, y1 = crop["boxes"][col]
            cells.append(f'<td><img src="img/{crop["files"][col]}" width="{2 * (x1 - x0)}" height="{2 * (y1 - y0)}" '
                         f'title="{col}: {crop["kind"]}, {x1 - x0}x{y1 - y0}" alt="{col}"></td>')
        rows.append(f'<tr><th>{crop["kind"]}</th>{"".join(cells)}</tr>')
    head = "<tr><th></th>" + "".join(f"<th>{col}</th>" for col in COLUMNS) + "</tr>"
    crops = f'<table class="crops">{head}{"".join(rows)}</table>' if rows else "<p>(no crops apply)</p>"
    return (f'<section><h2>{index}. {html.escape(stem)}</h2><div class="row">{figures}</div>{crops}'
            f'{rating_html(stem, "A")}{rating_html(stem, "B")}</section>')


PAGE_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Blind comparison __PAGE__</title>
<style>
body { font: 14px sans-serif; margin: 16px; max-width: 1400px; }
#bar { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ccc; padding: 6px 0; z-index: 1; }
section { border-bottom: 2px solid #ddd; padding: 8px 0 16px; }
.row { display: flex; gap: 8px; }
figure { margin: 0; } figcaption { font-weight: bold; }
img.whole { width: 440px; max-width: 32vw; height: auto; }
table.crops img { image-rendering: pixelated; display: block; }
table.crops td, table.crops th { vertical-align: top; padding: 2px 6px 2px 0; text-align: left; }
.rate { margin: 6px 0; } .rate label { margin-right: 14px; }
#json { white-space: pre-wrap; background: #f6f6f6; }
</style></head><body>
<div id="bar"><b>Blind comparison</b> (page __PAGE__): for each photo, rate A and B:
<b>a person would call this anime</b>: __SCALE__.
Crops are 100 % of each picture's own pixels, shown at 2x.
<button onclick="saveRatings()">Show / download ratings (JSON)</button> <span id="count"></span></div>
__SECTIONS__
<pre id="json"></pre>
<script>
const PAGE = "__PAGE__";
function ratings() {
  const r = {};
  document.querySelectorAll("input[type=radio]:checked").forEach(i => {
    (r[i.dataset.photo] = r[i.dataset.photo] || {})[i.dataset.out] = Number(i.value); });
  return r;
}
function count() {
  const n = document.querySelectorAll("input[type=radio]:checked").length;
  document.getElementById("count").textContent = n + " of " + document.querySelectorAll(".rate").length + " rated";
}
function saveRatings() {
  const text = JSON.stringify({page: PAGE, time: new Date().toISOString(), ratings: ratings()}, null, 1);
  document.getElementById("json").textContent = text;
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type: "application/json"}));
  a.download = "ratings-" + PAGE + ".json";
  a.click();
}
document.addEventListener("change", () => { localStorage.setItem("ratings-" + PAGE, JSON.stringify(ratings())); count(); });
window.addEventListener("load", () => {
  const kept = JSON.parse(localStorage.getItem("ratings-" + PAGE) || "{}");
  document.querySelectorAll("input[type=radio]").forEach(i => {
    const o = kept[i.dataset.photo]; if (o && o[i.dataset.out] === Number(i.value)) i.checked = true; });
  count();
});
</script>
</body></html>
"""


def contact_sheet(rows: list[list[Image.Image]], labels: list[str], path: Path) -> None:
    """photo | A | B per row, SHEET_ROW_PX high, labelled, one JPEG: a quick look without a browser."""
    thumbs = [[ImageOps.contain(pic, (2 * SHEET_ROW_PX, SHEET_ROW_PX)) for pic in row] for row in rows]
    cell_w = max(t.width for row in thumbs for t in row) + 4
    sheet = Image.new("RGB", (cell_w * len(COLUMNS), (SHEET_ROW_PX + 4) * len(thumbs)), "white")
    draw = ImageDraw.Draw(sheet)
    for r, row in enumerate(thumbs):
        for c, thumb in enumerate(row):
            x, y = c * cell_w + (cell_w - thumb.width) // 2, r * (SHEET_ROW_PX + 4) + 2
            sheet.paste(thumb, (x, y))
            draw.text((x + 3, y + 2), labels[r] if c == 0 else COLUMNS[c], fill="yellow", stroke_width=1,
                      stroke_fill="black")
    save_jpeg(sheet, path, 85)


def fresh_img_dir(out: Path) -> Path:
    """OUT/img/, emptied of this script's images from an earlier run: a photo left out now must not linger."""
    img_dir = out / "img"
    img_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*img_dir.glob("*.jpg"), *img_dir.glob("*.png")]:
        stale.unlink()
    return img_dir


def build_page(before: Path, after: Path, photos_dir: Path, out: Path, *, seed: int,
               find_faces: FindFaces | None, sheet: bool = False) -> dict[str, Any]:
    """Write OUT/index.html (blind), its images under OUT/img/, OUT/key.json (which of A/B is BEFORE, per
    photo) and with ``sheet`` OUT/sheet.jpg; returns the key."""
    found, one_sided = entries(photos_dir, before, after)
    if one_sided:
        print(f"left out (an output in one folder only): {', '.join(one_sided)}", flush=True)
    img_dir = fresh_img_dir(out)
    order = a_is_before([e.photo.stem for e in found], seed)
    page_id = secrets.token_hex(4)  # ties ratings to the key; random, so it says nothing of the order
    key: dict[str, Any] = {"page": page_id, "seed": seed, "before": str(before.resolve()),
                           "after": str(after.resolve()), "photos_dir": str(photos_dir.resolve()), "photos": {}}
    sections, rows = [], []
    for index, entry in enumerate(found, 1):
        stem = entry.photo.stem
        old_new = (load_rgb(entry.before), load_rgb(entry.after))
        a, b = old_new if order[stem] else old_new[::-1]
        pictures = {"photo": load_rgb(entry.photo), "A": a, "B": b}
        scale = min(a.width, b.width) / pictures["photo"].width
        done = write_entry(f"{index:03d}", pictures, regions_of(pictures["photo"], scale, find_faces), img_dir)
        sections.append(section_html(index, stem, done))
        key["photos"][stem] = key_entry(entry, order[stem], done)
        if sheet:
            rows.append([pictures[col] for col in COLUMNS])
    scale_text = ", ".join(f"{n} = {text}" for n, text in SCALE.items())
    write_atomic(out / "index.html", PAGE_TEMPLATE.replace("__PAGE__", page_id).replace("__SCALE__", scale_text)
                 .replace("__SECTIONS__", "\n".join(sections)))
    write_atomic(out / "key.json", json.dumps(key, indent=1))
    if sheet and rows:
        contact_sheet(rows, [e.photo.stem for e in found], out / "sheet.jpg")
    return key


def key_entry(entry: Entry, a_before: bool, done: dict[str, Any]) -> dict[str, Any]:
    """What the key says of one photo: which side each letter is, its images' prefix under img/, the files,
    and where each crop was cut in each picture (left, top, right, bottom)."""
    return {"A": "BEFORE" if a_before else "AFTER", "B": "AFTER" if a_before else "BEFORE",
            "section": done["name"], "photo": str(entry.photo), "before_file": str(entry.before), "after_file": str(entry.after),
            "crops": {c["kind"]: c["boxes"] for c in done["crops"]}}


def face_finder() -> tuple[FindFaces, Callable[[], None]]:
    """The bundled face detector at the default config's smallest face, and how to close it."""
    from edge_anime.config import Config
    from edge_anime.faces.detect import FaceDetector

    config = Config()
    detector = FaceDetector(config.device)
    return (lambda rgb: detector.detect(rgb, min_px=config.image.faces_min_px)), detector.close


def page_main(argv: list[str]) -> int:
    """``compare.py BEFORE AFTER``: the blind rating page."""
    p = argparse.ArgumentParser(prog="compare.py BEFORE AFTER", description="blind A/B rating page for two "
                                "folders of stylized outputs of the same photos (issue 41)")
    p.add_argument("before", type=Path, help="folder of outputs (NAME_STYLE.jpg for photo NAME.jpg)")
    p.add_argument("after", type=Path, help="the other folder of outputs")
    p.add_argument("--photos", type=Path, default=None, help="photo folder (default: ../shared/photos)")
    p.add_argument("--out", type=Path, default=DEFAULT_PAGE_OUT, help="default: benchmarks/results/compare")
    p.add_argument("--seed", type=int, default=None, help="A/B order seed (default: a fresh one, kept in key.json)")
    p.add_argument("--sheet", action="store_true", help="also write OUT/sheet.jpg: photo | A | B rows, small")
    p.add_argument("--no-faces", action="store_true", help="no face detector: no eyes, skin or hair crops")
    a = p.parse_args(argv)
    photos_dir = photos_or_skip(p, a.photos)
    if photos_dir is None:
        return 0
    for folder in (a.before, a.after):
        if not folder.is_dir():
            p.error(f"{folder} is not a folder")
    if inside(a.out, REPO) and not inside(a.out, RESULTS_DIR):
        p.error(f"--out {a.out}: pictures made from photos stay out of git: use a folder under {RESULTS_DIR}")
    seed = a.seed if a.seed is not None else secrets.randbelow(2**31)
    find, close = (None, None) if a.no_faces else face_finder()
    try:
        key = build_page(a.before, a.after, photos_dir, a.out, seed=seed, find_faces=find, sheet=a.sheet)
    finally:
        if close is not None:
            close()
    print(f"{len(key['photos'])} photos: {(a.out / 'index.html').resolve().as_uri()}\nkey: {a.out / 'key.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``compare.py EXPERIMENT ...`` times configs; ``compare.py BEFORE AFTER ...`` writes the blind page."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and not argv[0].startswith("-") and argv[0] not in EXPERIMENTS:
        return page_main(argv)
    return experiment_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
