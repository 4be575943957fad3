"""The cel palette (edge_anime.imaging.palette): a picture comes back in a few hundred flat colours of its own,
small vivid areas and thin ink keep their colour, the style's manifest and the config switch it, every photo
of the pipeline gets it and a clip's frames do not."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from conftest import run_pipeline, style_with
from edge_anime.errors import ModelError
from edge_anime.imaging.palette import SHARPEN, SOFT_LEVELS, apply_palette, choose_palette
from edge_anime.locations import bundled_models_dir
from edge_anime.models import MANIFEST_NAME, PaletteSpec, load_model_info


def distinct(rgb: np.ndarray) -> int:
    return len(np.unique(rgb.reshape(-1, 3), axis=0))


def assert_painted_with(out: np.ndarray, source: np.ndarray, colours: int, exact: float = 0.75) -> None:
    """``out`` is ``source``, sharpened (module doc 0), painted with its palette of ``colours``: more than ``exact``
    of the pixels hold an entry exactly, and the rest lie within ``SOFT_LEVELS`` of one (the soft band edges,
    module doc 4), never a colour of their own."""
    picture = Image.fromarray(np.ascontiguousarray(source[0] if source.ndim == 4 else source))
    sharpened = np.asarray(picture.filter(SHARPEN))
    palette = choose_palette(sharpened, colours).astype(np.int16)
    pixels = out.reshape(-1, 1, 3).astype(np.int16)
    off = np.abs(pixels - palette[None]).max(axis=2).min(axis=1)
    assert float((off == 0).mean()) > exact and int(off.max()) <= SOFT_LEVELS, (float((off == 0).mean()), off.max())


def painted_photo(width: int = 320, height: int = 240, *, seed: int = 0) -> np.ndarray:
    """A model-like output: smooth gradients everywhere (thousands of colours), a small red patch (lips: 0.5 %
    of the picture) and one-pixel black ink lines."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, height)[:, None, None]
    x = np.linspace(0.0, 1.0, width)[None, :, None]
    zero = np.zeros((height, width, 1))
    rgb = np.concatenate([60 + 150 * y + 20 * x + zero, 120 + 100 * x + zero, 230 - 60 * y + zero], axis=2)
    rgb = rgb + rng.normal(0.0, 1.5, (height, width, 3))
    rgb[100:112, 150:180] = (205, 60, 75)       # the small vivid patch
    rgb[40, :] = rgb[:, 60] = (12, 10, 14)      # ink
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def test_a_picture_comes_back_in_at_most_the_colours_asked_and_close_to_itself() -> None:
    photo = painted_photo()
    before = photo.copy()
    out = apply_palette(photo, 64, calm=False)
    assert np.array_equal(photo, before), "the input is never modified"
    assert out.shape == photo.shape and out.dtype == np.uint8
    assert distinct(photo) > 5000
    assert_painted_with(out, photo, 64)
    error = np.abs(out.astype(np.int16) - photo).sum(axis=2)
    assert float(error.mean()) < 24, "each pixel is painted with a colour near its own"
    assert np.array_equal(apply_palette(photo, 64, calm=False), out), "deterministic: the same picture, the same paint"


def test_small_vivid_areas_and_thin_ink_keep_their_colour() -> None:
    """Median cut alone gives boxes by population: without the saturated sample the red patch came out a dull
    brown and the ink dark grey."""
    photo = painted_photo()
    out = apply_palette(photo, 64, calm=False).astype(np.int16)
    # sharpened, the small patch stands out from its gradient a little more (module doc 0), and keeps its hue
    assert np.abs(out[100:112, 150:180] - (205, 60, 75)).max() <= 20
    assert out[40, :].max() <= 40 and out[:, 60].max() <= 40


def test_a_noisy_gradient_is_painted_in_clean_bands_not_speckle() -> None:
    """The model's output has a level or two of noise: painted pixel by pixel, neighbours on a smooth gradient
    flip between two entries (105 changes a row here, for 41 colours); read from the blur where the picture
    is smooth, each band boundary is crossed about once."""
    rng = np.random.default_rng(1)
    ramp = np.linspace(40.0, 220.0, 320)
    rgb = np.stack([np.broadcast_to(ramp, (64, 320)), np.broadcast_to(ramp * 0.8 + 20, (64, 320)),
                    np.full((64, 320), 150.0)], axis=-1)
    rgb = np.clip(np.rint(rgb + rng.normal(0.0, 1.5, rgb.shape)), 0, 255).astype(np.uint8)
    out = apply_palette(rgb, 64, calm=False)
    changes = np.any(out[:, 1:] != out[:, :-1], axis=-1).sum(axis=1)
    colours = np.array([distinct(row) for row in out])
    assert changes.mean() <= 1.3 * colours.mean(), (changes.mean(), colours.mean())


