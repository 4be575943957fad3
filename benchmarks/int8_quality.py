"""INT8 study (issue 6 item 4): which NNCF setup keeps >= 35 dB PSNR vs FP32 while staying >= 1.6x faster.

For each weight set (seeded-random, and the bundled toon checkpoint when ``models/toon/`` has one) and each
setup: quantize on calibration photos, then
- quality: PSNR in u8 space of INT8 vs FP32 (and vs PyTorch) on every photo, fitted to --eval-size;
- speed: FP32 and INT8 compiled at a static 512x512, timed alternately in this one process, so load from
  other processes on the box hits both alike; the figure is the ratio of medians, never an absolute time.
Rows are written after each setup (JSON + markdown under --out), so an interrupted run keeps what it has.

    nice -n 10 python benchmarks/int8_quality.py --out benchmarks/results/

``--figure`` (issue 14) is the before/after figure instead: the bundled toon checkpoint quantized with the
converter's default (all INT8, "before") and with its decoder-float fallback ("after"; plus any ``--ir NAME=XML``, e.g. the QAT IR of
``training/qat_toon.py``), each scored against the FP32 IR on every photo at 512 px long side (downscaled
only, multiple of 4, as the runtime plans it): min and mean dB and the worst photos; then their speed as
images/s at one static 512 px shape in interleaved rounds, reported as a ratio to "before":

    nice -n 10 python benchmarks/int8_quality.py --figure --ir qat=training/runs/qat/model_int8.xml
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _common import cpu_model  # noqa: E402
from edge_anime_converters.quantize import (  # noqa: E402
    DECODER_FLOAT_INT8,
    DEFAULT_INT8,
    Int8Setup,
    calibration_samples,
    quantize,
)
from edge_anime_converters.samples import (  # noqa: E402
    Sample,
    default_photo_dir,
    fit,
    load_samples,
    photo_paths,
    psnr_db,
    read_rgb,
    to_nchw_float,
    to_u8_hwc,
)

RANDOM_SEED = 0
SPEED_HW = (512, 512)
TARGET_PSNR_DB = 35.0
TARGET_SPEEDUP = 1.6
# "FP32" means FP32 arithmetic: on CPUs with AMX/AVX512-BF16 the plugin's default is bf16, which is
# reported as its own column. INT8 models are compiled with the same hint so their float layers stay f32.
F32 = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
PLUGIN_DEFAULT = {"PERFORMANCE_HINT": "LATENCY"}

SETUPS: dict[str, Int8Setup] = {
    "mixed": Int8Setup(preset="mixed"),
    "performance": Int8Setup(preset="performance"),
    "mixed-on-u8": Int8Setup(preset="mixed", target="u8"),
    "mixed-first-last": Int8Setup(preset="mixed", ignore=("first_conv", "last_conv")),
    "performance-first-last": Int8Setup(preset="performance", ignore=("first_conv", "last_conv")),
    "mixed-norm": Int8Setup(preset="mixed", ignore=("norm",)),
    "mixed-depthwise": Int8Setup(preset="mixed", ignore=("depthwise",)),
    "mixed-first-last-depthwise": Int8Setup(preset="mixed", ignore=("first_conv", "last_conv", "depthwise")),
    "mixed-first-last-residual-upsample": Int8Setup(preset="mixed", ignore=("first_conv", "last_conv", "residual", "upsample")),
    "mixed-full-bias-corr": Int8Setup(preset="mixed", fast_bias_correction=False),
    "mixed-no-bias-corr": Int8Setup(preset="mixed", disable_bias_correction=True),
    "mixed-minmax": Int8Setup(preset="mixed", range_estimator="MINMAX"),
    "mixed-mean-no-outliers": Int8Setup(preset="mixed", range_estimator="MEAN_NO_OUTLIERS_MINMAX"),
    "mixed-smoothquant-conv": Int8Setup(preset="mixed", smooth_quant_conv_alpha=0.15),
    "mixed-transformer": Int8Setup(preset="mixed", model_type="transformer"),
    "mixed-accuracy-control": Int8Setup(preset="mixed", accuracy_control_floor_db=TARGET_PSNR_DB),
    "mixed-quantile": Int8Setup(preset="mixed", range_estimator="MEAN_QUANTILE"),
    "mixed-histogram": Int8Setup(preset="mixed", range_estimator="HISTOGRAM"),
    "mixed-norm-quantile": Int8Setup(preset="mixed", ignore=("norm",), range_estimator="MEAN_QUANTILE"),
    "mixed-norm-first-last": Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv")),
    "mixed-norm-residual": Int8Setup(preset="mixed", ignore=("norm", "residual")),
    "mixed-norm-block-e": Int8Setup(preset="mixed", ignore=("norm", "block_e", "last_conv")),
    "mixed-norm-block-a-e": Int8Setup(preset="mixed", ignore=("norm", "block_a", "block_e", "last_conv")),
    "performance-norm": Int8Setup(preset="performance", ignore=("norm",)),
    "mixed-norm-first-last-full-bias": Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv"),
                                                 fast_bias_correction=False),
    "mixed-norm-first-last-upsample": Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv", "upsample")),
    "mixed-norm-first-last-depthwise": Int8Setup(preset="mixed",
                                                 ignore=("norm", "first_conv", "last_conv", "depthwise")),
    "mixed-norm-first-last-minmax": Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv"),
                                              range_estimator="MINMAX"),
    # issue 14: the two decoder layers whose float copy lifted the worst photo most (docs/toon.md, INT8 quality)
    "minmax-float-e1": Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv", "block_e.1"),
                                 range_estimator="MINMAX"),
    "minmax-float-d1-e1": Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv", "block_d.1", "block_e.1"),
                                    range_estimator="MINMAX"),
}


@dataclass
class Weights:
    """A weight set under study: its name, the torch module and its float OpenVINO graph."""

    name: str
    module: Any
    float_model: ov.Model


def random_weights() -> Weights:
    from edge_anime_converters.generator import seeded_random_generator
    from edge_anime_converters.ir import torch_to_float_ov

    module = seeded_random_generator(RANDOM_SEED)
    return Weights(f"random(seed={RANDOM_SEED})", module, torch_to_float_ov(module))


def checkpoint_weights(path: Path) -> Weights:
    from edge_anime_converters.ir import torch_to_float_ov
    from edge_anime_converters.sources import load_torch_source

    source = load_torch_source(path, upsample_align=None, name=path.stem)
    return Weights(f"{path.parent.name}/{path.name}", source.module, torch_to_float_ov(source.module))


def find_toon_checkpoint() -> Path | None:
    """The bundled toon style's torch checkpoint, when the training helper has put one in models/toon/."""
    folder = REPO / "models" / "toon"
    if not folder.is_dir():
        return None
    for pattern in ("*.pt", "*.pth"):
        found = sorted(folder.glob(pattern))
        if found:
            return found[0]
    return None


