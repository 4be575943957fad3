"""Where the tiles of a full-resolution picture go, and how their outputs blend back: integers and numpy only.

Why overlap at least the receptive field's reach (``margin``, measured by the converter and written in the
manifest as ``tiling.margin_px``): the network's reflect padding at a tile's border differs from the real neighbouring
pixels, and with the whole picture's GroupNorm statistics (pass 2) nothing else differs, so a pixel at least
``margin`` inside a tile comes out as the whole-picture run gives it. A tile's weight is therefore zero in its
outer ``margin`` (except on the picture's own border, where the whole run reflects too), then rises linearly
over ``ramp`` pixels: neighbours overlap by ``2 * margin + ramp`` so each cross-fades into the next, and any
leftover difference (statistics from a downscaled copy, the decoder's bilinear grid) fades instead of
stepping at a line.

Tile corners sit on multiples of ``ALIGN_PX`` so the stride-2 convolutions of every tile sample the same
phase as the whole picture's. Tiles of one picture are all one static shape (one compile; a camera's
photos share it). The blend keeps a float
accumulator one tile row high (``Blender``): the full-size float canvas Real-ESRGAN keeps would be 16 bytes
per pixel, 190 MB for a 12 MP photo.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

import numpy as np

ALIGN_PX = 4  # two stride-2 stages: a tile corner on a multiple of 4 keeps every level's sampling phase
DEFAULT_RAMP_PX = 16
FIT_STEP_PX = 8  # fitted tile sides are multiples of this (fewer distinct shapes to compile); of ALIGN_PX too
# How a picture is padded up to the network's multiple (and a tile past the picture's edge): numpy's "edge",
# the border pixel repeated. Measured (toon fp16 IR at f32, 12 photos of ../shared/photos, 384x288 crops run
# whole as the reference, then their top-left cut short by k = 1, 3, 5, 7 px a side, padded back and run;
# error of the kept pixels against the reference, which saw the real neighbours, in u8 levels):
#     4 px next to the padding, mean / max:  edge 1.55 / 4.54, symmetric 1.76 / 4.64, reflect 2.13 / 6.17
#     the last pixel row and column:         edge 2.37 / 6.96, symmetric 2.77 / 8.87, reflect 3.38 / 12.26
#     the whole picture, PSNR mean / min:    edge 55.1 / 44.7, symmetric 54.3 / 42.6, reflect 52.4 / 39.5 dB
# Edge beat reflect in 43 of the 48 cases. A repeated pixel is the smoothest guess at what lies past the
# border; a mirror doubles an edge near the border into a feature the network then draws, and its extra
# texture moves the whole picture's GroupNorm statistics more.
PAD_MODE: Final = "edge"


@dataclass(frozen=True)
class TilePlan:
    """Tiles of ``tile_h`` x ``tile_w`` covering a ``height`` x ``width`` picture, row by row."""

    height: int
    width: int
    tile_h: int
    tile_w: int
    margin: int
    ramp: int
    tops: tuple[int, ...]
    lefts: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.tops) * len(self.lefts)

    def tiles(self) -> Iterator[tuple[int, int, int]]:
        """(row index, top, left) of every tile, row-major: the order they are run and blended in."""
        for row, top in enumerate(self.tops):
            for left in self.lefts:
                yield row, top, left

    def weights(self, top: int, left: int) -> np.ndarray:
        """The tile's blend weight, ``tile_h`` x ``tile_w`` float32 (zero in its outer margin, see module)."""
        wy = _axis_weights(top, self.tile_h, self.height, self.margin, self.ramp)
        wx = _axis_weights(left, self.tile_w, self.width, self.margin, self.ramp)
        return np.outer(wy, wx).astype(np.float32)


