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
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

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
    product_environment,
    run_worker,
    write_results,
)

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    raise SystemExit(main())
