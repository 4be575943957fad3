"""Colour fringes (edge_anime.imaging.fringe): the network's crimson rim around an ear and its olive seam under a cap
are repainted in the colour of their sides, their darkness kept; a line the photo has, an ink line in the local
colour and everything outside the boxes it is given are left alone."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_anime.imaging.fringe import SATURATION_GAIN, clean_fringes
from edge_anime.locations import bundled_models_dir

SKIN = (236, 190, 160)
WALL = (246, 246, 246)
CAP = (16, 16, 18)


def ycc(rgb: np.ndarray) -> np.ndarray:
    """JFIF YCbCr (as Pillow converts) of an array of RGB triples, float."""
    r, g, b = (rgb[..., i].astype(np.float64) for i in range(3))
    y = 0.299 * r + 0.587 * g + 0.114 * b
    return np.stack([y, 128 - 0.168736 * r - 0.331264 * g + 0.5 * b, 128 + 0.5 * r - 0.418688 * g - 0.081312 * b], -1)


def saturation(rgb: np.ndarray) -> np.ndarray:
    """Chroma per level of luma: what step 2 bounds."""
    c = ycc(rgb)
    return np.hypot(c[..., 1] - 128, c[..., 2] - 128) / np.maximum(c[..., 0], 16)


def ear(width: int = 96, height: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(photo, output): skin on the left, a white wall on the right; the output adds a 2 px crimson line on the
    border (the network's rim), which the photo does not have."""
    photo = np.zeros((height, width, 3), np.uint8)
    photo[:, :48], photo[:, 48:] = SKIN, WALL
    out = photo.copy()
    out[:, 47:49] = (120, 28, 44)
    return photo, out


def test_a_crimson_rim_the_photo_lacks_becomes_a_dark_skin_tone_and_keeps_its_darkness() -> None:
    photo, out = ear()
    before = out.copy()
    got = clean_fringes(out, photo)
    assert np.array_equal(out, before), "the input is never modified"
    rim, sides = got[8:56, 47:49], got[8:56, [40, 56]]
    assert saturation(rim).max() <= SATURATION_GAIN * saturation(np.array(SKIN)) + 0.02, rim[0]
    assert saturation(out[8:56, 47:49]).min() > 2 * saturation(np.array(SKIN)), "it was a fringe to begin with"
    assert np.abs(ycc(rim)[..., 0] - ycc(out[8:56, 47:49])[..., 0]).max() <= 1.5, "the line stays as dark"
    hue = np.degrees(np.arctan2(ycc(rim)[..., 2] - 128, ycc(rim)[..., 1] - 128))
    assert np.abs(hue - hue.mean()).max() < 5, "one flat colour along the line"
    assert np.array_equal(sides, out[8:56, [40, 56]]), "skin and wall are untouched"


def test_an_olive_seam_under_a_cap_becomes_a_shade_of_the_skin() -> None:
    photo = np.zeros((64, 96, 3), np.uint8)
    photo[:32], photo[32:] = CAP, SKIN
    out = photo.copy()
    out[31] = (120, 118, 60)  # the seam: olive, a hue neither the cap nor the skin has
    got = clean_fringes(out, photo)
    seam, skin = ycc(got[31, 8:88]), ycc(np.array(SKIN, np.uint8))
    hue = np.degrees(np.arctan2(seam[:, 2] - 128, seam[:, 1] - 128))
    assert np.abs(hue - np.degrees(np.arctan2(skin[2] - 128, skin[1] - 128))).max() < 5, got[31, 8]
    assert np.abs(saturation(got[31, 8:88]) / saturation(np.array(SKIN)) - 1).max() < 0.2, "the skin's, shaded"
    assert np.abs(seam[:, 0] - ycc(out[31, 8:88])[:, 0]).max() <= 1.5, "its luma stays"


def test_what_the_photo_has_and_an_ink_line_in_the_local_colour_are_left_alone() -> None:
    photo, out = ear()
    photo[:, 47:49] = out[:, 47:49]  # a red thread: the photo has it
    assert clean_fringes(out, photo) is out
    photo, out = ear()
    out[:, 47:49] = np.rint(np.array(SKIN) * 0.35).astype(np.uint8)  # ink: darkened toward a share of its colour
    assert clean_fringes(out, photo) is out


def test_only_inside_the_boxes_given() -> None:
    photo, out = ear(width=192)
    photo[:, 96:144], photo[:, 144:] = SKIN, WALL
    out[:, 96:144], out[:, 144:] = SKIN, WALL
    out[:, 143:145] = (120, 28, 44)  # a second rim, right of the first
    got = clean_fringes(out, photo, within=[(120, -10, 400, 80)])  # the right half, overhanging the picture
    assert np.array_equal(got[:, :96], out[:, :96]), "outside the box: the first rim stays"
    assert saturation(got[8:56, 143:145]).max() < saturation(out[8:56, 143:145]).min() / 2, "inside: cleaned"
    assert clean_fringes(out, photo, within=[]) is out


def test_shapes_are_checked() -> None:
    photo, out = ear()
    with pytest.raises(ValueError, match="H x W x 3"):
        clean_fringes(out, photo[:, :10])


@pytest.mark.slow
def test_the_bundled_toon_draws_face_8_s_ear_without_its_crimson_rim(write_config: Callable[..., Path],
                                                                     shared_photos: Path) -> None:
    """The pipeline, the bundled style, a real photo: the network outlines face_8's ear in crimson (there with
    ``image.faces: off``, where nothing cleans it); with the faces found, the ear is in the widened box and the
    rim comes out a dark skin tone."""
    from edge_anime import Stylizer

    ear_box = (slice(85, 140), slice(240, 270))  # the right ear against the white wall, in the photo as stored
    crimson = {}
    for faces in ("auto", "off"):
        config = write_config({"model": {"path": str(bundled_models_dir() / "toon"), "variant": "fp16"},
                               "image": {"faces": faces, "max_side": 1024}}, name=f"faces-{faces}.yaml")
        with Stylizer(config) as stylizer:
            result = stylizer.run(shared_photos / "face_8.jpg")
        assert result.image is not None
        rgb = np.asarray(result.image.convert("RGB"))[ear_box]
        assert (len(result.faces) == 1) == (faces == "auto")
        dark = ycc(rgb)[..., 0] < 150
        crimson[faces] = int((dark & (saturation(rgb) > 0.5)).sum())
    assert crimson["off"] > 20, "the network's rim (the test's premise)"
    assert crimson["auto"] == 0, crimson


def test_bands_give_what_one_piece_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tall box is cleaned in bands of rows (a face in a 24-megapixel picture needs a band's memory); the bands
    join exactly, a box's as the whole picture's."""
    from edge_anime.imaging import fringe

    photo, out = ear(width=96, height=160)
    out[:, 47:49] = (120, 28, 44)
    out[40:100, 20] = (120, 118, 60)  # an olive stroke across several bands
    whole = clean_fringes(out, photo)
    monkeypatch.setattr(fringe, "BAND_ROWS", 16)
    assert np.array_equal(clean_fringes(out, photo), whole)
    assert np.array_equal(clean_fringes(out, photo, within=[(0, 0, 96, 160)]), whole)
