"""``Decoded`` at any size -> ``Decoded`` at the size it comes out at: resize mode, memory guard, and the
padded shape inference runs at (``infer_size``: the size rounded up to the multiple; the pipeline pads the
picture to it and crops the output back, see ``geometry``).

Filters: LANCZOS to shrink (Pillow's sharpest anti-aliasing filter; the generator traces edges, and a
softer BICUBIC/BILINEAR shrink loses the thin lines it would outline), with ``reducing_gap=2`` (what
Pillow's ``thumbnail`` uses) so a big shrink first takes cheap integer box steps (``Image.reduce``) and
LANCZOS only does the last factor of 2 or more. BICUBIC to enlarge: LANCZOS rings
around hard edges when it enlarges, and enlarged inputs (``center_square`` of a small face, ``fixed``) are
where that would show.
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
from PIL import Image

from ..config import ImageSection
from ..errors import InputError
from .decoded import Decoded
from .fullres import canvas_mb, padded, plan_full
from .geometry import MIN_SIDE_PX, crop_box_center_square, padded_inference_mb, padded_size, policy_size
from .target import target_size

log = logging.getLogger(__name__)

SHRINK_FILTER = Image.Resampling.LANCZOS
ENLARGE_FILTER = Image.Resampling.BICUBIC
# Measured (benchmarks/draft_gap.py, removed in 82b5692; docs/design.md has the command; 31 JPEGs of
# ../shared/photos, JPEG draft gap 2 as shipped, vs a full decode shrunk by LANCZOS alone): gap 3 -> 2 took
# decode + plan from 26.2 to 24.6 ms/photo at max_side 512 and 31.0 to 28.1 at a fixed 512x512, with the planned
# input >= 44.1 dB and the toon output >= 50.1 dB of the reference (1.5: 41.6 / 48.6 dB). At INT8 speed on the
# 2-core box decode + resize is the only work the pipeline adds to inference, so every ms counts there.
REDUCING_GAP = 2.0


def resize_image(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    """Resize with the filter the direction calls for (see the module docstring)."""
    if image.size == size:
        return image
    if size[0] < image.size[0] or size[1] < image.size[1]:
        return image.resize(size, SHRINK_FILTER, reducing_gap=REDUCING_GAP)
    return image.resize(size, ENLARGE_FILTER)


def _resize_array(array: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    if (array.shape[1], array.shape[0]) == size:
        return np.ascontiguousarray(array)
    return np.asarray(resize_image(Image.fromarray(np.ascontiguousarray(array)), size))


def _refusal(decoded: Decoded, cfg: ImageSection, multiple: int) -> InputError:
    wanted = policy_size(decoded.original_size, cfg)
    need_mb = padded_inference_mb(wanted, multiple)
    if cfg.over_budget == "refuse":
        fix = "set image.over_budget: downscale, lower image.max_side, or raise image.memory_budget_mb"
    else:
        fix = "raise image.memory_budget_mb"
    return InputError(
        f"{decoded.path or 'image'}: inference at {wanted[0]}x{wanted[1]} needs about {need_mb:.0f} MB, over "
        f"image.memory_budget_mb={cfg.memory_budget_mb}; {fix}", stage="plan")


def plan(decoded: Decoded, cfg: ImageSection, *, multiple: int, requests: int = 1) -> Decoded:
    """Apply the resize policy and the inference-memory guard; ``InputError(stage="plan")`` when refused.

    ``multiple`` is max(image.multiple, the model's size_multiple): the caller knows the model; ``requests``
    the inferences it runs at once (``resize: full`` sizes its tiles so that many fit the budget).
    The target comes from ``original_size``, so a draft-decoded JPEG plans exactly like a full decode.
    ``rgb`` comes back at the exact target (the photo's aspect ratio); ``infer_size`` is that size padded up
    to ``multiple``, the one static shape inference runs (a clip's frames all share it).
    """
    multiple = max(multiple, cfg.multiple, MIN_SIDE_PX)
    if cfg.resize == "full":
        return _plan_full(decoded, cfg, requests=requests)
    target = target_size(decoded.original_size, cfg, multiple=multiple)
    if target is None:
        raise _refusal(decoded, cfg, multiple)
    rgb, alpha, restore = decoded.rgb, decoded.alpha, decoded.original_size
    if cfg.resize == "center_square":
        left, top, right, bottom = crop_box_center_square(decoded.size)
        rgb = rgb[top:bottom, left:right]
        alpha = alpha[top:bottom, left:right] if alpha is not None else None
        side = min(decoded.original_size)
        restore = (side, side)  # "back to the original size" of what was kept: the crop
    guide = rgb if cfg.upscale_to_original and cfg.upscale_method == "guided" else None  # full size: no draft
    rgb = _resize_array(rgb, target)
    alpha = _resize_array(alpha, target) if alpha is not None else None
    return replace(decoded, rgb=rgb, alpha=alpha, restore_size=restore, guide=guide,
                   infer_size=padded_size(target, multiple))


def _plan_full(decoded: Decoded, cfg: ImageSection, *, requests: int) -> Decoded:
    """``resize: full``: the photo's own size (or the largest that fits, logged), whole or tiled."""
    full = plan_full(decoded.original_size, cfg, requests=requests)
    if full is None:
        width, height = decoded.original_size
        raise InputError(
            f"{decoded.path or 'image'}: {width}x{height} at full resolution does not fit "
            f"image.memory_budget_mb={cfg.memory_budget_mb} even in tiles (canvases alone need about "
            f"{canvas_mb(decoded.original_size):.0f} MB); "
            + ("set image.over_budget: downscale or raise image.memory_budget_mb" if cfg.over_budget == "refuse"
               else "raise image.memory_budget_mb"), stage="plan")
    if full.fallback_from is not None:
        log.info("%s: %dx%d does not fit image.memory_budget_mb=%d at full resolution: running %dx%d "
                 "(over_budget: downscale)", decoded.path or "image", *full.fallback_from, cfg.memory_budget_mb,
                 *full.size)
    guide = decoded.rgb if cfg.upscale_to_original and cfg.upscale_method == "guided" else None
    rgb = _resize_array(decoded.rgb, full.size)
    alpha = _resize_array(decoded.alpha, full.size) if decoded.alpha is not None else None
    return replace(decoded, rgb=rgb, alpha=alpha, restore_size=decoded.original_size, full=full, guide=guide,
                   infer_size=padded(full.size))  # what a whole picture runs at; tiles have their own shape
