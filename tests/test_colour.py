"""Colour management (issue 32): an embedded Display P3, Adobe RGB, ProPhoto or grey profile is converted to sRGB
before inference (LittleCMS, perceptual), a picture without one is sRGB, every output carries sRGB's profile.

The profiles are built here from their published primaries, white points and curves (a matrix-shaper ICC
profile is a few hundred bytes of arithmetic), and checked against published conversions first, so a wrong
builder cannot pass by agreeing with itself. The done-when check runs the real decoder and the seeded-random
IR: a photo in Display P3 and in Adobe RGB comes out within 2 mean dE00 of the sRGB original's picture, and
the same pixels without their profile (what the runtime did before) do not."""
from __future__ import annotations

import io
import logging
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageCms

from conftest import synthetic_photo
from edge_anime import Stylizer
from edge_anime.config import ImageSection, OutputSection
from edge_anime.imaging import decode, encode, finish
from edge_anime.imaging.colour import srgb_icc

KEEP = ImageSection(resize="keep")
D50 = (0.9642, 1.0, 0.8249)
BRADFORD = np.array([[0.8951, 0.2664, -0.1614], [-0.7502, 1.7135, 0.0367], [0.0389, -0.0685, 1.0296]])


def _srgb_curve(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


# (red, green, blue, white) chromaticities and the tone curve (a gamma, or "srgb")
SPACES: dict[str, tuple[tuple[tuple[float, float], ...], float | str]] = {
    "display-p3": (((0.680, 0.320), (0.265, 0.690), (0.150, 0.060), (0.3127, 0.3290)), "srgb"),
    "adobe-rgb": (((0.640, 0.330), (0.210, 0.710), (0.150, 0.060), (0.3127, 0.3290)), 563 / 256),
    "prophoto": (((0.7347, 0.2653), (0.1596, 0.8404), (0.0366, 0.0001), (0.3457, 0.3585)), 1.8),
}


def _xyz(xy: tuple[float, float]) -> np.ndarray:
    return np.array([xy[0] / xy[1], 1.0, (1 - xy[0] - xy[1]) / xy[1]])


def _colorants_d50(chroma: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Columns: the red, green and blue colorants' XYZ, Bradford-adapted to D50 (what an ICC profile holds)."""
    primaries = np.stack([_xyz(c) for c in chroma[:3]], axis=1)
    white = _xyz(chroma[3])
    scaled = primaries * np.linalg.solve(primaries, white)
    adapt = np.linalg.inv(BRADFORD) @ np.diag((BRADFORD @ np.array(D50)) / (BRADFORD @ white)) @ BRADFORD
    return adapt @ scaled


def _s15(value: float) -> bytes:
    return struct.pack(">i", int(round(value * 65536)))


def _xyz_tag(xyz: np.ndarray | tuple[float, ...]) -> bytes:
    return b"XYZ \0\0\0\0" + b"".join(_s15(v) for v in xyz)


def _curve_tag(curve: float | str) -> bytes:
    if isinstance(curve, str):  # the sRGB curve, sampled (a v2 profile has no parametric curves)
        table = np.round(_srgb_curve(np.linspace(0, 1, 1024)) * 65535).astype(">u2").tobytes()
        return b"curv\0\0\0\0" + struct.pack(">I", 1024) + table
    return b"curv\0\0\0\0" + struct.pack(">IH", 1, int(round(curve * 256))) + b"\0\0"


def _desc_tag(text: str) -> bytes:
    ascii_text = text.encode("ascii") + b"\0"
    return (b"desc\0\0\0\0" + struct.pack(">I", len(ascii_text)) + ascii_text + struct.pack(">II", 0, 0)
            + struct.pack(">HB", 0, 0) + bytes(67))


def _profile(colour_space: bytes, tags: dict[bytes, bytes]) -> bytes:
    """An ICC v2.1 display profile: header, tag table, tags (4-byte aligned)."""
    tags = {b"desc": _desc_tag("edge-anime test"), b"cprt": b"text\0\0\0\0CC0\0", **tags}
    offset = 128 + 4 + 12 * len(tags)
    table, body = b"", b""
    for signature, data in tags.items():
        table += signature + struct.pack(">II", offset + len(body), len(data))
        body += data + bytes(-len(data) % 4)
    size = offset + len(body)
    header = (struct.pack(">I", size) + b"lcms" + struct.pack(">I", 0x02100000) + b"mntr" + colour_space
              + b"XYZ " + bytes(12) + b"acsp" + bytes(4 + 4 + 4 + 4 + 8) + struct.pack(">I", 0)
              + b"".join(_s15(v) for v in D50) + b"lcms" + bytes(16 + 28))
    assert len(header) == 128
    return header + struct.pack(">I", len(tags)) + table + body


def rgb_profile(name: str) -> bytes:
    chroma, curve = SPACES[name]
    colorants = _colorants_d50(chroma)
    trc = _curve_tag(curve)
    return _profile(b"RGB ", {b"wtpt": _xyz_tag(D50), b"rXYZ": _xyz_tag(colorants[:, 0]),
                               b"gXYZ": _xyz_tag(colorants[:, 1]), b"bXYZ": _xyz_tag(colorants[:, 2]),
                               b"rTRC": trc, b"gTRC": trc, b"bTRC": trc})


def grey_profile(gamma: float) -> bytes:
    return _profile(b"GRAY", {b"wtpt": _xyz_tag(D50), b"kTRC": _curve_tag(gamma)})


def _cms(icc: bytes) -> ImageCms.ImageCmsProfile:
    return ImageCms.ImageCmsProfile(io.BytesIO(icc))


def from_srgb(image: Image.Image, icc: bytes) -> Image.Image:
    """An sRGB picture's colours in the space ``icc`` describes (relative colorimetric: sRGB fits in all three)."""
    converted = ImageCms.profileToProfile(image, _cms(srgb_icc()), _cms(icc),
                                          renderingIntent=ImageCms.Intent.RELATIVE_COLORIMETRIC, outputMode="RGB")
    assert converted is not None
    return converted


@pytest.mark.parametrize(("name", "expected"), [
    ("display-p3", (234, 51, 35)),  # CSS Color 4: sRGB red is color(display-p3 0.9175 0.2003 0.1386)
    ("adobe-rgb", (219, 0, 0)),     # sRGB red in Adobe RGB (1998)
])
def test_the_built_profiles_agree_with_published_conversions(name: str, expected: tuple[int, int, int]) -> None:
    red = from_srgb(Image.new("RGB", (1, 1), (255, 0, 0)), rgb_profile(name)).getpixel((0, 0))
    assert isinstance(red, tuple) and np.abs(np.subtract(red, expected)).max() <= 2, red


def _srgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    linear = _srgb_curve(rgb.astype(np.float64) / 255)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = linear @ m.T / np.array([0.9505, 1.0, 1.089])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def delta_e00(a: np.ndarray, b: np.ndarray) -> float:
    """Mean CIEDE2000 between two sRGB u8 pictures."""
    return float(delta_e00_lab(_srgb_to_lab(a).reshape(-1, 3), _srgb_to_lab(b).reshape(-1, 3)).mean())


def delta_e00_lab(lab1: np.ndarray, lab2: np.ndarray) -> np.ndarray:
    """CIEDE2000 of N x 3 Lab pairs (Sharma, Wu and Dalal's formulation)."""
    l1, a1, b1 = lab1.T
    l2, a2, b2 = lab2.T
    c_bar = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_bar**7 / (c_bar**7 + 25.0**7)))
    a1p, a2p = a1 * (1 + g), a2 * (1 + g)
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p, h2p = np.degrees(np.arctan2(b1, a1p)) % 360, np.degrees(np.arctan2(b2, a2p)) % 360
    dlp, dcp = l2 - l1, c2p - c1p
    dhp = h2p - h1p
    dhp = np.where(c1p * c2p == 0, 0, np.where(dhp > 180, dhp - 360, np.where(dhp < -180, dhp + 360, dhp)))
    d_hp = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dhp / 2))
    lbp, cbp = (l1 + l2) / 2, (c1p + c2p) / 2
    hsum = h1p + h2p
    wrapped = np.where(hsum < 360, (hsum + 360) / 2, (hsum - 360) / 2)
    hbp = np.where(c1p * c2p == 0, hsum, np.where(np.abs(h1p - h2p) <= 180, hsum / 2, wrapped))
    t = (1 - 0.17 * np.cos(np.radians(hbp - 30)) + 0.24 * np.cos(np.radians(2 * hbp))
         + 0.32 * np.cos(np.radians(3 * hbp + 6)) - 0.20 * np.cos(np.radians(4 * hbp - 63)))
    sl = 1 + 0.015 * (lbp - 50) ** 2 / np.sqrt(20 + (lbp - 50) ** 2)
    sc, sh = 1 + 0.045 * cbp, 1 + 0.015 * cbp * t
    rt = -2 * np.sqrt(cbp**7 / (cbp**7 + 25.0**7)) * np.sin(np.radians(60 * np.exp(-(((hbp - 275) / 25) ** 2))))
    result: np.ndarray = np.sqrt((dlp / sl) ** 2 + (dcp / sc) ** 2 + (d_hp / sh) ** 2
                                 + rt * (dcp / sc) * (d_hp / sh))
    return result


