"""imaging.finish/encode/image_extension: alpha back, upscale, formats, quality, EXIF/GPS/ICC."""
from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from conftest import synthetic_photo
from edge_anime.config import ImageSection, OutputSection
from edge_anime.errors import InputError
from edge_anime.imaging import Decoded, decode, encode, finish, image_extension, plan

GPS_IFD = 0x8825
ORIENTATION = 0x0112


def _through(path: Path, image_cfg: ImageSection, out_cfg: OutputSection, *, ext: str) -> tuple[Decoded, Image.Image]:
    """decode -> plan -> (identity "inference") -> finish -> encode -> reopen."""
    planned = plan(decode(path, image_cfg), image_cfg, multiple=8)
    data = encode(finish(planned.rgb, planned, image_cfg), planned, out_cfg, ext=ext)
    return planned, Image.open(io.BytesIO(data))


def _photo_with_metadata(path: Path) -> bytes:
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    exif[0x010F] = "TestCam"
    gps = exif.get_ifd(GPS_IFD)
    gps[1], gps[2] = "N", (52.0, 31.0, 12.0)
    icc = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    synthetic_photo(64, 48).save(path, quality=95, exif=exif.tobytes(), icc_profile=icc)
    return icc


@pytest.mark.parametrize(("fmt", "src", "ext"), [
    ("jpeg", "a.png", "jpg"), ("png", "a.jpg", "png"), ("webp", "a.jpg", "webp"), ("same", "a.PNG", "png"),
    ("same", "a.jpeg", "jpg"), ("same", "a.webp", "webp"), ("same", "a.tif", "jpg"), ("same", "a.bmp", "jpg")])
def test_output_extension(fmt: str, src: str, ext: str) -> None:
    assert image_extension(OutputSection(format=fmt), Path(src)) == ext


@pytest.mark.parametrize("ext", ["jpg", "png", "webp"])
def test_formats_round_trip(make_photo: Callable[..., Path], ext: str) -> None:
    _, out = _through(make_photo("a.jpg", 96, 64), ImageSection(resize="keep"), OutputSection(), ext=ext)
    assert out.format == {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}[ext] and out.size == (96, 64)


def test_from_quality_90_a_jpeg_keeps_full_chroma_quantized_like_luma(make_photo: Callable[..., Path]) -> None:
    """A stylized picture's saturated paint against greys rings into the greys under libjpeg's coarser chroma
    table (imaging.encoder says what it cost); from quality 90 chroma is kept 4:4:4 and quantized with the
    luma table at that quality. Below 90 bytes matter more: 4:2:0 and the standard tables."""
    from PIL import JpegImagePlugin

    path = make_photo("a.png", 64, 48)
    cfg = ImageSection(resize="keep")
    planned = plan(decode(path, cfg), cfg, multiple=8)
    image = finish(planned.rgb, planned, cfg)
    for quality in (90, 92, 97):
        with Image.open(io.BytesIO(encode(image, planned, OutputSection(quality=quality), ext="jpg"))) as saved:
            tables = saved.quantization
            assert JpegImagePlugin.get_sampling(saved) == 0 and tables[1] == tables[0], quality
            reference = io.BytesIO()
            image.save(reference, "JPEG", quality=quality)
            with Image.open(reference) as plain:
                assert tables[0] == plain.quantization[0], "the luma table is libjpeg's at that quality"
    with Image.open(io.BytesIO(encode(image, planned, OutputSection(quality=80), ext="jpg"))) as saved:
        assert JpegImagePlugin.get_sampling(saved) == 2 and saved.quantization[1] != saved.quantization[0]


def test_quality_changes_size(make_photo: Callable[..., Path]) -> None:
    path = make_photo("a.jpg", 128, 96)
    cfg = ImageSection(resize="keep")
    planned = plan(decode(path, cfg), cfg, multiple=8)
    image = finish(planned.rgb, planned, cfg)
    for ext in ("jpg", "webp"):
        low = encode(image, planned, OutputSection(quality=20), ext=ext)
        high = encode(image, planned, OutputSection(quality=95), ext=ext)
        assert len(low) < len(high) / 2


def _transparent_png(path: Path) -> np.ndarray:
    rgba = synthetic_photo(64, 48).convert("RGBA")
    alpha = np.full((48, 64), 255, np.uint8)
    alpha[:, :32] = 0
    rgba.putalpha(Image.fromarray(alpha))
    rgba.save(path)
    return alpha


