"""The tone guard (edge_anime.imaging.tone): a washed-out, colour-cast output comes back with the photo's range
and grey greys; an output that already has them is left alone; the style's manifest and the config switch it;
every picture of the pipeline gets it. L* and chroma are computed here as ../shared/tools/look.py does."""
from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from conftest import style_with
from edge_anime.errors import ModelError
from edge_anime.imaging.tone import WHITE_DROP, ToneTrack, keep_whites, measure, restore_tone
from edge_anime.models import MANIFEST_NAME, ToneSpec, load_model_info

CONTRAST_MIN = 0.8  # issue 27: L* std out / in on every photo
CAST_MAX = 6.0      # issue 27: mean chroma C* of the output where the photo is neutral


def lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB u8 -> CIE L*a*b* (D65), look.py's formula."""
    c = rgb.astype(np.float64) / 255.0
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    xyz = c @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def look(photo: np.ndarray, out: np.ndarray) -> tuple[float, float]:
    """(L* contrast out / in, mean chroma of ``out`` where the photo is neutral), as look.py measures them."""
    la, lb = lab(photo), lab(out)
    ca, cb = np.hypot(la[..., 1], la[..., 2]), np.hypot(lb[..., 1], lb[..., 2])
    neutral = (ca < 4) & (la[..., 0] > 25) & (la[..., 0] < 95)
    assert neutral.sum() > 500, "the test photo must have neutral areas"
    return float(lb[..., 0].std() / la[..., 0].std()), float(cb[neutral].mean())


def sky_photo(width: int = 256, height: int = 192, *, seed: int = 0) -> np.ndarray:
    """A blue-sky photo: a sky gradient over most of it, a white wall, a grey road, dark green ground."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0.0, 1.0, height)[:, None, None]
    rgb = np.broadcast_to(np.concatenate([70 + 110 * y, 130 + 90 * y, 235 - 15 * y], axis=2),
                          (height, width, 3)).copy()
    rgb[height // 2: height * 7 // 8, width // 4: width * 5 // 8] = 243  # the white wall
    rgb[height * 7 // 8:, width // 2:] = 128                              # a grey road
    rgb[height * 3 // 4:, : width // 4] = (40, 62, 30)                   # dark ground
    rgb += rng.normal(0.0, 2.0, rgb.shape)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def washed_out(photo: np.ndarray, *, contrast: float = 0.3, cast: tuple[float, float, float] = (-22, 0, -6)
               ) -> np.ndarray:
    """The failure of issue 27: the photo's range shrunk around its mean, a cyan cast over everything."""
    f = photo.astype(np.float32)
    out = (f - f.mean()) * contrast + f.mean() + np.array(cast, np.float32)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def test_a_washed_out_cyan_output_gets_the_photos_range_and_grey_whites_back() -> None:
    photo = sky_photo()
    out = washed_out(photo)
    before = look(photo, out)
    assert before[0] < 0.4 and before[1] > CAST_MAX, before  # the failure is really there
    fixed = restore_tone(out, photo)
    contrast, cast = look(photo, fixed)
    assert contrast >= CONTRAST_MIN, (before, contrast)
    assert cast <= CAST_MAX, (before, cast)
    assert fixed.dtype == np.uint8 and fixed.shape == out.shape
    assert np.array_equal(out, washed_out(photo)), "the model's output array is never written to"


@pytest.mark.parametrize("shrink", [0.28, 0.5, 0.7])
def test_every_washed_out_ratio_the_issue_measured_reaches_the_target(shrink: float) -> None:
    for seed in range(3):
        photo = sky_photo(200, 152, seed=seed)
        contrast, cast = look(photo, restore_tone(washed_out(photo, contrast=shrink), photo))
        assert contrast >= CONTRAST_MIN and cast <= CAST_MAX, (shrink, seed, contrast, cast)


def _strong_style(photo: np.ndarray) -> np.ndarray:
    """What a strong style may do and the guard must keep: more contrast, flat bands of lightness, warmer
    colours where the photo is colourful, greys left grey."""
    f = photo.astype(np.float32)
    out = (f - f.mean()) * 1.25 + f.mean()
    luma = out @ np.array([0.299, 0.587, 0.114], np.float32)
    out += (np.floor(luma / 24) * 24 + 12 - luma)[..., None]  # flat bands of lightness, a grey kept grey
    colourful = (photo.max(axis=2).astype(np.int16) - photo.min(axis=2)) > 30
    out[colourful] += np.array([18, -6, -18], np.float32)
    return np.clip(out, 0, 255).astype(np.uint8)


