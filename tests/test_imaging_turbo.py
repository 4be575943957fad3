"""The TurboJPEG decode path (imaging/turbo.py) gives the very pictures the Pillow path gives, and leaves to
Pillow every file it cannot decode exactly.

"Without the wheel" is the real fallback an install without simplejpeg takes (``turbo.simplejpeg = None``),
so each comparison decodes the same file both ways, through the one public ``decode``.
"""
from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from conftest import synthetic_photo
from edge_anime.config import ImageSection, OutputSection
from edge_anime.errors import InputError
from edge_anime.imaging import Decoded, decode, encode, finish, plan, turbo

pytest.importorskip("simplejpeg", reason="the TurboJPEG path needs the simplejpeg wheel")

# Every resize mode, with targets that make the photos take each draft scale (1, 2, 4 and 8).
CONFIGS = {
    "keep": ImageSection(resize="keep"),
    "max_side 512": ImageSection(resize="max_side", max_side=512),
    "max_side 128": ImageSection(resize="max_side", max_side=128),
    "max_side 64": ImageSection(resize="max_side", max_side=64),
    "fixed 512x512": ImageSection(resize="fixed", fixed=(512, 512)),
    "center_square 96": ImageSection(resize="center_square", center_square=96),
}
# Decoding every shared photo at (near) full size takes seconds a mode; the small targets keep the fast tier's
# check of the draft scales (2, 4 and 8), the full-size ones run in the slow tier.
FULL_SIZE = {"keep", "max_side 512", "fixed 512x512"}


@dataclass
class Both:
    turbo: Decoded
    pillow: Decoded


@pytest.fixture
def without_turbo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Decode as an install without the simplejpeg wheel does."""
    monkeypatch.setattr(turbo, "simplejpeg", None)
    yield


def _both(path: Path, cfg: ImageSection, monkeypatch: pytest.MonkeyPatch) -> Both:
    fast = decode(path, cfg)
    with monkeypatch.context() as patch:
        patch.setattr(turbo, "simplejpeg", None)
        slow = decode(path, cfg)
    return Both(fast, slow)


def _assert_same(both: Both) -> None:
    a, b = both.turbo, both.pillow
    assert a.rgb.dtype == b.rgb.dtype == np.uint8 and a.rgb.flags.c_contiguous
    assert a.rgb.shape == b.rgb.shape
    assert np.array_equal(a.rgb, b.rgb)
    assert (a.alpha, a.source_format, a.original_size, a.exif, a.icc, a.restore_size) == \
           (b.alpha, b.source_format, b.original_size, b.exif, b.icc, b.restore_size)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in FULL_SIZE else n
                                  for n in sorted(CONFIGS)])
def test_shared_photos_decode_to_the_same_pixels(shared_photos: Path, monkeypatch: pytest.MonkeyPatch,
                                                 name: str) -> None:
    """Camera JPEGs (baseline and progressive, 4:2:0 and 4:4:4, with ICC and EXIF) at every draft scale:
    identical to Pillow's pixels, and so is what plan makes of them."""
    cfg = CONFIGS[name]
    scales = set()
    for path in sorted(shared_photos.glob("*.jpg")):
        both = _both(path, cfg, monkeypatch)
        _assert_same(both)
        scales.add(both.turbo.original_size[0] // both.turbo.size[0])
        planned = plan(both.turbo, cfg, multiple=8), plan(both.pillow, cfg, multiple=8)
        assert np.array_equal(planned[0].rgb, planned[1].rgb)
    if name == "max_side 64":
        assert scales >= {4, 8}  # the photos did take the scaled decodes, not only full ones


def test_the_turbo_path_is_the_one_taken_for_a_camera_jpeg(tmp_path: Path) -> None:
    """decode's RGB JPEG pixels are what libjpeg-turbo's TurboJPEG API decodes (not a silent fallback)."""
    path = tmp_path / "plain.jpg"
    synthetic_photo(400, 300, seed=2).save(path, quality=90)
    data = path.read_bytes()
    direct = turbo.decode_rgb(data, (400, 300), 2)
    assert direct is not None and direct.shape == (150, 200, 3)
    cfg = ImageSection(resize="max_side", max_side=96)  # request 192x144: Pillow's draft scale is 2
    assert np.array_equal(decode(path, cfg).rgb, direct)


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("name", ["keep", "max_side 64"])
def test_exif_orientation_and_metadata_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             orientation: int, name: str) -> None:
    """Every EXIF orientation, full size and drafted: same pixels, same oriented size, same EXIF (Orientation
    reset to 1, other tags kept, GPS still there until encode strips it) and the same ICC profile."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "TestCam"
    exif.get_ifd(0x8825)[1] = "N"
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    image = synthetic_photo(320, 200, seed=orientation)
    image.paste((255, 0, 0), (0, 0, 40, 20))  # a marker in the stored top-left corner
    path = tmp_path / f"o{orientation}.jpg"
    image.save(path, quality=92, exif=exif.tobytes(), icc_profile=icc)
    both = _both(path, CONFIGS[name], monkeypatch)
    _assert_same(both)
    kept = Image.Exif()
    kept.load(both.turbo.exif)
    assert kept[0x0112] == 1 and kept[0x010F] == "TestCam" and both.turbo.icc == icc
    cfg = CONFIGS[name]
    out = Image.open(io.BytesIO(encode(finish(plan(both.turbo, cfg, multiple=8).rgb, both.turbo, cfg),
                                       both.turbo, OutputSection(), ext="jpg")))
    assert 0x8825 not in out.getexif() and out.getexif()[0x0112] == 1  # strip_gps still holds


@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
@pytest.mark.parametrize("progressive", [False, True])
def test_subsampling_and_progressive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, subsampling: int,
                                     progressive: bool) -> None:
    path = tmp_path / "s.jpg"
    synthetic_photo(333, 257, seed=subsampling).save(path, quality=85, subsampling=subsampling,
                                                     progressive=progressive)
    for name in ("keep", "max_side 128", "max_side 64"):
        _assert_same(_both(path, CONFIGS[name], monkeypatch))


def test_mpo_first_frame(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A phone's MPO (a JPEG with more frames after it) decodes its first frame the same way."""
    path = tmp_path / "phone.jpg"
    first, second = synthetic_photo(300, 200, seed=5), synthetic_photo(300, 200, seed=6)
    first.save(path, "MPO", save_all=True, append_images=[second], quality=90)
    both = _both(path, CONFIGS["max_side 64"], monkeypatch)
    assert both.turbo.source_format == "MPO"
    _assert_same(both)