@pytest.mark.parametrize("ext", ["png", "webp"])
def test_alpha_kept_in_png_and_webp(tmp_path: Path, ext: str) -> None:
    alpha = _transparent_png(tmp_path / "t.png")
    _, out = _through(tmp_path / "t.png", ImageSection(resize="keep"), OutputSection(quality=100), ext=ext)
    assert out.mode == "RGBA"
    assert np.array_equal(np.asarray(out.getchannel("A")), alpha)


def test_alpha_flattened_on_white_in_jpeg(tmp_path: Path) -> None:
    _transparent_png(tmp_path / "t.png")
    _, out = _through(tmp_path / "t.png", ImageSection(resize="keep"), OutputSection(), ext="jpg")
    pixels = np.asarray(out)
    assert out.mode == "RGB" and (pixels[:, :28] >= 250).all()


def test_upscale_to_original(make_photo: Callable[..., Path]) -> None:
    cfg = ImageSection(resize="max_side", max_side=64, upscale_to_original=True)
    planned, out = _through(make_photo("a.jpg", 200, 150), cfg, OutputSection(), ext="png")
    assert planned.size == (64, 48) and out.size == (200, 150)


def test_upscale_center_square_returns_to_the_crop(make_photo: Callable[..., Path]) -> None:
    cfg = ImageSection(resize="center_square", center_square=32, upscale_to_original=True)
    _, out = _through(make_photo("a.jpg", 120, 90), cfg, OutputSection(), ext="png")
    assert out.size == (90, 90)


def test_upscale_keeps_alpha(tmp_path: Path) -> None:
    _transparent_png(tmp_path / "t.png")
    cfg = ImageSection(resize="max_side", max_side=32, upscale_to_original=True)
    _, out = _through(tmp_path / "t.png", cfg, OutputSection(), ext="png")
    assert out.size == (64, 48) and out.mode == "RGBA"
    alpha = np.asarray(out.getchannel("A"))
    assert (alpha[:, :24] <= 2).all() and (alpha[:, 40:] >= 253).all()  # bicubic overshoot near the edge


def test_exif_orientation_reset_gps_stripped_icc_kept(tmp_path: Path) -> None:
    icc = _photo_with_metadata(tmp_path / "meta.jpg")
    _, out = _through(tmp_path / "meta.jpg", ImageSection(resize="keep"), OutputSection(), ext="jpg")
    exif = out.getexif()
    assert out.size == (48, 64)  # rotated by orientation 6
    assert exif[ORIENTATION] == 1 and exif[0x010F] == "TestCam"
    assert GPS_IFD not in exif and not exif.get_ifd(GPS_IFD)
    assert out.info.get("icc_profile") == icc


def test_gps_kept_when_asked(tmp_path: Path) -> None:
    _photo_with_metadata(tmp_path / "meta.jpg")
    _, out = _through(tmp_path / "meta.jpg", ImageSection(resize="keep"), OutputSection(strip_gps=False), ext="jpg")
    assert out.getexif().get_ifd(GPS_IFD)[1] == "N"


@pytest.mark.parametrize("ext", ["jpg", "png", "webp"])
def test_metadata_stripped_when_asked(tmp_path: Path, ext: str) -> None:
    _photo_with_metadata(tmp_path / "meta.jpg")
    _, out = _through(tmp_path / "meta.jpg", ImageSection(resize="keep"),
                      OutputSection(keep_exif=False, keep_icc=False), ext=ext)
    assert not out.getexif() and "icc_profile" not in out.info


@pytest.mark.parametrize("ext", ["png", "webp"])
def test_metadata_kept_in_png_and_webp(tmp_path: Path, ext: str) -> None:
    icc = _photo_with_metadata(tmp_path / "meta.jpg")
    _, out = _through(tmp_path / "meta.jpg", ImageSection(resize="keep"), OutputSection(), ext=ext)
    assert out.getexif()[0x010F] == "TestCam" and out.info.get("icc_profile") == icc


def test_unencodable_size_is_an_input_error(tmp_path: Path) -> None:
    Image.new("RGB", (16400, 4), (10, 20, 30)).save(tmp_path / "strip.png")
    cfg = ImageSection(resize="keep", multiple=4)
    planned = plan(decode(tmp_path / "strip.png", cfg), cfg, multiple=4)
    with pytest.raises(InputError) as info:
        encode(finish(planned.rgb, planned, cfg), planned, OutputSection(), ext="webp")
    assert info.value.stage == "encode" and "strip.png" in str(info.value)
