"""Training data: the procedural scenes (training/synth.py) and the allow-list of real photos (training/sources.py).

The fast tier never touches the network; the one test that downloads the Debian packages is marked slow and
skips where apt-get / dpkg-deb are missing.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scipy", reason="training/synth.py needs scipy (installed with edge-anime[train])")

from training import sources, synth  # after the skip: scipy is a training-only dependency


@pytest.mark.parametrize("kind", synth.KINDS)
def test_scene_is_deterministic_with_the_right_shape(kind: str) -> None:
    a = synth.scene(kind, np.random.default_rng(7), (96, 128))
    b = synth.scene(kind, np.random.default_rng(7), (96, 128))
    c = synth.scene(kind, np.random.default_rng(8), (96, 128))
    assert a.shape == (96, 128, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert float(a.std()) > 3.0  # not a flat picture


def test_sky_scene_is_mostly_blue_and_bright() -> None:
    rng = np.random.default_rng(0)
    for _ in range(3):
        img = synth.scene("sky", rng, (120, 160)).astype(np.float32)
        top = img[: img.shape[0] // 2]  # the horizon is at 55-80 % of the height: the top half is sky
        r, g, b = (top[..., i].mean() for i in range(3))
        assert b > r + 30 and b > g, (r, g, b)
        assert b > 150, (r, g, b)


def test_overcast_neutrals_stay_neutral() -> None:
    img = synth.scene("overcast", np.random.default_rng(3), (120, 160)).astype(np.int16)
    neutral = (img[..., 0] == img[..., 1]) & (img[..., 1] == img[..., 2])
    assert neutral.mean() > 0.85  # all but the small coloured accents (and their blurred edges)


def test_skin_tones_span_the_range() -> None:
    lum = [0.2126 * r + 0.7152 * g + 0.0722 * b for r, g, b in synth.SKIN_TONES]
    assert max(lum) > 200 and min(lum) < 70
    assert lum == sorted(lum, reverse=True)  # Fitzpatrick I (lightest) to VI (darkest)


def test_unknown_kind_and_tiny_size_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown scene kind"):
        synth.scene("volcano", np.random.default_rng(0), (128, 128))
    with pytest.raises(ValueError, match="too small"):
        synth.scene("sky", np.random.default_rng(0), (16, 128))


def test_allow_list_carries_only_allowed_licences() -> None:
    entries = list(sources._ENTRIES.values())
    assert len(entries) >= 20
    for e in entries:
        assert e.licence in sources.ALLOWED_LICENCES, e
        assert e.attribution and len(e.sha16) == 16 and e.deb in sources._DEBS
    for name, (_dist, _inner, _sha, licence, credit, _tags, _grey) in sources._WHEEL_PHOTOS.items():
        assert licence in sources.ALLOWED_LICENCES, name
        assert credit
    for licence in sources.ALLOWED_LICENCES:
        assert not any(word in licence.upper() for word in ("SA", "GPL", "NC", "ND")), licence


def test_holdout_names_are_on_the_allow_list() -> None:
    known = set(sources._ENTRIES) | set(sources._WHEEL_PHOTOS)
    assert 4 <= len(sources.HOLDOUT) <= 6
    assert set(sources.HOLDOUT) <= known


def test_wheel_photos_load_without_network() -> None:
    pytest.importorskip("skimage", reason="scikit-image ships the wheel photos")
    root = sources._wheel_root("skimage")
    img = sources.load_rgb(root / "data" / "astronaut.png", long_side=256)
    assert img.dtype == np.uint8 and img.shape == (256, 256, 3)
    grey = sources.load_rgb(root / "data" / "camera.png")
    assert grey.ndim == 3 and grey.shape[2] == 3


@pytest.mark.slow
def test_collect_fetches_the_allow_list(tmp_path: Path) -> None:
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: the Debian packages cannot be fetched here")
    pytest.importorskip("skimage", reason="scikit-image ships part of the pool")
    try:
        train = sources.collect(tmp_path)
    except RuntimeError as e:
        if "apt-get" in str(e) and ("update" in str(e) or "download" in str(e)):
            pytest.skip(f"the Debian archive is not reachable: {e}")
        raise
    held = sources.holdout(tmp_path)
    assert len(held) == len(sources.HOLDOUT)
    assert not {s.name for s in held} & {s.name for s in train}
    assert len(train) >= 25
    assert all(s.licence in sources.ALLOWED_LICENCES and s.path.is_file() for s in [*train, *held])
    img = sources.load_rgb(held[0], long_side=512)
    assert img.dtype == np.uint8 and max(img.shape[:2]) == 512
    # a second call uses the cache (no network): same list
    assert [s.name for s in sources.collect(tmp_path)] == [s.name for s in train]


def test_illustration_patches_are_opaque_crops_only() -> None:
    """A sprite's patch never reaches its transparent surround (painted magenta here, so a leak shows)."""
    from training import illustrations

    rgb = np.zeros((200, 120, 3), np.uint8)
    rgb[...] = (255, 0, 255)
    rgb[40:180, 20:100] = (30, 160, 90)
    opaque = np.zeros((200, 120), bool)
    opaque[40:180, 20:100] = True
    sprite = illustrations.Illustration("sprite", rgb, opaque, "test")
    batches = illustrations.patches([sprite], crop_px=32, batch=6, seed=1)
    for _ in range(5):
        batch = next(batches)
        assert batch.shape == (6, 32, 32, 3) and batch.dtype == np.uint8
        assert not (batch == (255, 0, 255)).all(axis=-1).any()
    again = illustrations.patches([sprite], crop_px=32, batch=6, seed=1)
    assert np.array_equal(next(again), next(illustrations.patches([sprite], crop_px=32, batch=6, seed=1)))


def test_illustrations_are_mit_with_their_sums() -> None:
    from training import illustrations

    assert illustrations.LICENCE == "MIT"
    assert len(illustrations._ENTRIES) >= 20
    for name, (deb, inner, sha16) in illustrations._ENTRIES.items():
        assert deb in illustrations._DEBS and len(sha16) == 16 and inner.startswith("usr/share/games/renpy/"), name


@pytest.mark.slow
def test_illustrations_fetch_and_load(tmp_path: Path) -> None:
    """The Ren'Py packages come from the Debian archive (skipped where it or apt-get is not reachable)."""
    from training import illustrations

    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is missing: the Debian packages cannot be fetched here")
    try:
        pictures = illustrations.collect(tmp_path, long_side=640)
    except RuntimeError as e:
        if "apt-get" in str(e) and ("update" in str(e) or "download" in str(e)):
            pytest.skip(f"the Debian archive is not reachable: {e}")
        raise
    assert len(pictures) == len(illustrations._ENTRIES)
    assert all(max(p.rgb.shape[:2]) <= 640 and p.opaque.shape == p.rgb.shape[:2] for p in pictures)
    backgrounds = [p for p in pictures if "/bg-" in p.name]
    assert len(backgrounds) == 4 and all(p.opaque.all() for p in backgrounds)
    assert all(0.05 < p.opaque.mean() < 1.0 for p in pictures if "sylvie" in p.name)
    batch = next(illustrations.patches(pictures, crop_px=64, batch=3, seed=0))
    assert batch.shape == (3, 64, 64, 3)
    cel = illustrations.collect(tmp_path, long_side=640, backgrounds=False)  # from the cache: no download
    assert {p.name for p in cel} == {p.name for p in pictures} - illustrations.BACKGROUNDS
    assert len(illustrations.BACKGROUNDS) == 4
