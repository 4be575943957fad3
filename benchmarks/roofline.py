"""Where FP32 inference time goes, and how close the convolutions run to what this CPU can do at all.

The ">= 1.8x the PyTorch pipeline in FP32" target rests on OpenVINO's f32 kernels beating PyTorch's. This
script says how much room there is: per operation type, the CPU plugin's own profile (PERF_COUNT) of the
seeded-random IR at one static size; the convolutions' multiply-adds counted from the graph and divided by
their time, set against the nominal FMA peak (cores x the clock /proc/cpuinfo reports x 64 f32 FLOP per
cycle with two AVX-512 FMA units, 32 with AVX2; turbo clocks can pass it). With ``--torch`` the seed
pipeline's TorchScript runs the same size on 2 threads, and "ratio if non-conv ops were free" is PyTorch's
time over our convolutions' time alone: what OpenVINO would reach with MVN, Pad and Interpolate costing
nothing, at convolution speed it already has.

``--isa avx2`` caps oneDNN (OpenVINO's convolutions and PyTorch's) and PyTorch's own kernels at AVX2, the
edge box the brief describes; the child process gets ONEDNN_MAX_CPU_ISA=AVX2 and ATEN_CPU_CAPABILITY=avx2.
(OpenVINO's own JIT kernels, MVN and Interpolate, still pick their ISA themselves: a few % of the time.)

    python benchmarks/roofline.py [--size 384x512] [--torch] [--isa native|avx2] [--repeat 5]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import time
from pathlib import Path
from typing import Any

from _common import ensure_seeded_ir, machine, markdown_table, median, run_worker, write_results

ISA_ENV = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}}
FLOP_PER_CYCLE = {"native": 64, "avx2": 32}  # f32, 2 FMA units x (16 | 8) lanes x 2 (this box: AVX-512)


def conv_macs(model: Any) -> int:
    """Multiply-adds of every (group) convolution of a static-shaped ov.Model."""
    import numpy as np

    total = 0
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind not in ("Convolution", "GroupConvolution"):
            continue
        outputs = int(np.prod(op.get_output_partial_shape(0).to_shape()))
        weights = list(op.input_value(1).get_partial_shape().to_shape())
        per_output = int(np.prod(weights[1:] if kind == "Convolution" else weights[2:]))  # Cin/g * kh * kw
        total += outputs * per_output
    return total


def nominal_ghz() -> float:
    """The clock /proc/cpuinfo reports (a VM shows the nominal one; turbo runs above it)."""
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1]) / 1000
    return float("nan")


def timed(call: Any, repeat: int) -> float:
    """Median seconds of ``call()`` after two untimed runs."""
    for _ in range(2):
        call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return median(times)


def worker(size_hw: tuple[int, int], repeat: int, with_torch: bool) -> dict[str, Any]:
    import numpy as np
    import openvino as ov

    core = ov.Core()
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
    model = core.read_model(ensure_seeded_ir() / "model.xml")
    model.reshape([1, *size_hw, 3])
    macs = conv_macs(model)
    compiled = core.compile_model(model, "CPU", {**config, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    frame = np.random.default_rng(0).integers(0, 256, size=(1, *size_hw, 3), dtype=np.uint8)
    infer_s = timed(lambda: request.infer({0: frame}), repeat)
    by_type: dict[str, float] = collections.defaultdict(float)
    kernels: dict[str, set[str]] = collections.defaultdict(set)
    for item in request.profiling_info:  # the last timed inference
        if item.status == item.Status.EXECUTED:
            by_type[item.node_type] += item.real_time.total_seconds()
            kernels[item.node_type].add(item.exec_type)
    conv_s = by_type.get("Convolution", 0.0) + by_type.get("GroupConvolution", 0.0)


    result = {"size": f"{size_hw[1]}x{size_hw[0]}", "threads": compiled.get_property("INFERENCE_NUM_THREADS"),
              "infer_s": infer_s, "conv_gflop": 2 * macs / 1e9, "conv_s": conv_s,
              "conv_gflops": 2 * macs / conv_s / 1e9 if conv_s else 0.0,
              "ops_s": dict(by_type), "kernels": {k: sorted(v) for k, v in kernels.items()}}
    if with_torch:
        import torch
        from vs_pytorch import ensure_torchscript

        torch.set_num_threads(2)
        torch.set_num_interop_threads(1)
        module = torch.jit.load(str(ensure_torchscript())).eval()
        x = torch.rand(1, 3, *size_hw) * 2 - 1
        with torch.no_grad():
            result["torch_s"] = timed(lambda: module(x), repeat)
        result["torch_capability"] = torch.backends.cpu.get_cpu_capability()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="384x512", help="W x H of the static shape")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--torch", action="store_true", help="time the seed pipeline's TorchScript too")
    parser.add_argument("--isa", choices=("native", "avx2"), default="native")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    if args.worker:
        print(json.dumps(worker((height, width), args.repeat, args.torch)))
        return 0
    env = {**os.environ, **ISA_ENV.get(args.isa, {})}
    flags = ["--worker", "--size", args.size, "--repeat", str(args.repeat)] + (["--torch"] if args.torch else [])
    r = run_worker(__file__, flags, env)
    total = sum(r["ops_s"].values())
    peak = r["threads"] * nominal_ghz() * FLOP_PER_CYCLE[args.isa]
    rows = [{"operation": kind, "ms": seconds * 1000, "share %": 100 * seconds / total,
             "kernels": ", ".join(r["kernels"][kind])}
            for kind, seconds in sorted(r["ops_s"].items(), key=lambda kv: -kv[1])]
    summary = {"size": r["size"], "isa": args.isa, "threads": r["threads"], "f32 infer ms": r["infer_s"] * 1000,
               "conv GFLOP": r["conv_gflop"], "conv GFLOP/s": r["conv_gflops"], "nominal peak GFLOP/s": peak,
               "conv / nominal peak": r["conv_gflops"] / peak,
               "non-conv share %": 100 * (1 - r["conv_s"] / total) if total else 0.0}
    if "torch_s" in r:
        summary.update({"PyTorch ms": r["torch_s"] * 1000, "PyTorch conv-equivalent GFLOP/s": r["conv_gflop"] / r["torch_s"],
                        "OpenVINO / PyTorch speed": r["torch_s"] / r["infer_s"],
                        "ratio if non-conv ops were free": r["torch_s"] / r["conv_s"]})
    table = (f"seeded-random IR, f32, LATENCY, static {r['size']}, ISA {args.isa}"
             f"{', PyTorch ' + r['torch_capability'] if 'torch_capability' in r else ''}\n\n"
             + markdown_table([summary], list(summary)) + "\n" + markdown_table(rows, ["operation", "ms", "share %", "kernels"]))
    write_results(f"roofline_{args.isa}", {"machine": machine(), "summary": summary, "raw": r}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
