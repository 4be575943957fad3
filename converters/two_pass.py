"""The generator cut open at its GroupNorms, for tiled full-resolution inference (issue #17).

Every ``GroupNorm(num_groups=1)`` normalises over the whole picture (C, H, W). A tile normalised with its
own mean and variance shifts tone and contrast from its neighbours, so tiles need the whole picture's
statistics. Two graphs of the same weights make that possible:

- **pass 1** (``stats_out``): the plain generator that also returns each GroupNorm's mean and variance as
  one tensor ``gn_stats`` [1, K, 2] (K GroupNorms, in forward order). It runs once, on a bounded
  downscaled copy of the photo.
- **pass 2** (``stats_in``): the generator whose GroupNorms take ``gn_stats`` as an input instead of
  measuring their own. It runs on every tile, each fed the same statistics, so every tile is normalised
  as the whole picture would be.

The surgery happens on a deep copy of the loaded torch module, after the published state dict was loaded
strictly into the plain ``Generator``: the checkpoint format and its key-for-key check stay untouched.
Each ``nn.GroupNorm`` is swapped for a ``SplitGroupNorm`` holding the very same weight and bias tensors;
a small ``_Hub`` object shared by them says which mode the forward runs in (set by the two wrappers
below right before they call the generator, so a trace sees plain tensor code).
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

STATS_NAME = "gn_stats"
ORIGIN_NAME = "tile_origin"  # [1, 4] float: the whole (padded) picture's H, W and the tile's top, left


@dataclass
class _Hub:
    """Shared by every SplitGroupNorm of one generator: the mode, and the statistics in or out."""

    given: torch.Tensor | None = None  # [N, K, 2] when the statistics come in (pass 2)
    origin: torch.Tensor | None = None  # [1, 4] with the statistics: where the tile sits (see resample)
    upsamples: int = 0  # decoder upsamplings done in this forward (0: H/4 -> H/2, 1: H/2 -> H)
    collected: list[torch.Tensor] = field(default_factory=list)  # [N, 2] per GroupNorm, pass 1


class SplitGroupNorm(nn.Module):
    """``GroupNorm(1, C)`` written out: (x - mean) / sqrt(var + eps) * weight + bias, where mean and var are
    this tensor's own (and collected) or come from the hub (pass 2). Biased variance, as torch computes it."""

    def __init__(self, norm: nn.GroupNorm, index: int, hub: _Hub) -> None:
        super().__init__()
        if norm.num_groups != 1 or not norm.affine:
            raise ValueError(f"SplitGroupNorm: expected GroupNorm(1, C, affine=True), got {norm}")
        self.weight = norm.weight
        self.bias = norm.bias
        self.eps = float(norm.eps)
        self.index = index
        self._hub = hub

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hub = self._hub
        if hub.given is not None:
            mean = hub.given[:, self.index, 0].reshape(-1, 1, 1, 1)
            var = hub.given[:, self.index, 1].reshape(-1, 1, 1, 1)
        else:
            mean, var = own_moments(x)
            hub.collected.append(_stacked(mean, var))
        scale = torch.rsqrt(var + self.eps)
        return (x - mean) * scale * self.weight.reshape(1, -1, 1, 1) + self.bias.reshape(1, -1, 1, 1)


