"""The seed's PyTorch pipeline (the published CPU write-up's): one place for vs_pytorch.py and the seed's web
service (seed_http_app.py), so the baseline both measure is the same code.

PIL convert, shrink to the 512 long side rounded to a multiple of 8 with BILINEAR, ``from_numpy().permute()
.float()``, [-1, 1], the TorchScript generator, back to u8.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

MAX_SIDE_PX = 512
MULTIPLE = 8


def paint(model: Any, image: Image.Image) -> Image.Image:
    image = image.convert("RGB")
    scale = MAX_SIDE_PX / max(image.size)
    factor = scale if scale < 1 else 1.0  # like max_side: shrink only, then round to the multiple
    size = tuple(max(MULTIPLE, round(s * factor / MULTIPLE) * MULTIPLE) for s in image.size)
    image = image.resize(size, Image.BILINEAR)
    tensor = torch.from_numpy(np.array(image)).permute(2, 0, 1).float()
    tensor = (tensor / 255.0 - 0.5) / 0.5
    with torch.no_grad():
        result = model(tensor.unsqueeze(0))[0]
    pixels = ((result.permute(1, 2, 0) + 1) * 127.5).clamp(0, 255).round().to(torch.uint8).numpy()
    return Image.fromarray(pixels)
