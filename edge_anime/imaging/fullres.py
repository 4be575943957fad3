"""``image.resize: full``: how a photo runs at its own size inside ``image.memory_budget_mb``. Arithmetic only.

Memory of one full-resolution picture, all of it counted against the budget (per picture, as elsewhere):
- the canvases, ``CANVAS_BYTES_PER_PIXEL`` per output pixel: the decoded RGB (3), the stylized RGB (3) and
  Pillow's RGBX copy when it encodes (4); the last only after the tiles, whose activation memory
  ``two_pass`` releases first, so the tile phase counts 6 bytes per pixel and the encode phase 10;
- the blend accumulator, one tile row high (``tiling.Blender``): 16 bytes per pixel of that strip;
- the activations of the tiles in flight: ``requests`` x ``estimate_inference_mb(tile, tile)``, where
  ``requests`` is pass 2's streams (``TwoPass.streams``, one at the LATENCY hint): a stream holds one
  inference's activations however many requests queue on it.
Pass 1 (the downscaled copy whose GroupNorm statistics every tile uses) runs before the tiles and gives its
activation memory back afterwards, so it is bounded on its own: the largest copy that fits beside the input.

The whole picture runs in one piece when that fits (it is exact and has no margin overhead); else tiles, as
large as the budget allows (fewer, so less margin overhead) up to ``TILE_MAX_PX``. When not even the smallest
tile fits beside the canvases, ``over_budget: downscale`` runs the largest size that fits (the caller logs
it) and ``refuse`` refuses. The decode itself is bounded by ``image.max_pixels`` (refused from the header as
in every mode); a JPEG falls back with a DCT-scaled decode (``Image.draft``) when the fallback is at most half
its size, so a huge JPEG is never decoded whole only to be shrunk.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import ImageSection
from .geometry import MIB, estimate_inference_mb, fit_budget

CANVAS_BYTES_PER_PIXEL = 10
# While tiles run only the decoded RGB and the stylized RGB exist (Pillow's copy comes at the encode, after
# the tiles' activation memory was released): at 24 MP that is 96 MB more for tiles, 416 -> 448 px.
TILE_PHASE_CANVAS_BYTES = 6
ACCUMULATOR_BYTES_PER_PIXEL = 16
TILE_MAX_PX = 1024   # past this, tiles buy little (the margin share is already small) and cost memory
TILE_MIN_PX = 256    # below this the margins (2 x 32 px + a 16 px ramp on toon) eat much of each tile
TILE_STEP_PX = 32
PASS1_MIN_SIDE_PX = 64
# Pass 1 costs inference time like the tiles do, and it is what makes small pictures dear per pixel: at most
# this share of the picture's pixels and PASS1_MAX_PIXELS. Measured drift (tiled vs whole picture, toon;
# benchmarks/fullres.py --parts drift, docs/fullres.md): exact statistics 46-51 dB; pass 1 at 1/1.5-1/1.8 of
# the side 39.4-44.9 dB; from 1/2 to 1/6.4 anywhere in 35.5-42.0 dB (scene_0) or 52.3 (scene_11 at 1/2), with
# no steady trend: past ~2x the photo decides, not pass 1's size. So a larger pass 1 mostly costs time: with
# a third of the pixels and no cap a 3 MP photo spent 2.2 s per MP in pass 1 against 0.5 at 12 MP (AMD EPYC,
# 2 cores), and on scene_0 at 2048x1536 the cap took 42.0 dB to 37.4.
PASS1_MAX_SHARE = 1 / 4
PASS1_MAX_PIXELS = 500_000
PASS1_ALWAYS_PIXELS = 250_000  # up to this many pixels pass 1 may take the picture whole (its cost is small)
# Pass 2's activations over the plain IR's per-pixel figure (``estimate_inference_mb``): its decoder upsamples
# with gathers at the whole picture's grid, which hold two more tensors per level. Measured: 800x600 in
# 256 px tiles, 2 streams, toon fp16 at f32, 297 MB peak over the started service vs 257 MB estimated.
PASS2_ACTIVATION_FACTOR = 1.25
# What the estimate above still misses in a running service (the blend's temporaries, the allocator's slack):
# measured peak over the started service / estimate, toon fp16 at f32, THROUGHPUT 2 requests, 1024 MB:
# 1.09 at 1156x868 and 1.10 at 2000x1500 in 544 px tiles (benchmarks/fullres.py, scale). Tiles are sized
# to this share of the budget so the measured peak stays under it.
TILED_BUDGET_SHARE = 0.88


@dataclass(frozen=True)
class FullPlan:
    """How one picture runs at full resolution: ``size`` (W, H) of the output, whole or in tiles."""

    size: tuple[int, int]
    tile_px: int                    # 0: the whole picture in one piece
    pass1_size: tuple[int, int]     # (W, H) of the downscaled copy whose statistics the tiles use
    budget_mb: float                # what the plan needs, by the estimate above (<= memory_budget_mb)
    fallback_from: tuple[int, int] | None = None  # the photo's size when the budget forced a smaller one

    @property
    def tiled(self) -> bool:
        return self.tile_px > 0


def canvas_mb(size: tuple[int, int]) -> float:
    return CANVAS_BYTES_PER_PIXEL * size[0] * size[1] / MIB


def padded(size: tuple[int, int]) -> tuple[int, int]:
    return -(-size[0] // 4) * 4, -(-size[1] // 4) * 4


def tiled_mb(size: tuple[int, int], tile: int, requests: int) -> float:
    """Estimated peak of a tiled run of ``size`` with ``tile`` x ``tile`` tiles, ``requests`` at once: the
    larger of the tile phase (input and output canvases, the strip, the tiles' activations) and the encode
    phase (all the canvases; ``two_pass`` gives the tiles' activation memory back before it)."""
    strip = ACCUMULATOR_BYTES_PER_PIXEL * min(tile, size[1]) * padded(size)[0] / MIB
    tiles = requests * PASS2_ACTIVATION_FACTOR * estimate_inference_mb(min(tile, size[0]), min(tile, size[1]))
    return max(TILE_PHASE_CANVAS_BYTES * size[0] * size[1] / MIB + strip + tiles, canvas_mb(size))


def _largest_tile(size: tuple[int, int], budget_mb: float, requests: int, cap: int) -> int:
    """The largest tile side from ``cap`` down (by TILE_STEP_PX; a configured ``tile_px`` is tried as given)
    whose run fits ``budget_mb``; 0 when none down to TILE_MIN_PX (or ``cap``, when that is smaller) does."""
    tile, floor = cap, min(cap, TILE_MIN_PX)
    while tile >= floor:
        if tiled_mb(size, tile, requests) <= budget_mb:
            return tile
        tile = (tile - 1) // TILE_STEP_PX * TILE_STEP_PX
    return 0


def _plan_at(size: tuple[int, int], cfg: ImageSection, requests: int) -> FullPlan | None:
    budget = float(cfg.memory_budget_mb)
    forced = cfg.tile_px != "auto" and max(size) > int(cfg.tile_px)
    whole_mb = canvas_mb(size) + estimate_inference_mb(*padded(size))
    if whole_mb <= budget and not forced:
        return FullPlan(size=size, tile_px=0, pass1_size=size, budget_mb=whole_mb)
    cap = TILE_MAX_PX if cfg.tile_px == "auto" else min(TILE_MAX_PX, int(cfg.tile_px))
    tile = _largest_tile(size, budget * TILED_BUDGET_SHARE, requests, cap - cap % 4)
    # Pass 1 beside the input canvas only, at the tiles' share of the budget: at the whole budget its peak
    # came out 8% over it (3 MP, pass 1 1096x824: 1106 MB measured vs 1024).
    pass1 = fit_budget(size, int(budget * TILED_BUDGET_SHARE - canvas_mb(size) * 0.6), multiple=4)
    if not tile or pass1 is None or min(pass1) < PASS1_MIN_SIDE_PX:
        return None
    pixels = size[0] * size[1]
    share = math.sqrt(min(1.0, max(min(PASS1_MAX_SHARE, PASS1_MAX_PIXELS / pixels), PASS1_ALWAYS_PIXELS / pixels)))
    pass1 = (min(pass1[0], size[0], _round4(size[0] * share)), min(pass1[1], size[1], _round4(size[1] * share)))
    return FullPlan(size=size, tile_px=tile, pass1_size=pass1, budget_mb=tiled_mb(size, tile, requests))


def _round4(value: float) -> int:
    return max(4, round(value / 4) * 4)


def plan_full(size: tuple[int, int], cfg: ImageSection, *, requests: int = 1) -> FullPlan | None:
    """The plan for a photo of ``size`` (W, H, oriented); None when it is over budget and may not shrink
    (``over_budget: refuse``) or not even a small picture fits."""
    found = _plan_at(size, cfg, requests)
    if found is not None or cfg.over_budget == "refuse":
        return found
    low, high = 0.0, 1.0  # the largest scale that fits: a few halvings are enough at this precision
    best: FullPlan | None = None
    for _ in range(14):
        mid = (low + high) / 2
        scaled = (max(4, math.floor(size[0] * mid)), max(4, math.floor(size[1] * mid)))
        attempt = _plan_at(scaled, cfg, requests)
        if attempt is None:
            high = mid
        else:
            low, best = mid, attempt
    if best is None:
        return None
    return FullPlan(size=best.size, tile_px=best.tile_px, pass1_size=best.pass1_size, budget_mb=best.budget_mb,
                    fallback_from=size)
