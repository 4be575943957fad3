"""The one value that travels from decode through plan to finish/encode (docs/contracts.md, section 3)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(eq=False)
class Decoded:
    """A decoded picture plus what the output needs from the input.

    ``rgb`` may be smaller than ``original_size`` straight after ``decode``: JPEGs much larger than the
    target are decoded at 1/2, 1/4 or 1/8 scale (DCT scaling). ``plan`` always computes the target from
    ``original_size``, so the result does not depend on that shortcut.

    After ``plan``, ``rgb`` is at the exact size the picture comes out at (its own aspect ratio) and
    ``infer_size`` the shape the network runs it at: that size padded up to the multiple the network needs.
    The pipeline pads to ``infer_size`` and crops the output back to ``size`` (``imaging.geometry``).
    """

    rgb: np.ndarray                  # H x W x 3 u8, C-contiguous, EXIF orientation applied
    alpha: np.ndarray | None         # H x W u8 at rgb's size, when the input had transparency
    source_format: str               # Pillow's format name: "JPEG", "PNG", ...
    original_size: tuple[int, int]   # (W, H) after orientation, before plan()
    exif: bytes | None               # raw EXIF to copy (orientation reset; GPS stripped at encode per config)
    icc: bytes | None                # the profile describing rgb: sRGB, the input's own or LittleCMS's (colour.py)
    path: Path | None = None         # the input file, for error messages
    restore_size: tuple[int, int] | None = None  # (W, H) that upscale_to_original returns to (set by plan)
    full: Any = None                 # imaging.fullres.FullPlan when resize: full (set by plan)
    guide: np.ndarray | None = None  # the full-size RGB photo, kept by plan for upscale_method: guided
    infer_size: tuple[int, int] | None = None  # (W, H) inference runs at: ``size`` padded to the multiple (plan)
    cost_mpx: float = 0.0            # decode_header: the decode's work estimate (decoder.decode_cost_mpx)

    @property
    def size(self) -> tuple[int, int]:
        """(W, H) of ``rgb`` now."""
        return int(self.rgb.shape[1]), int(self.rgb.shape[0])
