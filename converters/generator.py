"""The AnimeGANv2 generator, written so its state dict matches the published checkpoints key for key.

The published checkpoints (``face_paint_512_v1``, ``face_paint_512_v2``, ``celeba_distill``, ``paprika``)
are plain state dicts of bryandlee/animegan2-pytorch's ``Generator`` (MIT). Module names and nesting
below are therefore part of the file format: ``block_c.1.layers.0.1.weight`` only exists because the
inverted residual block keeps its layers in a ``Sequential`` called ``layers`` whose first entry is a
pad/conv/norm/act ``Sequential``. Do not rename or regroup anything here.

One property is not in the weights: how the decoder upsamples. The face models were trained (and are
run by torch.hub's ``face2paint``) with ``align_corners=True`` resizing to the encoder's saved sizes;
``paprika`` was converted from TensorFlow and runs with ``scale_factor=2, align_corners=False``. It is a
constructor argument so that the exported graph bakes in the right one.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# align_corners per published checkpoint: see the module docstring for where each default comes from.
KNOWN_UPSAMPLE_ALIGN: dict[str, bool] = {
    "face_paint_512_v1": True,
    "face_paint_512_v2": True,
    "celeba_distill": True,
    "paprika": False,
}


class ConvNormLReLU(nn.Sequential):
    """pad -> conv -> GroupNorm(1) -> LeakyReLU(0.2), indexed 0..3 as in the published state dict."""

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        kernel_size: int = 3,
        stride: int = 1,
        padding: int | tuple[int, int, int, int] = 1,
        groups: int = 1,
        bias: bool = False,
    ) -> None:
        super().__init__(
            nn.ReflectionPad2d(padding),
            nn.Conv2d(in_ch, out_ch, kernel_size=kernel_size, stride=stride, padding=0, groups=groups, bias=bias),
            nn.GroupNorm(num_groups=1, num_channels=out_ch, affine=True),
            nn.LeakyReLU(0.2, inplace=True),
        )


class InvertedResBlock(nn.Module):
    """MobileNetV2-style block: 1x1 expand, 3x3 depthwise, 1x1 project, residual when shapes allow."""

    def __init__(self, in_ch: int, out_ch: int, expansion_ratio: int = 2) -> None:
        super().__init__()
        self.use_res_connect = in_ch == out_ch
        bottleneck = int(round(in_ch * expansion_ratio))
        layers: list[nn.Module] = []
        if expansion_ratio != 1:
            layers.append(ConvNormLReLU(in_ch, bottleneck, kernel_size=1, padding=0))
        layers.append(ConvNormLReLU(bottleneck, bottleneck, groups=bottleneck, bias=True))
        layers.append(nn.Conv2d(bottleneck, out_ch, kernel_size=1, padding=0, bias=False))
        layers.append(nn.GroupNorm(num_groups=1, num_channels=out_ch, affine=True))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.layers(x)
        return x + out if self.use_res_connect else out


class Generator(nn.Module):
    """Input NCHW float in [-1, 1], output NCHW float in [-1, 1] (tanh).

    ``upsample_align=True``: resize to the encoder's saved sizes with ``align_corners=True`` (any even-ish
    input size round-trips exactly). ``False``: ``scale_factor=2, align_corners=False``, which needs H and W
    to be multiples of 4 for the output to match the input size.
    """

    def __init__(self, *, upsample_align: bool = True, width: float = 1.0) -> None:
        """``width`` scales every layer's channels (1.0: the published shape). A lighter student distilled
        from a style (training/distill.py, issue 43) is the same graph at ``width=0.5``: ~4x fewer MACs, and
        the same key names, so one loader and one converter serve both."""
        super().__init__()
        self.upsample_align = upsample_align
        self.width = width

        def c(channels: int) -> int:
            return max(8, round(channels * width))

        self.block_a = nn.Sequential(
            ConvNormLReLU(3, c(32), kernel_size=7, padding=3),
            ConvNormLReLU(c(32), c(64), stride=2, padding=(0, 1, 0, 1)),
            ConvNormLReLU(c(64), c(64)),
        )
        self.block_b = nn.Sequential(
            ConvNormLReLU(c(64), c(128), stride=2, padding=(0, 1, 0, 1)),
            ConvNormLReLU(c(128), c(128)),
        )
        self.block_c = nn.Sequential(
            ConvNormLReLU(c(128), c(128)),
            InvertedResBlock(c(128), c(256), 2),
            InvertedResBlock(c(256), c(256), 2),
            InvertedResBlock(c(256), c(256), 2),
            InvertedResBlock(c(256), c(256), 2),
            ConvNormLReLU(c(256), c(128)),
        )
        self.block_d = nn.Sequential(ConvNormLReLU(c(128), c(128)), ConvNormLReLU(c(128), c(128)))
        self.block_e = nn.Sequential(
            ConvNormLReLU(c(128), c(64)),
            ConvNormLReLU(c(64), c(64)),
            ConvNormLReLU(c(64), c(32), kernel_size=7, padding=3),
        )
        self.out_layer = nn.Sequential(nn.Conv2d(c(32), 3, kernel_size=1, stride=1, padding=0, bias=False),
                                       nn.Tanh())

    def _upsample(self, x: torch.Tensor, size: torch.Size) -> torch.Tensor:
        if self.upsample_align:
            return F.interpolate(x, size, mode="bilinear", align_corners=True)
        return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.block_a(x)
        half_size = out.shape[-2:]
        out = self.block_b(out)
        out = self.block_c(out)
        out = self._upsample(out, half_size)
        out = self.block_d(out)
        out = self._upsample(out, x.shape[-2:])
        out = self.block_e(out)
        image: torch.Tensor = self.out_layer(out)  # nn.Module.__call__ is typed Any; the tanh's output is a Tensor
        return image


def seeded_random_generator(seed: int, *, upsample_align: bool = True, width: float = 1.0) -> Generator:
    """A generator with reproducible random weights, for tests and benchmarks (no real weights here).

    PyTorch's default init gives a near-constant output after tanh; the GroupNorm affines are spread so
    the output has real spatial structure and PSNR comparisons mean something. ``width`` below 1.0 gives the
    same graph with fewer channels (``Generator``'s width): the same layers and ops at a fraction of the
    arithmetic, for tests whose claim is about the graph, not its size (0.25: ~16x fewer MACs).
    """
    gen = torch.Generator().manual_seed(seed)
    model = Generator(upsample_align=upsample_align, width=width)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name.endswith("weight") and tensor.dim() == 4:
                fan_in = tensor.shape[1] * tensor.shape[2] * tensor.shape[3]
                tensor.copy_(torch.randn(tensor.shape, generator=gen) * (2.0 / fan_in) ** 0.5)
            elif name.endswith("weight"):
                tensor.copy_(1.0 + 0.2 * torch.randn(tensor.shape, generator=gen))
            else:
                tensor.copy_(0.1 * torch.randn(tensor.shape, generator=gen))
    return model.eval()
