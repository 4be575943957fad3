"""Size arithmetic of the resize policy and the inference-memory guard: integers in, integers out.

Kept apart from Pillow so ``decode`` (to pick a JPEG draft scale) and ``plan`` (to resize) compute the very
same target from the very same rules, and so the rules can be tested without an image.

The size rule (issue #29): pad inside, exact size out. The target keeps the photo's aspect ratio to the
pixel (``policy_size``: no rounding to ``image.multiple``); the network, whose sides must be multiples of
it, runs on the target padded up to the next multiple (``padded_size``), and the padding is cropped off
its output. Snapping the target itself to the multiple changed the shape of every picture (248x260 came
out 248x264). The padded sides are multiples as before, so the shapes compiled stay one per multiple
bucket, and the memory guard counts the padded size, which is what runs.
"""
from __future__ import annotations

import math

from ..config import ImageSection
from ..errors import BYTES_PER_MB

MIN_SIDE_PX = 4  # the align_corners=False decoder halves twice: anything smaller has no pixels left

# Inference memory of the AnimeGANv2 generator on the OpenVINO CPU plugin, one infer request:
#     peak_bytes ~= ACTIVATION_FIXED_MB * MiB + ACTIVATION_BYTES_PER_PIXEL * H * W
# Measured, not guessed: one fresh process per size; read the IR, reshape to static [1, H, W, 3], compile
# with PERFORMANCE_HINT=LATENCY, NUM_STREAMS=1, run one inference; peak RSS (ru_maxrss) minus RSS before
# compile. Seeded-random fp32 IR, OpenVINO 2026.4.1, Xeon with AMX (so precision forced per row):
#     INFERENCE_PRECISION_HINT=f32:  256^2 +121 MB, 512^2 +315 MB, 768^2 +641 MB, 1024^2 +1095 MB,
#                                    1024x1536 +1613 MB  -> slope 1038 B/px, intercept ~56 MB
#     bf16 (the plugin's default on AMX CPUs): 256^2 +86 MB, 512^2 +184 MB, 1024^2 +580 MB -> 527 B/px
# The slope matches the layer shapes: at full resolution the decoder's upsampled 128-channel tensor
# (512 B/px in f32) is live together with the 64-channel conv output (256 B/px) and the next one's
# padded input; everything at H/2 and H/4 is a quarter or less of that. f32 is the worst case (CPUs
# without bf16, execution_mode ACCURACY), so the guard uses it with ~6% headroom on the slope. An int8 model or bf16
# needs about half; the guard then errs on the safe side. Each CPU stream runs its own inference, so a
# THROUGHPUT setup with N streams needs up to N times this: image.memory_budget_mb is per image.
ACTIVATION_BYTES_PER_PIXEL = 1100
ACTIVATION_FIXED_MB = 56
MIB = BYTES_PER_MB


def padded_size(size: tuple[int, int], multiple: int) -> tuple[int, int]:
    """(W, H) rounded up to ``multiple`` (at least ``MIN_SIDE_PX``): the shape the network runs a picture of
    ``size`` at. The padding is cropped off the output, so it never shows in the picture's size."""
    step = max(multiple, MIN_SIDE_PX)
    return -(-size[0] // step) * step, -(-size[1] // step) * step


def _round_side(value: float) -> int:
    """Nearest whole pixel, halves up (not to even: 0.5 px rounds the same way on both sides), at least 1."""
    return max(1, int(math.floor(value + 0.5)))


def oriented_size(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    """(W, H) as shown after the EXIF rotation: orientations 5-8 swap the sides."""
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else size


def crop_box_center_square(size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The centred square of a (W, H) picture, as a Pillow box (left, top, right, bottom)."""
    width, height = size
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def policy_size(size: tuple[int, int], cfg: ImageSection) -> tuple[int, int]:
    """The (W, H) the resize mode asks for, before the memory guard, at the photo's own aspect ratio (whole
    pixels, not multiples: ``padded_size`` is what the network runs). ``size`` is the oriented original."""
    width, height = size
    if cfg.resize in ("keep", "full"):
        target_w, target_h = float(width), float(height)
    elif cfg.resize == "max_side":
        scale = min(1.0, cfg.max_side / max(width, height))  # never enlarges
        target_w, target_h = width * scale, height * scale
    elif cfg.resize == "fixed":
        target_w, target_h = float(cfg.fixed[0]), float(cfg.fixed[1])
    else:  # center_square
        target_w = target_h = float(cfg.center_square)
    return _round_side(target_w), _round_side(target_h)


def estimate_inference_mb(width: int, height: int) -> float:
    """Peak inference memory of one image of W x H, in MiB (see the measurement above)."""
    return ACTIVATION_FIXED_MB + ACTIVATION_BYTES_PER_PIXEL * width * height / MIB


def padded_inference_mb(size: tuple[int, int], multiple: int) -> float:
    """Peak inference memory of a picture of ``size`` (W, H) as it runs: padded up to ``multiple``."""
    return estimate_inference_mb(*padded_size(size, multiple))


def fit_budget(size: tuple[int, int], budget_mb: int, *, multiple: int) -> tuple[int, int] | None:
    """The largest size with ``size``'s aspect whose padded run (``padded_size``) fits ``budget_mb``; ``size``
    itself when it already fits; None when not even one multiple by one multiple fits."""
    if padded_inference_mb(size, multiple) <= budget_mb:
        return size
    max_pixels = (budget_mb - ACTIVATION_FIXED_MB) * MIB / ACTIVATION_BYTES_PER_PIXEL
    if max_pixels <= 0:
        return None
    width, height = size
    long_side, short_side = max(width, height), min(width, height)
    # The pixel count fixes the long side to within a few multiples (the padding adds up to one multiple a
    # side); step down from there until the padded run fits: a handful of integer tries.
    side = min(long_side, int(math.sqrt(max_pixels * long_side / short_side)))
    while side >= 1:
        other = _round_side(short_side * side / long_side)
        fitted = (side, other) if width >= height else (other, side)
        if padded_inference_mb(fitted, multiple) <= budget_mb:
            return fitted
        side -= 1
    return None