def padded_side(side: int) -> int:
    """``side`` rounded up to ALIGN_PX: the network needs sides of that multiple (the picture is reflected)."""
    return -(-side // ALIGN_PX) * ALIGN_PX


def _positions(length: int, tile: int, overlap: int) -> tuple[int, ...]:
    """Tile starts along one axis: first at 0, last flush with the end, evenly spread, on ALIGN_PX."""
    if length <= tile:
        return (0,)
    stride = tile - overlap
    count = math.ceil((length - tile) / stride) + 1
    starts = [round(i * (length - tile) / (count - 1) / ALIGN_PX) * ALIGN_PX for i in range(count)]
    starts[-1] = length - tile
    return tuple(starts)


def fitted_side(length: int, tile: int, overlap: int) -> int:
    """The smallest tile side (a multiple of FIT_STEP_PX, at most ``tile``) that covers ``length`` with as
    few tiles as ``tile`` itself needs.

    Why: the count along an axis is rounded up, so tiles of the largest side the budget allows overlap far
    more than the margins need (1156 px in 512 px tiles: 3 columns that 472 px tiles also make). Every pixel
    of a tile costs inference time; shrinking the tile to what its count needs cuts the tiled pixels by 3-11%
    (1 to 24 MP). FIT_STEP_PX keeps the number of distinct tile shapes (compiles) small."""
    if length <= tile:
        return length
    count = math.ceil((length - tile) / (tile - overlap)) + 1
    needed = -(-(length + (count - 1) * overlap) // count)
    return min(tile, -(-needed // FIT_STEP_PX) * FIT_STEP_PX)


def plan_tiles(width: int, height: int, *, tile: int, margin: int, ramp: int = DEFAULT_RAMP_PX) -> TilePlan:
    """Tiles of at most ``tile`` x ``tile`` over a ``width`` x ``height`` picture: each side cut to the padded
    picture's when that is smaller, else to what its tile count needs (``fitted_side``). ``tile`` must leave
    room for both margins and a ramp."""
    overlap = 2 * margin + ramp
    if tile % ALIGN_PX or tile <= overlap + ALIGN_PX:
        raise ValueError(f"tile {tile} px: expected a multiple of {ALIGN_PX} above 2 x margin ({margin}) + "
                         f"ramp ({ramp}) + {ALIGN_PX}")
    padded_h, padded_w = padded_side(height), padded_side(width)
    tile_h, tile_w = fitted_side(padded_h, tile, overlap), fitted_side(padded_w, tile, overlap)
    return TilePlan(height=height, width=width, tile_h=tile_h, tile_w=tile_w, margin=margin, ramp=ramp,
                    tops=_positions(padded_h, tile_h, overlap), lefts=_positions(padded_w, tile_w, overlap))


def _axis_weights(start: int, size: int, length: int, margin: int, ramp: int) -> np.ndarray:
    """1-D weight: 0 in the outer ``margin`` unless that side is the picture's border, linear over ``ramp``."""
    index = np.arange(size, dtype=np.float32)
    weight = np.ones(size, np.float32)
    if start > 0:
        weight = np.minimum(weight, np.clip((index - margin + 1) / ramp, 0.0, 1.0))
    if start + size < padded_side(length):
        weight = np.minimum(weight, np.clip((size - index - margin) / ramp, 0.0, 1.0))
    return weight


def pad_to(rgb: np.ndarray, height: int, width: int) -> np.ndarray:
    """``rgb`` (H x W x C) padded at its bottom and right to ``height`` x ``width`` with ``PAD_MODE``,
    C-contiguous; ``rgb`` itself (made contiguous) when it already has that size. The network needs sides on
    its multiple; the caller crops the padding off the output (``geometry`` says why not resize instead)."""
    short_h, short_w = height - rgb.shape[0], width - rgb.shape[1]
    if short_h < 0 or short_w < 0:
        raise ValueError(f"pad_to: {rgb.shape[1]}x{rgb.shape[0]} is larger than {width}x{height}")
    if not short_h and not short_w:
        return np.ascontiguousarray(rgb)
    return np.pad(rgb, ((0, short_h), (0, short_w)) + ((0, 0),) * (rgb.ndim - 2), mode=PAD_MODE)


def cut_tile(rgb: np.ndarray, top: int, left: int, tile_h: int, tile_w: int) -> np.ndarray:
    """The tile's input, C-contiguous; past the picture's bottom or right edge (at most ALIGN_PX - 1 pixels)
    padded as the whole picture padded to the multiple is (``pad_to``)."""
    piece = rgb[top:top + tile_h, left:left + tile_w]
    return pad_to(piece, tile_h, tile_w)


class Blender:
    """Accumulates tile outputs in run order and writes finished rows into ``out`` (u8, the picture's size).

    Holds one float accumulator a tile row high: the rows above the next tile row's top are final when a row
    of tiles is done, so they are divided by their weight sum and rounded into ``out`` straight away."""

    def __init__(self, plan: TilePlan, out: np.ndarray) -> None:
        self.plan = plan
        self.out = out
        self._row = -1
        self._top = 0
        self._acc = np.zeros((0, padded_side(plan.width), 3), np.float32)
        self._wsum = np.zeros((0, padded_side(plan.width)), np.float32)

    def add(self, row: int, top: int, left: int, tile: np.ndarray) -> None:
        """Blend one tile's H x W x 3 u8 output (tiles must come in ``TilePlan.tiles`` order)."""
        if row != self._row:
            self._start_row(row, top)
        plan = self.plan
        weight = plan.weights(top, left)
        rows = slice(top - self._top, top - self._top + plan.tile_h)
        cols = slice(left, left + plan.tile_w)
        self._acc[rows, cols] += tile.astype(np.float32) * weight[..., None]
        self._wsum[rows, cols] += weight

    def finish(self) -> np.ndarray:
        """Write what is left; returns ``out``."""
        self._flush(self._top + self._acc.shape[0])
        return self.out

    def _start_row(self, row: int, top: int) -> None:
        if self._row >= 0:
            self._flush(top)
        keep = self._top + self._acc.shape[0] - top  # rows the new tile row shares with the previous one
        acc = np.zeros((self.plan.tile_h, self._acc.shape[1], 3), np.float32)
        wsum = np.zeros((self.plan.tile_h, self._acc.shape[1]), np.float32)
        if keep > 0:
            acc[:keep] = self._acc[-keep:]
            wsum[:keep] = self._wsum[-keep:]
        self._acc, self._wsum, self._top, self._row = acc, wsum, top, row

    def _flush(self, until: int) -> None:
        """Rows [self._top, until) are final: into ``out`` (cut to the picture's size)."""
        end = min(until, self.plan.height)
        count = end - self._top
        if count <= 0:
            return
        acc, wsum = self._acc[:count], self._wsum[:count]
        done = acc / np.maximum(wsum, 1e-6)[..., None]
        self.out[self._top:end] = np.clip(np.rint(done[:, :self.plan.width]), 0, 255).astype(np.uint8)
