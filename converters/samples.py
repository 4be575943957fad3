"""Sample images for verification, calibration and the INT8 study: a photo folder, or synthetic stand-ins.

Why synthetic images exist at all: a conversion must verify even on a box with no photos at hand. They are
seeded gradients, discs, stripes and noise, so every layer sees edges, flat areas and texture; a constant
image would hide a broken upsample or a swapped channel order.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")
SYNTHETIC_COUNT = 6
SYNTHETIC_SEED = 20261129
# Where the team keeps real photos, relative to the repository root (never copied into the repo).
SHARED_PHOTOS_RELATIVE = Path("..") / "shared" / "photos"


@dataclass(frozen=True)
class Sample:
    """One RGB u8 image [H, W, 3] and the name reports use for it."""

    name: str
    rgb: np.ndarray


def default_photo_dir() -> Path | None:
    """``../shared/photos`` next to the working directory or the repository, when it holds images."""
    repo_root = Path(__file__).resolve().parents[1]
    for base in (Path.cwd(), repo_root):
        candidate = (base / SHARED_PHOTOS_RELATIVE).resolve()
        if candidate.is_dir() and photo_paths(candidate):
            return candidate
    return None


def photo_paths(folder: Path) -> list[Path]:
    """Image files in ``folder`` (not recursive), sorted so every run sees the same order."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def fit(rgb: np.ndarray, size_hw: tuple[int, int]) -> np.ndarray:
    """Centre-crop to the target aspect and resize: no padding, so no flat borders inflate PSNR."""
    image = Image.fromarray(rgb)
    fitted = ImageOps.fit(image, (size_hw[1], size_hw[0]), method=Image.Resampling.LANCZOS)
    return np.ascontiguousarray(np.asarray(fitted.convert("RGB"), dtype=np.uint8))


def load_photos(folder: Path, *, size_hw: tuple[int, int], limit: int | None = None) -> list[Sample]:
    """Photos from ``folder`` fitted to ``size_hw``; EXIF orientation applied as a viewer would."""
    paths = photo_paths(folder)
    if not paths:
        raise FileNotFoundError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)}) found")
    samples = []
    for path in paths[:limit]:
        samples.append(Sample(path.name, fit(read_rgb(path, min_side=2 * max(size_hw)), size_hw)))
    return samples


def read_rgb(path: Path, *, min_side: int | None = None) -> np.ndarray:
    """Decode to RGB u8 with EXIF orientation applied; with ``min_side``, let JPEG decode at a reduced
    scale that still leaves both sides >= min_side (a 24 MP photo fitted to 256 px need not be decoded whole)."""
    with Image.open(path) as im:
        if min_side is not None:
            im.draft("RGB", (min_side, min_side))
        return np.asarray(ImageOps.exif_transpose(im).convert("RGB"), dtype=np.uint8)


def synthetic_images(
    *, size_hw: tuple[int, int], count: int = SYNTHETIC_COUNT, seed: int = SYNTHETIC_SEED
) -> list[Sample]:
    """Seeded images with gradients, discs, stripes and noise (see the module docstring for why)."""
    rng = np.random.default_rng(seed)
    h, w = size_hw
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    samples = []
    for index in range(count):
        base = np.stack(
            [(xx / w) * rng.uniform(80, 255), (yy / h) * rng.uniform(80, 255), np.full((h, w), rng.uniform(0, 255))],
            axis=-1,
        )
        for _ in range(4):
            cy, cx, radius = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(0.1, 0.4) * min(h, w)
            disc = (yy - cy) ** 2 + (xx - cx) ** 2 < radius**2
            base[disc] = rng.uniform(0, 255, size=3)
        stripes = 40.0 * np.sin(xx / rng.uniform(2.0, 12.0) + yy / rng.uniform(3.0, 20.0))
        noisy = base + stripes[..., None] + rng.normal(0.0, 8.0, size=base.shape)
        samples.append(Sample(f"synthetic_{index}", np.clip(noisy, 0, 255).astype(np.uint8)))
    return samples


def load_samples(folder: Path | None, *, size_hw: tuple[int, int], limit: int | None = None) -> list[Sample]:
    """Photos from ``folder`` when given, else the synthetic set: the one entry point callers need."""
    if folder is None:
        return synthetic_images(size_hw=size_hw)[:limit]
    return load_photos(folder, size_hw=size_hw, limit=limit)


def to_nchw_float(rgb: np.ndarray) -> np.ndarray:
    """u8 [H, W, 3] -> float32 [1, 3, H, W] in [-1, 1], the same arithmetic as the IR's preprocessing."""
    # numpy types arithmetic with a scalar as Any: the annotation says what it is
    nchw: np.ndarray = rgb.astype(np.float32).transpose(2, 0, 1)[None] / np.float32(127.5) - np.float32(1.0)
    return nchw


def to_u8_hwc(nchw: np.ndarray) -> np.ndarray:
    """float [1, 3, H, W] in [-1, 1] -> u8 [H, W, 3]: round((x + 1) * 127.5) clamped, as the IR's postprocessing."""
    scaled = np.round((nchw[0].transpose(1, 2, 0).astype(np.float32) + np.float32(1.0)) * np.float32(127.5))
    rgb: np.ndarray = np.clip(scaled, 0, 255).astype(np.uint8)  # Any to numpy's types, like to_nchw_float's
    return rgb


def psnr_db(a: np.ndarray, b: np.ndarray, *, cap_db: float = 100.0) -> float:
    """PSNR in u8 space; identical images report ``cap_db`` instead of infinity so YAML/JSON stay plain."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    if mse == 0.0:
        return cap_db
    return min(cap_db, 10.0 * float(np.log10(255.0**2 / mse)))
