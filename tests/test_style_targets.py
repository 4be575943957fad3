"""The bundled styles' training targets (training/target.py STYLES): what each style is taught to draw.

A target that washes a sky out, casts a grey or keeps the photo's texture would be learned faithfully by
the generator, so the properties issue 27 asks of the pictures are first asked of the targets.
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("skimage")

from training.target import STYLES, toonify


def _lightness(rgb: np.ndarray) -> np.ndarray:
    from skimage import color

    return color.rgb2lab(rgb)[..., 0]


def _chroma(rgb: np.ndarray) -> np.ndarray:
    from skimage import color

    lab = color.rgb2lab(rgb)
    return np.hypot(lab[..., 1], lab[..., 2])


def _sky(h: int = 96, w: int = 128) -> np.ndarray:
    """A clear sky gradient over a dark strip of land: the kind of photo the first toon washed out."""
    rows = np.linspace(0.0, 1.0, h)[:, None, None]
    sky = (1 - rows) * np.array([40, 110, 220]) + rows * np.array([170, 205, 245])
    img = np.broadcast_to(sky, (h, w, 3)).copy()
    img[int(h * 0.8):] = (50, 70, 40)
    noise = np.random.default_rng(1).normal(0, 3, img.shape)
    return np.clip(img + noise, 0, 255).astype(np.uint8)


def _textured_step(size_px: int = 96) -> np.ndarray:
    rng = np.random.default_rng(0)
    img = np.empty((size_px, size_px, 3), np.float32)
    img[:, : size_px // 2] = (40, 60, 140)
    img[:, size_px // 2 :] = (230, 170, 90)
    return np.clip(img + rng.normal(0, 8, img.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_style_keeps_a_sky_bright_blue_and_contrasted(style: str) -> None:
    photo = _sky()
    out = toonify(photo, params=STYLES[style])
    ratio = _lightness(out).std() / _lightness(photo).std()
    assert ratio >= 0.9, f"{style}: L* contrast {ratio:.2f} of the photo's"
    top = out[:20].reshape(-1, 3).mean(axis=0)
    assert top[2] > top[0] + 60, f"{style}: the sky is no longer blue: {top}"


@pytest.mark.parametrize("style", sorted(STYLES))
def test_style_keeps_greys_neutral(style: str) -> None:
    ramp = np.repeat(np.linspace(40, 240, 128)[None, :, None], 64, axis=0).repeat(3, axis=2)
    photo = np.clip(ramp + np.random.default_rng(2).normal(0, 2, ramp.shape), 0, 255).astype(np.uint8)
    out = toonify(photo, params=STYLES[style])
    assert _chroma(out).mean() <= 3.0, f"{style}: a grey ramp came out with chroma {_chroma(out).mean():.1f}"


@pytest.mark.parametrize("style", sorted(STYLES))
def test_style_inks_edges_and_flattens_texture(style: str) -> None:
    photo = _textured_step()
    out = toonify(photo, params=STYLES[style])
    assert np.array_equal(out, toonify(photo, params=STYLES[style])), "the target must be deterministic"
    lum = out.astype(np.float32).mean(axis=2)
    assert lum[8:-8, 42:54].min() < 0.5 * lum[8:-8, 60:88].mean(), f"{style}: no ink along the edge"
    flat = lum[8:-8, 64:88].std()
    assert flat < 0.4 * photo[8:-8, 64:88].astype(np.float32).mean(axis=2).std(), f"{style}: texture kept"


@pytest.mark.slow
def test_styles_are_distinct() -> None:
    """Two bundled styles must not be one look twice: their pictures of the same photo differ clearly."""
    from skimage import data

    from training.target import resize_long_side

    photo = resize_long_side(data.astronaut(), 256)
    a, b = (toonify(photo, params=STYLES[s]).astype(np.float32) for s in ("toon", "cel"))
    assert np.abs(a - b).mean() > 4.0


@pytest.mark.slow
def test_lines_scale_with_the_picture() -> None:
    """At twice the size the colour layer is the same and the ink twice as wide: the look holds at 1024 px."""
    from skimage import data

    from training.target import resize_long_side

    big = resize_long_side(data.chelsea(), 1024)
    small = resize_long_side(data.chelsea(), 512)
    dark_big = (toonify(big, params=STYLES["toon"]).mean(axis=2) < 40).mean()
    dark_small = (toonify(small, params=STYLES["toon"]).mean(axis=2) < 40).mean()
    assert dark_big == pytest.approx(dark_small, rel=0.5), "ink covers a similar share of the picture at both sizes"


def _foliage(size_px: int = 160) -> np.ndarray:
    """Green leaf texture (isotropic blobs of light and shade) crossed by one long dark trunk."""
    from scipy import ndimage

    rng = np.random.default_rng(3)
    noise = ndimage.gaussian_filter(rng.normal(0, 1, (size_px, size_px)), 1.5)
    shade = np.clip(0.5 + 0.35 * noise / noise.std(), 0, 1)[..., None]
    img = shade * np.array([70, 150, 40]) + (1 - shade) * np.array([20, 60, 15])
    img[:, size_px // 2 - 3 : size_px // 2 + 3] = (60, 40, 30)
    return np.clip(img, 0, 255).astype(np.uint8)


def test_toon2_keeps_ink_off_foliage_but_on_a_trunk() -> None:
    """Issue 41: leaves got scattered black confetti; the v2 target leaves texture un-inked, outlines kept."""
    photo = _foliage()
    v1 = toonify(photo, params=STYLES["toon"]).max(axis=2)  # ink is near black in every channel; dark leaves
    v2 = toonify(photo, params=STYLES["toon2"]).max(axis=2)  # keep their green
    leaves = np.s_[8:-8, 8:60]
    ink_v1, ink_v2 = (v1[leaves] < 30).mean(), (v2[leaves] < 30).mean()
    assert ink_v2 <= 0.5 * ink_v1 + 0.002, f"confetti on foliage: v2 {ink_v2:.3f} of pixels inked, v1 {ink_v1:.3f}"
    trunk_edge = v2[8:-8, 72:89]
    assert (trunk_edge.min(axis=1) < 30).mean() > 0.8, "the trunk's outline is drawn along its length"
