"""Issue 14's figures: the default (model.variant and inference_precision auto, i.e. measured) against each
variant of the bundled style pinned, through `edge-anime bench` (the whole pipeline), in alternating
rounds; plus the first-start probe time (an empty device.cache_dir: the measurement runs) and the warm
start (the cached decision is read and the model cache is warm).

Every side is a fresh `edge-anime bench` process with its own config file in a temp folder; the default's
config shares one cache folder across rounds, so only the first start (timed separately) measures.

    python benchmarks/variants.py [--photos DIR] [--max-side 512] [--rounds 2] [--repeat 1] [--limit 16]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from _common import PHOTOS_DIR, REPO, alternating_rounds, machine, markdown_table, median, write_results

STARTS = 3  # warm starts timed


def _config(folder: Path, cache: Path, **model: str) -> Path:
    path = folder / f"config-{'-'.join(model.values()) or 'auto'}.yaml"
    path.write_text(yaml.safe_dump({"model": {"path": "toon", **model}, "device": {"cache_dir": str(cache)}}),
                    encoding="utf-8")
    return path


def bench(config: Path, photos: Path, *, max_side: int, repeat: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        proc = subprocess.run([sys.executable, "-m", "edge_anime", "bench", str(photos), "--config", str(config),
                               "--max-side", str(max_side), "--repeat", str(repeat), "--json", out.name],
                              capture_output=True, text=True, cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(f"bench failed: {proc.stderr[-2000:]}")
        report: dict[str, Any] = json.loads(Path(out.name).read_text(encoding="utf-8"))
    return report


def start_seconds(config: Path, max_side: int) -> tuple[float, dict[str, Any]]:
    """Wall time of a fresh process from exec to a compiled engine (open_engine), and its choice."""
    code = ("import json, sys, time; t = time.perf_counter()\n"
            "from edge_anime.measure.throughput import with_overrides\n"
            "from edge_anime.runtime.choice import open_engine\n"
            "from edge_anime.config import load_config\n"
            f"config = with_overrides(load_config(sys.argv[1]), max_side={max_side})\n"
            "_, engine = open_engine(config)\n"
            "print(json.dumps({'engine_s': time.perf_counter() - t, 'choice': engine.choice}))\n")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, str(config)], capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--max-side", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--limit", type=int, default=16, help="photos used (name order)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="edge-anime-variants-"))
    try:
        photos = work / "photos"
        photos.mkdir()
        for src in sorted(args.photos.glob("*.jpg"))[: args.limit]:
            (photos / src.name).symlink_to(src.resolve())
        shared_cache = work / "cache"
        first_s, first = start_seconds(_config(work, shared_cache), args.max_side)  # empty cache: measures
        warm = [start_seconds(_config(work, shared_cache), args.max_side)[0] for _ in range(STARTS)]
        configs = {"default (auto)": _config(work, shared_cache),
                   **{f"{v} pinned": _config(work, shared_cache, variant=v) for v in ("fp16", "int8")}}
        rounds = alternating_rounds(list(configs), args.rounds,
                                    lambda name: bench(configs[name], photos, max_side=args.max_side,
                                                       repeat=args.repeat))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for name in configs:
        ratios = [r[name]["images_per_s"] / r["default (auto)"]["images_per_s"] for r in rounds]
        plugin = rounds[0][name]["plugin"]
        rows.append({"side": name, "variant": plugin.get("variant"),
                     "precision": plugin["effective"].get("INFERENCE_PRECISION_HINT"),
                     "images/s (median)": median([r[name]["images_per_s"] for r in rounds]),
                     "vs default per round": ", ".join(f"{x:.2f}" for x in ratios),
                     "machine busy %": median([r[name]["machine_cpu_busy_pct"] for r in rounds])})
    table = markdown_table(rows, list(rows[0]))
    table += (f"\nfirst start (empty cache, probe runs): {first_s:.1f} s, of which the probe "
              f"{first['choice']['probe_s']:.1f} s; choice: {first['choice']['summary']}\n"
              f"warm start (cached decision, warm model cache), process exec to compiled engine: "
              f"{', '.join(f'{x:.2f}' for x in warm)} s\n")
    data = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "rounds": rounds,
            "first_start_s": first_s, "first_choice": first["choice"], "warm_start_s": warm}
    write_results("variants", data, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
