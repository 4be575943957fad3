"""The Python API, ``edge_anime.Stylizer``: the example in docs/api.md runs as written, every input kind goes
through the same image policy as the CLI (same pixels), concurrent calls from many threads, and errors of
the project's taxonomy. Real OpenVINO on the seeded-random IR; the docs example on the bundled style."""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from deadlines import scaled
from PIL import Image

from conftest import REPO_ROOT, synthetic_photo
from edge_anime import Stylizer
from edge_anime.cli import main
from edge_anime.errors import InputError, UserError


@pytest.fixture
def stylizer(write_config: Callable[..., Path]) -> Iterator[Stylizer]:
    with Stylizer(config=write_config({"output": {"format": "png"},
                                       "device": {"inference_precision": "f32"}})) as s:
        yield s


@pytest.mark.slow
def test_the_docs_example_runs_as_written(tmp_path: Path) -> None:
    """The bundled default config, so the checkout's own model cache: on a fresh checkout the first start
    measures toon's variants at 1024 px (minutes on two busy cores); slow for that first time."""
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=scaled(300), check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "('toon',)"
    assert Image.open(tmp_path / "out_toon.png").size == (96, 64)


def test_pil_bytes_and_path_give_the_pixels_the_cli_writes(stylizer: Stylizer, write_config: Callable[..., Path],
                                                           tmp_path: Path) -> None:
    photo = synthetic_photo(120, 80, seed=3)
    path = tmp_path / "p.png"
    photo.save(path)
    config = write_config({"output": {"format": "png"}, "device": {"inference_precision": "f32"}})
    assert main(["stylize", str(path), "-o", str(tmp_path / "out"), "--config", str(config), "-q"]) == 0
    (written,) = (tmp_path / "out").iterdir()
    expected = np.asarray(Image.open(written))
    for source in (photo, path.read_bytes(), path, str(path)):
        got = stylizer.stylize(source)
        assert got.mode == "RGB" and np.array_equal(np.asarray(got), expected), type(source).__name__


def test_the_image_policy_applies_exif_orientation_and_transparency(stylizer: Stylizer) -> None:
    photo = synthetic_photo(96, 64)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    rotated = Image.open(io.BytesIO(_jpeg(photo, exif=exif.tobytes())))
    assert stylizer.stylize(rotated).size == (64, 96)
    rgba = photo.convert("RGBA")
    rgba.putalpha(Image.new("L", photo.size, 128))
    out = stylizer.stylize(rgba)
    assert out.mode == "RGBA" and out.getchannel("A").getextrema() == (128, 128)
    assert stylizer.stylize(photo.convert("CMYK")).mode == "RGB"


def test_concurrent_calls_from_many_threads_each_get_their_own_picture(stylizer: Stylizer) -> None:
    photos = [synthetic_photo(96, 64, seed=i) for i in range(4)]
    expected = [np.asarray(stylizer.stylize(p)) for p in photos]
    results: dict[tuple[int, int], np.ndarray] = {}
    errors: list[BaseException] = []

    def worker(thread: int) -> None:
        try:
            for round_ in range(3):
                index = (thread + round_) % len(photos)
                results[(thread, round_)] = np.asarray(stylizer.stylize(photos[index], timeout=120))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == [] and len(results) == 12
    for (thread, round_), got in results.items():
        assert np.array_equal(got, expected[(thread + round_) % len(photos)])


def test_errors_are_the_projects_taxonomy(stylizer: Stylizer, write_config: Callable[..., Path]) -> None:
    with pytest.raises(InputError, match=r"<image>: .*(not|cannot)"):
        stylizer.stylize(b"this is not an image")
    with pytest.raises(UserError, match="style 'paprika' is not served here; expected one of randgen"):
        stylizer.stylize(synthetic_photo(32, 32), style="paprika")
    with pytest.raises(TypeError, match="PIL image, encoded image bytes or a file path"):
        stylizer.stylize(12345)  # type: ignore[arg-type]
    refused = pytest.raises(InputError, match=r"<image>: refused before decoding: .*image.max_pixels=1000")
    with Stylizer(config=write_config({"image": {"max_pixels": 1000}})) as small, refused:
        small.stylize(synthetic_photo(96, 64))
    stylizer.close()
    with pytest.raises(RuntimeError, match="after close"):
        stylizer.stylize(synthetic_photo(32, 32))


