"""Issue 42, items 1, 3, 9 and part of 13: pictures whose header understates what decoding them costs, and
colour profiles that are payloads.

The hostile files are built here: a HEIC ``grid`` written box by box around one tile that pillow-heif encodes
(every tile item pointing at the same coded bytes), cropped by a ``clap`` box so the opener reports 64 x 64; an
AVIF and a HEIC whose ``ispe`` is patched below their coded picture's size; sRGB's profile padded with a private
tag. Sizes are kept small against a small ``image.max_pixels`` so a regression costs a fast decode, not memory;
the one full-size bomb runs in a child process under an address-space limit."""
from __future__ import annotations

import gc
import io
import logging
import struct
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from deadlines import scaled
from PIL import Image
from test_formats import _encoded, _patched_ispe

from conftest import synthetic_photo
from edge_anime.config import ImageSection, OutputSection
from edge_anime.errors import InputError
from edge_anime.imaging import decode, encode, finish, heif, heif_boxes
from edge_anime.imaging.colour import KEEP_OWN_MAX_BYTES, MAX_ICC_BYTES, srgb_icc, to_srgb
from edge_anime.imaging.decoded import Decoded
from edge_anime.imaging.decoder import decode_cost_mpx, decode_header

SMALL = ImageSection(resize="keep", max_pixels=500_000)
# The child's RLIMIT_AS: its imports take about 0.5 GB of address space; the bomb's decode peaked at 1.7 GB RSS
BOMB_ADDRESS_SPACE = 3 << 29


@pytest.fixture(autouse=True, scope="module")
def _writers() -> None:
    if not heif.writable("HEIF"):
        pytest.skip("pillow-heif (the heic-out extra) writes the tiles these tests build on")
    if not heif.avif_available():
        pytest.skip("this Pillow has no AVIF (>= 11.3 has)")


