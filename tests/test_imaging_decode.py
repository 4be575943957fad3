"""imaging.decode on real files: every colour mode, EXIF orientation, broken inputs, a real PNG bomb, a real
progressive-JPEG scan bomb, a device and a FIFO."""
from __future__ import annotations

import contextlib
import io
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from deadlines import scaled
from PIL import Image, ImageCms, ImageOps

from conftest import REPO_ROOT, decode_damaged, png_chunk, synthetic_photo
from edge_anime.config import ImageSection
from edge_anime.errors import InputError
from edge_anime.imaging import decode, plan

KEEP = ImageSection(resize="keep")
BOMB_SIDE_PX = 20000


def write_png(path: Path, width: int, height: int, *, bit_depth: int, colour_type: int,
              rows: Callable[[int], bytes]) -> Path:
    """A PNG written chunk by chunk, so sizes and depths Pillow cannot write (16-bit RGB, a 20000^2 bomb)
    cost no memory: rows are compressed one at a time, each with filter byte 0."""
    compressor = zlib.compressobj(9)
    idat = bytearray()
    for y in range(height):
        idat += compressor.compress(b"\x00" + rows(y))
    idat += compressor.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, colour_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", bytes(idat))
                     + png_chunk(b"IEND", b""))
    return path


@pytest.fixture(scope="module")
def png_bomb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20000 x 20000 1-bit all-zero PNG: ~50 kB on disk, 400 MB once Pillow decodes it (1 byte/pixel)."""
    zero_row = bytes((BOMB_SIDE_PX + 7) // 8)
    path = write_png(tmp_path_factory.mktemp("bomb") / "bomb.png", BOMB_SIDE_PX, BOMB_SIDE_PX,
                     bit_depth=1, colour_type=0, rows=lambda _y: zero_row)
    assert path.stat().st_size < 200_000
    return path


def test_rgb_jpeg_is_contiguous_u8(make_photo: Callable[..., Path]) -> None:
    d = decode(make_photo("a.jpg", 96, 64), KEEP)
    assert d.rgb.shape == (64, 96, 3) and d.rgb.dtype == np.uint8 and d.rgb.flags.c_contiguous
    assert d.alpha is None and d.source_format == "JPEG" and d.original_size == (96, 64)


@pytest.mark.parametrize(("mode", "ext"), [("L", "png"), ("L", "jpg"), ("1", "png"), ("P", "png"),
                                           ("RGB", "bmp"), ("RGB", "tif"), ("RGB", "webp"), ("P", "gif")])
def test_opaque_modes_become_rgb(make_photo: Callable[..., Path], mode: str, ext: str) -> None:
    path = make_photo(f"m.{ext}", 48, 32, mode=mode)
    reference = np.asarray(Image.open(path).convert("RGB"))
    d = decode(path, KEEP)
    assert d.rgb.shape == (32, 48, 3) and d.alpha is None
    assert np.array_equal(d.rgb, reference)


def test_one_bit_is_black_and_white(make_photo: Callable[..., Path]) -> None:
    d = decode(make_photo("bw.png", 40, 24, mode="1"), KEEP)
    assert set(np.unique(d.rgb)) <= {0, 255} and len(np.unique(d.rgb)) == 2


@pytest.mark.parametrize("mode", ["RGBA", "LA"])
def test_alpha_modes_keep_alpha(tmp_path: Path, mode: str) -> None:
    rgba = synthetic_photo(40, 30).convert("RGBA")
    alpha = np.zeros((30, 40), np.uint8)
    alpha[:, 20:] = 255
    alpha[:, 10:20] = 128
    rgba.putalpha(Image.fromarray(alpha))
    path = tmp_path / "t.png"
    (rgba if mode == "RGBA" else rgba.convert(mode)).save(path)
    d = decode(path, KEEP)
    assert d.alpha is not None and d.alpha.shape == (30, 40)
    assert np.array_equal(d.alpha, np.asarray(Image.open(path).convert("RGBA").getchannel("A")))


def test_palette_with_transparent_index_keeps_alpha(tmp_path: Path) -> None:
    pal = synthetic_photo(32, 32).convert("P")
    pixels = np.asarray(pal).copy()
    pixels[:8] = 0
    image = Image.fromarray(pixels, "P")
    image.putpalette(pal.getpalette())
    path = tmp_path / "t.gif"
    image.save(path, transparency=0)
    d = decode(path, KEEP)
    assert d.alpha is not None and (d.alpha[:8] == 0).all() and (d.alpha[8:][pixels[8:] != 0] == 255).all()


def test_fully_opaque_alpha_is_dropped(make_photo: Callable[..., Path]) -> None:
    assert decode(make_photo("o.png", mode="RGBA"), KEEP).alpha is None


def test_cmyk_jpeg_converts_to_rgb(tmp_path: Path) -> None:
    rgb = synthetic_photo(64, 48)
    path = tmp_path / "cmyk.jpg"
    rgb.convert("CMYK").save(path, quality=95)
    d = decode(path, KEEP)
    assert d.rgb.shape == (48, 64, 3) and d.icc is None
    assert np.abs(d.rgb.astype(int) - np.asarray(rgb, dtype=int)).mean() < 6


def test_sixteen_bit_gray_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    ramp = np.tile(np.linspace(0, 65535, 64).astype(np.uint16), (8, 1))
    path = tmp_path / "g16.png"
    Image.fromarray(ramp).save(path)
    assert Image.open(path).mode.startswith("I")
    d = decode(path, KEEP)
    assert np.array_equal(d.rgb[..., 0], np.round(ramp / 257).astype(np.uint8))  # rounded, not the high byte
    assert 125 <= d.rgb[0, 32, 0] <= 131 and (d.rgb[..., 0] < 255).sum() > 60  # a clip would give 255s


def test_sixteen_bit_rgb_png(tmp_path: Path) -> None:
    values = np.linspace(0, 65535, 32).astype(">u2")
    row = np.stack([values, values[::-1], np.full(32, 0x8000)], axis=1).astype(">u2").tobytes()  # PNG is big-endian
    path = write_png(tmp_path / "rgb16.png", 32, 4, bit_depth=16, colour_type=2, rows=lambda _y: row)
    d = decode(path, KEEP)
    assert d.rgb.shape == (4, 32, 3)
    # rounded from the whole value (Pillow alone keeps the high byte): 0x8000 is 127.5 levels, rounded up
    assert np.array_equal(d.rgb[0, :, 0], np.round(values.astype(np.float64) / 257).astype(np.uint8))
    assert (d.rgb[..., 2] == 128).all()


def test_int32_and_float_tiff(tmp_path: Path) -> None:
    ramp = np.tile(np.linspace(0, 65535, 64), (4, 1))
    Image.fromarray(ramp.astype(np.int32), "I").save(tmp_path / "i.tif")
    Image.fromarray((ramp / 65535).astype(np.float32), "F").save(tmp_path / "f.tif")
    as_int = decode(tmp_path / "i.tif", KEEP).rgb[..., 0]
    as_float = decode(tmp_path / "f.tif", KEEP).rgb[..., 0]
    assert as_int[0, 0] == 0 and as_int[0, -1] == 255 and 120 <= as_int[0, 32] <= 135
    assert as_float[0, 0] == 0 and as_float[0, -1] == 255 and 120 <= as_float[0, 32] <= 135


def _oriented_jpeg(path: Path, orientation: int) -> Path:
    image = synthetic_photo(60, 40)
    image.paste((255, 0, 0), (0, 0, 12, 8))  # a marker in the stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = orientation
    exif[0x010F] = "TestCam"
    image.save(path, quality=95, exif=exif.tobytes())
    return path


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_matches_exif_transpose(tmp_path: Path, orientation: int) -> None:
    path = _oriented_jpeg(tmp_path / f"o{orientation}.jpg", orientation)
    expected = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    d = decode(path, KEEP)
    assert np.array_equal(d.rgb, expected)
    assert d.original_size == (expected.shape[1], expected.shape[0])
    exif = Image.Exif()
    exif.load(d.exif)
    assert exif[0x0112] == 1 and exif[0x010F] == "TestCam"


@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_tiffs_orientation_tag_is_applied_too(tmp_path: Path, orientation: int) -> None:
    """Pillow turns a TIFF upright while loading it; the decoded size must follow the pixels (a portrait TIFF
    was planned, and resized, as landscape when its tag was missed before loading)."""
    jpeg = _oriented_jpeg(tmp_path / "o.jpg", orientation)
    expected = np.asarray(ImageOps.exif_transpose(Image.open(jpeg)).convert("RGB"))
    path = tmp_path / f"o{orientation}.tif"
    with Image.open(jpeg) as stored:  # a fresh open: exif_transpose edits the EXIF of the image it is given
        stored.save(path, compression=None, exif=stored.getexif())
    decoded = decode(path, KEEP)
    assert np.array_equal(decoded.rgb, expected)
    assert decoded.original_size == (expected.shape[1], expected.shape[0])


def test_orientation_can_be_left_to_the_viewer(tmp_path: Path) -> None:
    path = _oriented_jpeg(tmp_path / "o6.jpg", 6)
    d = decode(path, ImageSection(resize="keep", apply_exif_orientation=False))
    exif = Image.Exif()
    exif.load(d.exif)
    assert d.rgb.shape[:2] == (40, 60) and exif[0x0112] == 6


def test_rgb_icc_profile_is_kept_and_gray_dropped(tmp_path: Path) -> None:
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    synthetic_photo(32, 32).save(tmp_path / "icc.jpg", icc_profile=srgb)
    assert decode(tmp_path / "icc.jpg", KEEP).icc == srgb


def test_large_jpeg_uses_dct_scaling_but_plans_the_same(tmp_path: Path) -> None:
    path = tmp_path / "big.jpg"
    synthetic_photo(1600, 1200, seed=3).save(path, quality=95)
    cfg = ImageSection(resize="max_side", max_side=128)
    d = decode(path, cfg)
    assert d.original_size == (1600, 1200) and d.size == (400, 300)  # 1/4 scale: still >= 2x the target
    planned = plan(d, cfg, multiple=8)
    full = plan(decode(path, KEEP), cfg, multiple=8)
    assert planned.size == full.size == (128, 96)
    mse = np.mean((planned.rgb.astype(np.float64) - full.rgb) ** 2)
    assert 10 * np.log10(255**2 / max(mse, 1e-9)) > 35


def _assert_input_error(path: Path, *words: str, cfg: ImageSection = KEEP, stage: str = "decode") -> None:
    with pytest.raises(InputError) as info:
        decode(path, cfg)
    assert info.value.stage == stage and str(path) in str(info.value)
    for word in words:
        assert word in str(info.value)


def test_truncated_jpeg(tmp_path: Path) -> None:
    data = io.BytesIO()
    synthetic_photo(256, 192).save(data, "JPEG", quality=95)
    path = tmp_path / "cut.jpg"
    path.write_bytes(data.getvalue()[: len(data.getvalue()) // 2])
    _assert_input_error(path, "truncated")


def test_zero_byte_file(tmp_path: Path) -> None:
    (tmp_path / "empty.jpg").write_bytes(b"")
    _assert_input_error(tmp_path / "empty.jpg", "empty file")


def test_text_named_jpg(tmp_path: Path) -> None:
    (tmp_path / "notes.jpg").write_text("shopping list: eggs, milk\n" * 20)
    _assert_input_error(tmp_path / "notes.jpg", "not a JPEG")


def test_directory_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "folder.jpg").mkdir()
    _assert_input_error(tmp_path / "folder.jpg", "is a directory", stage="read")
    _assert_input_error(tmp_path / "gone.jpg", "no such file", stage="read")


def test_formats_outside_the_list_are_refused(tmp_path: Path) -> None:
    synthetic_photo(32, 32).save(tmp_path / "icon.ico")
    _assert_input_error(tmp_path / "icon.ico", "not a JPEG")


@pytest.mark.parametrize("side", [40, 64])  # 1600 px: Pillow's warning (> limit); 4096: its error (> 2x limit)
def test_pillow_bomb_checks_become_input_errors(make_photo: Callable[..., Path], side: int) -> None:
    path = make_photo("small.png", side, side)
    _assert_input_error(path, "refused before decoding", "max_pixels=1000",
                        cfg=ImageSection(resize="keep", max_pixels=1000))


def test_png_bomb_is_refused_fast(png_bomb: Path) -> None:
    start = time.perf_counter()
    _assert_input_error(png_bomb, "refused before decoding")
    assert time.perf_counter() - start < 1.0


def test_png_bomb_is_never_decoded(png_bomb: Path) -> None:
    """Peak memory of a fresh process stays flat: 20000^2 decoded would add 400 MB."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        import psutil
        from edge_anime.config import ImageSection
        from edge_anime.errors import InputError
        from edge_anime.imaging import decode
        def peak_kb():  # VmHWM: unlike ru_maxrss, not inherited from the parent (pytest) across exec
            return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
        before = psutil.Process().memory_info().rss // 1024
        try:
            decode(Path({str(png_bomb)!r}), ImageSection())
        except InputError as exc:
            print("refused:", exc)
        grown_kb = peak_kb() - before
        print("grown_kb", grown_kb)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT,
                         timeout=scaled(60), check=True).stdout
    assert "refused:" in out and "max_pixels" in out
    grown_kb = int(out.split("grown_kb")[1])
    assert grown_kb < 20_000, out