def test_an_output_with_the_photos_contrast_and_grey_greys_is_left_unchanged() -> None:
    """Steps 1-3 (step 4 is below: the strong style's bands darken the white wall)."""
    photo = sky_photo()
    for out in (_strong_style(photo), photo.copy()):
        assert np.array_equal(restore_tone(out, photo, whites=False), out)
    assert np.array_equal(restore_tone(photo.copy(), photo), photo), "the photo itself keeps its whites"


def test_a_dark_contrasty_output_is_never_lightened_or_flattened() -> None:
    """Steps 1-3; step 4 lightens its white wall only (``test_a_dingy_white_comes_back_white``)."""
    photo = sky_photo()
    dark = np.clip(photo.astype(np.int16) * 11 // 10 - 40, 0, 255).astype(np.uint8)  # darker, more contrast
    stats = measure(dark, photo)
    assert stats.ratio > 1.0 and stats.out_mean < stats.photo_mean - 5
    assert np.array_equal(restore_tone(dark, photo, whites=False), dark)


def _luma(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float64) @ np.array([0.299, 0.587, 0.114])


def test_a_dingy_white_comes_back_white() -> None:
    """Step 4: the style paints a white cloud or wall a dingy light grey (raters: "a yellowish stain in the cloud",
    "sky washed grey"). The dark output's white wall (the photo's 243, painted ~227 and a little blue) comes back
    to within ``WHITE_DROP`` of the photo's luma, its hue kept; nothing else moves, and an output already as light
    as the photo there is left as it is."""
    photo = sky_photo()
    dark = np.clip(photo.astype(np.int16) * 11 // 10 - 40, 0, 255).astype(np.uint8)
    dark[..., 2] = np.clip(dark[..., 2].astype(np.int16) + 6, 0, 255)  # a bluish grey, to see the hue kept
    height, width = photo.shape[:2]
    wall = np.zeros(photo.shape[:2], bool)
    wall[height // 2 + 2: height * 7 // 8 - 2, width // 4 + 2: width * 5 // 8 - 2] = True  # off its 3 x 3 rim
    fixed = keep_whites(dark, photo)
    drop = _luma(photo[wall]).mean() - _luma(fixed[wall]).mean()  # light, not grain: the step compares 3 x 3 means
    assert 0 <= drop <= WHITE_DROP + 0.5, drop
    assert _luma(photo[wall]).mean() - _luma(dark[wall]).mean() > WHITE_DROP + 8, "the wall really was dingy"
    before, after = dark[wall].astype(np.int16), fixed[wall].astype(np.int16)
    clear = np.abs(before[:, 2] - before[:, 0]) >= 2  # each channel moves the same share of its way to white
    assert (np.sign(after[clear, 2] - after[clear, 0]) == np.sign(before[clear, 2] - before[clear, 0])).all()
    assert after[:, 2].mean() > after[:, 0].mean() + 2, "a bluish grey stays bluish"
    sky_and_ground = np.ones_like(wall)
    sky_and_ground[height // 2 - 2: height * 7 // 8 + 2, width // 4 - 2: width * 5 // 8 + 2] = False
    assert np.array_equal(fixed[sky_and_ground], dark[sky_and_ground]), "only the photo's whites move"
    assert keep_whites(photo, photo) is photo, "an output as light as the photo's whites is left as it is"
    assert keep_whites(dark, photo, strength=0.0) is dark
    half = keep_whites(dark, photo, strength=0.5)
    assert (_luma(half[wall]) < _luma(fixed[wall])).all() and (_luma(half[wall]) > _luma(dark[wall])).all()


def test_strength_zero_is_the_identity_and_strength_scales_the_repair() -> None:
    photo = sky_photo()
    out = washed_out(photo)
    assert restore_tone(out, photo, strength=0.0) is out
    half, full = look(photo, restore_tone(out, photo, strength=0.5)), look(photo, restore_tone(out, photo))
    before = look(photo, out)
    assert before[0] < half[0] < full[0] and before[1] > half[1] > full[1], (before, half, full)


def test_neutral_false_keeps_the_cast_and_restores_the_range() -> None:
    photo = sky_photo()
    out = washed_out(photo)
    contrast, cast = look(photo, restore_tone(out, photo, neutral=False))
    assert contrast >= CONTRAST_MIN and cast > CAST_MAX


def test_a_clips_map_follows_its_frames_without_jumping() -> None:
    """ToneTrack: the first frame gets the full repair; a sudden change of the output's contrast moves the
    map part-way per frame, not at once."""
    photo = sky_photo(160, 120)
    track = ToneTrack(strength=1.0, neutral=True)
    first = track.apply(washed_out(photo), photo)
    assert look(photo, first)[0] >= CONTRAST_MIN
    fine = photo.copy()
    stepped = [look(photo, track.apply(fine, photo))[0] for _ in range(30)]
    assert stepped[0] > 1.05 and all(a > b for a, b in itertools.pairwise(stepped[:9])), stepped
    assert abs(stepped[-1] - 1.0) < 0.05, stepped  # eases back to the fine output's own within about a second


# -- the manifest -------------------------------------------------------------------------------------------
def _style_copy(random_ir: Path, tmp_path: Path, tone: object) -> Path:
    return style_with(random_ir, tmp_path, "tone", tone)


def test_the_converter_writes_the_tone_key_and_a_manifest_without_it_gets_the_default(
        random_ir: Path, tmp_path: Path) -> None:
    written = yaml.safe_load((random_ir / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert written["tone"] == {"enabled": True, "strength": 1.0, "neutral": True}
    assert load_model_info(_style_copy(random_ir, tmp_path, None)).tone == ToneSpec()


@pytest.mark.parametrize(("tone", "says"), [
    ({"strength": 2}, "tone.strength: expected a number from 0 to 1, got 2"),
    ({"strength": "strong"}, "tone.strength"),
    ({"enabled": "yes"}, "tone.enabled: expected true or false"),
    ({"neutrals": True}, "tone.neutrals: unknown key"),
    ("on", "tone: expected a mapping"),
])
def test_a_bad_tone_value_in_a_manifest_names_the_file_and_the_key(random_ir: Path, tmp_path: Path,
                                                                   tone: object, says: str) -> None:
    folder = _style_copy(random_ir, tmp_path, tone)
    with pytest.raises(ModelError) as caught:
        load_model_info(folder)
    assert str(folder / MANIFEST_NAME) in str(caught.value) and says in str(caught.value), str(caught.value)


# -- the pipeline -------------------------------------------------------------------------------------------
def test_every_picture_of_the_pipeline_gets_the_styles_guard(random_ir: Path, tmp_path: Path,
                                                              write_config: Callable[..., Path]) -> None:
    """The real runtime on the seeded-random IR: with ``tone`` on, Stylizer's picture is the guard applied to
    the IR's own output for the picture it was fed; with it off in the manifest, or ``image.tone: off``, it
    is the IR's output as it is."""
    from edge_anime import Stylizer

    photo = sky_photo(96, 64)  # a multiple of 8 under max_side: fed to the model as it is
    path = tmp_path / "sky.png"
    Image.fromarray(photo).save(path)
    got: dict[str, np.ndarray] = {}
    raw: np.ndarray | None = None
    for name, tone, switch in (("on", {"enabled": True, "strength": 1.0}, "auto"),
                               ("off", {"enabled": False}, "auto"), ("switched", {"enabled": True}, "off")):
        folder = _style_copy(random_ir, tmp_path / name, tone)
        config = write_config({"model": {"path": str(folder)}, "device": {"inference_precision": "f32"},
                               "image": {"tone": switch}}, name=f"{name}.yaml")
        with Stylizer(config) as stylizer:
            got[name] = np.asarray(stylizer.stylize(path))
            raw = stylizer.engine.infer(photo)
    assert raw is not None
    guarded = restore_tone(raw, photo)
    assert not np.array_equal(guarded, raw), "the random IR's output must need the guard for this test to say much"
    assert np.array_equal(got["on"], guarded)
    assert np.array_equal(got["off"], raw) and np.array_equal(got["switched"], raw)