def _jpeg(image: Image.Image, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=95, **options)
    return buffer.getvalue()


@pytest.fixture
def two_styles(write_config: Callable[..., Path]) -> Callable[..., Path]:
    """The seeded-random IR as the default, the bundled toon as a second style."""

    def write(**device: object) -> Path:
        return write_config({"model": {"styles": ["toon"]}, "output": {"format": "png"},
                             "image": {"max_side": 256}, "device": {"inference_precision": "f32", **device}})

    return write


@pytest.mark.slow
def test_several_styles_compile_on_first_use_and_stay_under_the_memory_bound(two_styles: Callable[..., Path]) -> None:
    photo = synthetic_photo(256, 192)  # one live f32 shape of 256x192 is over 64 MB (Engine.shape_mb)
    with Stylizer(config=two_styles(shape_cache_mb=64)) as s:
        assert s.styles == ("randgen", "toon") and s.compiled_styles() == ("randgen",)
        default = np.asarray(s.stylize(photo))
        assert s.engine.released_shapes() == []
        toon = np.asarray(s.stylize(photo, style="toon"))
        assert not np.array_equal(default, toon)
        # 64 MB holds one live shape: the idle default gave its activations back and stays compiled
        assert s.compiled_styles() == ("randgen", "toon")
        assert s.engine.released_shapes() == [(192, 256)]
        assert np.array_equal(np.asarray(s.stylize(photo)), default)  # allocated again, the same picture
        assert s.engine.released_shapes() == []
    with Stylizer(config=two_styles()) as roomy:
        roomy.stylize(photo)
        roomy.stylize(photo, style="toon")
        assert roomy.compiled_styles() == ("randgen", "toon") and roomy.engine.released_shapes() == []