def own_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and biased variance of each picture of ``x`` over (C, H, W), each [N, 1, 1, 1]."""
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return mean, ((x - mean) * (x - mean)).mean(dim=(1, 2, 3), keepdim=True)


def _stacked(mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    return torch.cat([mean.reshape(-1, 1), var.reshape(-1, 1)], dim=1)  # [N, 2], a row of gn_stats


def split_norms(generator: nn.Module) -> tuple[nn.Module, _Hub, int]:
    """A deep copy of ``generator`` with every GroupNorm replaced (forward order); returns (copy, hub, K)."""
    model = copy.deepcopy(generator).eval()
    hub = _Hub()
    norms = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.GroupNorm)]
    for count, (name, norm) in enumerate(norms):  # named_modules is pre-order: the generator's forward order
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attr, SplitGroupNorm(norm, count, hub))
    count = len(norms)
    if count == 0:
        raise ValueError("the generator has no GroupNorm to split")
    return model, hub, count


class StatsOut(nn.Module):
    """Pass 1: image in, (image, gn_stats [N, K, 2]) out."""

    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.gen, self._hub, self.count = split_norms(generator)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self._hub.given = None
        self._hub.collected = []
        out = self.gen(x)
        if len(self._hub.collected) != self.count:  # forward order must be the numbering order
            raise ValueError(f"StatsOut: {len(self._hub.collected)} GroupNorms ran, expected {self.count}")
        stats = torch.stack(self._hub.collected, dim=1)
        self._hub.collected = []
        return out, stats


class StatsIn(nn.Module):
    """Pass 2: (image, gn_stats [N, K, 2], tile_origin [1, 4]) in, image out; every GroupNorm uses the given
    statistics, and the decoder's two bilinear upsamplings sample where the whole picture's would.

    Why the origin: with ``align_corners=True`` (the face models, toon) the upsampling's scale is
    (n_in - 1) / (n_out - 1) of the *whole* picture, not exactly 1/2, so a tile resampled on its own grid is
    off by up to a quarter pixel at the far side of the picture (measured: tiled vs whole 35.6 dB with the
    true statistics on the toon style, from that alone). Given the picture's size and the tile's corner,
    each tile resamples at exactly the whole picture's source coordinates."""

    def __init__(self, generator: nn.Module) -> None:
        super().__init__()
        self.gen, self._hub, self.count = split_norms(generator)
        align = bool(getattr(generator, "upsample_align", True))
        hub = self._hub

        def upsample(x: torch.Tensor, size: torch.Size) -> torch.Tensor:
            level = hub.upsamples
            hub.upsamples += 1
            assert hub.origin is not None
            return resample(x, size, hub.origin, level=level, align=align)

        # An instance attribute over the method: Generator.forward calls self._upsample, and the instance's
        # __dict__ is where nn.Module.__setattr__ puts a plain function anyway (said outright for the type checker).
        self.gen.__dict__["_upsample"] = upsample

    def forward(self, x: torch.Tensor, stats: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
        self._hub.given, self._hub.origin, self._hub.upsamples = stats, origin, 0
        try:
            image: torch.Tensor = self.gen(x)  # nn.Module.__call__ is typed Any
            return image
        finally:
            self._hub.given = self._hub.origin = None


def resample(x: torch.Tensor, size: torch.Size, origin: torch.Tensor, *, level: int, align: bool) -> torch.Tensor:
    """Bilinear upsampling of a tile to ``size`` (x2) at the whole picture's source coordinates.

    ``level`` 0 maps the picture's H/4 grid to H/2, level 1 H/2 to H. With ``align`` the whole picture maps
    output index g to g * (n_in - 1) / (n_out - 1); a tile whose output starts at global index o_out (input
    at o_in) therefore reads local index j at j * s + (o_out * s - o_in). Without ``align`` (scale_factor=2,
    half-pixel centres) the map is j / 2 - 1 / 4 wherever the tile is."""
    step = 4.0 if level == 0 else 2.0  # full-resolution pixels per input pixel at this level
    out_rows = _coords(origin[0, 0], origin[0, 2], size[0], step, align)  # sizes stay traced (no int())
    out_cols = _coords(origin[0, 1], origin[0, 3], size[1], step, align)
    x = _lerp(x, out_rows, dim=2)
    return _lerp(x, out_cols, dim=3)


def _coords(full: torch.Tensor, start: torch.Tensor, count: int, step: float, align: bool) -> torch.Tensor:
    """``count`` is a size read from a tensor's shape: an int, which tracing records as the traced value."""
    index = torch.arange(count, dtype=torch.float32)
    if not align:
        return index * 0.5 - 0.25
    n_in, n_out = full / step, full / (step / 2)
    scale = (n_in - 1.0) / (n_out - 1.0)
    return index * scale + (start / (step / 2) * scale - start / step)


def _lerp(x: torch.Tensor, coords: torch.Tensor, *, dim: int) -> torch.Tensor:
    """Linear interpolation of ``x`` along ``dim`` at fractional ``coords`` (clamped to the tensor)."""
    last = x.shape[dim] - 1
    coords = torch.clamp(coords, min=0.0)
    coords = torch.minimum(coords, torch.full_like(coords, 1.0) * last)
    low = torch.floor(coords)
    frac = coords - low
    low_i = low.to(torch.int64)
    high_i = torch.minimum(low_i + 1, torch.full_like(low_i, 1) * last)
    a = torch.index_select(x, dim, low_i)
    b = torch.index_select(x, dim, high_i)
    shape = [1, 1, 1, 1]
    shape[dim] = -1
    return a + (b - a) * frac.reshape(shape)


def count_norms(generator: nn.Module) -> int:
    """How many GroupNorms ``generator`` has (the K of ``gn_stats``)."""
    return sum(isinstance(m, nn.GroupNorm) for m in generator.modules())


def run_with_stats(generator: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward of the plain ``generator`` (no gradients) that also returns the statistics pass 1 gives:
    each GroupNorm input's mean and biased variance, [N, K, 2], numbered as ``split_norms`` numbers them.

    Why hooks and not ``StatsOut``: verification needs the reference picture and its statistics of every
    image; one forward of the module itself gives both, where StatsOut deep-copied the generator and ran a
    second, slower forward (GroupNorm written out in Python) for the statistics alone."""
    norms = [module for module in generator.modules() if isinstance(module, nn.GroupNorm)]
    if not norms:
        raise ValueError("the generator has no GroupNorm to measure")
    seen: dict[int, torch.Tensor] = {}

    def recorder(index: int) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def record(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            seen[index] = _stacked(*own_moments(args[0]))
        return record

    handles = [norm.register_forward_pre_hook(recorder(index)) for index, norm in enumerate(norms)]
    try:
        with torch.no_grad():
            out: torch.Tensor = generator(x)
    finally:
        for handle in handles:
            handle.remove()
    if len(seen) != len(norms):
        raise ValueError(f"run_with_stats: {len(seen)} of {len(norms)} GroupNorms ran")
    return out, torch.stack([seen[index] for index in range(len(norms))], dim=1)


def torch_stats(generator: nn.Module, nchw: np.ndarray) -> np.ndarray:
    """The whole picture's statistics as the torch generator computes them: numpy [1, K, 2] float32."""
    _, stats = run_with_stats(generator, torch.from_numpy(nchw))
    return stats.numpy().astype(np.float32)