def infer_all(compiled: ov.CompiledModel, images: list[np.ndarray]) -> list[np.ndarray]:
    return [compiled(rgb[None])[0][0] for rgb in images]


def torch_outputs(module: Any, images: list[np.ndarray]) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        return [to_u8_hwc(module(torch.from_numpy(to_nchw_float(rgb))).numpy()) for rgb in images]


def speed_ratio(core: ov.Core, fp32: ov.Model, candidate: ov.Model, *, rounds: int,
                candidate_config: dict[str, str] = F32) -> dict[str, float]:
    """FP32 / candidate median latency at a static 512x512, timed alternately (see module docstring).

    Three compiled models take turns: FP32 (f32 arithmetic), FP32 IR with the plugin's default precision
    (bf16 where the CPU has it), and the candidate.
    """
    from edge_anime_converters.ir import with_static_hw

    setups = ((fp32, F32), (fp32, PLUGIN_DEFAULT), (candidate, candidate_config))
    compiled = [core.compile_model(with_static_hw(m, SPEED_HW), "CPU", cfg) for m, cfg in setups]
    frame = np.random.default_rng(1).integers(0, 256, size=(1, *SPEED_HW, 3), dtype=np.uint8)
    requests = [c.create_infer_request() for c in compiled]
    for request in requests:  # warm-up: first inference pays for memory allocation
        request.infer({0: frame})
    times: list[list[float]] = [[] for _ in requests]
    for _ in range(rounds):
        for index, request in enumerate(requests):
            start = time.perf_counter()
            request.infer({0: frame})
            times[index].append(time.perf_counter() - start)
    f32, default, cand = (statistics.median(t) for t in times)
    return {
        "speedup": f32 / cand,
        "speedup_per_round_median": statistics.median(a / c for a, c in zip(times[0], times[2])),
        "speedup_vs_plugin_default": default / cand,
        "rounds": rounds,
    }


