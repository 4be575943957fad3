"""(d) Peak RSS of the whole pipeline at 512x512 and at 1352x1080, per hint and precision.

Each case runs in its own process (``getrusage`` peak RSS is per process and never goes down), pushing real
photos through ``edge_anime.bench.measure`` with ``image.resize: fixed`` so every inference has the size
named. The last cases are the realistic ones: the photos at ``max_side: 512``, mixed shapes, the shape cache
at the default and smaller sizes: every shape in use holds its own activation memory per stream, idle ones
only their compiled graph once over ``shape_cache_mb``.

    python benchmarks/memory.py [--limit 4]
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
    from edge_anime.bench import input_files, measure
    from edge_anime.config import parse_config

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--limit", type=int, default=4, help="photos per fixed-size case (all for mixed cases)")
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
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