def test_a_missing_style_is_a_config_error_naming_its_key(write_config: Callable[..., Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config({"model": {"styles": ["toon", "nosuchstyle"]}})
    with pytest.raises(UserError, match=r"model.styles\[1\]: no installed model named 'nosuchstyle'"):
        Stylizer(config=config)
    assert main(["config", "check", str(config)]) == 78
    assert "model.styles[1]: no installed model named 'nosuchstyle'" in capsys.readouterr().err


@pytest.mark.slow
def test_stylize_style_picks_a_served_style(two_styles: Callable[..., Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config = two_styles()
    synthetic_photo(96, 64).save(tmp_path / "a.jpg")
    assert main(["stylize", str(tmp_path / "a.jpg"), "-o", str(tmp_path / "out"), "--config", str(config),
                 "--style", "toon", "-q"]) == 0
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["a_toon.png"]
    assert main(["stylize", str(tmp_path / "a.jpg"), "-o", str(tmp_path / "out"), "--config", str(config),
                 "--style", "paprika"]) == 78
    assert "--style paprika: not served by" in capsys.readouterr().err
    assert main(["config", "check", str(config)]) == 0
    assert "also serves toon" in capsys.readouterr().out


# --- issue 28: palette transparency through the API, devices and FIFOs -------------------------------------

def test_a_palette_picture_with_transparency_keeps_its_alpha_through_the_api(stylizer: Stylizer,
                                                                              tmp_path: Path) -> None:
    """TIFF, the API's hand-over, drops a palette's transparent entries: the PIL image came back RGB while the
    same file by path kept its alpha. Both give the same RGBA now, for tRNS and for an RGBA palette."""
    rgba = synthetic_photo(96, 64, seed=5).convert("RGBA")
    alpha = Image.new("L", rgba.size, 255)
    alpha.paste(0, (0, 0, 48, 64))
    rgba.putalpha(alpha)
    for name, picture in (("trns.png", rgba.convert("RGB").quantize(16)), ("rgba_palette.png", rgba.quantize(16))):
        if name == "trns.png":
            picture.info["transparency"] = picture.getpixel((0, 0))  # the left half's colour is transparent
        path = tmp_path / name
        picture.save(path)
        by_path = stylizer.stylize(path)
        opened = Image.open(path)
        assert opened.mode == "P"
        by_image = stylizer.stylize(opened)
        assert by_path.mode == by_image.mode == "RGBA", name
        assert np.array_equal(np.asarray(by_image), np.asarray(by_path)), name
        assert by_image.getchannel("A").getextrema() == (0, 255), name


def test_a_fifo_is_refused_at_once_instead_of_waiting_for_a_writer(stylizer: Stylizer, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    try:
        with pytest.raises(InputError, match=rf"{re.escape(str(fifo))}: is a FIFO \(named pipe\), not a regular file"):
            stylizer.stylize(fifo, timeout=10)
    finally:  # before the fix a decode thread waited in open() for a writer: let it go so close() can end
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_dev_zero_is_refused_instead_of_filling_the_memory(write_config: Callable[..., Path]) -> None:
    """In a child process with its data segment capped at 2 GiB: before the fix ``/dev/zero`` was read until
    the kernel killed the process (23.8 GB), here it would end in a MemoryError instead of a clear refusal."""
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))
        from edge_anime import Stylizer
        from edge_anime.errors import InputError
        with Stylizer({str(write_config())!r}) as s:
            try:
                s.stylize("/dev/zero", timeout=60)
            except InputError as exc:
                print("refused:", exc)
            except BaseException as exc:
                print("other:", type(exc).__name__, exc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(120),
                          check=False)
    assert "refused: /dev/zero: is a character device, not a regular file" in proc.stdout, proc.stdout + proc.stderr


def test_a_finished_job_lets_go_of_its_upload_without_the_cyclic_collector(stylizer: Stylizer) -> None:
    """Issue 28 (upload memory): the future's result held the job, whose tag was the future: a cycle that kept
    each upload's bytes (and its picture) until Python's cyclic GC happened to run. With the collector off,
    the bytes must come back to the caller's own references once the future and result are dropped."""
    import gc
    import time

    from edge_anime.core.pipeline import Job

    buffer = io.BytesIO()
    synthetic_photo(96, 64).save(buffer, "PNG")
    data = buffer.getvalue()
    baseline = sys.getrefcount(data)
    gc.disable()
    try:
        future = stylizer.submit(Job(src=Path("upload.png"), dst=None, data=data))
        result = future.result(timeout=120)
        assert result.ok and result.image is not None
        assert result.job.data is None and result.job.tag is None
        del future, result
        deadline = time.monotonic() + scaled(10)  # the pipeline's threads drop their last references as they finish
        while sys.getrefcount(data) > baseline and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sys.getrefcount(data) == baseline
    finally:
        gc.enable()


def test_a_job_takes_str_and_pathlike_paths_as_the_docs_show(stylizer: Stylizer, tmp_path: Path) -> None:
    """Issue 42 item 14: ``Stylizer.submit(Job(src="a.jpg", dst="b.jpg"))``, as docs/api.md shows it, failed
    with "'str' object has no attribute 'name'"."""
    from edge_anime.core.pipeline import Job

    synthetic_photo(96, 64).save(tmp_path / "a.jpg")

    class Where(os.PathLike[str]):  # any os.PathLike, not only pathlib's
        def __init__(self, path: Path) -> None:
            self.path = path

        def __fspath__(self) -> str:
            return str(self.path)

    for dst in (str(tmp_path / "b.jpg"), Where(tmp_path / "c.png")):
        result = stylizer.submit(Job(src=str(tmp_path / "a.jpg"), dst=dst)).result(timeout=120)  # type: ignore[arg-type]
        assert result.ok, result.error
        assert result.job.dst is not None and Image.open(result.job.dst).size == result.out_size