def test_dct_scaling_with_exif_rotation(tmp_path: Path) -> None:
    path = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    synthetic_photo(1600, 1200, seed=4).save(path, quality=90, exif=exif.tobytes())
    cfg = ImageSection(resize="max_side", max_side=128)
    d = decode(path, cfg)
    assert d.original_size == (1200, 1600) and d.size == (300, 400)
    assert plan(d, cfg, multiple=8).size == (96, 128)


@pytest.mark.filterwarnings("ignore::UserWarning")  # Pillow's TIFF reader warns about the damage it skips
def test_damaged_files_give_a_picture_or_an_input_error(tmp_path: Path) -> None:
    """Seeded byte flips and cuts in every accepted format: decode+plan either works or raises InputError,
    never another exception (which the watch folder would report as a bug)."""
    originals = {}
    for fmt, ext in [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp"), ("GIF", "gif"), ("TIFF", "tif"),
                     ("BMP", "bmp")]:
        buffer = io.BytesIO()
        synthetic_photo(80, 60).save(buffer, fmt)
        originals[ext] = buffer.getvalue()
    outcomes = decode_damaged(originals, tmp_path, seed=7, count=150, max_flips=8)
    assert outcomes["ok"] > 0 and outcomes["refused"] > 0


def test_decode_from_bytes_read_once(make_photo: Callable[..., Path], tmp_path: Path) -> None:
    """The pipeline hands decode the bytes it already read: the same pixels, no second open of the file,
    and errors still name the file."""
    path = make_photo("once.png", 48, 32)
    data = path.read_bytes()
    from_file = decode(path, KEEP)
    path.unlink()  # decode must not need the file again
    from_bytes = decode(path, KEEP, data=data)
    assert np.array_equal(from_bytes.rgb, from_file.rgb) and from_bytes.path == path
    with pytest.raises(InputError) as info:
        decode(tmp_path / "empty.jpg", KEEP, data=b"")
    assert str(tmp_path / "empty.jpg") in str(info.value) and "empty file" in str(info.value)
    with pytest.raises(InputError) as info:
        decode(tmp_path / "cut.png", KEEP, data=data[: len(data) // 2])
    assert str(tmp_path / "cut.png") in str(info.value)


# --- issue 28: scan bombs, one limit in the bomb message, regular files only ---------------------------------

def progressive_jpeg(side: int, scans: int, *, mode: str = "RGB") -> bytes:
    """A flat progressive JPEG of ``scans`` scans, written marker by marker: Pillow's own file (libjpeg's
    simple progression: 10 scans in colour, 6 in gray), its last scan (an AC refinement of luma over the
    whole picture) repeated before EOI. libjpeg decodes every copy over every block, as in a scan bomb."""
    buffer = io.BytesIO()
    Image.new(mode, (side, side), 128 if mode == "L" else (128, 128, 128)).save(buffer, "JPEG", progressive=True)
    data = buffer.getvalue()
    last_scan, eoi = data.rfind(b"\xff\xda"), len(data) - 2  # a flat picture's scan data holds no 0xFF 0xDA
    assert data[eoi:] == b"\xff\xd9"
    own = 10 if mode == "RGB" else 6
    return data[:eoi] + data[last_scan:eoi] * (scans - own) + data[eoi:]


def test_a_progressive_jpeg_scan_bomb_is_refused_from_its_markers(tmp_path: Path) -> None:
    """500 scans of 2048 x 2048 (33 KB, under image.max_pixels): ~3 s of decoding before, refused in ms now."""
    path = tmp_path / "scans.jpg"
    path.write_bytes(progressive_jpeg(2048, 500))
    assert path.stat().st_size < 100_000
    start = time.perf_counter()
    _assert_input_error(path, "progressive JPEG of more than 100 scans", "refused before decoding",
                        cfg=ImageSection())
    assert time.perf_counter() - start < 0.5


def test_scans_are_counted_as_encoders_write_them(tmp_path: Path) -> None:
    from edge_anime.imaging.decoder import MAX_JPEG_SCANS, jpeg_scans

    assert jpeg_scans(progressive_jpeg(64, 10)) == 10 and jpeg_scans(progressive_jpeg(64, 6, mode="L")) == 6
    photo = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 1
    synthetic_photo(96, 64).save(photo, "JPEG", exif=exif.tobytes())
    assert jpeg_scans(photo.getvalue()) == 1                                  # baseline: one scan
    thumb = photo.getvalue()                                                  # a JPEG inside APP1: skipped
    app1 = b"\xff\xe1" + struct.pack(">H", len(thumb) + 8) + b"Exif\x00\x00" + thumb
    with_thumb = progressive_jpeg(64, 10)
    assert jpeg_scans(with_thumb[:2] + app1 + with_thumb[2:]) == 10
    assert jpeg_scans(progressive_jpeg(64, 300)) == MAX_JPEG_SCANS + 1        # counting stops past the limit
    at_limit = tmp_path / "at_limit.jpg"                                      # the limit itself still decodes
    at_limit.write_bytes(progressive_jpeg(256, MAX_JPEG_SCANS))
    plain = tmp_path / "plain.jpg"
    plain.write_bytes(progressive_jpeg(256, 10))
    assert np.array_equal(decode(at_limit, KEEP).rgb, decode(plain, KEEP).rgb)


@pytest.mark.parametrize("side", [40, 64])  # Pillow's warning (its limit) and its error (twice its limit)
def test_the_bomb_message_names_image_max_pixels_alone(make_photo: Callable[..., Path], side: int) -> None:
    path = make_photo("small.png", side, side)
    with pytest.raises(InputError) as info:
        decode(path, ImageSection(resize="keep", max_pixels=1000))
    message = str(info.value)
    assert message == f"{path}: refused before decoding: {side * side} pixels, over image.max_pixels=1000"


def test_a_device_or_a_fifo_is_refused_without_reading_it(tmp_path: Path) -> None:
    """/dev/zero never ends and a FIFO's open waits for a writer: both refused at once, named for what they are."""
    _assert_input_error(Path("/dev/zero"), "is a character device, not a regular file", stage="read")
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            decode(fifo, KEEP)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - judged below
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5.0)
    if thread.is_alive():  # the bug: blocked in open() until a writer comes; let it go before failing
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5.0)
    assert outcome and isinstance(outcome[0], InputError), outcome
    assert f"{fifo}: is a FIFO (named pipe), not a regular file" in str(outcome[0])