def _box(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", 8 + len(payload)) + kind + payload


def _full_box(kind: bytes, payload: bytes, version: int = 0) -> bytes:
    return _box(kind, struct.pack(">I", version << 24) + payload)


def _child(data: bytes, start: int, end: int, kind: bytes) -> tuple[int, int]:
    pos = start
    while pos + 8 <= end:
        size = struct.unpack(">I", data[pos:pos + 4])[0] or end - pos
        if data[pos + 4:pos + 8] == kind:
            return pos + 8, pos + size
        pos += size
    raise AssertionError(f"no {kind!r} box")


def _tile(size: int) -> tuple[bytes, bytes]:
    """(hvcC box, coded bytes) of a flat ``size`` x ``size`` picture pillow-heif encodes as one item."""
    heic = _encoded(Image.new("RGB", (size, size), (90, 120, 200)), "heic", quality=30)
    meta = _child(heic, 0, len(heic), b"meta")
    ipco = _child(heic, *_child(heic, meta[0] + 4, meta[1], b"iprp"), b"ipco")
    start, end = _child(heic, *ipco, b"hvcC")
    return heic[start - 8:end], heic[slice(*_child(heic, 0, len(heic), b"mdat"))]


def grid_heic(tile: int, grid: int, crop: int) -> bytes:
    """A HEIC whose primary item is a ``grid`` x ``grid`` grid of ``tile``-sized tiles, every tile item's data the
    same coded bytes, cropped to ``crop`` x ``crop`` by a ``clap`` box (what the opener then reports)."""
    hvcc, coded = _tile(tile)
    side = -(-grid // tile)
    ids = list(range(2, 2 + side * side))
    infe = [_full_box(b"infe", struct.pack(">HH", 1, 0) + b"grid\0", version=2)]
    infe += [_full_box(b"infe", struct.pack(">HH", i, 0) + b"hvc1\0", version=2) for i in ids]
    properties = _box(b"ipco", hvcc + _full_box(b"ispe", struct.pack(">II", tile, tile))
                      + _full_box(b"ispe", struct.pack(">II", grid, grid))
                      + _box(b"clap", struct.pack(">IIIIiIiI", crop, 1, crop, 1, 0, 1, 0, 1)))
    associations = _full_box(b"ipma", struct.pack(">I", 1 + len(ids)) + struct.pack(">HBBB", 1, 2, 3, 0x84)
                             + b"".join(struct.pack(">HBBB", i, 2, 0x81, 2) for i in ids))
    grid_data = bytes([0, 0, side - 1, side - 1]) + struct.pack(">HH", grid, grid)

    def head(base: int) -> bytes:
        iloc = _full_box(b"iloc", bytes([0x44, 0x00]) + struct.pack(">H", 1 + len(ids))
                         + struct.pack(">HHHII", 1, 0, 1, base, len(grid_data))
                         + b"".join(struct.pack(">HHHII", i, 0, 1, base + len(grid_data), len(coded)) for i in ids))
        meta = _full_box(b"meta", _full_box(b"hdlr", bytes(4) + b"pict" + bytes(12) + b"\0")
                         + _full_box(b"pitm", struct.pack(">H", 1)) + iloc
                         + _full_box(b"iinf", struct.pack(">H", len(infe)) + b"".join(infe))
                         + _full_box(b"iref", _box(b"dimg", struct.pack(">HH", 1, len(ids))
                                                   + b"".join(struct.pack(">H", i) for i in ids)))
                         + _box(b"iprp", properties + associations))
        return _box(b"ftyp", b"heic" + bytes(4) + b"mif1heic") + meta

    first = head(0)
    return head(len(first) + 8) + _box(b"mdat", grid_data + coded)


def _refusal(path: Path, cfg: ImageSection) -> InputError:
    with pytest.raises(InputError) as info:
        decode(path, cfg)
    assert info.value.stage == "decode" and str(path) in str(info.value), info.value
    with pytest.raises(InputError) as header:
        decode_header(path, cfg, data=path.read_bytes())  # the HTTP service's check before a queue slot
    assert str(header.value) == str(info.value)
    assert decode_cost_mpx(path, cfg, data=path.read_bytes()) == 0.0
    return info.value


def test_item1_a_heic_grid_cropped_to_64x64_is_refused_from_its_grid_size(tmp_path: Path) -> None:
    """A 1024 x 1024 grid of one 512 x 512 tile referenced 4 times, cropped to 64 x 64: the opener says 64 x 64
    (4096 pixels, under max_pixels=500000), the grid is 1 MP: refused from the grid, naming it."""
    path = tmp_path / "grid.heic"
    path.write_bytes(grid_heic(512, 1024, 64))
    with Image.open(path) as opened:
        assert opened.size == (64, 64)  # what the pixel guard alone sees
    error = _refusal(path, SMALL)
    assert "grid 1024x1024 is 1048576 pixels, over image.max_pixels=500000" in str(error), error
    assert "refused before decoding" in str(error) and "64x64" in str(error)


def test_item1_a_grid_whose_tiles_outgrow_its_output_is_refused(tmp_path: Path) -> None:
    """The grid's own size fits (a 600 x 600 output of 4 tiles of 512: tiles 1 MP, whole tiles cover it with
    1 MP): fine. Over max_pixels only by its tiles when they are more than whole tiles need: the same 4
    tiles behind a 256 x 256 output."""
    cover = tmp_path / "cover.heic"
    cover.write_bytes(grid_heic(512, 600, 600))
    cost = heif_boxes.primary_cost(cover.read_bytes())
    assert cost is not None and cost.coded_pixels == 4 * 512 * 512
    assert (cost.over(350_000) or "").startswith("grid 600x600 is 360000 pixels")
    assert cost.over(360_000) is None  # 600 x 600 fits: the tiles' overhang is whole tiles' rounding
    overhang = grid_heic(512, 1024, 64).replace(struct.pack(">HH", 1024, 1024), struct.pack(">HH", 256, 256))
    overhang = overhang.replace(struct.pack(">II", 1024, 1024), struct.pack(">II", 256, 256))  # its ispe too
    cost = heif_boxes.primary_cost(overhang)
    assert cost is not None and cost.over(500_000) is not None
    assert "4 coded pictures of up to 512x512 are 1048576 pixels" in (cost.over(500_000) or "")


def test_item1_the_full_size_grid_bomb_is_refused_in_a_capped_process(tmp_path: Path) -> None:
    """The issue's bomb: a 32768 x 32768 grid of one 2048 x 2048 tile 256 times, cropped to 64 x 64, at the
    default max_pixels, decoded in a child limited to 1.5 GB of address space (a regression fails there, fast,
    instead of taking this box's memory): refused before decoding, in well under the 9 s the decode took."""
    path = tmp_path / "bomb.heic"
    path.write_bytes(grid_heic(2048, 32768, 64))
    assert path.stat().st_size < 16_000
    script = textwrap.dedent(f"""
        import resource, time
        resource.setrlimit(resource.RLIMIT_AS, ({BOMB_ADDRESS_SPACE}, {BOMB_ADDRESS_SPACE}))
        from pathlib import Path
        from edge_anime.config import ImageSection
        from edge_anime.errors import InputError
        from edge_anime.imaging import decode
        start = time.perf_counter()
        try:
            decode(Path({str(path)!r}), ImageSection())
        except InputError as exc:
            print("refused", round(time.perf_counter() - start, 3), exc)
        else:
            print("decoded")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(120),
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused "), done.stdout
    _, seconds, reason = done.stdout.split(" ", 2)
    assert "grid 32768x32768 is 1073741824 pixels, over image.max_pixels=60000000" in reason, reason
    assert float(seconds) < 2.0


def test_item1_libheif_itself_refuses_over_max_pixels(tmp_path: Path) -> None:
    """Behind the box check, libheif's own limit follows max_pixels (``heif.libheif_limit``: a quarter more, at
    least 16 MP): after a decode at max_pixels=500000 (in a fresh process: the limit only ever rises within
    one), the wheel's own ``open_heif`` on a 4608 x 4608 grid (21 MP) is refused by libheif itself, and a
    picture under the limit still decodes."""
    assert heif.libheif_limit(500_000) == heif.LIBHEIF_FLOOR_PIXELS == 16_777_216
    assert heif.libheif_limit(60_000_000) == 75_000_000
    grid = tmp_path / "grid.heic"
    grid.write_bytes(grid_heic(512, 4608, 64))
    small = tmp_path / "small.heic"
    small.write_bytes(_encoded(synthetic_photo(64, 48), "heic"))
    script = textwrap.dedent(f"""
        import importlib, sys
        from pathlib import Path
        from edge_anime.config import ImageSection
        from edge_anime.imaging import decode, heif
        print(decode(Path({str(small)!r}), ImageSection(resize="keep", max_pixels=500_000)).original_size)
        wheel = importlib.import_module(next(name for name in heif.HEIF_MODULES if name in sys.modules))
        try:
            print(len(wheel.open_heif(Path({str(grid)!r}).read_bytes()).data))
        except (RuntimeError, ValueError) as exc:
            print("refused:", " ".join(str(exc).split()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(120),
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.splitlines()
    assert first == "(64, 48)"
    assert second.startswith("refused:") and "4608x4608 exceeds the maximum image size 16777216" in second, second


def test_item3_an_avif_whose_frame_is_bigger_than_its_ispe_is_refused(tmp_path: Path) -> None:
    """The AVIF's ispe says 64 x 64, its AV1 sequence header (the frame libavif decodes) 1024 x 1024: refused
    from the sequence header before decoding (a regression decodes 1 MP and scales it to 64 x 64)."""
    path = tmp_path / "frame.avif"
    path.write_bytes(_patched_ispe(_encoded(Image.new("RGB", (1024, 1024), (40, 80, 160)), "avif", quality=30),
                                   64, 64))
    with Image.open(path) as opened:
        assert opened.size == (64, 64)
    error = _refusal(path, SMALL)
    assert "item 1 (av01)'s coded picture 1024x1024 is 1048576 pixels, over image.max_pixels=500000" in str(error)


def test_item3_the_same_lie_in_a_heic_is_refused_before_decoding(tmp_path: Path) -> None:
    """The HEVC twin: ispe 64 x 64, the SPS 1024 x 1024 (libheif finds out only after decoding all of it)."""
    path = tmp_path / "frame.heic"
    path.write_bytes(_patched_ispe(_encoded(Image.new("RGB", (1024, 1024), (40, 80, 160)), "heic", quality=30),
                                   64, 64))
    error = _refusal(path, SMALL)
    assert "item 1 (hvc1)'s coded picture 1024x1024" in str(error), error


@pytest.mark.parametrize("ext", ["heic", "avif"])
@pytest.mark.parametrize("size", [(97, 61), (640, 480), (1000, 498)])
def test_item3_honest_files_pass_at_their_own_size(tmp_path: Path, ext: str, size: tuple[int, int]) -> None:
    """The coded size read from the SPS / sequence header is the encoder's (block-padded) size, and a picture
    whose ispe fits max_pixels decodes at a limit just over its size."""
    data = _encoded(synthetic_photo(*size, seed=2), ext, quality=60)
    cost = heif_boxes.primary_cost(data)
    assert cost is not None
    coded = [s for s in cost.sizes if s.what.endswith("coded picture")]
    assert len(coded) == 1 and size[0] <= coded[0].width < size[0] + 64 and size[1] <= coded[0].height < size[1] + 64
    ispe = max(s.pixels for s in cost.sizes if s.what.endswith("ispe"))
    path = tmp_path / f"photo.{ext}"
    path.write_bytes(data)
    decoded = decode(path, ImageSection(resize="keep", max_pixels=ispe))
    assert decoded.original_size == size


def test_item13_libheif_messages_lose_their_trailing_newline(tmp_path: Path) -> None:
    """libheif ends its messages in a newline, which ended up inside our one-line reasons (failed.jsonl, logs)."""
    path = tmp_path / "cut.heic"
    data = _encoded(synthetic_photo(128, 96), "heic")
    path.write_bytes(data[:len(data) - 16])  # libheif: "... references data outside of file bounds (...)\n"
    with pytest.raises(InputError) as info:
        decode(path, ImageSection(resize="keep"))
    text = str(info.value)
    assert str(path) in text and "corrupt or truncated" in text
    assert "\n" not in text and text == text.strip(), repr(text)


def padded_srgb(pad: int, *, fill: int = 0) -> bytes:
    """sRGB's own profile with a private tag of ``pad`` bytes added: LittleCMS still reads it as sRGB."""
    icc = srgb_icc()
    count = struct.unpack(">I", icc[128:132])[0]
    table_end = 132 + 12 * count
    entries = [struct.unpack(">4sII", icc[132 + 12 * i:144 + 12 * i]) for i in range(count)]
    body = icc[table_end:] + bytes(-(len(icc) - table_end) % 4)
    private = b"zzzz" + bytes(4) + bytes([fill]) * pad
    table = struct.pack(">I", count + 1) + b"".join(struct.pack(">4sII", sig, at + 12, size)
                                                     for sig, at, size in entries)
    table += struct.pack(">4sII", b"zzzz", table_end + 12 + len(body), len(private))
    out = bytearray(icc[:128] + table + body + private)
    out[0:4] = struct.pack(">I", len(out))
    out[84:100] = bytes(16)  # no profile ID (an MD5 of the profile) claimed
    return bytes(out)


def _jpeg_profile_chunks(data: bytes) -> int:
    """APP2 ICC_PROFILE segments in a JPEG's header."""
    count, pos = 0, 2
    while pos + 4 <= len(data) and data[pos] == 0xFF and data[pos + 1] not in (0xDA, 0xD9):
        length = struct.unpack(">H", data[pos + 2:pos + 4])[0]
        count += data[pos + 1] == 0xE2 and data[pos + 4:pos + 16] == b"ICC_PROFILE\0"
        pos += 2 + length
    return count


def test_item9_a_padded_srgb_profile_is_not_copied_out(tmp_path: Path) -> None:
    """sRGB padded to 200 KB passes the "already sRGB" probe; the output carries sRGB's own 588 bytes."""
    icc = padded_srgb(200_000)
    assert KEEP_OWN_MAX_BYTES < len(icc) < MAX_ICC_BYTES
    path = tmp_path / "padded.tif"
    photo = synthetic_photo(64, 48, seed=4)
    photo.save(path, icc_profile=icc)
    decoded = decode(path, ImageSection(resize="keep"))
    assert decoded.icc == srgb_icc()
    assert np.array_equal(decoded.rgb, np.asarray(photo))  # still sRGB: the pixels are untouched
    assert decode_header(path, ImageSection(resize="keep"), data=path.read_bytes()).icc == srgb_icc()
    out = encode(finish(decoded.rgb, decoded, ImageSection(resize="keep")), decoded, OutputSection(), ext="jpg")
    with Image.open(io.BytesIO(out)) as written:
        assert written.info["icc_profile"] == srgb_icc()
    assert len(out) < 50_000


def test_item9_a_profile_over_the_bound_is_taken_as_srgb_and_logged(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A 5 MB profile (over MAX_ICC_BYTES) is not parsed, not kept: logged, the pixels taken as sRGB, and the
    JPEG written is a picture's size, not the profile's."""
    icc = padded_srgb(MAX_ICC_BYTES + 1_000_000)
    path = tmp_path / "huge.tif"
    synthetic_photo(64, 48, seed=4).save(path, icc_profile=icc)
    with caplog.at_level(logging.WARNING, logger="edge_anime.imaging"):
        decoded = decode(path, ImageSection(resize="keep"))
    assert decoded.icc is None
    said = [r.getMessage() for r in caplog.records if str(path) in r.getMessage()]
    assert said and f"a profile of {len(icc)} bytes, over the {MAX_ICC_BYTES}" in said[0], said
    out = encode(finish(decoded.rgb, decoded, ImageSection(resize="keep")), decoded, OutputSection(), ext="jpg")
    assert len(out) < 50_000 and _jpeg_profile_chunks(out) == 1


def test_item9_a_jpeg_never_gets_more_than_255_profile_chunks(caplog: pytest.LogCaptureFixture) -> None:
    """A profile handed to the encoder that no JPEG can carry whole (257 chunks: the counter would wrap) is
    replaced by sRGB's and said; one that fits is written whole."""
    rgb = synthetic_photo(32, 24, seed=1)
    for icc, kept in ((padded_srgb(255 * 65519 + 10_000), False), (padded_srgb(100_000), True)):
        decoded = Decoded(rgb=np.asarray(rgb), alpha=None, source_format="PNG", original_size=rgb.size, exif=None,
                          icc=icc, path=Path("given.png"))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="edge_anime.imaging.encoder"):
            out = encode(rgb, decoded, OutputSection(), ext="jpg")
        with Image.open(io.BytesIO(out)) as written:
            assert written.info["icc_profile"] == (icc if kept else srgb_icc())
        assert _jpeg_profile_chunks(out) == (2 if kept else 1)
        assert bool(caplog.records) is not kept
        if not kept:
            assert "given.png" in caplog.records[0].getMessage() and "JPEG" in caplog.records[0].getMessage()


def test_item9_the_profile_cache_keeps_digests_not_bytes() -> None:
    """Twenty distinct 1 MB sRGB profiles judged one after another: the cache must not keep their bytes (it
    kept 16 of them: 16 MB here, 492 MB RSS in the issue with 30 MB ones)."""
    picture = Image.new("RGB", (4, 4), (10, 200, 30))
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for fill in range(20):
            icc = padded_srgb(1 << 20, fill=fill + 1)
            assert to_srgb(picture, icc)[1] == srgb_icc()  # judged sRGB; its padding is not copied out
            del icc
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2_000_000, held