@pytest.mark.parametrize("mode", ["L", "CMYK"])
def test_other_jpeg_modes_stay_with_pillow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Grayscale and CMYK JPEGs are left to Pillow (its mode and ICC conversions; TurboJPEG would turn CMYK
    into RGB by the naive formula): the same result both ways."""
    path = tmp_path / f"{mode}.jpg"
    synthetic_photo(160, 120).convert(mode).save(path, quality=90)
    for name in ("keep", "max_side 64"):
        _assert_same(_both(path, CONFIGS[name], monkeypatch))


def test_adobe_rgb_coded_jpeg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JPEG stored as RGB (Adobe transform 0, no YCbCr) decodes to the same pixels."""
    path = tmp_path / "rgb.jpg"
    synthetic_photo(120, 90).save(path, quality=90, keep_rgb=True)
    _assert_same(_both(path, CONFIGS["keep"], monkeypatch))


@pytest.mark.parametrize("cut", [0.5, 0.9])
def test_truncated_jpeg_keeps_pillows_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: float) -> None:
    """libjpeg-turbo only warns about a cut file; the strict TurboJPEG call refuses it and Pillow decides,
    so the error is the one an install without the wheel gives."""
    data = io.BytesIO()
    synthetic_photo(256, 192).save(data, "JPEG", quality=95, progressive=cut > 0.7)
    path = tmp_path / "cut.jpg"
    path.write_bytes(data.getvalue()[: int(len(data.getvalue()) * cut)])
    assert turbo.decode_rgb(path.read_bytes(), (256, 192), 1) is None
    errors = []
    for disabled in (False, True):
        with monkeypatch.context() as patch:
            if disabled:
                patch.setattr(turbo, "simplejpeg", None)
            with pytest.raises(InputError) as info:
                decode(path, CONFIGS["keep"])
            errors.append(str(info.value))
    assert errors[0] == errors[1] and "truncated" in errors[0]


def test_without_the_wheel_everything_still_decodes(tmp_path: Path, without_turbo: None) -> None:
    path = tmp_path / "a.jpg"
    synthetic_photo(64, 48).save(path, quality=90)
    assert not turbo.available()
    assert decode(path, CONFIGS["keep"]).size == (64, 48)


@pytest.mark.parametrize(("stored", "request_", "scale"), [
    ((4000, 3000), None, 1), ((4000, 3000), (2000, 1500), 2), ((4000, 3000), (1100, 800), 2),
    ((4000, 3000), (1000, 750), 4), ((4000, 3000), (400, 300), 8), ((4000, 3000), (10, 10), 8),
    ((4000, 3000), (3000, 2999), 1), ((1000, 4000), (300, 1100), 2),
])
def test_draft_scale_is_pillows(tmp_path: Path, stored: tuple[int, int], request_: tuple[int, int] | None,
                                scale: int) -> None:
    """The scale rule against Pillow's own draft, on a real file's header."""
    path = tmp_path / "h.jpg"
    Image.new("RGB", stored).save(path)
    assert turbo.draft_scale(stored, request_) == scale
    with Image.open(path) as im:
        if request_ is not None:
            im.draft("RGB", request_)
        assert im.size == (-(-stored[0] // scale), -(-stored[1] // scale))