def test_delta_e00_matches_sharmas_published_pairs() -> None:
    """Pairs 1 and 17 of Sharma, Wu and Dalal's CIEDE2000 test data: 2.0425 and 27.1492."""
    lab1 = np.array([[50.0, 2.6772, -79.7751], [50.0, 2.5, 0.0]])
    lab2 = np.array([[50.0, 0.0, -82.7485], [73.0, 25.0, -18.0]])
    assert np.allclose(delta_e00_lab(lab1, lab2), [2.0425, 27.1492], atol=1e-4)
    grey = np.full((1, 1, 3), 128, np.uint8)
    assert 0.3 < delta_e00(grey, grey + 1) < 1.0  # one level of grey is under one just-noticeable difference


@pytest.fixture
def photo() -> Image.Image:
    """A saturated synthetic photo: wide-gamut numbers read as sRGB would move its colours visibly."""
    return synthetic_photo(128, 96, seed=11)


def _save(image: Image.Image, path: Path, icc: bytes | None) -> Path:
    """``image`` with ``icc`` embedded, or with no profile at all (ImageCms leaves its output profile in info)."""
    image = image.copy()
    image.info.pop("icc_profile", None)
    image.save(path, **({"icc_profile": icc} if icc else {}), **({"quality": 95} if path.suffix == ".jpg" else {}))
    return path


