"""Size arithmetic of the resize policy and the inference-memory guard: integers in, integers out.

Kept apart from Pillow so ``decode`` (to pick a JPEG draft scale) and ``plan`` (to resize) compute the very
same target from the very same rules, and so the rules can be tested without an image.
"""
from __future__ import annotations

import math

from ..config import ImageSection

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
MIB = 1 << 20


def round_to_multiple(value: float, multiple: int) -> int:
    """Nearest multiple of ``multiple`` (at least one multiple, never below ``MIN_SIDE_PX``)."""
    step = max(multiple, MIN_SIDE_PX)
    return max(step, int(math.floor(value / step + 0.5)) * step)  # halves round up, not to even


def floor_to_multiple(value: float, multiple: int) -> int:
    """Largest multiple not above ``value`` (at least one multiple): for sizes that must stay under a cap."""
    step = max(multiple, MIN_SIDE_PX)
    return max(step, int(math.floor(value / step)) * step)


def oriented_size(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    """(W, H) as shown after the EXIF rotation: orientations 5-8 swap the sides."""
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else size


def crop_box_center_square(size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The centred square of a (W, H) picture, as a Pillow box (left, top, right, bottom)."""
    width, height = size
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    return left, top, left + side, top + side


def policy_size(size: tuple[int, int], cfg: ImageSection, *, multiple: int) -> tuple[int, int]:
    """The (W, H) the resize mode asks for, before the memory guard. ``size`` is the oriented original."""
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
    return round_to_multiple(target_w, multiple), round_to_multiple(target_h, multiple)


def estimate_inference_mb(width: int, height: int) -> float:
    """Peak inference memory of one image of W x H, in MiB (see the measurement above)."""
    return ACTIVATION_FIXED_MB + ACTIVATION_BYTES_PER_PIXEL * width * height / MIB


def fit_budget(size: tuple[int, int], budget_mb: int, *, multiple: int) -> tuple[int, int] | None:
    """The largest size with ``size``'s aspect (sides multiples of ``multiple``) that fits ``budget_mb``;
    ``size`` itself when it already fits; None when not even one multiple by one multiple fits."""
    width, height = size
    if estimate_inference_mb(width, height) <= budget_mb:
        return size
    max_pixels = (budget_mb - ACTIVATION_FIXED_MB) * MIB / ACTIVATION_BYTES_PER_PIXEL
    if max_pixels <= 0:
        return None
    scale = math.sqrt(max_pixels / (width * height))
    fitted = floor_to_multiple(width * scale, multiple), floor_to_multiple(height * scale, multiple)
    return fitted if estimate_inference_mb(*fitted) <= budget_mb else None
