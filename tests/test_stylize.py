"""`edge-anime stylize` end to end with the real OpenVINO runtime on the seeded-random IR."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from deadlines import scaled
from PIL import Image

from conftest import REPO_ROOT, synthetic_photo
from edge_anime.cli import main
from edge_anime.errors import EXIT_CONFIG, EXIT_FAILURES

STYLE = "randgen"  # the random IR's manifest name
ORIENTATION_TAG = 0x0112  # EXIF Orientation
TURNED = {5, 6, 7, 8}     # orientations that swap width and height


def _good_and_bad(folder: Path, make_photo: Callable[..., Path]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    make_photo("a.jpg", 96, 64, folder=folder)
    make_photo("b.png", 64, 80, mode="L", folder=folder, seed=1)
    rgba = synthetic_photo(72, 48, seed=2).convert("RGBA")
    rgba.putalpha(Image.fromarray(np.tile(np.linspace(0, 255, 72).astype(np.uint8), (48, 1))))
    rgba.save(folder / "c.png")
    jpeg = io.BytesIO()
    synthetic_photo(128, 96).save(jpeg, "JPEG")
    (folder / "cut.jpg").write_bytes(jpeg.getvalue()[:600])
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "notes.jpg").write_text("not a picture\n", encoding="utf-8")
    (folder / "readme.txt").write_text("skipped: not an image extension\n", encoding="utf-8")
    (folder / ".hidden.jpg").write_bytes(jpeg.getvalue())


def test_folder_with_bad_files(tmp_path: Path, make_photo: Callable[..., Path], write_config: Callable[..., Path],
                               capsys: pytest.CaptureFixture[str]) -> None:
    _good_and_bad(tmp_path / "in", make_photo)
    config = write_config({"output": {"format": "same"}, "image": {"max_side": 64}})
    status = main(["stylize", str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--config", str(config)])
    captured = capsys.readouterr()
    assert status == EXIT_FAILURES
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"a_{STYLE}.jpg", f"b_{STYLE}.png", f"c_{STYLE}.png"]
    assert Image.open(tmp_path / "out" / f"a_{STYLE}.jpg").size == (64, 43)  # 96x64 at its own aspect ratio
    assert Image.open(tmp_path / "out" / f"c_{STYLE}.png").mode == "RGBA"
    failed = [line.strip() for line in captured.err.splitlines() if line.startswith("  ")]
    assert len(failed) == 3 and "3 failed:" in captured.err
    for name, reason in [("cut.jpg", "truncated"), ("empty.jpg", "empty file"), ("notes.jpg", "not a JPEG")]:
        assert any(str(tmp_path / "in" / name) in line and reason in line for line in failed), (name, failed)
    assert "stylized 3 of 6" in captured.out


def test_names_never_overwrite(tmp_path: Path, make_photo: Callable[..., Path],
                               write_config: Callable[..., Path]) -> None:
    make_photo("a.jpg", 64, 48)
    make_photo("a.png", 64, 48, seed=5)  # same stem, same output name with format jpeg
    out = tmp_path / "out"
    out.mkdir()
    (out / f"a_{STYLE}.jpg").write_bytes(b"precious")
    args = ["stylize", str(tmp_path / "a.jpg"), str(tmp_path / "a.png"), "-o", str(out), "--config",
            str(write_config())]
    assert main(args) == 0
    assert (out / f"a_{STYLE}.jpg").read_bytes() == b"precious"
    # a.jpg and a.png share a folder: each output's name carries its input's extension (naming.SourceNames)
    assert sorted(p.name for p in out.iterdir()) == [f"a_jpg_{STYLE}.jpg", f"a_png_{STYLE}.jpg", f"a_{STYLE}.jpg"]
    assert main(args) == 0  # the next run: both names taken on disk, suffixed as before
    assert sorted(p.name for p in out.iterdir()) == [f"a_jpg_{STYLE}-1.jpg", f"a_jpg_{STYLE}.jpg",
                                                     f"a_png_{STYLE}-1.jpg", f"a_png_{STYLE}.jpg", f"a_{STYLE}.jpg"]


def test_name_template_and_numbering(tmp_path: Path, make_photo: Callable[..., Path],
                                     write_config: Callable[..., Path]) -> None:
    make_photo("cat.jpg", 64, 48)
    config = write_config({"output": {"name_template": "{style}-{n}-{name}.{ext}", "format": "webp"}})
    for _ in range(2):
        assert main(["stylize", str(tmp_path / "cat.jpg"), "-o", str(tmp_path / "out"), "--config", str(config)]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"{STYLE}-0-cat.jpg.webp", f"{STYLE}-1-cat.jpg.webp"]


def test_globs_and_recursion(tmp_path: Path, make_photo: Callable[..., Path],
                             write_config: Callable[..., Path]) -> None:
    make_photo("top.jpg", 64, 48, folder=tmp_path / "in")
    make_photo("deep.jpg", 64, 48, folder=tmp_path / "in" / "sub")
    config = str(write_config())
    assert main(["stylize", str(tmp_path / "in"), "-o", str(tmp_path / "flat"), "--config", config]) == 0
    assert [p.name for p in (tmp_path / "flat").rglob("*.jpg")] == [f"top_{STYLE}.jpg"]
    assert main(["stylize", str(tmp_path / "in"), "-r", "-o", str(tmp_path / "tree"), "--config", config]) == 0
    assert (tmp_path / "tree" / "sub" / f"deep_{STYLE}.jpg").is_file()
    assert main(["stylize", str(tmp_path / "in" / "*.jpg"), str(tmp_path / "none*.png"), "-o",
                 str(tmp_path / "glob"), "--config", config]) == EXIT_FAILURES
    assert [p.name for p in (tmp_path / "glob").iterdir()] == [f"top_{STYLE}.jpg"]


def test_config_error_exits_78_before_any_work(tmp_path: Path, make_photo: Callable[..., Path],
                                               write_config: Callable[..., Path],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config({"image": {"resize": "stretch"}})
    args = ["stylize", str(make_photo("a.jpg")), "-o", str(tmp_path / "out"), "--config", str(config)]
    assert main(args) == EXIT_CONFIG
    assert "image.resize" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_every_shared_photo(tmp_path: Path, shared_photos: Path, write_config: Callable[..., Path],
                            capsys: pytest.CaptureFixture[str]) -> None:
    photos = sorted(shared_photos.glob("*.jpg"))
    # Sizes are the point here: the faces pass (more than half the CPU of 31 photos, eight of them portraits)
    # pastes onto the output without changing its size, and test_faces/test_portrait hold it to its sizes.
    config = write_config({"image": {"max_side": 256, "faces": "off"}})
    assert main(["stylize", str(shared_photos), "-o", str(tmp_path / "out"), "--config", str(config)]) == 0
    for photo in photos:
        out = Image.open(tmp_path / "out" / f"{photo.stem}_{STYLE}.jpg")
        with Image.open(photo) as source:
            width, height = source.size
            if source.getexif().get(ORIENTATION_TAG, 1) in TURNED:
                width, height = height, width
        scale = min(1.0, 256 / max(width, height))
        # the photo's own aspect ratio, to the pixel: the network's multiple is padding, cropped off again
        assert abs(out.size[0] - width * scale) <= 1 and abs(out.size[1] - height * scale) <= 1, (photo, out.size)
    assert f"stylized {len(photos)} of {len(photos)}" in capsys.readouterr().out


def test_python_m_and_no_torch(tmp_path: Path, make_photo: Callable[..., Path],
                               write_config: Callable[..., Path]) -> None:
    """`python -m edge_anime stylize` in a fresh process, then: neither torch nor nncf was ever imported."""
    photo, config, out = make_photo("a.jpg", 64, 48), write_config(), tmp_path / "out"
    script = textwrap.dedent(f"""
        import json, sys
        import edge_anime
        after_import = sorted(m for m in ("torch", "nncf") if m in sys.modules)
        from edge_anime.cli import main
        sys.argv = ["edge-anime", "stylize", {str(photo)!r}, "-o", {str(out)!r}, "--config", {str(config)!r}]
        status = main(sys.argv[1:])
        print(json.dumps({{"status": status, "after_import": after_import,
                          "after_stylize": sorted(m for m in ("torch", "nncf") if m in sys.modules)}}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=scaled(300))
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"status": 0, "after_import": [], "after_stylize": []}, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "stylize", str(photo), "-o", str(out), "--config",
                           str(config)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"a_{STYLE}-1.jpg", f"a_{STYLE}.jpg"]