@pytest.mark.parametrize("name", ["display-p3", "adobe-rgb", "prophoto"])
def test_a_wide_gamut_picture_is_decoded_to_srgb(tmp_path: Path, photo: Image.Image, name: str) -> None:
    """The sRGB original within the 8-bit rounding of the round trip, tagged with sRGB's profile; the same
    numbers read raw are far off (dE00 2.5 for P3, 3.9 for Adobe RGB, 10 for ProPhoto on this picture)."""
    icc = rgb_profile(name)
    wide = from_srgb(photo, icc)
    decoded = decode(_save(wide, tmp_path / "wide.png", icc), KEEP)
    original = np.asarray(photo)
    assert decoded.icc == srgb_icc()
    managed, raw = delta_e00(decoded.rgb, original), delta_e00(np.asarray(wide), original)
    assert managed < 0.5 and raw > 2.0, (managed, raw)


def test_a_jpeg_decoded_by_turbojpeg_is_converted_too(tmp_path: Path, photo: Image.Image) -> None:
    """The TurboJPEG path (an RGB JPEG) gives what Pillow's pixels converted by LittleCMS give."""
    icc = rgb_profile("adobe-rgb")
    path = _save(from_srgb(photo, icc), tmp_path / "adobe.jpg", icc)
    with Image.open(path) as opened:
        expected = ImageCms.profileToProfile(opened, _cms(icc), _cms(srgb_icc()), outputMode="RGB")
        raw = np.asarray(opened.convert("RGB"))
    assert expected is not None
    decoded = decode(path, KEEP)
    assert np.abs(decoded.rgb.astype(int) - np.asarray(expected)).max() <= 1 and decoded.icc == srgb_icc()
    assert np.abs(decoded.rgb.astype(int) - raw).mean() > 3


def test_an_srgb_profile_leaves_the_pixels_and_the_profile_alone(tmp_path: Path, photo: Image.Image) -> None:
    decoded = decode(_save(photo, tmp_path / "srgb.png", srgb_icc()), KEEP)
    assert np.array_equal(decoded.rgb, np.asarray(photo)) and decoded.icc == srgb_icc()
    assert decode(_save(photo, tmp_path / "none.png", None), KEEP).icc is None


def test_a_grey_profile_is_applied(tmp_path: Path) -> None:
    """A grey picture with a linear (gamma 1.0) profile: its middle value 128 is half the light, sRGB ~188."""
    ramp = Image.fromarray(np.tile(np.arange(256, dtype=np.uint8), (4, 1)), "L")
    decoded = decode(_save(ramp, tmp_path / "grey.png", grey_profile(1.0)), KEEP)
    spread = decoded.rgb.astype(int).max(axis=-1) - decoded.rgb.astype(int).min(axis=-1)
    assert spread.max() <= 1 and abs(int(decoded.rgb[0, 128, 1]) - 188) <= 2  # grey (D50 -> D65: within a level)
    assert decoded.rgb[0, 0, 0] == 0 and decoded.rgb[0, 255, 0] == 255


