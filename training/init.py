"""A "pass-through" initialisation: the untrained generator already returns a softened copy of its input.

Why: the toon target is close to the photo (mean |photo - target| is ~0.08 in [-1, 1] units), but from
PyTorch's default init the generator outputs blobs (L1 ~0.35) and spends most of a CPU-hour budget just
learning to carry the picture through its 1/4-resolution bottleneck. Here six channels of every layer are
wired by hand to carry (x, -x) for the three colours: centre taps for ordinary convs, a [1, 2, 1] blur for
the stride-2 ones, identity residual blocks (their last GroupNorm scaled near zero). Every other weight
keeps PyTorch's default init (Adam moves each weight by about the learning rate per step; weights much
smaller than that are rewritten within a few steps and, through GroupNorm, drown the hand-wired path), and
the pair's GroupNorm gains are then calibrated on real crops so the pair keeps its magnitude layer by layer.

Why pairs (x, -x): after LeakyReLU(0.2), lrelu(x) - lrelu(-x) = 1.2 x exactly, so the next conv recovers x
linearly whatever its sign, and a pair has zero mean across channels, so GroupNorm(1) does not shift it.
GroupNorm still divides by the whole tensor's spread: the output is x / rms(x) up to a constant, which the
output layer's scale is calibrated for on the training pool. The architecture has no bias before its first
norm, so it cannot see absolute contrast anyway (it is invariant to x -> k x, k > 0).
"""
from __future__ import annotations

import torch
from torch import nn

from edge_anime_converters.generator import ConvNormLReLU, Generator, InvertedResBlock

PAIR = 6  # channels 0..2 carry x (RGB), 3..5 carry -x
RESIDUAL_BRANCH_GAIN = 0.05  # last GroupNorm gamma in residual blocks: blocks start near identity
LRELU_PAIR_GAIN = 1.2  # lrelu(x) - lrelu(-x) for LeakyReLU(0.2)
TYPICAL_RMS = 0.55  # rms of a photo in [-1, 1]; GroupNorm gammas restore about this magnitude
BLUR_1D = (0.25, 0.5, 0.25)


def _pair_weights(conv: nn.Conv2d, *, source: str, gain: float, stride2: bool) -> None:
    """Wire output channels 0..5 to (x, -x) from the input's 'raw' x or its (p, n) = lrelu pair."""
    w = conv.weight.data
    k = w.shape[-1]
    taps = torch.zeros(k, k)
    if stride2:  # pad is (0, 1, 0, 1): output i sees inputs 2i..2i+2, so a centred blur is taps 0..2
        b = torch.tensor(BLUR_1D)
        taps[:3, :3] = torch.outer(b, b)
    else:
        taps[k // 2, k // 2] = 1.0
    w[:PAIR] = 0.0
    for c in range(3):
        if source == "raw":
            w[c, c] = taps
            w[3 + c, c] = -taps
        elif source == "linear":  # input already holds (x, -x)
            w[c, c] = taps
            w[3 + c, 3 + c] = taps
        else:  # "lrelu": x = (p - n) / gain
            w[c, c], w[c, 3 + c] = taps / gain, -taps / gain
            w[3 + c, c], w[3 + c, 3 + c] = -taps / gain, taps / gain


def _norm_gamma(norm: nn.GroupNorm, channels: int) -> None:
    """GroupNorm divides by the spread of all channels; the pair is 6 of them, so scale it back up."""
    norm.weight.data[:PAIR] = TYPICAL_RMS * (PAIR / channels) ** 0.5 * 1.0
    norm.bias.data.zero_()


def _wire_cnl(block: ConvNormLReLU, *, source: str, gain: float = LRELU_PAIR_GAIN) -> str:
    conv, norm = block[1], block[2]
    _pair_weights(conv, source=source, gain=gain, stride2=conv.stride[0] == 2)
    _norm_gamma(norm, conv.out_channels)
    return "lrelu"


def _wire_first_inverted(block: InvertedResBlock) -> None:
    """128 -> 256 block (no residual): expand wires the pair, depthwise keeps it, project makes it linear."""
    expand, depthwise, project, norm = block.layers
    _wire_cnl(expand, source="lrelu")
    dw = depthwise[1].weight.data
    dw[:PAIR] = 0.0
    dw[:PAIR, 0, 1, 1] = 1.0
    depthwise[1].bias.data[:PAIR] = 0.0  # the only conv with a bias: a per-channel offset would break the pair
    depthwise[2].weight.data[:PAIR] = TYPICAL_RMS * (PAIR / dw.shape[0]) ** 0.5
    depthwise[2].bias.data.zero_()
    # after two LeakyReLUs: lrelu(lrelu(x)) - lrelu(lrelu(-x)) = (1 + 0.2 * 0.2) x
    _pair_weights(project, source="lrelu", gain=1.04, stride2=False)
    _norm_gamma(norm, project.out_channels)


def passthrough_init(model: Generator, *, seed: int, photos: torch.Tensor | None = None) -> Generator:
    """Rewire ``model`` in place (see the module docstring) and return it; deterministic for a seed.

    ``photos`` ([B, 3, H, W] in [-1, 1]) calibrate the pair's GroupNorm gains; without them the gains
    assume the pair dominates each layer's spread, which holds only roughly.
    """
    torch.manual_seed(seed)
    with torch.no_grad():
        source = "raw"
        for block in model.block_a:
            source = _wire_cnl(block, source=source)
        for block in model.block_b:
            source = _wire_cnl(block, source=source)
        source = _wire_cnl(model.block_c[0], source=source)
        _wire_first_inverted(model.block_c[1])
        source = "linear"
        for block in model.block_c[2:5]:  # the pair rides the skip; the branch must not add to it
            block.layers[-1].weight.data.fill_(RESIDUAL_BRANCH_GAIN)
            block.layers[-1].weight.data[:PAIR] = 0.0
            block.layers[-1].bias.data[:PAIR] = 0.0
        source = _wire_cnl(model.block_c[5], source=source)
        for block in [*model.block_d, *model.block_e]:
            source = _wire_cnl(block, source=source)
        out = model.out_layer[0].weight.data
        out.zero_()
        for c in range(3):
            out[c, c], out[c, 3 + c] = 1.0 / LRELU_PAIR_GAIN, -1.0 / LRELU_PAIR_GAIN
    if photos is not None:
        calibrate_pair_gains(model, photos)
    return model


def calibrate_pair_gains(model: Generator, photos: torch.Tensor) -> None:
    """LSUV-style: in one forward pass, scale each GroupNorm's pair gains so the pair leaves it at TYPICAL_RMS.

    Each hook fixes its layer's gamma and rescales that layer's output in place, so later layers are
    calibrated on already-corrected activations.
    """
    def hook(norm: nn.GroupNorm, _inp: object, out: torch.Tensor) -> torch.Tensor:
        rms = float(out[:, :PAIR].pow(2).mean().sqrt())
        if rms > 1e-6:
            factor = TYPICAL_RMS / rms
            norm.weight.data[:PAIR] *= factor
            out[:, :PAIR] *= factor
        return out

    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm) and float(m.weight.detach()[:PAIR].abs().sum()) > 0]
    handles = [n.register_forward_hook(hook) for n in norms]
    try:
        with torch.no_grad():
            model(photos)
    finally:
        for h in handles:
            h.remove()