def study(weights: Weights, setups: dict[str, Int8Setup], *, eval_images: list, calibration: list,
          rounds: int, core: ov.Core, sink: Sink, include_bf16: bool = True) -> None:
    from edge_anime_converters.ir import with_static_hw, with_u8_io

    fp32 = with_u8_io(weights.float_model.clone())
    eval_hw = eval_images[0].rgb.shape[:2]
    rgbs = [s.rgb for s in eval_images]
    fp32_out = infer_all(core.compile_model(with_static_hw(fp32, eval_hw), "CPU", F32), rgbs)
    torch_out = torch_outputs(weights.module, rgbs)
    fp32_vs_torch = [psnr_db(a, b) for a, b in zip(fp32_out, torch_out)]
    sink.note(weights.name, "fp32 IR (f32) vs torch", min(fp32_vs_torch), statistics.mean(fp32_vs_torch))
    if include_bf16:
        out = infer_all(core.compile_model(with_static_hw(fp32, eval_hw), "CPU", PLUGIN_DEFAULT), rgbs)
        sink.row(_row(weights, "fp32-ir-plugin-default", "fp32 IR, plugin default precision (bf16 on AMX)",
                      {"inference_precision": "plugin default"}, eval_images, out, fp32_out, torch_out,
                      speed_ratio(core, fp32, fp32, rounds=rounds, candidate_config=PLUGIN_DEFAULT), 0.0))
    for key, setup in setups.items():
        start = time.perf_counter()
        int8 = quantize(weights.float_model, calibration, setup=setup, validation=eval_images[:8])
        quantize_s = time.perf_counter() - start
        out = infer_all(core.compile_model(with_static_hw(int8, eval_hw), "CPU", F32), rgbs)
        sink.row(_row(weights, key, setup.label, setup.to_manifest(), eval_images, out, fp32_out, torch_out,
                      speed_ratio(core, fp32, int8, rounds=rounds), quantize_s))


def _row(weights: Weights, key: str, label: str, params: dict[str, Any], eval_images: list,
         out: list[np.ndarray], fp32_out: list[np.ndarray], torch_out: list[np.ndarray],
         speed: dict[str, float], quantize_s: float) -> dict[str, Any]:
    vs_fp32 = [psnr_db(a, b) for a, b in zip(out, fp32_out)]
    vs_torch = [psnr_db(a, b) for a, b in zip(out, torch_out)]
    return {
        "weights": weights.name, "setup": key, "label": label, "params": params,
        "psnr_vs_fp32_db": {"min": min(vs_fp32), "mean": statistics.mean(vs_fp32)},
        "psnr_vs_torch_db": {"min": min(vs_torch), "mean": statistics.mean(vs_torch)},
        "per_image_vs_fp32_db": {s.name: round(v, 2) for s, v in zip(eval_images, vs_fp32)},
        **speed, "quantize_s": quantize_s,
        "meets_targets": min(vs_fp32) >= TARGET_PSNR_DB and speed["speedup"] >= TARGET_SPEEDUP,
    }


