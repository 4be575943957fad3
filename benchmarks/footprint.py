"""The memory levers at the edge, measured on photos of many sizes: peak RSS, images/s, s per MP, compiled
shapes, and what each costs the picture (PSNR of each output against the first setting's).

A setting is config overrides, ``section.key=value`` joined by commas (``image.multiple=32`` pads every picture
up to a coarser multiple, so photos of many sizes share a few compiled shapes: size buckets;
``device.shape_cache_mb=256`` gives activations back sooner; ``device.num_requests=1`` keeps fewer requests per
shape). Each (setting, max_side) runs in a fresh process: ``edge_anime.measure.throughput.measure`` over the
photos (one untimed pass that compiles every shape, ``--repeat`` timed ones), then ``Stylizer.stylize`` of each
photo for the picture. Everything else at the defaults (THROUGHPUT, the variant the first start chose).

    python benchmarks/footprint.py [--settings "" image.multiple=32 device.shape_cache_mb=256] [--max-sides 256 512]
                                   [--limit 16] [--repeat 2]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import PHOTOS_DIR, REPO, RESULTS_DIR, machine, markdown_table, run_worker, write_results


def overrides(setting: str) -> dict[str, dict[str, Any]]:
    """``"image.multiple=32,device.shape_cache_mb=256"`` -> ``{"image": {"multiple": 32}, "device": {...}}``."""
    import yaml

    found: dict[str, dict[str, Any]] = {}
    for part in filter(None, (p.strip() for p in setting.split(","))):
        key, value = part.split("=", 1)
        section, name = key.split(".", 1)
        found.setdefault(section, {})[name] = yaml.safe_load(value)
    return found


def worker(setting: str, max_side: int, photos: Path, limit: int, repeat: int, out: Path) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    import numpy as np

    from edge_anime.config import parse_config
    from edge_anime.measure.throughput import input_files, measure
    from edge_anime.stylizer import Stylizer

    raw: dict[str, Any] = {"model": {"path": "toon"}, "device": {"cache_dir": str(RESULTS_DIR / "ovcache")},
                           "image": {"resize": "max_side", "max_side": max_side}}
    for section, values in overrides(setting).items():
        raw.setdefault(section, {}).update(values)
    config = parse_config(raw, base_dir=REPO)
    files = input_files(photos, config.watch)[:limit]
    with Stylizer(config) as stylizer:
        report = measure(config, files, repeat=repeat, warmup=1, stylizer=stylizer)
        out.mkdir(parents=True, exist_ok=True)
        for path in files:
            np.save(out / f"{path.stem}.npy", np.asarray(stylizer.stylize(path)))
    return {"setting": setting or "defaults", "max_side": max_side, "images_per_s": report["images_per_s"],
            "s_per_mp": report["s_per_mp"], "peak_rss_mb": report["peak_rss_mb"],
            "shapes": len(report["compiled_shapes"]), "sizes": len(report["sizes"]),
            "variant": report["plugin"].get("variant"),
            "precision": report["plugin"]["effective"].get("INFERENCE_PRECISION_HINT")}


def psnr(a: Any, b: Any) -> float:
    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return 100.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", default=["", "image.multiple=32", "device.shape_cache_mb=256"],
                        help="config overrides per run; the first is the picture's reference (\"\": the defaults)")
    parser.add_argument("--max-sides", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        spec = json.loads(args.worker)
        spec["photos"], spec["out"] = Path(spec["photos"]), Path(spec["out"])
        print(json.dumps(worker(**spec)))
        return 0
    import numpy as np

    rows = []
    with tempfile.TemporaryDirectory(prefix="edge-anime-footprint-") as tmp:
        for max_side in args.max_sides:
            reference: Path | None = None
            for number, setting in enumerate(args.settings):
                out = Path(tmp) / f"{max_side}-{number}"
                spec = {"setting": setting, "max_side": max_side, "photos": str(args.photos),
                        "limit": args.limit, "repeat": args.repeat, "out": str(out)}
                row = run_worker(__file__, ["--worker", json.dumps(spec)])
                if reference is None:
                    reference = out
                    row["psnr_min_db"] = row["psnr_mean_db"] = None
                else:
                    figures = [psnr(np.load(p), np.load(reference / p.name)) for p in sorted(out.glob("*.npy"))]
                    row["psnr_min_db"], row["psnr_mean_db"] = min(figures), sum(figures) / len(figures)
                rows.append(row)
                print(row, flush=True)
    text = (f"Memory levers over {args.limit} photos of ../shared/photos, bundled toon; PSNR of each output against "
            f"the first setting's ({args.settings[0] or 'defaults'})\n\n"
            + markdown_table(rows, ["max_side", "setting", "shapes", "sizes", "images_per_s", "s_per_mp",
                                    "peak_rss_mb", "psnr_min_db", "psnr_mean_db", "variant", "precision"]))
    write_results("footprint", {"machine": machine(), "rows": rows}, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
