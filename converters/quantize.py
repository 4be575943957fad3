"""INT8 post-training quantization with NNCF, calibrated on photos.

``choose_int8`` quantizes with each of ``INT8_CANDIDATES`` in turn and keeps the first whose worst
validation photo holds the floor against the float model: the order and the candidates were chosen by
measurement (``benchmarks/int8_quality.py``, issue 6 item 4). Both are MIXED with GroupNormalization and the
first and last convolutions left in float; they differ in how activation ranges are set. On the 31 shared
photos, PSNR vs FP32 min / mean:
- the bundled toon model (trained weights): MINMAX ranges 35.8 / 38.6 dB, every photo >= 35 dB; calibrated
  on half the photos, the held-out half scored 35.6 / 38.8. NNCF's default ranges (means of per-image
  extremes) 27.3 / 40.9: better on average, but a bright photo (scene_16) whose activations exceed the
  calibration average is clipped everywhere and its whole picture shifts by ~12 levels.
- seeded-random weights: default ranges 29.3 / 33.4 dB, MINMAX 29.8 / 31.0: no plain PTQ setup reached
  35 dB on random weights (keeping the whole decoder tail in float gives a 36 dB mean but only 1.7x f32).
Trained weights quantize far better than random ones (smoother activation ranges). ``Int8Setup`` names every
knob the study turned, so the manifest records exactly what produced an IR.

Issue 14 (the worst photo): at 512 px the all-INT8 MINMAX setup leaves the toon model's worst photo at
35.9 dB vs FP32. Leaving one convolution float at a time showed the encoder and bottleneck matter little
(<= 0.2 dB each) and two decoder layers most: ``block_d.1`` and ``block_e.1`` in float lift the worst photo and
the mean by about 1.3 dB, for ~10 % of the multiply-adds each; measured on a quiet AVX2 box that IR ran 0.84x
as fast, so it is the last candidate, taken only by weights that miss the floor all-INT8 (docs/toon.md, "INT8
variant"). The layer words need torch module names in the graph; in a TorchScript or ONNX source's graph
they match nothing, and the candidate quantizes as the all-INT8 one does.

Why the float graph is quantized and the u8 pre/post-processing added afterwards: calibration data is then
plain [-1, 1] NCHW floats, the quantizer sees the tensors PyTorch sees, and NNCF never has to reason about
the Convert/Round/Clamp tail (the study compares both places: ``target="u8"`` quantizes the wrapped model).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from edge_anime.config import QUALITY_FLOOR_DB

from .ir import with_u8_io
from .samples import Sample, default_photo_dir, synthetic_images, to_nchw_float

CALIBRATION_COUNT = 64
PSNR_CAP_DB = 100.0  # dB, what identical outputs score
CALIBRATION_HW = (256, 256)
# Crops per photo: the photos folder holds ~30 images; several crops of the larger ones give the range
# statistics more variety than 30 downscaled frames would.
CROPS_PER_PHOTO = 3

# What each ``ignore`` word keeps in floating point (see ``ignored_scope``).
IGNORE_CHOICES = ("first_conv", "last_conv", "depthwise", "norm", "upsample", "residual", "block_a", "block_e")
# Besides those words: one generator layer, "block_<a-e>.<index>" (e.g. "block_e.1"): its convolutions stay
# float. Found by the module path in the op names, which torch sources keep (TorchScript and ONNX ones may not).
LAYER_WORD = re.compile(r"block_[a-e]\.\d+")


@dataclass(frozen=True)
class Int8Setup:
    """Every NNCF knob the INT8 study turns; ``label`` is the row name in its table."""

    preset: str = "mixed"                      # mixed | performance
    ignore: tuple[str, ...] = ()               # words from IGNORE_CHOICES
    fast_bias_correction: bool = True          # False: the slower, per-layer BiasCorrection
    disable_bias_correction: bool = False
    smooth_quant_conv_alpha: float | None = None
    model_type: str | None = None              # None | "transformer"
    range_estimator: str | None = None         # None (NNCF default) | a RangeEstimatorParametersSet name
    target: str = "float"                      # "float": quantize before the u8 wrapping; "u8": after
    accuracy_control_floor_db: float | None = None  # quantize_with_accuracy_control to this PSNR vs float

    @property
    def label(self) -> str:
        parts = [self.preset]
        if self.ignore:
            parts.append("ignore=" + "+".join(self.ignore))
        if not self.fast_bias_correction:
            parts.append("full-bias-corr")
        if self.disable_bias_correction:
            parts.append("no-bias-corr")
        if self.smooth_quant_conv_alpha is not None:
            parts.append(f"smoothquant-conv={self.smooth_quant_conv_alpha}")
        if self.model_type:
            parts.append(f"model_type={self.model_type}")
        if self.range_estimator:
            parts.append(f"range={self.range_estimator}")
        if self.target != "float":
            parts.append(f"on={self.target}")
        if self.accuracy_control_floor_db is not None:
            parts.append(f"accuracy-control(floor={self.accuracy_control_floor_db}dB)")
        return " ".join(parts)

    def to_manifest(self) -> dict[str, Any]:
        data = asdict(self)
        data["ignore"] = list(self.ignore)
        return data


# Tried in this order by ``choose_int8``: the all-INT8 setups first (the fastest that holds the floor wins;
# MINMAX ranges never clip a photo like the calibration ones, at a coarser step; NNCF's default ranges give
# finer steps and a better mean, for models whose photos all fit), then the same with two decoder convolutions
# left float, which lifts the worst photo ~1.4 dB but ran 0.84x as fast on AVX2 (median of 5 rounds, quiet
# AMD EPYC; docs/toon.md "INT8 variant"), so it is the fallback for weights that miss the floor all-INT8.
INT8_CANDIDATES: tuple[Int8Setup, ...] = (
    Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv"), range_estimator="MINMAX"),
    Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv")),
    Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv", "block_d.1", "block_e.1"),
              range_estimator="MINMAX"),
    # Issue 27's toon and cel held 34.89 / 34.43 dB with the one above: the next most sensitive decoder convs
    # (block_e.2, then block_e.0 and block_d.0: per-layer sensitivity in docs/toon.md) stay float too.
    Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv", "block_d.1", "block_e.1", "block_e.2"),
              range_estimator="MINMAX"),
    Int8Setup(preset="mixed", ignore=("norm", "first_conv", "last_conv", "block_d.0", "block_d.1", "block_e.0",
                                      "block_e.1", "block_e.2"), range_estimator="MINMAX"),
)
DEFAULT_INT8 = INT8_CANDIDATES[0]
# A quantization-aware fine-tune (training/qat_toon.py) starts from this setup's quantizers and moves them.
QAT_SETUP = DEFAULT_INT8
# The decoder-float fallback: ``benchmarks/int8_quality.py --figure`` compares it with the default.
DECODER_FLOAT_INT8 = INT8_CANDIDATES[2]
# From the one with the decoder's last three convolutions float on: what the bundled toon and its live student
# quantize with. All-INT8 holds the 35 dB floor for both (toon3 35.47 dB worst photo) but draws a fine grain the
# FP32 picture has not: look.py's texture median through the default settings 0.344 -> 0.363 and on the faces
# 0.38 -> 0.53, the chroma median 1.02 -> 0.98 (toon3, 31 photos; the student's table in training/ship_student.py).
DECODER_FLOAT3_SETUPS: tuple[Int8Setup, ...] = tuple(
    s for s in INT8_CANDIDATES if {"block_d.1", "block_e.1", "block_e.2"} <= set(s.ignore))


@dataclass
class Int8Choice:
    """What ``choose_int8`` kept, and every candidate it measured on the way (for the manifest)."""

    model: ov.Model
    setup: Int8Setup
    scores: list[float]  # PSNR vs the float model per validation image, dB
    tried: list[dict[str, Any]]

    @property
    def min_db(self) -> float:
        return min(self.scores)

    @property
    def mean_db(self) -> float:
        return float(np.mean(self.scores))


def psnr_vs_float(float_model: ov.Model, candidates: list[ov.Model], validation: list[Sample], *,
                  layout: str = "NCHW", output_layout: str | None = None) -> list[list[float]]:
    """PSNR (dB, u8 space) of each u8-wrapped candidate against the float model, per validation image.

    Everything is compiled at f32 so the figure is the quantization's alone (bf16 would add its own ~48 dB).
    """
    from .ir import with_static_hw
    from .samples import psnr_db
    from .verify import VERIFY_CONFIG

    core = ov.Core()
    reference = with_u8_io(float_model.clone(), layout=layout, output_layout=output_layout)
    by_size: dict[tuple[int, int], list[int]] = {}
    for index, sample in enumerate(validation):
        height, width = sample.rgb.shape[:2]
        by_size.setdefault((int(height), int(width)), []).append(index)
    scores = [[0.0] * len(validation) for _ in candidates]
    for size, indices in by_size.items():
        ref = core.compile_model(with_static_hw(reference, size), "CPU", VERIFY_CONFIG)
        expected = [ref(validation[i].rgb[None])[0][0] for i in indices]
        for row, model in zip(scores, candidates):
            compiled = core.compile_model(with_static_hw(model, size), "CPU", VERIFY_CONFIG)
            for i, want in zip(indices, expected):
                row[i] = psnr_db(compiled(validation[i].rgb[None])[0][0], want)
    return scores


def choose_int8(float_model: ov.Model, calibration: list[Sample], validation: list[Sample], *, floor_db: float,
                candidates: tuple[Int8Setup, ...] = INT8_CANDIDATES, layout: str = "NCHW",
                output_layout: str | None = None) -> Int8Choice:
    """Quantize with each candidate in order; keep the first whose worst validation image holds ``floor_db``
    against the float model, else the one with the best worst image (the caller decides whether to fail).

    One setup cannot serve every model: which range estimator wins depends on how a model's activations
    spread across photos, so it is measured per model, on photos, at convert time.
    """
    if not candidates or not validation:
        raise ValueError("choose_int8 needs at least one candidate setup and one validation image")
    best: Int8Choice | None = None
    tried: list[dict[str, Any]] = []
    for setup in candidates:
        model = quantize(float_model, calibration, setup=setup, layout=layout, output_layout=output_layout)
        scores = psnr_vs_float(float_model, [model], validation, layout=layout, output_layout=output_layout)[0]
        worst = min(range(len(scores)), key=scores.__getitem__)
        tried.append({"setup": setup.label, "min_db": round(scores[worst], 2),
                      "mean_db": round(float(np.mean(scores)), 2), "worst_image": validation[worst].name})
        if best is None or scores[worst] > best.min_db:
            best = Int8Choice(model, setup, scores, tried)
        if scores[worst] >= floor_db:
            break
    assert best is not None
    return best


def taken_int8(float_model: ov.Model, xml: Path, validation: list[Sample], *, layout: str = "NCHW",
               output_layout: str | None = None) -> Int8Choice:
    """An INT8 IR made elsewhere (quantization-aware training), scored like ``choose_int8``'s candidates: per
    validation photo against the float model. Its setup is recorded as "qat"; the caller gates the floor."""
    if not validation:
        raise ValueError("taken_int8 needs at least one validation image")
    model = ov.Core().read_model(xml)
    scores = psnr_vs_float(float_model, [model], validation, layout=layout, output_layout=output_layout)[0]
    worst = min(range(len(scores)), key=scores.__getitem__)
    tried = [{"setup": "qat", "min_db": round(scores[worst], 2), "mean_db": round(float(np.mean(scores)), 2),
              "worst_image": validation[worst].name}]
    return Int8Choice(model, QAT_SETUP, scores, tried)


def calibration_samples(folder: Path | None, *, count: int = CALIBRATION_COUNT,
                        size_hw: tuple[int, int] = CALIBRATION_HW) -> tuple[list[Sample], str]:
    """Calibration images and where they came from ("photos:<dir>" or "synthetic").

    ``folder`` None means ../shared/photos when present, else synthetic images (a warning-worthy fallback:
    ranges from synthetic images fit real photos less well; the manifest records which was used).
    """
    source = folder if folder is not None else default_photo_dir()
    if source is None:
        images = synthetic_images(size_hw=size_hw, count=min(count, 16))
        return images, "synthetic"
    from .samples import fit, photo_paths, read_rgb

    samples: list[Sample] = []
    rng = np.random.default_rng(0)
    for path in photo_paths(source):
        rgb = read_rgb(path, min_side=4 * max(size_hw))  # crops of half the short side stay >= 2x size_hw
        samples.append(Sample(path.name, fit(rgb, size_hw)))
        h, w = rgb.shape[:2]
        for crop in range(CROPS_PER_PHOTO - 1):
            ch, cw = min(h, w) // 2, min(h, w) // 2
            if ch < size_hw[0]:
                break
            y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
            samples.append(Sample(f"{path.name}#crop{crop}", fit(rgb[y:y + ch, x:x + cw], size_hw)))
    order = rng.permutation(len(samples))
    return [samples[i] for i in order[:count]], f"photos:{source}"


def ignored_scope(model: ov.Model, ignore: tuple[str, ...]) -> Any:
    """An NNCF IgnoredScope for the words in ``ignore``, found by op type and graph order (not by names,
    which differ between torch, TorchScript and ONNX sources)."""
    import nncf

    unknown = {word for word in ignore if word not in IGNORE_CHOICES and not LAYER_WORD.fullmatch(word)}
    if unknown:
        raise ValueError(f"ignore: unknown {sorted(unknown)}; expected some of {IGNORE_CHOICES} "
                         "or a layer such as block_e.1")
    ops = model.get_ordered_ops()
    convs = [op.get_friendly_name() for op in ops if op.get_type_name() == "Convolution"]
    names: list[str] = []
    types: list[str] = []
    if "first_conv" in ignore and convs:
        names.append(convs[0])
    if "last_conv" in ignore and convs:
        names.append(convs[-1])
    if "depthwise" in ignore:
        types.append("GroupConvolution")
    if "norm" in ignore:
        types.extend(["GroupNormalization", "MVN"])
    if "upsample" in ignore:
        types.append("Interpolate")
    if "residual" in ignore:
        names.extend(op.get_friendly_name() for op in ops if op.get_type_name() == "Add")
    layers = [w for w in ignore if w in ("block_a", "block_e") or LAYER_WORD.fullmatch(w)]
    for block in layers:  # a whole block (encoder head / decoder tail) or one layer; torch sources' names only
        names.extend(op.get_friendly_name() for op in ops
                     if op.get_type_name() in ("Convolution", "GroupConvolution")
                     and f".{block}." in op.get_friendly_name())
    present = {op.get_type_name() for op in ops}
    return nncf.IgnoredScope(names=names, types=[t for t in types if t in present], validate=False)


def _advanced(setup: Int8Setup) -> Any:
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    kwargs: dict[str, Any] = {"disable_bias_correction": setup.disable_bias_correction}
    if setup.smooth_quant_conv_alpha is not None:
        kwargs["smooth_quant_alphas"] = AdvancedSmoothQuantParameters(convolution=setup.smooth_quant_conv_alpha)
    if setup.range_estimator:
        kwargs["activations_range_estimator_params"] = getattr(RangeEstimatorParametersSet, setup.range_estimator)
    return AdvancedQuantizationParameters(**kwargs)


def quantize(float_model: ov.Model, calibration: list[Sample], *, setup: Int8Setup = DEFAULT_INT8,
             validation: list[Sample] | None = None, layout: str = "NCHW",
             output_layout: str | None = None) -> ov.Model:
    """Quantize a float [-1, 1] model (``layout`` NCHW or NHWC) and return it wrapped with the u8 NHWC contract.

    ``validation`` is used only by accuracy control (its metric is PSNR against the float model).
    """
    def wrap(model: ov.Model) -> ov.Model:
        return with_u8_io(model, layout=layout, output_layout=output_layout)

    def to_input(sample: Sample) -> np.ndarray:
        x = to_nchw_float(sample.rgb)
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if layout == "NHWC" else x

    import nncf

    common: dict[str, Any] = {
        "preset": nncf.QuantizationPreset.MIXED if setup.preset == "mixed" else nncf.QuantizationPreset.PERFORMANCE,
        "subset_size": len(calibration),
        "fast_bias_correction": setup.fast_bias_correction,
        "model_type": nncf.ModelType.TRANSFORMER if setup.model_type == "transformer" else None,
    }
    if setup.target == "u8":
        model = wrap(float_model.clone())
        data = nncf.Dataset([s.rgb[None] for s in calibration])
    else:
        model = float_model.clone()
        data = nncf.Dataset([to_input(s) for s in calibration])
    scope = ignored_scope(model, setup.ignore)
    if setup.accuracy_control_floor_db is not None:
        inputs = [s.rgb[None] if setup.target == "u8" else to_input(s) for s in (validation or calibration)]
        quantized = _quantize_with_accuracy_control(model, data, inputs, setup, scope, common)
    else:
        quantized = nncf.quantize(model, data, ignored_scope=scope, advanced_parameters=_advanced(setup), **common)
    return quantized if setup.target == "u8" else wrap(quantized)


def _quantize_with_accuracy_control(model: ov.Model, data: Any, inputs: list[np.ndarray], setup: Int8Setup,
                                    scope: Any, common: dict[str, Any]) -> ov.Model:
    """NNCF's accuracy-aware PTQ: layers are reverted to float until the PSNR drop vs float is in budget.

    The metric is mean PSNR (dB) of the candidate against the float model on ``validation``, so "drop" is
    measured from a perfect 100 dB (the float model against itself): max_drop = 100 - floor.
    """
    import nncf

    # The reference is whatever NNCF's own compile of the float model gives: NNCF validates the initial
    # model first (every item), and its compile settings need not match ours (bf16 vs f32 on AMX CPUs gives
    # ~48 dB). Outputs seen first, keyed by input bytes, are therefore the float model's: it scores the cap.
    references: dict[bytes, np.ndarray] = {}

    def validate(compiled: Any, items: Any) -> tuple[float, list[float]]:
        scale = 1.0 if setup.target == "u8" else 127.5  # [-1, 1] floats -> u8 units
        scores = []
        for x in items:
            out = compiled(x)[0].astype(np.float64)
            ref = references.setdefault(hashlib.sha1(np.ascontiguousarray(x).tobytes()).digest(), out)
            mse = float(np.mean(((out - ref) * scale) ** 2))
            scores.append(PSNR_CAP_DB if mse == 0 else min(PSNR_CAP_DB, 10 * float(np.log10(255.0**2 / mse))))
        return float(np.mean(scores)), scores

    floor_db = setup.accuracy_control_floor_db if setup.accuracy_control_floor_db is not None else QUALITY_FLOOR_DB
    return nncf.quantize_with_accuracy_control(
        model, data, nncf.Dataset(inputs), validate,
        max_drop=PSNR_CAP_DB - floor_db, drop_type=nncf.DropType.ABSOLUTE,
        ignored_scope=scope, advanced_quantization_parameters=_advanced(setup), **common,
    )