class Sink:
    """Collects rows and rewrites results JSON + markdown after each one (an interrupted run keeps rows)."""

    def __init__(self, out_dir: Path, meta: dict[str, Any]) -> None:
        self.out_dir = out_dir
        self.meta = meta
        self.rows: list[dict[str, Any]] = []
        self.notes: list[str] = []
        out_dir.mkdir(parents=True, exist_ok=True)

    def note(self, weights: str, what: str, min_db: float, mean_db: float) -> None:
        self.notes.append(f"{weights}: {what}: min {min_db:.1f} dB, mean {mean_db:.1f} dB")
        print(self.notes[-1], flush=True)
        self.flush()

    def row(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        print(f"{row['weights']:>24} {row['setup']:<38} vs fp32 min {row['psnr_vs_fp32_db']['min']:5.1f} "
              f"mean {row['psnr_vs_fp32_db']['mean']:5.1f} dB  speedup {row['speedup']:.2f}x "
              f"(vs plugin default {row['speedup_vs_plugin_default']:.2f}x)", flush=True)
        self.flush()

    def flush(self) -> None:
        payload = {"meta": self.meta, "notes": self.notes, "rows": self.rows}
        _write(self.out_dir / "int8_quality.json", json.dumps(payload, indent=2))
        _write(self.out_dir / "int8_quality.md", self.markdown())

    def markdown(self) -> str:
        lines = [f"# INT8 study ({self.meta['created']})", "",
                 f"Eval: {self.meta['eval']}; speed: static {SPEED_HW[0]}x{SPEED_HW[1]}, "
                 f"{self.meta['rounds']} interleaved rounds; calibration: {self.meta['calibration']}.", ""]
        lines += [f"- {n}" for n in self.notes] + [""]
        lines += ["| weights | setup | PSNR vs FP32 min / mean (dB) | PSNR vs torch min / mean (dB) | "
                  "speed vs FP32 (f32) | speed vs plugin default (bf16) | quantize (s) | meets >=35 dB & >=1.6x |",
                 "|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            lines.append(
                f"| {r['weights']} | {r['label']} | {r['psnr_vs_fp32_db']['min']:.1f} / {r['psnr_vs_fp32_db']['mean']:.1f} | "
                f"{r['psnr_vs_torch_db']['min']:.1f} / {r['psnr_vs_torch_db']['mean']:.1f} | {r['speedup']:.2f}x | "
                f"{r['speedup_vs_plugin_default']:.2f}x | "
                f"{r['quantize_s']:.0f} | {'yes' if r['meets_targets'] else 'no'} |")
        return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


FIGURE_LONG_SIDE = 512
FIGURE_SPEED_HW = (340, 512)  # a 3:2 photo at 512 px long side, the commonest shape in ../shared/photos


def photos_at_long_side(folder: Path, long_side: int = FIGURE_LONG_SIDE) -> list[Sample]:
    """Every photo downscaled (never up) to ``long_side``, sides rounded to a multiple of 4 like the runtime."""
    samples = []
    for path in photo_paths(folder):
        rgb = read_rgb(path, min_side=2 * long_side)
        h, w = rgb.shape[:2]
        scale = min(1.0, long_side / max(h, w))
        size = (max(4, round(h * scale / 4) * 4), max(4, round(w * scale / 4) * 4))
        samples.append(Sample(path.name, fit(rgb, size)))
    return samples


def outputs(core: ov.Core, model: ov.Model, samples: list[Sample]) -> list[np.ndarray]:
    """u8 outputs of a u8-contract model (dynamic H x W) at f32 arithmetic, one per sample."""
    compiled = core.compile_model(model, "CPU", F32)
    return [compiled(s.rgb[None])[0][0] for s in samples]


def images_per_s(core: ov.Core, models: dict[str, ov.Model], *, rounds: int, per_round: int = 4) -> dict[str, float]:
    """Median images/s of each model at FIGURE_SPEED_HW, the models taking turns within every round."""
    from edge_anime_converters.ir import with_static_hw

    requests = {k: core.compile_model(with_static_hw(m, FIGURE_SPEED_HW), "CPU", F32).create_infer_request()
                for k, m in models.items()}
    frame = np.random.default_rng(1).integers(0, 256, size=(1, *FIGURE_SPEED_HW, 3), dtype=np.uint8)
    for request in requests.values():
        request.infer({0: frame})
    rates: dict[str, list[float]] = {k: [] for k in requests}
    for _ in range(rounds):
        for key, request in requests.items():
            start = time.perf_counter()
            for _ in range(per_round):
                request.infer({0: frame})
            rates[key].append(per_round / (time.perf_counter() - start))
    return {k: statistics.median(v) for k, v in rates.items()}


def figure(args: argparse.Namespace, photos: Path) -> int:
    """Issue 14's INT8 figure: before/after (and extra IRs) vs FP32 at 512 px, plus their speed ratio."""
    from edge_anime_converters.ir import with_u8_io

    toon = args.checkpoint or find_toon_checkpoint()
    if toon is None:
        print("--figure: no checkpoint in models/toon/ (give --checkpoint)", file=sys.stderr)
        return 2
    core = ov.Core()
    weights = checkpoint_weights(toon)
    samples = photos_at_long_side(photos)
    reference = outputs(core, with_u8_io(weights.float_model.clone()), samples)
    calibration, calib_source = calibration_samples(photos, count=args.calib_count)
    candidates: dict[str, ov.Model] = {}
    setups = {"before": DEFAULT_INT8, "after": DECODER_FLOAT_INT8}
    setups.update({k: SETUPS[k] for k in args.setups or [] if SETUPS[k] not in setups.values()})
    for key, setup in setups.items():
        candidates[key] = quantize(weights.float_model, calibration, setup=setup)
        print(f"{key:>10}: quantized ({setup.label})", flush=True)
    for spec in args.ir:
        key, _, xml = spec.partition("=")
        candidates[key] = core.read_model(xml)
    rows: list[dict[str, Any]] = []
    for key, model in candidates.items():
        scores = [psnr_db(o, r) for o, r in zip(outputs(core, model, samples), reference)]
        order = sorted(range(len(scores)), key=scores.__getitem__)
        rows.append({"variant": key, "min_db": round(min(scores), 2), "mean_db": round(statistics.mean(scores), 2),
                     "worst": [f"{samples[i].name} {scores[i]:.2f}" for i in order[:3]],
                     "per_photo_db": {s.name: round(v, 2) for s, v in zip(samples, scores)}})
        print(f"{key:>10}: min {rows[-1]['min_db']:.2f} mean {rows[-1]['mean_db']:.2f} dB; worst "
              + ", ".join(rows[-1]["worst"]), flush=True)
    speed = images_per_s(core, candidates, rounds=args.rounds)
    for row in rows:
        row["images_per_s"] = round(speed[row["variant"]], 2)
        row["speed_vs_before"] = round(speed[row["variant"]] / speed["before"], 3)
        print(f"{row['variant']:>10}: {row['images_per_s']:.2f} images/s at {FIGURE_SPEED_HW}, "
              f"{row['speed_vs_before']:.3f}x before", flush=True)
    meta = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_model(),
            "load_avg": os.getloadavg(), "photos": f"{len(samples)} from {photos}, {FIGURE_LONG_SIDE} px long side",
            "calibration": f"{len(calibration)} ({calib_source})", "before": DEFAULT_INT8.label,
            "after": DECODER_FLOAT_INT8.label, "speed": f"{FIGURE_SPEED_HW}, {args.rounds} interleaved rounds",
            "versions": {"openvino": ov.__version__}}
    table = ["| variant | min dB | mean dB | worst photos | images/s | vs before |", "|---|---|---|---|---|---|"]
    table += [f"| {r['variant']} | {r['min_db']:.2f} | {r['mean_db']:.2f} | {'; '.join(r['worst'])} | "
              f"{r['images_per_s']:.2f} | {r['speed_vs_before']:.3f}x |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    _write(args.out / "int8_figure.json", json.dumps({"meta": meta, "rows": rows}, indent=2))
    _write(args.out / "int8_figure.md", "\n".join([f"# INT8 vs FP32 at 512 px ({meta['created']})", "",
                                                    json.dumps(meta), "", *table]) + "\n")
    print("\n".join(table))
    print(f"wrote {args.out / 'int8_figure.md'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figure", action="store_true", help="issue 14's before/after figure at 512 px (see above)")
    parser.add_argument("--ir", action="append", default=[], metavar="NAME=XML",
                        help="--figure: also score this INT8 IR (u8 contract), e.g. qat=training/runs/qat/model_int8.xml")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--photos", type=Path, default=None, help="default: ../shared/photos")
    parser.add_argument("--eval-size", type=int, nargs=2, default=[256, 256], metavar=("H", "W"))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved FP32/INT8 timing rounds at 512x512")
    parser.add_argument("--calib-count", type=int, default=64)
    parser.add_argument("--setups", nargs="*", default=None, help=f"subset of: {', '.join(SETUPS)}")
    parser.add_argument("--weights", choices=["random", "toon", "both"], default="both",
                        help="'both' includes toon only when models/toon/ holds a checkpoint")
    parser.add_argument("--checkpoint", type=Path, default=None, help="study this checkpoint instead of toon")
    parser.add_argument("--no-bf16-row", action="store_true", help="skip the plugin-default (bf16) FP32 row")
    args = parser.parse_args(argv)

    photos = args.photos or default_photo_dir()
    if photos is None:
        print("no photos: give --photos DIR (the study is about real photos)", file=sys.stderr)
        return 2
    unknown = set(args.setups or []) - set(SETUPS)
    if unknown:
        print(f"--setups: unknown {sorted(unknown)}; choose from {', '.join(SETUPS)}", file=sys.stderr)
        return 2
    if args.figure:
        return figure(args, photos)
    eval_hw = (args.eval_size[0], args.eval_size[1])
    eval_images = load_samples(photos, size_hw=eval_hw)
    calibration, calib_source = calibration_samples(photos, count=args.calib_count)
    chosen = {k: v for k, v in SETUPS.items() if args.setups is None or k in args.setups}
    unknown = set(args.setups or []) - set(SETUPS)
    if unknown:
        print(f"--setups: unknown {sorted(unknown)}; choose from {', '.join(SETUPS)}", file=sys.stderr)
        return 2
    core = ov.Core()
    import nncf
    import torch

    meta = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "eval": f"{len(eval_images)} photos from {photos} fitted to {eval_hw[0]}x{eval_hw[1]}",
            "calibration": f"{len(calibration)} images ({calib_source})", "rounds": args.rounds,
            "default_setup": DEFAULT_INT8.label,
            "versions": {"openvino": ov.__version__, "nncf": nncf.__version__, "torch": torch.__version__},
            "cpu": cpu_model()}
    sink = Sink(args.out, meta)
    weight_sets = []
    if args.weights in ("random", "both"):
        weight_sets.append(random_weights)
    toon = args.checkpoint or find_toon_checkpoint()
    if args.weights in ("toon", "both") and toon is not None:
        weight_sets.append(lambda: checkpoint_weights(toon))
    elif args.weights == "toon":
        print("--weights toon: no checkpoint in models/toon/ (give --checkpoint)", file=sys.stderr)
        return 2
    for make in weight_sets:
        study(make(), chosen, eval_images=eval_images, calibration=calibration, rounds=args.rounds,
              core=core, sink=sink, include_bf16=not args.no_bf16_row)
    print(f"wrote {args.out / 'int8_quality.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
