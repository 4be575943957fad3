"""The size a picture comes out at, for every policy: the one answer ``decode`` (its JPEG draft scale), ``plan``
(its resize) and a clip's frames all take.

Apart from ``geometry`` because ``image.resize: full`` has its own memory model (``fullres``), which is
built on ``geometry``'s arithmetic: here both meet, so neither imports the other.
"""
from __future__ import annotations

from ..config import ImageSection
from .fullres import plan_full
from .geometry import fit_budget, padded_inference_mb, policy_size


def target_size(size: tuple[int, int], cfg: ImageSection, *, multiple: int) -> tuple[int, int] | None:
    """The size the picture is planned at: resize policy at the exact aspect ratio, then the memory guard
    (counting the run padded to ``multiple``, ``geometry.padded_size``) when it downscales.

    None when the image is over budget and nothing can or may be done (``over_budget: refuse``, or a
    budget too small for any size); the caller turns that into an ``InputError`` naming the file.
    """
    if cfg.resize == "full":  # its own memory model (imaging.fullres): tiles, not a downscale, when large
        full = plan_full(size, cfg)
        return None if full is None else full.size
    wanted = policy_size(size, cfg)
    if padded_inference_mb(wanted, multiple) <= cfg.memory_budget_mb:
        return wanted
    if cfg.over_budget == "refuse":
        return None
    return fit_budget(wanted, cfg.memory_budget_mb, multiple=multiple)