def test_a_broken_profile_is_said_and_the_pixels_taken_as_srgb(tmp_path: Path, photo: Image.Image,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    broken = rgb_profile("display-p3")[:200]  # the header says RGB, the tags run off the end
    with caplog.at_level(logging.WARNING):
        decoded = decode(_save(photo, tmp_path / "broken.png", broken), KEEP)
    assert np.array_equal(decoded.rgb, np.asarray(photo)) and decoded.icc is None
    assert "broken.png: its colour profile cannot be used" in caplog.text


@pytest.mark.parametrize("ext", ["jpg", "png", "webp", "heic", "avif"])
def test_every_output_carries_srgbs_profile(tmp_path: Path, photo: Image.Image, ext: str) -> None:
    """A P3 input's output is tagged sRGB (its pixels are), so is an untagged input's; keep_icc: false tags none."""
    for source in (_save(from_srgb(photo, rgb_profile("display-p3")), tmp_path / "p3.png", rgb_profile("display-p3")),
                   _save(photo, tmp_path / "plain.png", None)):
        decoded = decode(source, KEEP)
        data = encode(finish(decoded.rgb, decoded, KEEP), decoded, OutputSection(), ext=ext)
        with Image.open(io.BytesIO(data)) as out:
            assert out.info.get("icc_profile") == srgb_icc()
    bare = encode(finish(decoded.rgb, decoded, KEEP), decoded, OutputSection(keep_icc=False), ext=ext)
    assert "icc_profile" not in Image.open(io.BytesIO(bare)).info


def test_p3_and_adobe_rgb_photos_stylize_like_the_srgb_original(tmp_path: Path, photo: Image.Image,
                                                                 write_config: Callable[..., Path]) -> None:
    """The done-when check: within 2 mean dE00 of the sRGB original's stylized picture, through the real
    decoder and the seeded-random IR; the same numbers without their profile (what the runtime fed the model
    before colour management) are more than 2 off, so the check fails without the conversion (measured:
    0.2 managed, 8.6 and 9.7 unmanaged)."""
    inputs = {"srgb": _save(photo, tmp_path / "srgb.png", None)}
    for name in ("display-p3", "adobe-rgb"):
        icc = rgb_profile(name)
        wide = from_srgb(photo, icc)
        inputs[name] = _save(wide, tmp_path / f"{name}.png", icc)
        inputs[f"{name}-unmanaged"] = _save(wide, tmp_path / f"{name}-unmanaged.png", None)
    with Stylizer(config=write_config({"image": {"resize": "keep"}})) as stylizer:
        out = {key: np.asarray(stylizer.stylize(path).convert("RGB")) for key, path in inputs.items()}
    figures = {key: round(delta_e00(pixels, out["srgb"]), 2) for key, pixels in out.items() if key != "srgb"}
    for name in ("display-p3", "adobe-rgb"):
        assert figures[name] < 2.0, figures
        assert figures[f"{name}-unmanaged"] > 2.0, figures


def test_a_heic_with_display_p3_in_its_colour_box_and_no_profile_is_converted(tmp_path: Path,
                                                                             photo: Image.Image) -> None:
    """Some phones tag a HEIC's colours with the container's nclx box (primaries 12: Display P3) and embed no ICC
    profile; read as sRGB its colours go dull (the same pixels with the box rewritten to BT.709 are the control)."""
    pillow_heif = pytest.importorskip("pillow_heif", reason="writing HEIC needs pillow-heif (the heic-out extra)")
    wide = from_srgb(photo, rgb_profile("display-p3"))
    wide.info.pop("icc_profile", None)

    def heic(primaries: int) -> Path:
        path = tmp_path / f"p{primaries}.heic"
        pillow_heif.from_pillow(wide).save(path, quality=-1, chroma=444, color_primaries=primaries,
                                           transfer_characteristics=13, matrix_coefficients=6, full_range_flag=1)
        return path

    tagged, control = decode(heic(12), KEEP), decode(heic(1), KEEP)
    original = np.asarray(photo)
    assert tagged.icc == srgb_icc() and control.icc is None
    managed, raw = delta_e00(tagged.rgb, original), delta_e00(control.rgb, original)
    print(f"nclx P3 HEIC: dE00 {managed:.2f} converted, {raw:.2f} read as sRGB")
    assert managed < 1.0 and raw > 2.0, (managed, raw)
