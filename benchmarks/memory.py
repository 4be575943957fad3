"""(d) Peak RSS of the whole pipeline at 512x512 and at 1352x1080, per hint and precision.

Each case runs in its own process (``getrusage`` peak RSS is per process and never goes down), pushing real
photos through ``edge_anime.measure.throughput.measure`` with ``image.resize: fixed`` so every inference has the size
named. The last cases are the realistic ones: the photos at ``max_side: 512``, mixed shapes, the shape cache
at the default and smaller sizes: every shape in use holds its own activation memory per stream, idle ones
only their compiled graph once over ``shape_cache_mb``.

With ``--shapes 1,2,4,8`` it measures instead the default setup (``max_side: 512``, THROUGHPUT, the bundled
toon's INT8 variant) per number of input shapes in use: K camera-size crops of one photo, each a different
shape at 512, every one run three times through the pipeline in a fresh process; peak RSS (VmHWM), RSS
after the engine started, and what the shape cache holds and estimates (``Engine.cache_mb``).

    python benchmarks/memory.py [--limit 4]
    python benchmarks/memory.py --shapes 1,2,4,6,8 [--shape-cache-mb 2048]

``--shape-cost`` measures what ``engine.ACTIVATION_BYTES_PER_PX`` and ``IDLE_SHAPE_MB`` hold: per variant of
the bundled toon at f32, THROUGHPUT, for 256x256, 512x512 and 768x512 in one fresh process, RSS before the
compile, after it, after one inference on every stream at once, and after ``release_memory``; the slope
of activations over pixels per stream is the figure the shape cache's estimate uses.

    python benchmarks/memory.py --shape-cost
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _common import (
    PHOTOS_DIR,
    REPO,
    RESULTS_DIR,
    ensure_seeded_ir,
    machine,
    markdown_table,
    product_environment,
    run_worker,
    write_results,
)

CASES: list[tuple[str, dict[str, Any]]] = [
    ("512x512 THROUGHPUT auto", {"device": {"performance_hint": "THROUGHPUT"}, "image": {"resize": "fixed", "fixed": "512x512"}}),
    ("512x512 LATENCY auto", {"device": {"performance_hint": "LATENCY"}, "image": {"resize": "fixed", "fixed": "512x512"}}),
    ("512x512 THROUGHPUT f32", {"device": {"performance_hint": "THROUGHPUT", "inference_precision": "f32"},
                                "image": {"resize": "fixed", "fixed": "512x512"}}),
    ("512x512 LATENCY f32", {"device": {"performance_hint": "LATENCY", "inference_precision": "f32"},
                             "image": {"resize": "fixed", "fixed": "512x512"}}),
    ("1352x1080 THROUGHPUT auto", {"device": {"performance_hint": "THROUGHPUT"}, "image": {"resize": "fixed", "fixed": "1352x1080"}}),
    ("1352x1080 LATENCY auto", {"device": {"performance_hint": "LATENCY"}, "image": {"resize": "fixed", "fixed": "1352x1080"}}),
    ("1352x1080 LATENCY f32", {"device": {"performance_hint": "LATENCY", "inference_precision": "f32"},
                               "image": {"resize": "fixed", "fixed": "1352x1080"}}),
    ("photos max_side 512, mixed shapes, cache 16 (default), THROUGHPUT auto",
     {"device": {"performance_hint": "THROUGHPUT"}, "image": {"resize": "max_side", "max_side": 512}}),
    ("photos max_side 512, mixed shapes, cache 4, THROUGHPUT auto",
     {"device": {"performance_hint": "THROUGHPUT", "shape_cache_size": 4}, "image": {"resize": "max_side", "max_side": 512}}),
    ("photos max_side 512, mixed shapes, cache 1, LATENCY auto",
     {"device": {"performance_hint": "LATENCY", "shape_cache_size": 1}, "image": {"resize": "max_side", "max_side": 512}}),
]


def worker(model_dir: Path, overrides: dict[str, Any], photos: Path, limit: int | None) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from edge_anime.config import parse_config
    from edge_anime.measure.throughput import input_files, measure

    raw: dict[str, Any] = {"model": {"path": str(model_dir / "model.xml")},
                           "device": {"cache_dir": str(RESULTS_DIR / "ovcache")}, "output": {"quality": 92}}
    for section, values in overrides.items():
        raw.setdefault(section, {}).update(values)
    config = parse_config(raw, base_dir=REPO)
    files = input_files(photos, config.watch)[:limit]
    report = measure(config, files, repeat=1, warmup=0)
    return {"peak_rss_mb": report["peak_rss_mb"], "images": report["ok"], "failed": report["failed"],
            "streams": report["plugin"]["effective"].get("NUM_STREAMS"),
            "precision": report["plugin"]["effective"].get("INFERENCE_PRECISION_HINT"),
            "shapes_kept": len(report["compiled_shapes"]), "sizes": len(report["sizes"]),
            "torch_loaded": "torch" in sys.modules}


def _status_mb(field: str) -> float:
    """VmRSS / VmHWM of this process in MB (VmHWM, unlike ru_maxrss, is this process's own, not a parent's)."""
    text = Path("/proc/self/status").read_text()
    return int(text.split(f"{field}:")[1].split()[0]) / 1024


def shapes_worker(count: int, photo: Path, shape_cache_mb: int | None) -> dict[str, Any]:
    """The default setup with ``count`` shapes in use (see the module docstring)."""
    import tempfile

    sys.path.insert(0, str(REPO))
    from PIL import Image

    from edge_anime.config import parse_config
    from edge_anime.measure.throughput import measure
    from edge_anime.runtime.choice import open_engine

    device: dict[str, Any] = {"cache_dir": str(RESULTS_DIR / "ovcache"), "performance_hint": "THROUGHPUT"}
    if shape_cache_mb is not None:
        device["shape_cache_mb"] = shape_cache_mb
    raw = {"model": {"path": "toon", "variant": "int8"}, "device": device,
           "image": {"resize": "max_side", "max_side": 512}, "output": {"quality": 92}}
    config = parse_config(raw, base_dir=REPO)
    with tempfile.TemporaryDirectory(prefix="edge-anime-shapes-") as tmp, Image.open(photo) as source:
        source = source.convert("RGB")
        files = []
        for i in range(count):  # 1024 x (768 + 16 i): 512 x (384 + 8 i) after max_side, one shape each
            path = Path(tmp) / f"shape_{i}.jpg"
            source.resize((1024, 768 + 16 * i)).save(path, quality=92)
            files.append(path)
        _, engine = open_engine(config)
        started_mb = _status_mb("VmRSS")
        report = measure(config, files * 3, repeat=1, warmup=0, engine=engine)
        released = engine.released_shapes()
        return {"shapes": count, "peak_rss_mb": _status_mb("VmHWM"), "rss_after_start_mb": started_mb,
                "rss_end_mb": _status_mb("VmRSS"), "estimate_mb": engine.cache_mb(),
                "shape_cache_mb": engine.device.shape_cache_mb, "kept": len(engine.cached_shapes()),
                "released": len(released), "failed": report["failed"],
                "variant": engine.model_info.variant_name,
                "streams": report["plugin"]["effective"].get("NUM_STREAMS"),
                "precision": report["plugin"]["effective"].get("INFERENCE_PRECISION_HINT")}


COST_SIZES_HW = ((256, 256), (512, 512), (768, 512))


def cost_worker(variant: str) -> dict[str, Any]:
    """RSS steps of each shape of ``COST_SIZES_HW`` for one variant of the bundled toon (module docstring)."""
    sys.path.insert(0, str(REPO))
    import numpy as np

    from edge_anime.config import DeviceSection
    from edge_anime.models import load_model_info
    from edge_anime.runtime.engine import Engine

    style = load_model_info(REPO / "models" / "toon", verify=False)
    device = DeviceSection(performance_hint="THROUGHPUT", inference_precision="f32",
                           cache_dir=RESULTS_DIR / "ovcache", shape_cache_size=16, shape_cache_mb=100_000)
    engine = Engine(style.with_variant(variant, verify=False), device)
    streams = int(engine.effective.get("NUM_STREAMS", 1))
    rows = []
    for height, width in COST_SIZES_HW:
        before = _status_mb("VmRSS")
        compiled = engine.compiled(height, width)
        compiled_mb = _status_mb("VmRSS")
        image = np.random.default_rng(0).integers(0, 256, (1, height, width, 3), dtype=np.uint8)
        requests = [compiled.create_infer_request() for _ in range(streams)]
        for request in requests:  # all at once: each stream allocates its own activations
            request.start_async({0: image})
        for request in requests:
            request.wait()
        inferred_mb = _status_mb("VmRSS")
        del requests
        compiled.release_memory()
        rows.append({"variant": variant, "size": f"{width}x{height}", "streams": streams,
                     "compile_mb": compiled_mb - before, "activations_mb": inferred_mb - compiled_mb,
                     "after_release_mb": _status_mb("VmRSS") - before,
                     "estimate_mb": engine.shape_mb(height, width)})
    pixels = [h * w for h, w in COST_SIZES_HW]
    slope = (rows[-1]["activations_mb"] - rows[0]["activations_mb"]) * (1 << 20) / (pixels[-1] - pixels[0])
    for row in rows:
        row["bytes_per_px_per_stream"] = round(slope / streams)
    return {"rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--limit", type=int, default=4, help="photos per fixed-size case (all for mixed cases)")
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--shapes", default=None, help="comma-separated shape counts: the default setup per count")
    parser.add_argument("--shape-cache-mb", type=int, default=None, help="device.shape_cache_mb for --shapes")
    parser.add_argument("--shape-cost", action="store_true", help="RSS per compiled shape, per variant")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None and args.worker.startswith("cost:"):
        print(json.dumps(cost_worker(args.worker.split(":")[1])))
        return 0
    if args.shape_cost:
        rows = [row for variant in ("fp16", "int8")
                for row in run_worker(__file__, ["--worker", f"cost:{variant}"], product_environment())["rows"]]
        for row in rows:
            print(row, flush=True)
        table = ("RSS of one compiled shape of the bundled toon, THROUGHPUT, f32 (one fresh process per variant)\n\n"
                 + markdown_table(rows, list(rows[0])))
        write_results("memory_shape_cost", {"machine": machine(), "rows": rows}, table)
        return 0
    photo = next(iter(sorted(args.photos.glob("scene_*.jpg"))), None)
    if args.worker is not None and args.worker.startswith("shapes:"):
        assert photo is not None
        print(json.dumps(shapes_worker(int(args.worker.split(":")[1]), photo, args.shape_cache_mb)))
        return 0
    if args.shapes:
        if photo is None:
            parser.error(f"--shapes needs a photo: none in {args.photos}")
        extra = ["--shape-cache-mb", str(args.shape_cache_mb)] if args.shape_cache_mb else []
        rows = []
        for count in (int(c) for c in args.shapes.split(",")):
            row = run_worker(__file__, ["--worker", f"shapes:{count}", "--photos", str(args.photos), *extra],
                             product_environment())
            print(row, flush=True)
            rows.append(row)
        table = ("default setup (max_side 512, THROUGHPUT, toon INT8) per number of shapes in use, one process "
                 "each\n\n" + markdown_table(rows, list(rows[0])))
        write_results("memory_shapes", {"machine": machine(), "rows": rows}, table)
        return 0
    if args.worker is not None:
        case = dict(CASES)[args.worker]
        limit = None if "mixed" in args.worker else args.limit
        print(json.dumps(worker(args.model, case, args.photos, limit)))
        return 0
    model = (args.model or ensure_seeded_ir()).resolve()
    rows = []
    env = product_environment()
    for label, _ in CASES:
        row = {"case": label, **run_worker(__file__, ["--worker", label, "--model", str(model), "--photos",
                                                      str(args.photos), "--limit", str(args.limit)], env)}
        print(row, flush=True)
        rows.append(row)
    table = "peak RSS (getrusage) of one process running the whole pipeline\n\n" + markdown_table(
        rows, ["case", "peak_rss_mb", "streams", "precision", "images", "sizes", "shapes_kept", "torch_loaded"])
    write_results("memory", {"machine": machine(), "rows": rows}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