def test_a_small_step_between_bands_is_ramped_and_ink_stays_hard() -> None:
    """Two flat bands a few levels apart meet in a 3-pixel ramp (the JPEG encoder rings around a bare step:
    texture); an ink line and the pixels beside it keep their exact colours."""
    rgb = np.zeros((48, 96, 3), np.uint8)
    rgb[:, :48], rgb[:, 48:] = (120, 150, 200), (124, 154, 204)  # one gradient's neighbouring bands
    rgb[:, 70] = (10, 10, 10)  # ink
    out = apply_palette(rgb, 32, calm=False).astype(np.int16)
    row = out[24]
    assert np.array_equal(row[36], rgb[24, 36]) and np.array_equal(row[62], rgb[24, 62]), "flat bands stay flat"
    red = row[36:63, 0]
    assert np.all(np.diff(red) >= 0) and len(set(red.tolist())) >= 3, red  # a ramp, not a bare step
    assert row[70].max() <= 12, "the ink stays ink"
    assert row[69].min() >= rgb[24, 69].min() and row[71].min() >= rgb[24, 71].min(), "and does not bleed"


def test_a_style_s_chroma_makes_the_entries_more_vivid_and_greys_stay_grey() -> None:
    photo = (128 + 0.4 * (painted_photo().astype(np.float32) - 128)).astype(np.uint8)  # room to be vivid
    photo[:40, :40] = 128  # a grey square
    plain = apply_palette(photo, 64, calm=False).astype(np.int16)
    vivid = apply_palette(photo, 64, chroma=1.3, calm=False).astype(np.int16)

    def spread(x: np.ndarray) -> float:
        return float((x.max(axis=-1) - x.min(axis=-1)).mean())

    assert spread(vivid) > 1.2 * spread(plain)
    assert np.all(vivid[:40, :40] == vivid[0, 0]) and len(set(vivid[0, 0].tolist())) == 1
    lightness = np.array([0.299, 0.587, 0.114])
    assert np.abs(vivid @ lightness - plain @ lightness).mean() < 2.0, "lightness stays"
    with pytest.raises(ValueError, match="palette chroma: expected 0.5 to 2.0"):
        apply_palette(photo, 64, chroma=3.0)


def test_a_batched_picture_keeps_its_shape_and_a_flat_one_needs_few_colours() -> None:
    flat = np.full((1, 48, 64, 3), (90, 140, 200), np.uint8)
    out = apply_palette(flat, 256)
    assert out.shape == flat.shape and np.array_equal(out, flat)
    tiny = painted_photo()[:8, :12]  # fewer pixels than one row of the sample
    assert apply_palette(tiny, 32).shape == tiny.shape


@pytest.mark.parametrize("colours", [0, 31, 257])
def test_a_palette_size_out_of_range_is_refused(colours: int) -> None:
    with pytest.raises(ValueError, match="palette colours: expected 32 to 256"):
        apply_palette(painted_photo(), colours)


# -- the manifest -------------------------------------------------------------------------------------------
def _style_copy(random_ir: Path, tmp_path: Path, palette: object) -> Path:
    return style_with(random_ir, tmp_path, "palette", palette)


def test_a_manifest_without_a_palette_is_off(random_ir: Path, tmp_path: Path) -> None:
    """A published checkpoint's gradients are its look: the palette is a style's choice, off by default."""
    assert load_model_info(_style_copy(random_ir, tmp_path, None)).palette == PaletteSpec(enabled=False)
    assert load_model_info(_style_copy(random_ir, tmp_path / "on", {"enabled": True, "colours": 96})).palette \
        == PaletteSpec(enabled=True, colours=96)


