"""Image policy (docs/contracts.md, section 3): decode -> plan -> [inference] -> finish -> encode.

One module per step: ``decoder`` (guards, EXIF orientation, colour modes via ``modes``), ``planner`` (resize
policy and inference-memory guard; the arithmetic is in ``geometry``), ``encoder`` (alpha, upscale,
format, metadata). Pixels stay u8 throughout: the IR takes and gives u8, so no float math happens here
except for float (mode F) inputs.
"""
from __future__ import annotations

from .decoded import Decoded
from .decoder import decode
from .encoder import encode, finish, image_extension
from .geometry import estimate_inference_mb
from .planner import plan

__all__ = ["Decoded", "decode", "encode", "estimate_inference_mb", "finish", "image_extension", "plan"]
