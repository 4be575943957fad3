"""(b) Our whole pipeline's images/s vs ``benchmark_app -hint throughput`` (inference only) on the same IR and shape.

Both sides run in the environment ``edge-anime`` gives itself (``_common.product_environment``: glibc's
huge-page tunable where supported), so neither gets the 10-24 % that huge pages are worth alone;
``--glibc-default-pages`` runs both without it.
``benchmark_app`` is OpenVINO's own ceiling: random tensors, no files, no decode or encode. Our side decodes
the real photos, resizes each to exactly 512x512 (``image.resize: fixed``, so every inference has the shape
benchmark_app uses), infers through the pipeline, encodes JPEG and writes atomically. Both use the
THROUGHPUT hint and the same inference precision; they run in separate processes, alternating, for
``--rounds`` rounds, and the ratio is taken per round (the box is shared: absolute figures are noisy).
benchmark_app reports a steady state (``-t`` seconds of back-to-back inferences); so does our side: the
photos are cycled into one pass of ``--images`` files, so the seconds at a pass's start (the first decode,
before any inference can run) and end (one stream finishing the last image alone) weigh as they do in a
watch folder that keeps receiving photos, not as in a 12-photo batch.

    python benchmarks/vs_benchmark_app.py [--rounds 2] [--seconds 20] [--int8 MODEL_DIR] [--precisions '']
    python benchmarks/vs_benchmark_app.py --int8 models/toon --precisions '' --rounds 3   # the INT8 ceiling
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import subprocess
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
    product_environment,
    run_worker,
    write_results,
)

SIZE_HW = (512, 512)
THROUGHPUT_RE = re.compile(r"Throughput:\s*([0-9.]+)\s*FPS")


def benchmark_app(xml: Path, precision: str, seconds: int, env: dict[str, str]) -> dict[str, Any]:
    exe = shutil.which("benchmark_app") or str(Path(sys.executable).with_name("benchmark_app"))
    cmd = [exe, "-m", str(xml), "-d", "CPU", "-hint", "throughput", "-t", str(seconds),
           "-shape", f"[1,{SIZE_HW[0]},{SIZE_HW[1]},3]"]
    if precision != "auto":
        cmd += ["-infer_precision", precision]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    match = THROUGHPUT_RE.search(out)
    if match is None:
        raise RuntimeError(f"no 'Throughput: N FPS' in benchmark_app output:\n{out[-2000:]}")
    streams = re.search(r"NUM_STREAMS:\s*(\d+)", out)
    return {"images_per_s": float(match.group(1)), "command": " ".join(cmd[1:]),
            "streams": int(streams.group(1)) if streams else None}


def ours(xml: Path, precision: str, photos: Path, limit: int | None, images: int, env: dict[str, str], *,
         tree: Path = REPO) -> dict[str, Any]:
    """Our pipeline in a fresh process, on the code of ``tree`` (this checkout, or ``--before``'s)."""
    variant = ["--variant", xml.stem.split("_", 1)[1]] if "_" in xml.stem else []  # model_int8.xml -> int8
    return run_worker(str(tree / "benchmarks" / Path(__file__).name), ["--worker", "--model", str(xml.parent), "--precision", precision, "--photos",
                                 str(photos), "--images", str(images), *variant]
                      + (["--limit", str(limit)] if limit else []), env)


def int8_xml(folder: Path) -> Path:
    """The INT8 IR of ``folder``: a style's ``int8`` variant (``model_int8.xml``) or a folder of its own."""
    variant = folder / "model_int8.xml"
    return variant if variant.is_file() else folder / "model.xml"


def worker(model_dir: Path, precision: str, photos: Path, limit: int | None, images: int,
           variant: str | None) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from edge_anime.config import parse_config
    from edge_anime.measure.throughput import input_files, measure

    model: dict[str, Any] = {"path": str(model_dir)} if variant else {"path": str(model_dir / "model.xml")}
    if variant:
        model["variant"] = variant
    raw = {"model": model,
           "device": {"performance_hint": "THROUGHPUT", "inference_precision": precision,
                      "cache_dir": str(RESULTS_DIR / "ovcache")},
           "image": {"resize": "fixed", "fixed": f"{SIZE_HW[1]}x{SIZE_HW[0]}"},
           "output": {"format": "jpeg", "quality": 92}}
    config = parse_config(raw, base_dir=REPO)
    files = input_files(photos, config.watch)[:limit]
    files = list(itertools.islice(itertools.cycle(files), max(images, len(files))))
    report = measure(config, files, repeat=1, warmup=1)
    return {"images_per_s": report["images_per_s"], "cpu_utilisation_pct": report["cpu_utilisation_pct"],
            "failed": report["failed"], "stages_s_per_image": report["stages_s_per_image"],
            "streams": report["plugin"]["effective"].get("NUM_STREAMS"),
            "precision": report["plugin"]["effective"].get("INFERENCE_PRECISION_HINT"),
            "sizes": report["sizes"], "peak_rss_mb": report["peak_rss_mb"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20, help="benchmark_app -t")
    parser.add_argument("--limit", type=int, default=None, help="only the first N photos")
    parser.add_argument("--images", type=int, default=48, help="images per timed pass (the photos cycled)")
    parser.add_argument("--model", type=Path, default=None, help="fp32 model folder (default: seeded-random IR)")
    parser.add_argument("--int8", type=Path, default=None,
                        help="an INT8 model folder, or a style folder with an int8 variant (models/toon)")
    parser.add_argument("--precisions", default="f32,auto", help="inference precisions for the fp32 IR (\"\" for none)")
    parser.add_argument("--before", type=Path, default=None,
                        help="another checkout (e.g. `git worktree add /tmp/before main`) run as a third side, "
                             "'pipeline before', in the same rounds: a change's effect as ratios of one run")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--glibc-default-pages", action="store_true", help="both sides without the huge-page tunable")
    parser.add_argument("--precision", default="f32", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    env = dict(os.environ) if args.glibc_default_pages else product_environment()
    if args.worker:
        print(json.dumps(worker(args.model, args.precision, args.photos, args.limit, args.images, args.variant)))
        return 0
    precisions = [p for p in args.precisions.split(",") if p]
    model = (args.model or ensure_seeded_ir()).resolve() if precisions else None
    variants = [(f"fp32 IR, {p}", model / "model.xml", p) for p in precisions if model is not None]
    if args.int8:
        variants.append(("int8 IR", int8_xml(args.int8.resolve()), "auto"))
    rows, raw = [], []
    for name, xml, precision in variants:
        sides = ["benchmark_app", "pipeline"] + (["pipeline before"] if args.before else [])
        per_round = alternating_rounds(
            sides, args.rounds, label=f"{name} ",
            run=lambda side: (benchmark_app(xml, precision, args.seconds, env)  # noqa: B023 - called in this loop
                              if side == "benchmark_app"
                              else ours(xml, precision, args.photos, args.limit, args.images, env,  # noqa: B023
                                        tree=args.before.resolve() if side == "pipeline before" else REPO)))
        for side in sides[1:]:
            ratios = [p[side]["images_per_s"] / p["benchmark_app"]["images_per_s"] for p in per_round]
            stages = {s: median([p[side]["stages_s_per_image"][s] for p in per_round]) * 1000
                      for s in ("decode", "resize", "infer", "encode")}
            rows.append({"model": name, "side": side,
                         "benchmark_app images/s": median([p["benchmark_app"]["images_per_s"] for p in per_round]),
                         "pipeline images/s": median([p[side]["images_per_s"] for p in per_round]),
                         "pipeline / benchmark_app": median(ratios), "per-round": ", ".join(f"{x:.2f}" for x in ratios),
                         "pipeline CPU %": median([p[side]["cpu_utilisation_pct"] for p in per_round]),
                         **{f"{s} ms": v for s, v in stages.items()},
                         "precision": per_round[0][side]["precision"]})
        raw.append({"variant": name, "rounds": per_round})
    table = (f"shape 1x{SIZE_HW[0]}x{SIZE_HW[1]}x3, THROUGHPUT hint; pipeline = real photos from {args.photos} "
             f"(decode, resize, infer, JPEG encode, atomic write), {args.images} images a pass; benchmark_app -t {args.seconds}; both sides "
             f"{'with glibc default pages' if args.glibc_default_pages else 'with huge pages (as edge-anime runs)'}\n\n"
             + markdown_table(rows, list(rows[0])))
    write_results("vs_benchmark_app" + ("_default_pages" if args.glibc_default_pages else ""), {"machine": machine(), "rows": rows, "raw": raw}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
