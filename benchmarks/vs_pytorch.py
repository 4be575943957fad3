"""(a) Our pipeline vs the seed-style PyTorch pipeline, images/s side by side in one run.

The PyTorch side is the published CPU tuning write-up's final setup: the model loaded once as TorchScript
(a trace of ``edge_anime_converters.generator``), ``torch.set_num_threads(2)``, ``set_num_interop_threads(1)``, its
preprocessing (PIL convert + BILINEAR resize + ``from_numpy().permute().float()`` and the [-1, 1] scaling),
one photo after another, JPEG out at the same quality. Our side is ``edge_anime.measure.throughput.measure`` (decode,
resize, infer, encode, atomic write). Same photos, same 512 long side, same weights (seeded-random).

Each side runs in its own process (so neither's thread pools or memory touch the other), the two
alternate for ``--rounds`` rounds, and the ratio is taken per round: load from other processes on the shared
box hits both alike. Each side gets one untimed warm-up pass (shapes compiled, TorchScript profiled).

Environments: our side runs as ``edge-anime`` runs, with glibc's huge-page tunable where the box supports
it (``edge_anime.runtime.host.huge_pages_environment``); the f32 row is repeated without it, so its share shows.
PyTorch runs as the write-up ran it (glibc defaults) unless ``--torch-huge-pages`` gives it the same.

    python benchmarks/vs_pytorch.py [--rounds 2] [--photos DIR] [--int8 MODEL_DIR] [--limit N] [--busy 1]
                                      [--torch-huge-pages]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
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
    other_load,
    product_environment,
    run_worker,
    write_results,
)

MAX_SIDE_PX = 512
MULTIPLE = 8
JPEG_QUALITY = 92
TORCHSCRIPT = RESULTS_DIR / "models" / "randgen_torchscript.pt"
EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp")


def photos(folder: Path, limit: int | None) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in EXTENSIONS)
    return files[:limit] if limit else files


def ensure_torchscript() -> Path:
    if TORCHSCRIPT.is_file():
        return TORCHSCRIPT
    import torch

    sys.path.insert(0, str(REPO))
    from edge_anime_converters.generator import seeded_random_generator

    traced = torch.jit.trace(seeded_random_generator(SEED).eval(), torch.zeros(1, 3, 256, 256))
    TORCHSCRIPT.parent.mkdir(parents=True, exist_ok=True)
    tmp = TORCHSCRIPT.with_name(".tmp-" + TORCHSCRIPT.name)
    traced.save(str(tmp))
    tmp.replace(TORCHSCRIPT)
    return TORCHSCRIPT


def torch_worker(files: list[Path]) -> dict[str, Any]:
    """The write-up's pipeline, one photo at a time."""
    import psutil
    import torch
    from PIL import Image

    torch.set_num_threads(2)
    torch.set_num_interop_threads(1)
    model = torch.jit.load(str(TORCHSCRIPT)).eval()

    from _seed import paint

    def one(path: Path, out: Path) -> None:
        paint(model, Image.open(path)).save(out, "JPEG", quality=JPEG_QUALITY)

    with tempfile.TemporaryDirectory() as tmp:
        for path in files:  # warm-up pass: the profiling executor specialises per shape on the first runs
            one(path, Path(tmp) / "w.jpg")
        proc = psutil.Process()
        before = proc.cpu_times()
        start = time.perf_counter()
        for i, path in enumerate(files):
            one(path, Path(tmp) / f"{i}.jpg")
        wall = time.perf_counter() - start
        after = proc.cpu_times()
    cpu = (after.user - before.user) + (after.system - before.system)
    return {"images_per_s": len(files) / wall, "wall_s": wall, "cpu_utilisation_pct": 100 * cpu / (wall * 2),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "threads": torch.get_num_threads()}


