"""Static vs dynamic shapes (the ``device.shape_policy`` decision): compile time with a cold and a warm model
cache, first-inference time and steady inference time, at 512x512 and 1352x1080, for the plugin's default
precision and for f32.

Static and dynamic inferences are interleaved (static, dynamic, static, ...) so load from other processes
on the shared box hits both alike; quote the ratio, not the absolute times.

    nice -n 10 python benchmarks/shapes.py [--model DIR] [--reps N]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from _common import ensure_seeded_ir, machine, markdown_table, median, write_results

SIZES_HW = ((512, 512), (1080, 1352))
PRECISIONS = ("auto", "f32")


def _props(precision: str, cache: Path) -> dict[str, Any]:
    props: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "CACHE_DIR": str(cache)}
    if precision != "auto":
        props["INFERENCE_PRECISION_HINT"] = precision
    return props


def _compile(xml: Path, size_hw: tuple[int, int] | None, props: dict[str, Any]) -> tuple[ov.CompiledModel, float]:
    """Read + (reshape) + compile in a fresh Core, as a service start does; returns the seconds it took."""
    start = time.perf_counter()
    core = ov.Core()
    model = core.read_model(str(xml))
    if size_hw is not None:
        model.reshape({model.input(0): ov.PartialShape([1, *size_hw, 3])})
    compiled = core.compile_model(model, "CPU", props)
    return compiled, time.perf_counter() - start


def _timed_infer(request: ov.InferRequest, image: np.ndarray) -> float:
    start = time.perf_counter()
    request.infer({0: image}, share_inputs=True)
    return time.perf_counter() - start


def measure(xml: Path, size_hw: tuple[int, int], precision: str, reps: int) -> dict[str, Any]:
    image = np.random.default_rng(0).integers(0, 256, (1, *size_hw, 3), dtype=np.uint8)
    row: dict[str, Any] = {"size": f"{size_hw[1]}x{size_hw[0]}", "precision": precision}
    requests: dict[str, ov.InferRequest] = {}
    for policy, shape in (("static", size_hw), ("dynamic", None)):
        cache = Path(tempfile.mkdtemp(prefix=f"ov-cache-{policy}-"))
        try:
            _, cold = _compile(xml, shape, _props(precision, cache))
            compiled, warm = _compile(xml, shape, _props(precision, cache))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        requests[policy] = compiled.create_infer_request()
        row[f"{policy}_compile_cold_s"] = cold
        row[f"{policy}_compile_warm_s"] = warm
        row[f"{policy}_first_infer_s"] = _timed_infer(requests[policy], image)
        row["effective_precision"] = str(compiled.get_property("INFERENCE_PRECISION_HINT").to_string())
    times: dict[str, list[float]] = {"static": [], "dynamic": []}
    for _ in range(reps):
        for policy in ("static", "dynamic"):
            times[policy].append(_timed_infer(requests[policy], image))
    for policy, values in times.items():
        row[f"{policy}_infer_s"] = median(values)
    row["dynamic_over_static"] = row["dynamic_infer_s"] / row["static_infer_s"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: seeded-random IR)")
    parser.add_argument("--reps", type=int, default=3, help="timed inferences per policy and size")
    args = parser.parse_args()
    folder = args.model or ensure_seeded_ir()
    xml = folder / "model.xml"
    rows = []
    for precision in PRECISIONS:
        for size_hw in SIZES_HW:
            rows.append(measure(xml, size_hw, precision, args.reps))
            print(rows[-1], flush=True)
    columns = ["size", "precision", "effective_precision", "static_compile_cold_s", "static_compile_warm_s",
               "dynamic_compile_cold_s", "dynamic_compile_warm_s", "static_first_infer_s", "dynamic_first_infer_s",
               "static_infer_s", "dynamic_infer_s", "dynamic_over_static"]
    table = f"model: {xml}\n\n" + markdown_table(rows, columns)
    write_results("shapes", {"machine": machine(), "model": str(xml), "reps": args.reps, "rows": rows}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
