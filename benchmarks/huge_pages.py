"""Inference with glibc's huge-page tunable vs glibc's defaults: the figure behind ``edge_anime.runtime.host``'s re-exec.

Each side is a fresh process (glibc reads its tunables at start) that compiles the seeded-random IR at a
static size with the THROUGHPUT hint, runs one untimed inference per request, then keeps every request busy
for ``--seconds`` and reports images/s and peak RSS. The sides alternate for ``--rounds`` rounds and the
ratio is taken per round. PyTorch (the seed pipeline's TorchScript, 2 threads) is timed the same way with
``--torch``, to show that huge pages are a property of the box that both runtimes can use.

    python benchmarks/huge_pages.py [--rounds 3] [--seconds 15] [--precision f32] [--size 384x512] [--torch]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any

from _common import alternating_rounds, machine, markdown_table, median, product_environment, run_worker, write_results


def ov_worker(precision: str, size_hw: tuple[int, int], seconds: float) -> dict[str, Any]:
    import numpy as np
    import openvino as ov

    from _common import ensure_seeded_ir

    core = ov.Core()
    model = core.read_model(ensure_seeded_ir() / "model.xml")
    model.reshape([1, *size_hw, 3])
    config = {"PERFORMANCE_HINT": "THROUGHPUT"}
    if precision != "auto":  # auto: the plugin's own choice (bf16 where the CPU has AMX)
        config["INFERENCE_PRECISION_HINT"] = precision
    compiled = core.compile_model(model, "CPU", config)
    queue = ov.AsyncInferQueue(compiled, compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
    frame = np.random.default_rng(0).integers(0, 256, size=(1, *size_hw, 3), dtype=np.uint8)
    for _ in range(len(queue)):
        queue.start_async({0: frame})
    queue.wait_all()
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        queue.start_async({0: frame})
        done += 1
    queue.wait_all()
    return {"images_per_s": done / (time.perf_counter() - start)}


def torch_worker(size_hw: tuple[int, int], seconds: float) -> dict[str, Any]:
    import torch
    from vs_pytorch import ensure_torchscript

    torch.set_num_threads(2)
    torch.set_num_interop_threads(1)
    module = torch.jit.load(str(ensure_torchscript())).eval()
    x = torch.rand(1, 3, *size_hw) * 2 - 1
    done = 0
    with torch.no_grad():
        for _ in range(3):  # the profiling executor settles after a few calls
            module(x)
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            module(x)
            done += 1
    return {"images_per_s": done / (time.perf_counter() - start)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--precision", default="f32")
    parser.add_argument("--size", default="384x512", help="HxW")
    parser.add_argument("--torch", action="store_true", help="time PyTorch both ways too")
    parser.add_argument("--worker", choices=("ov", "torch"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    height, width = (int(v) for v in args.size.lower().split("x"))
    if args.worker:
        result = (ov_worker(args.precision, (height, width), args.seconds) if args.worker == "ov"
                  else torch_worker((height, width), args.seconds))
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return 0
    huge = product_environment()
    plain = dict(os.environ)
    if huge == plain:
        print("huge pages: nothing to switch on this box (kernel THP 'always'/'never', not glibc >= 2.35, or "
              "already set); both sides would be the same", file=sys.stderr)
        return 2
    runtimes = ["ov", "torch"] if args.torch else ["ov"]
    sides = {f"{rt} {pages}": (rt, env) for rt in runtimes for pages, env in (("default", plain), ("huge", huge))}
    rounds = alternating_rounds(list(sides), args.rounds, lambda name: run_worker(
        __file__, ["--worker", sides[name][0], "--precision", args.precision, "--size", args.size,
                   "--seconds", str(args.seconds)], sides[name][1]))
    rows = []
    for runtime in runtimes:
        base, huge_name = f"{runtime} default", f"{runtime} huge"
        ratios = [rd[huge_name]["images_per_s"] / rd[base]["images_per_s"] for rd in rounds]
        rows.append({"runtime": "openvino" if runtime == "ov" else "pytorch",
                     "default images/s": median([rd[base]["images_per_s"] for rd in rounds]),
                     "huge pages images/s": median([rd[huge_name]["images_per_s"] for rd in rounds]),
                     "x default (median of rounds)": median(ratios),
                     "per-round": ", ".join(f"{x:.2f}" for x in ratios),
                     "peak RSS MB default / huge": f"{median([rd[base]['peak_rss_mb'] for rd in rounds]):.0f} / "
                                                   f"{median([rd[huge_name]['peak_rss_mb'] for rd in rounds]):.0f}"})
    table = (f"glibc huge-page tunable vs defaults: {args.size}, precision {args.precision} (PyTorch f32), "
             f"{args.rounds} alternating rounds of {args.seconds:g} s\n\n" + markdown_table(rows, list(rows[0])))
    write_results(f"huge_pages_{args.precision}", {"machine": machine(), "rounds": rounds, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
