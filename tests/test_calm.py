"""The palette's step 5 (edge_anime.imaging.calm): a sky or lake that the palette cut into bands comes back as one
gradient, a cloud's rim across it stays a crisp edge, and textured areas (foliage, stone) keep the palette's paint
to the pixel."""
from __future__ import annotations

import numpy as np

from edge_anime.imaging.palette import apply_palette


def banded_sky(height: int = 192, width: int = 256, *, seed: int = 0) -> np.ndarray:
    """A model-like sky: a vertical gradient with a level of noise, and a bright cloud (a disc 80 levels above
    the sky around it) in the middle of it."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, height)[:, None]
    sky = np.stack([np.broadcast_to(40 + 60 * y, (height, width)), np.broadcast_to(90 + 60 * y, (height, width)),
                    np.broadcast_to(200 - 20 * y, (height, width))], axis=-1)
    yy, xx = np.mgrid[:height, :width]
    cloud = (yy - height / 2) ** 2 + (xx - width / 2) ** 2 < (height / 5) ** 2
    sky = np.where(cloud[..., None], sky + 80, sky) + rng.normal(0.0, 1.0, (height, width, 3))
    return np.clip(np.rint(sky), 0, 255).astype(np.uint8)


def foliage(height: int = 192, width: int = 256, *, seed: int = 0) -> np.ndarray:
    """Leaves: 3 x 3 px patches of greens whose lightness jumps by up to 60 levels."""
    rng = np.random.default_rng(seed)
    patches = rng.uniform(-30.0, 30.0, (height // 3 + 1, width // 3 + 1, 1))
    leaves = np.repeat(np.repeat(patches, 3, axis=0), 3, axis=1)[:height, :width]
    return np.clip(np.rint(np.array([60.0, 120.0, 50.0]) + leaves), 0, 255).astype(np.uint8)


def longest_flat_run(line: np.ndarray) -> int:
    """The most pixels in a row of ``line`` (N x 3) with one colour: a band's width."""
    best = current = 1
    for same in np.all(line[1:] == line[:-1], axis=1):
        current = current + 1 if same else 1
        best = max(best, current)
    return best


def test_a_banded_sky_comes_back_as_one_gradient_and_its_cloud_keeps_its_rim() -> None:
    sky = banded_sky()
    banded = apply_palette(sky, 32, calm=False).astype(np.int16)
    out = apply_palette(sky, 32).astype(np.int16)
    column = 24  # far from the cloud
    # the palette alone paints this gradient in flat bands of 20-odd rows (their edges ramped: palette step 4)
    assert longest_flat_run(banded[:, column]) >= 16
    assert longest_flat_run(out[:, column]) <= 10, "one gradient"
    assert np.abs(np.diff(out[:, column], axis=0)).max() <= 2
    assert np.abs(out[:, column] - sky[:, column]).max() <= 12, "the gradient follows the sky's own colours"
    # across the cloud's rim (row through its centre): from sky to cloud within 4 pixels, as painted before
    row, rim = sky.shape[0] // 2, sky.shape[1] // 2 - sky.shape[0] // 5
    for picture in (banded, out):
        assert picture[row, rim + 2].mean() - picture[row, rim - 3].mean() >= 60, picture[row, rim - 4:rim + 4]


def test_foliage_keeps_the_palettes_paint_to_the_pixel() -> None:
    leaves = foliage()
    assert np.array_equal(apply_palette(leaves, 32), apply_palette(leaves, 32, calm=False))


def test_beside_a_sky_the_foliage_keeps_its_paint_and_the_sky_is_smoothed() -> None:
    picture = np.concatenate([foliage(192, 128), banded_sky(192, 128, seed=1)], axis=1)
    painted = apply_palette(picture, 48, calm=False)
    out = apply_palette(picture, 48)
    assert np.array_equal(out[:, :100], painted[:, :100]), "leaves 28 px from the sky are untouched"
    for column in (140, 200):  # the sky above its cloud
        assert longest_flat_run(painted[:40, column]) >= 14 and longest_flat_run(out[:40, column]) <= 10
        assert np.abs(np.diff(out[:40, column].astype(np.int16), axis=0)).max() <= 2
