"""Temporal stability: the static-region blend that tames flicker, and the flicker figure that measures it.

Why it flickers: the generator normalises every frame on its own (instance/group statistics of the whole
frame), so a person walking through the picture shifts the tone of a wall that did not move, and sensor
noise the model sharpens into texture changes every frame. Where the input did not change (mean RGB change
under ``video.static_threshold``), the output should not either: there it is blended with the previous
output frame, ``out = (1 - s * m) * new + s * m * previous``, ``m`` in [0, 1] falling off linearly with the
input's change, so moving parts take the fresh output at once and nothing trails behind them.
Smoothing the normalisation statistics instead would need an IR that takes them as inputs (the two-pass
variant of the full-resolution issue); the output blend needs no new IR and works with every style.

``Flicker`` is the figure of docs and benchmarks: mean absolute frame-to-frame change of the output over
that of the input, both on the static pixels (where the ideal output does not change at all).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image


def static_weight(current: np.ndarray, previous: np.ndarray | None, threshold: float) -> np.ndarray | None:
    """Per pixel, 1 where the input did not change and 0 from ``threshold`` (mean RGB change) on; H x W f32."""
    if previous is None or previous.shape != current.shape:
        return None
    change = np.abs(current.astype(np.int16) - previous.astype(np.int16)).mean(axis=2, dtype=np.float32)
    weight: np.ndarray = np.clip(1.0 - change / np.float32(threshold), 0.0, 1.0)
    return weight


def _fit(weight: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The weight at the output's size (the output is upscaled back with ``image.upscale_to_original``)."""
    if weight.shape == shape[:2]:
        return weight
    resized: np.ndarray = np.asarray(Image.fromarray(weight, mode="F").resize((shape[1], shape[0]),
                                                                           Image.Resampling.BILINEAR))
    return resized


class Smoother:
    """Blends each output frame with the previous one where the input stood still (see the module doc)."""

    def __init__(self, strength: float) -> None:
        self.strength = np.float32(strength)
        self._previous: np.ndarray | None = None  # the previous output as shown (after blending), f32

    def apply(self, output: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
        """``output`` (H x W x 3 u8) blended with the previous frame by ``strength x weight``."""
        if self.strength == 0:
            return output
        fresh = output.astype(np.float32)
        if weight is not None and self._previous is not None and self._previous.shape == fresh.shape:
            mix = (self.strength * _fit(weight, fresh.shape))[..., None]
            fresh += mix * (self._previous - fresh)
        self._previous = fresh
        shown: np.ndarray = np.clip(fresh + 0.5, 0, 255).astype(np.uint8)
        return shown


@dataclass
class Flicker:
    """Running sums of the frame-to-frame change on static pixels: input, raw output, shown output."""

    input_change: float = 0.0
    raw_change: float = 0.0
    shown_change: float = 0.0
    pixels: int = 0

    def add(self, weight: np.ndarray | None, inputs: tuple[np.ndarray, np.ndarray | None],
            raw: tuple[np.ndarray, np.ndarray | None], shown: tuple[np.ndarray, np.ndarray | None]) -> None:
        """One frame: ``(current, previous)`` of the planned input, the model's output and the blended output."""
        if weight is None or inputs[1] is None or raw[1] is None or shown[1] is None:
            return
        static = weight >= 0.5
        count = int(static.sum())
        if count == 0:
            return
        out_static = _fit(static.astype(np.float32), raw[0].shape) >= 0.5
        self.input_change += _mean_change(inputs, static) * count
        self.raw_change += _mean_change(raw, out_static) * count
        self.shown_change += _mean_change(shown, out_static) * count
        self.pixels += count

    def ratios(self) -> tuple[float, float] | None:
        """(before, after): output change / input change on static pixels; None without static pixels."""
        if self.pixels == 0:
            return None
        base = max(self.input_change, 1e-9)
        return self.raw_change / base, self.shown_change / base


def _mean_change(pair: tuple[np.ndarray, np.ndarray | None], mask: np.ndarray) -> float:
    current, previous = pair
    assert previous is not None
    diff = np.abs(current.astype(np.int16) - previous.astype(np.int16)).mean(axis=2)
    return float(diff[mask].mean()) if mask.any() else 0.0
