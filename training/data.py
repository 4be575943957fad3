"""Training pairs (photo crop, toon target crop) from scikit-image's bundled, permissively licensed photos.

Only files shipped inside the scikit-image wheel are used (no pooch downloads), each with its licence as
stated in skimage.data's docstrings. Textures ship grey; they are tinted at random so the network also
sees flat-ish colour areas with fine texture, which is what the target smooths away.

Colour jitter does not commute with the target (the target of a jittered photo is not a jittered target),
so targets are rendered once per (photo, scale, jitter) into a pool; crops and flips, which do commute
(up to a one-pixel border), are then taken from the pool at no cost.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from training.target import DEFAULT_PARAMS, ToonParams, resize_long_side, toonify

# name -> licence, as stated in skimage.data (only wheel-bundled files).
COLOUR_PHOTOS: dict[str, str] = {
    "astronaut": "public domain (NASA)",
    "chelsea": "CC0 (Stefan van der Walt)",
    "coffee": "CC0 (Rachel Michetti)",
    "rocket": "public domain (SpaceX)",
}
GREY_PHOTOS: dict[str, str] = {
    "camera": "CC0 (Lav Varshney)",
    "grass": "CC0 (CC0Textures)",
    "brick": "CC0 (CC0Textures)",
    "gravel": "CC0 (CC0Textures)",
}
LONG_SIDES_PX = (400, 512, 640)  # around the 512 px the target is tuned and evaluated at
JITTERS_PER_IMAGE = 4  # the first one is the untouched photo


def load_photo(name: str) -> NDArray[np.uint8]:
    """RGB u8 from skimage.data; grey images are replicated to three channels."""
    from skimage import data

    img = np.asarray(getattr(data, name)())
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    return np.ascontiguousarray(img[..., :3]).astype(np.uint8)


def jitter(rgb: NDArray[np.uint8], rng: np.random.Generator, *, tint: bool) -> NDArray[np.uint8]:
    """Random hue rotation, saturation, brightness, contrast and gamma: more colours than 4 photos hold."""
    from skimage import color

    hsv = color.rgb2hsv(rgb)
    if tint:  # grey source: give it a random colour of moderate saturation
        hsv[..., 0] = rng.uniform(0.0, 1.0)
        hsv[..., 1] = rng.uniform(0.15, 0.6)
    else:
        hsv[..., 0] = (hsv[..., 0] + rng.uniform(-0.15, 0.15)) % 1.0
        hsv[..., 1] = np.clip(hsv[..., 1] * rng.uniform(0.6, 1.4), 0.0, 1.0)
    out = color.hsv2rgb(hsv)
    out = (out - 0.5) * rng.uniform(0.75, 1.25) + 0.5 + rng.uniform(-0.1, 0.1)
    out = np.clip(out, 0.0, 1.0) ** rng.uniform(0.75, 1.35)
    return np.clip(np.round(out * 255.0), 0, 255).astype(np.uint8)


def scene_jitter(rgb: NDArray[np.uint8], rng: np.random.Generator) -> NDArray[np.uint8]:
    """A strong global cast at low contrast: the look of sky, sea, haze, dusk and night photos.

    Why: the generator cannot see absolute contrast (no bias before its first whole-picture GroupNorm, so
    x -> k x gives the same output), only the balance of a picture's offset against its variation, and the
    four colour photos never show a picture that is mostly one strong colour. Trained without these, the
    model turned blue-sky and night-sea photos into flat grey (docs/toon.md).
    """
    out = rgb.astype(np.float32) / 255.0
    cast = np.array([rng.uniform(0.0, 1.0) for _ in range(3)], np.float32)
    cast = cast / max(float(cast.max()), 1e-3) * rng.uniform(0.25, 1.0)  # a colour of random hue and level
    mixed = (1.0 - (a := rng.uniform(0.25, 0.6))) * out + a * cast
    mean = mixed.mean(axis=(0, 1), keepdims=True)
    out = np.clip((mixed - mean) * rng.uniform(0.4, 0.8) + mean, 0.0, 1.0)
    from skimage import color

    hsv = color.rgb2hsv(out)
    hsv[..., 1] = np.clip(hsv[..., 1] * rng.uniform(0.8, 2.2), 0.0, 1.0)  # vivid skies and neon nights too
    return np.clip(np.round(color.hsv2rgb(hsv) * 255.0), 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class Pair:
    photo: NDArray[np.uint8]
    target: NDArray[np.uint8]


def build_pool(*, seed: int, long_sides_px: tuple[int, ...] = LONG_SIDES_PX,
               jitters: int = JITTERS_PER_IMAGE, names: list[str] | None = None,
               scene_jitters: int = 0, params: ToonParams = DEFAULT_PARAMS,
               extra: list[tuple[str, NDArray[np.uint8]]] | None = None) -> list[Pair]:
    """Render every (photo, scale, jitter) target once with the style ``params``; deterministic for a seed.

    ``scene_jitters`` more per (photo, scale) get ``scene_jitter`` (strong cast, low contrast). ``extra``:
    more (name, RGB u8) photos beside scikit-image's (training/sources.py, training/synth.py); a photo is
    never enlarged, so a scale above its long side is skipped.
    """
    rng = np.random.default_rng(seed)
    chosen = names if names is not None else [*COLOUR_PHOTOS, *GREY_PHOTOS]
    photos = [(name, load_photo(name), name in GREY_PHOTOS) for name in chosen]
    photos += [(name, rgb, False) for name, rgb in (extra or [])]
    pool: list[Pair] = []
    for _name, base, grey in photos:
        sides = [s for s in long_sides_px if s <= max(base.shape[:2])] or [max(base.shape[:2])]
        for long_side in sides:
            scaled = resize_long_side(base, long_side)
            for j in range(jitters):
                photo = scaled if (j == 0 and not grey) else jitter(scaled, rng, tint=grey)
                pool.append(Pair(photo=photo, target=toonify(photo, params=params)))
            for _ in range(scene_jitters):
                photo = scene_jitter(jitter(scaled, rng, tint=grey), rng)
                pool.append(Pair(photo=photo, target=toonify(photo, params=params)))
    return pool


def load_or_build_pool(cache: Path | None, *, seed: int, **kwargs: object) -> list[Pair]:
    """The pool takes minutes on 2 cores; a cache file (keyed by seed) makes restarts cheap."""
    if cache is not None and cache.exists():
        with np.load(cache) as z:
            return [Pair(photo=z[f"p{i}"], target=z[f"t{i}"]) for i in range(int(z["n"]))]
    pool = build_pool(seed=seed, **kwargs)  # type: ignore[arg-type]
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + ".tmp.npz")
        arrays = {f"p{i}": p.photo for i, p in enumerate(pool)} | {f"t{i}": p.target for i, p in enumerate(pool)}
        np.savez(tmp, n=np.int64(len(pool)), **arrays)  # type: ignore[arg-type]
        tmp.rename(cache)
    return pool


def batches(pool: list[Pair], *, crop_px: int, batch: int, seed: int) -> Iterator[tuple[NDArray[np.uint8], NDArray[np.uint8]]]:
    """Endless (photos, targets) u8 [B, crop, crop, 3] batches: random pool entry, crop and h-flip."""
    rng = np.random.default_rng(seed)
    usable = [p for p in pool if min(p.photo.shape[:2]) >= crop_px]
    if not usable:
        raise ValueError(f"no pool image is at least {crop_px} px on its short side")
    while True:
        xs, ys = [], []
        for _ in range(batch):
            pair = usable[int(rng.integers(len(usable)))]
            h, w = pair.photo.shape[:2]
            top, left = int(rng.integers(h - crop_px + 1)), int(rng.integers(w - crop_px + 1))
            x = pair.photo[top : top + crop_px, left : left + crop_px]
            y = pair.target[top : top + crop_px, left : left + crop_px]
            if rng.random() < 0.5:
                x, y = x[:, ::-1], y[:, ::-1]
            xs.append(x)
            ys.append(y)
        yield np.stack(xs), np.stack(ys)
