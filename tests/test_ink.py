"""imaging.ink: the photo's thin structure inked over the stylized picture, and not its texture.

Synthetic photos whose answer is known (a thin line on flat ground, a field of leaf-like blobs), then the real
runtime on the seeded-random style with the manifest's ``ink:`` on and off."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFilter

from edge_anime.errors import ModelError
from edge_anime.imaging import ink
from edge_anime.imaging.ink import draw_ink, ink_alpha
from edge_anime.locations import bundled_models_dir
from edge_anime.models import MANIFEST_NAME, InkSpec, load_model_info
from tests.conftest import style_with

GROUND, PAINT = 205, np.array([186, 150, 128], np.uint8)


def _wire(width: int = 320, height: int = 240) -> tuple[np.ndarray, tuple[float, float, float, float]]:
    """Flat light ground with one thin dark line across it (a power line against the sky), antialiased."""
    image = Image.new("L", (width * 4, height * 4), GROUND)
    line = (10.0, 40.0, width - 10.0, height - 60.0)
    ImageDraw.Draw(image).line([v * 4 for v in line], fill=60, width=7)  # ~1.75 px at the picture's size
    small = image.resize((width, height), Image.Resampling.BOX).convert("RGB")
    return np.asarray(small), line


def _leaves(width: int = 320, height: int = 240, seed: int = 3) -> np.ndarray:
    """Foliage: a dense field of small light and dark blobs, every edge short and every direction."""
    rng = np.random.default_rng(seed)
    noise = Image.fromarray(np.uint8(rng.integers(40, 216, (height // 3, width // 3))))
    blobs = noise.resize((width, height), Image.Resampling.BICUBIC).filter(ImageFilter.GaussianBlur(0.8))
    return np.asarray(blobs.convert("RGB"))


def _luma(rgb: np.ndarray) -> np.ndarray:
    return np.asarray(rgb, np.float32) @ np.array([0.299, 0.587, 0.114], np.float32)


def test_a_thin_line_is_inked_along_its_whole_length_and_nothing_else() -> None:
    photo, (x0, y0, x1, y1) = _wire()
    stylized = np.broadcast_to(PAINT, photo.shape).copy()  # the network smoothed the wire away
    out = draw_ink(stylized, photo, strength=1.0)
    t = np.linspace(0.05, 0.95, 200)
    xs, ys = np.rint(x0 + (x1 - x0) * t).astype(int), np.rint(y0 + (y1 - y0) * t).astype(int)
    on_line = np.array([_luma(out[y - 1:y + 2, x - 1:x + 2]).min() for x, y in zip(xs, ys, strict=True)])
    paint = float(_luma(PAINT[None])[0])
    assert (on_line < 0.5 * paint).mean() >= 0.97, f"the stroke is broken: {np.round(on_line[::10])}"
    yy, xx = np.mgrid[0:photo.shape[0], 0:photo.shape[1]]
    distance = np.abs((y1 - y0) * xx - (x1 - x0) * yy + x1 * y0 - y1 * x0) / np.hypot(x1 - x0, y1 - y0)
    assert np.array_equal(out[distance > 6], stylized[distance > 6]), "ink away from the line"
    assert np.array_equal(stylized, np.broadcast_to(PAINT, photo.shape)), "the input was changed"


def test_foliage_gets_no_confetti() -> None:
    """Every blob edge of a leaf field is as dark as the wire: a plain difference of Gaussians inks a tenth of it
    with specks (issue 41's "confetti"); the texture and coherence gates leave it clean."""
    photo = _leaves()
    luma = Image.fromarray(photo).convert("L")
    dog = (np.asarray(luma.filter(ImageFilter.GaussianBlur(ink.LINE_SIGMA)), np.float32)
           - np.asarray(luma.filter(ImageFilter.GaussianBlur(ink.LINE_SIGMA * ink.LINE_RATIO)), np.float32))
    plain = float((-dog > ink.THRESHOLD + ink.SOFTNESS / 2).mean())
    assert plain > 0.05, f"the leaves must be a real test: a plain DoG inks {plain:.3f} of them"
    inked = float((ink_alpha(photo) > 0.3).mean())
    assert inked < 0.005, f"{inked:.4f} of the foliage inked"


def test_bands_join_without_a_seam() -> None:
    """Drawn in bands of ``BAND_ROWS`` (a full-resolution picture's memory): the same strokes as the whole."""
    photo, _ = _wire(300, 3 * ink.BAND_ROWS + 37)
    stylized = np.broadcast_to(PAINT, photo.shape).copy()
    whole = 1.0 - ink.DARKEN * ink_alpha(photo)
    expected = np.clip(stylized * whole[..., None] + 0.5, 0, 255).astype(np.uint8)
    got = draw_ink(stylized, photo, strength=1.0)
    assert int(np.abs(got.astype(np.int16) - expected).max()) <= 1


def test_faces_and_strength_zero_are_left_alone() -> None:
    photo, _ = _wire()
    stylized = np.broadcast_to(PAINT, photo.shape).copy()
    face = (100, 60, 220, 200)
    out = draw_ink(stylized, photo, strength=1.0, keep_out=[face, (-50, -50, -10, -10)])
    assert np.array_equal(out[60:200, 100:220], stylized[60:200, 100:220])
    assert not np.array_equal(out, stylized)
    assert np.array_equal(draw_ink(stylized, photo, strength=0.0), stylized)
    with pytest.raises(ValueError, match=r"ink: the stylized picture is \(10, 10, 3\), its photo \(240, 320, 3\)"):
        draw_ink(stylized[:10, :10], photo, strength=1.0)


# -- the manifest and the pipeline ---------------------------------------------------------------------------
def test_ink_is_a_styles_choice_off_by_default_and_a_bad_value_names_the_file(random_ir: Path,
                                                                               tmp_path: Path) -> None:
    assert load_model_info(style_with(random_ir, tmp_path / "none", "ink", None)).ink == InkSpec(enabled=False)
    assert load_model_info(bundled_models_dir() / "toon").ink == InkSpec(enabled=True, strength=0.8)
    assert load_model_info(bundled_models_dir() / "cel").ink == InkSpec(enabled=False)
    folder = style_with(random_ir, tmp_path / "bad", "ink", {"enabled": True, "strength": 2})
    with pytest.raises(ModelError) as caught:
        load_model_info(folder)
    said = str(caught.value)
    assert str(folder / MANIFEST_NAME) in said and "ink.strength: expected a number from 0 to 1, got 2" in said


def test_the_pipeline_inks_a_photo_as_the_manifest_says(random_ir: Path, tmp_path: Path,
                                                        write_config: Callable[..., Path]) -> None:
    """The real runtime: with ``ink`` on, the picture is the IR's output with the wire inked over it (tone and
    palette off, so nothing else stands between); ``image.ink: off`` leaves the IR's output as it is."""
    from edge_anime import Stylizer

    photo, _ = _wire(160, 120)
    path = tmp_path / "wire.png"
    Image.fromarray(photo).save(path)
    got, raw, ink_s = {}, None, 0.0
    for name, switch in (("on", "auto"), ("off", "off")):
        folder = style_with(random_ir, tmp_path / name, "ink", {"enabled": True, "strength": 1.0})
        config = write_config({"model": {"path": str(folder)}, "device": {"inference_precision": "f32"},
                               "image": {"ink": switch, "tone": "off", "palette": "off", "faces": "off",
                                         "max_side": 1024}},
                              name=f"{name}.yaml")
        with Stylizer(config) as stylizer:
            result = stylizer.run(path)
            got[name] = np.asarray(result.image)
            ink_s = max(ink_s, result.timings_s["ink"])
            raw = stylizer.engine.infer(photo)
    assert raw is not None
    assert np.array_equal(got["off"], raw)
    assert np.array_equal(got["on"], draw_ink(raw, photo, strength=1.0)) and not np.array_equal(got["on"], raw)
    assert ink_s > 0


def test_a_clips_frame_gets_no_ink(random_ir: Path, tmp_path: Path, write_config: Callable[..., Path]) -> None:
    """A clip's frames are submitted with ``ink=False`` (video.job): lines found per frame would flicker on the
    sensor's noise. The same picture through the same pipeline: inked as a photo, left as it is as a frame."""
    from edge_anime.config import load_config
    from edge_anime.core.pipeline import Job
    from edge_anime.runtime.engine import Engine
    from tests.conftest import run_pipeline

    photo, _ = _wire(160, 120)
    path = tmp_path / "wire.png"
    Image.fromarray(photo).save(path)
    folder = style_with(random_ir, tmp_path, "ink", {"enabled": True, "strength": 1.0})
    config = load_config(write_config({"model": {"path": str(folder)}, "device": {"inference_precision": "f32"},
                                       "image": {"tone": "off", "palette": "off", "faces": "off",
                                                 "max_side": 1024}}))
    engine = Engine(load_model_info(folder), config.device)
    photo_out, frame_out = (np.asarray(r.image) for r in run_pipeline(
        engine, config, [Job(src=path, dst=None), Job(src=path, dst=None, ink=False)]))
    raw = engine.infer(photo)
    assert np.array_equal(photo_out, draw_ink(raw, photo, strength=1.0))
    assert np.array_equal(frame_out, raw)