def ov_worker(files: list[Path], model_dir: Path, precision: str) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from edge_anime.config import parse_config
    from edge_anime.measure.throughput import measure

    raw = {"model": {"path": str(model_dir / "model.xml")},
           "device": {"inference_precision": precision, "cache_dir": str(RESULTS_DIR / "ovcache")},
           "image": {"resize": "max_side", "max_side": MAX_SIDE_PX, "multiple": MULTIPLE},
           "output": {"format": "jpeg", "quality": JPEG_QUALITY}}
    report = measure(parse_config(raw, base_dir=REPO), files, repeat=1, warmup=1)
    assert "torch" not in sys.modules, "the runtime must not import torch"
    eff = report["plugin"]["effective"]
    return {"images_per_s": report["images_per_s"], "wall_s": report["wall_s"], "failed": report["failed"],
            "cpu_utilisation_pct": report["cpu_utilisation_pct"], "peak_rss_mb": report["peak_rss_mb"],
            "latency_p50_s": report["latency_s"]["p50"], "precision": eff.get("INFERENCE_PRECISION_HINT"),
            "streams": eff.get("NUM_STREAMS"), "stages_s_per_image": report["stages_s_per_image"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="only the first N photos")
    parser.add_argument("--model", type=Path, default=None, help="fp32 model folder (default: seeded-random IR)")
    parser.add_argument("--int8", type=Path, default=None, help="an INT8 model folder of the same weights")
    parser.add_argument("--torch-huge-pages", action="store_true", help="PyTorch gets the huge-page tunable too")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes kept running alongside (other load)")
    parser.add_argument("--worker", choices=("torch", "ov"), help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="f32", help=argparse.SUPPRESS)
    args = parser.parse_args()
    files = photos(args.photos, args.limit)
    if args.worker == "torch":
        print(json.dumps(torch_worker(files)))
        return 0
    if args.worker == "ov":
        print(json.dumps(ov_worker(files, args.model, args.precision)))
        return 0
    if not files:
        print(f"no photos in {args.photos}; give --photos DIR", file=sys.stderr)
        return 2
    model = (args.model or ensure_seeded_ir()).resolve()
    int8 = args.int8.resolve() if args.int8 else None
    ensure_torchscript()
    plain = dict(os.environ)
    product = product_environment()
    variants: list[tuple[str, list[str], dict[str, str]]] = [
        ("openvino f32", ["--model", str(model), "--precision", "f32"], product),
        ("openvino f32, glibc default pages", ["--model", str(model), "--precision", "f32"], plain),
        ("openvino auto", ["--model", str(model), "--precision", "auto"], product)]
    if int8:
        variants.append(("openvino int8", ["--model", str(int8), "--precision", "auto"], product))
    torch_env = product if args.torch_huge_pages else plain
    common = ["--photos", str(args.photos)] + (["--limit", str(args.limit)] if args.limit else [])
    sides = {"pytorch": (["--worker", "torch"], torch_env), **{n: (["--worker", "ov", *a], e) for n, a, e in variants}}
    with other_load(args.busy):
        rounds = alternating_rounds(list(sides), args.rounds,
                                    lambda name: run_worker(__file__, sides[name][0] + common, sides[name][1]))
    table_rows = []
    for name in ["pytorch"] + [n for n, _, _ in variants]:
        ratios = [rd[name]["images_per_s"] / rd["pytorch"]["images_per_s"] for rd in rounds]
        table_rows.append({"pipeline": name, "images/s (median)": median([rd[name]["images_per_s"] for rd in rounds]),
                           "x pytorch (median of per-round ratios)": median(ratios),
                           "per-round ratios": ", ".join(f"{x:.2f}" for x in ratios),
                           "CPU %": median([rd[name]["cpu_utilisation_pct"] for rd in rounds]),
                           "peak RSS MB": median([rd[name]["peak_rss_mb"] for rd in rounds]),
                           "precision": rounds[0][name].get("precision", "f32")})
    table = (f"{len(files)} photos from {args.photos}, long side {MAX_SIDE_PX}, JPEG q{JPEG_QUALITY}, "
             f"{args.rounds} alternating rounds{f', {args.busy} busy processes alongside' if args.busy else ''}"
             f"{', PyTorch with huge pages too' if args.torch_huge_pages else ''}\n\n"
             + markdown_table(table_rows, list(table_rows[0])))
    suffix = (f"_busy{args.busy}" if args.busy else "") + ("_torchhp" if args.torch_huge_pages else "")
    write_results(f"vs_pytorch{suffix}", {"machine": machine(), "photos": len(files), "busy": args.busy,
                                          "rounds": rounds, "table": table_rows}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
