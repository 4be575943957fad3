"""CPU time of each step of the pipeline, one photo at a time: read, decode, resize (plan), infer, encode.

The pipeline's ceiling against ``benchmark_app`` (``vs_benchmark_app.py``) is set by the CPU its own steps
take from inference on a small box: with ``c`` core-seconds of inference per image and ``o`` of the other
steps, the best the pipeline can reach is about ``c / (c + o)`` of benchmark_app. This script measures
``o`` step by step and ``c`` (THROUGHPUT hint, all requests in flight, process CPU time per image), as CPU
time of this process (``time.process_time``/``thread_time``), which other processes' load changes far less
than wall time. ``--before DIR`` runs the same measurement on another checkout in the same rounds (A, B,
B, A, ...), so a change's effect is read as ratios of one run.

    python benchmarks/pipeline_steps.py [--model models/toon --variant int8] [--rounds 3] [--before DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from _common import PHOTOS_DIR, REPO, alternating_rounds, machine, markdown_table, median, run_worker, write_results

STEPS = ("read", "decode", "resize", "finish", "encode")
CONFIGS = {"fixed 512x512": {"resize": "fixed", "fixed": "512x512"},
           "max_side 512": {"resize": "max_side", "max_side": 512}}


def worker(tree: Path, model: Path, variant: str | None, photos: Path, mode: str, infer_images: int) -> dict[str, Any]:
    """One pass in this process over the photos; ms of CPU per photo for each step, and for inference."""
    sys.path.insert(0, str(tree))
    import numpy as np
    import openvino as ov

    from edge_anime import imaging
    from edge_anime.config import parse_config
    from edge_anime.measure.throughput import input_files

    raw: dict[str, Any] = {"model": {"path": str(model)}, "image": CONFIGS[mode],
                           "output": {"format": "jpeg", "quality": 92},
                           "device": {"performance_hint": "THROUGHPUT", "inference_precision": "f32"}}
    if variant:
        raw["model"]["variant"] = variant
    config = parse_config(raw, base_dir=REPO)
    files = input_files(photos, config.watch)
    totals = dict.fromkeys(STEPS, 0.0)
    planned_all = []
    for warm in (True, False):  # a warm-up pass (page cache, lazy imports, Pillow's tables), then the timed one
        for path in files:
            t0 = time.thread_time()
            data = path.read_bytes()
            t1 = time.thread_time()
            decoded = imaging.decode(path, config.image, data=data)
            t2 = time.thread_time()
            planned = imaging.plan(decoded, config.image, multiple=max(config.image.multiple, 4))
            t3 = time.thread_time()
            image = imaging.finish(planned.rgb, planned, config.image)  # the model's output has the input's size
            t4 = time.thread_time()
            imaging.encode(image, planned, config.output, ext="jpg")
            t5 = time.thread_time()
            if not warm:
                for step, seconds in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
                    totals[step] += seconds
                planned_all.append(planned.rgb)
    per_step = {step: 1000 * seconds / len(files) for step, seconds in totals.items()}
    # Inference: the variant's IR at the first photo's planned shape, every request busy, CPU per image.
    core = ov.Core()
    ir = core.read_model(str(model / (f"model_{variant}.xml" if variant else "model.xml")))
    shape = planned_all[0].shape
    ir.reshape({ir.input(0): ov.PartialShape([1, shape[0], shape[1], 3])})
    compiled = core.compile_model(ir, "CPU", {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"})
    queue = ov.AsyncInferQueue(compiled)
    batch = np.ascontiguousarray(planned_all[0])[None]
    for _ in range(len(queue)):  # warm-up: every request allocates once
        queue.start_async({0: batch})
    queue.wait_all()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(infer_images):
        queue.start_async({0: batch})
    queue.wait_all()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    per_step["infer"] = 1000 * cpu / infer_images
    other = sum(per_step[s] for s in STEPS)
    return {"images_per_s": infer_images / wall, "ms_per_image": per_step, "photos": len(files),
            "ceiling": per_step["infer"] / (per_step["infer"] + other), "shape": list(shape[:2]),
            "turbo": "edge_anime.imaging.turbo" in sys.modules}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=PHOTOS_DIR)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "toon")
    parser.add_argument("--variant", default="int8")
    parser.add_argument("--mode", choices=sorted(CONFIGS), default="fixed 512x512")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--infer-images", type=int, default=16)
    parser.add_argument("--before", type=Path, default=None, help="another checkout, measured in the same rounds")
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.worker, args.model, args.variant or None, args.photos, args.mode,
                                args.infer_images)))
        return 0
    trees = {"after": REPO} | ({"before": args.before.resolve()} if args.before else {})
    common = ["--model", str(args.model.resolve()), "--variant", args.variant, "--photos", str(args.photos),
              "--mode", args.mode, "--infer-images", str(args.infer_images)]
    per_round = alternating_rounds(list(trees), args.rounds, label=f"{args.mode} ",
                                   run=lambda name: run_worker(__file__, ["--worker", str(trees[name]), *common],
                                                               dict(os.environ)))
    rows = []
    for name in trees:
        cells = {s: median([r[name]["ms_per_image"][s] for r in per_round]) for s in (*STEPS, "infer")}
        rows.append({"code": name, **{f"{s} ms": v for s, v in cells.items()},
                     "non-inference ms": sum(cells[s] for s in STEPS),
                     "ceiling c/(c+o)": median([r[name]["ceiling"] for r in per_round]),
                     "turbo decode": per_round[0][name]["turbo"]})
    table = (f"CPU ms per photo ({args.mode}, {per_round[0]['after']['photos']} photos of {args.photos}, "
             f"{args.model.name} {args.variant or 'default'} IR; infer = process CPU per image at "
             f"{per_round[0]['after']['shape']} with THROUGHPUT; medians of {args.rounds} rounds)\n\n"
             + markdown_table(rows, list(rows[0])))
    write_results("pipeline_steps", {"machine": machine(), "rows": rows, "raw": per_round}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