@pytest.mark.parametrize(("palette", "says"), [
    ({"colours": 300}, "palette.colours: expected a whole number from 32 to 256, got 300"),
    ({"colours": 64.5}, "palette.colours"),
    ({"enabled": "yes"}, "palette.enabled: expected true or false"),
    ({"colors": 64}, "palette.colors: unknown key"),
    ({"chroma": 2.5}, "palette.chroma: expected a number from 0.5 to 2.0, got 2.5"),
    ("on", "palette: expected a mapping"),
])
def test_a_bad_palette_value_in_a_manifest_names_the_file_and_the_key(random_ir: Path, tmp_path: Path,
                                                                      palette: object, says: str) -> None:
    folder = _style_copy(random_ir, tmp_path, palette)
    with pytest.raises(ModelError) as caught:
        load_model_info(folder)
    assert str(folder / MANIFEST_NAME) in str(caught.value) and says in str(caught.value), str(caught.value)


# -- the pipeline -------------------------------------------------------------------------------------------
def test_every_photo_of_the_pipeline_gets_the_styles_palette(random_ir: Path, tmp_path: Path,
                                                              write_config: Callable[..., Path]) -> None:
    """The real runtime on the seeded-random IR: with ``palette`` on, Stylizer's picture is the palette applied
    to the IR's own output (the tone guard off, so nothing else stands between); off in the manifest, or
    ``image.palette: off``, it is the IR's output as it is."""
    from edge_anime import Stylizer

    photo = painted_photo(96, 64)
    path = tmp_path / "photo.png"
    Image.fromarray(photo).save(path)
    got: dict[str, np.ndarray] = {}
    raw: np.ndarray | None = None
    for name, palette, switch in (("on", {"enabled": True, "colours": 32}, "auto"),
                                  ("off", {"enabled": False}, "auto"), ("switched", {"enabled": True}, "off")):
        folder = _style_copy(random_ir, tmp_path / name, palette)
        config = write_config({"model": {"path": str(folder)}, "device": {"inference_precision": "f32"},
                               "image": {"palette": switch, "tone": "off"}}, name=f"{name}.yaml")
        with Stylizer(config) as stylizer:
            got[name] = np.asarray(stylizer.stylize(path))
            raw = stylizer.engine.infer(photo)
    assert raw is not None
    assert distinct(raw) > 32, "the random IR's output must have more colours for this test to say much"
    assert np.array_equal(got["on"], apply_palette(raw, 32))  # steps 0-5, each tested above on its own
    assert_painted_with(apply_palette(raw, 32, calm=False), raw, 32, exact=0.4)  # the IR's output: small steps
    assert np.array_equal(got["off"], raw) and np.array_equal(got["switched"], raw)


def test_the_bundled_styles_paint_with_their_palette() -> None:
    """Both bundled styles are cel looks: their manifests turn the palette on."""
    for name, chroma in (("toon", 1.12), ("cel", 1.0)):  # the toon model paints a little paler than its target
        palette = load_model_info(bundled_models_dir() / name).palette
        # 112 and 192 colours hold look.py's colours median under 0.6 once the palette sharpens (module doc 0)
        assert palette == PaletteSpec(enabled=True, colours=112 if name == "toon" else 192, chroma=chroma), name


def test_a_job_that_asks_for_no_palette_gets_none(random_ir: Path, tmp_path: Path,
                                                  write_config: Callable[..., Path]) -> None:
    """A clip's frames are submitted with ``palette=False`` (video.job): a palette chosen per frame would make
    the clip flicker. The same photo through the same pipeline: painted as a photo, left as it is as a frame."""
    from edge_anime.config import load_config
    from edge_anime.core.pipeline import Job, JobResult
    from edge_anime.models import load_model_info as load
    from edge_anime.runtime.engine import Engine

    photo = painted_photo(96, 64)
    path = tmp_path / "photo.png"
    Image.fromarray(photo).save(path)
    folder = _style_copy(random_ir, tmp_path, {"enabled": True, "colours": 32})
    config = load_config(write_config({"model": {"path": str(folder)}, "device": {"inference_precision": "f32"},
                                       "image": {"tone": "off"}}))
    engine = Engine(load(folder), config.device)
    results: list[JobResult] = run_pipeline(engine, config, [Job(src=path, dst=None), Job(src=path, dst=None,
                                                                                      palette=False)])
    photo_out, frame_out = (np.asarray(r.image) for r in results)
    raw = engine.infer(photo)
    assert np.array_equal(photo_out, apply_palette(raw, 32))
    assert np.array_equal(frame_out, raw)
    assert all(r.timings_s["palette"] >= 0 for r in results)
