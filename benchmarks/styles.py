"""Several styles on one box: memory per compiled style, the cost of switching styles, and the Python API's
threads against `bench` (issue 15's figures).

Styles are seeded-random generators of the published architecture with different seeds (the architecture,
not the weights, sets speed and memory), converted to fp32 IR once under ``benchmarks/results/models``.
Every case runs in its own process: peak RSS (getrusage) never goes down within one.

- ``rss N``: a Stylizer serving N styles at ``max_side`` 512, each style used on the photos (so each is
  compiled and has run its shapes); peak and current RSS.
- ``one`` / ``alternate``: the same photos through one style, or alternating between two styles file by
  file, submitted together through ``Stylizer.submit`` (what the watch folder does); images/s.
- ``api4`` / ``bench``: four threads calling ``Stylizer.stylize`` on the photos vs ``edge-anime bench``'s
  measure on the same photos, one style; images/s.
Throughput cases run in alternating rounds (ABC, CBA...) and ratios are taken per round.

    python benchmarks/styles.py [--limit 8] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import (
    PHOTOS_DIR,
    REPO,
    RESULTS_DIR,
    SEED,
    alternating_rounds,
    ensure_seeded_ir,
    machine,
    markdown_table,
    median,
    product_environment,
    run_worker,
    write_results,
)

STYLE_COUNT = 4
MAX_SIDE = 512


def style_dirs() -> list[Path]:
    """Four fp32 style folders, ``style1`` .. ``style4``, from four seeds."""
    return [ensure_seeded_ir(RESULTS_DIR / "models" / f"style{i + 1}", seed=SEED + i) for i in range(STYLE_COUNT)]


def _config(styles: list[Path]) -> Any:
    """The shipped defaults (``device.shape_cache_mb`` included: it bounds every style's shapes together)."""
    sys.path.insert(0, str(REPO))
    from edge_anime.config import parse_config

    return parse_config({
        "model": {"path": str(styles[0] / "model.xml"), "styles": [str(s / "model.xml") for s in styles[1:]]},
        "device": {"cache_dir": str(RESULTS_DIR / "ovcache")},
        "image": {"resize": "max_side", "max_side": MAX_SIDE},
        "output": {"quality": 92},
    }, base_dir=REPO)


def _photos(folder: Path, limit: int) -> list[Path]:
    from edge_anime.config import WatchSection
    from edge_anime.measure.throughput import input_files

    return input_files(folder, WatchSection())[:limit]


def _rss_mb() -> tuple[float, float]:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with open("/proc/self/statm") as fh:
        current = int(fh.read().split()[1]) * resource.getpagesize() / 2**20
    return peak, current


def _through(stylizer: Any, files: list[Path], styles: list[str | None], out: Path) -> float:
    """Submit every file (style chosen per file), wait for all; images/s."""
    from edge_anime.pipeline import Job

    start = time.perf_counter()
    futures = [stylizer.submit(Job(src=f, dst=out / f"{i:03d}.jpg"), style=styles[i % len(styles)])
               for i, f in enumerate(files)]
    errors = [r.error for r in (f.result() for f in futures) if r.error is not None]
    if errors:
        raise RuntimeError(f"{len(errors)} failed: {errors[0]}")
    return len(files) / (time.perf_counter() - start)


def worker(case: str, photos: Path, limit: int, out: Path) -> dict[str, Any]:
    from edge_anime import Stylizer

    styles = style_dirs()
    files = _photos(photos, limit)
    out.mkdir(parents=True, exist_ok=True)
    if case.startswith("rss"):
        count = int(case.split()[1])
        with Stylizer(_config(styles[:count])) as stylizer:
            for name in stylizer.styles:
                _through(stylizer, files, [name], out)
            peak, current = _rss_mb()
            return {"styles": count, "compiled": len(stylizer.compiled_styles()), "peak_rss_mb": round(peak),
                    "rss_mb": round(current), "shape_cache_mb": stylizer.config.device.shape_cache_mb}
    if case in ("one", "alternate"):
        with Stylizer(_config(styles[:2])) as stylizer:
            names: list[str | None] = list(stylizer.styles) if case == "alternate" else [stylizer.styles[0]]
            _through(stylizer, files, list(stylizer.styles), out)  # warm-up: both compiled, every shape once
            return {"images_per_s": _through(stylizer, files, names, out)}
    if case == "api4":
        with Stylizer(_config(styles[:1])) as stylizer:
            for f in files:
                stylizer.stylize(f)  # warm-up: every shape compiled
            queue = list(files)
            lock = threading.Lock()

            def call() -> None:
                while True:
                    with lock:
                        if not queue:
                            return
                        path = queue.pop()
                    stylizer.stylize(path)

            start = time.perf_counter()
            threads = [threading.Thread(target=call) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return {"images_per_s": len(files) / (time.perf_counter() - start)}
    if case == "bench":
        from edge_anime.measure.throughput import measure

        report = measure(_config(styles[:1]), files, repeat=1, warmup=1)
        return {"images_per_s": report["images_per_s"]}
    raise SystemExit(f"unknown case {case!r}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--limit", type=int, default=8, help="photos per case")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the throughput cases")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    out = RESULTS_DIR / "styles_out"
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.photos, args.limit, out)))
        return 0
    style_dirs()  # built once, before any timing
    env = product_environment()

    def run(case: str) -> dict[str, Any]:
        return run_worker(__file__, ["--worker", case, "--photos", str(args.photos), "--limit", str(args.limit)], env)

    rss_rows = []
    for count in (1, 2, 4):
        row = run(f"rss {count}")
        print(row, flush=True)
        rss_rows.append(row)
    switching = alternating_rounds(["one", "alternate"], args.rounds, run, label="switching ")
    api = alternating_rounds(["api4", "bench"], args.rounds, run, label="api ")
    ratios = {
        "alternate_vs_one": [r["alternate"]["images_per_s"] / r["one"]["images_per_s"] for r in switching],
        "api4_vs_bench": [r["api4"]["images_per_s"] / r["bench"]["images_per_s"] for r in api],
    }
    summary = {k: round(median(v), 3) for k, v in ratios.items()}
    table = (f"peak RSS with N styles compiled at max_side {MAX_SIDE} ({args.limit} photos through each)\n\n"
             + markdown_table(rss_rows, ["styles", "compiled", "peak_rss_mb", "rss_mb", "shape_cache_mb"])
             + "\n\nthroughput ratios per round (median): "
             + ", ".join(f"{k} {v}" for k, v in summary.items()) + "\n")
    data = {"machine": machine(), "rss": rss_rows, "switching": switching, "api": api, "ratios": ratios,
            "median_ratios": summary}
    path = write_results("styles", data, table)
    print(table)
    print(f"written {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
