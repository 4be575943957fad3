"""The tone guard's step 3 (edge_anime.imaging.hues): a sign's green stripe that the style painted grey comes back
green in the style's own lightness; an outline a pixel off the photo's edge, a style's own shift of a hue and its
greys are left alone; the guard's strength and its ``hues`` switch scale and turn it off."""
from __future__ import annotations

import numpy as np

from edge_anime.imaging.hues import restore_hues
from edge_anime.imaging.tone import ToneTrack, restore_tone

LUMA = np.array([0.299, 0.587, 0.114])


def sign(width: int = 160, height: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """(photo, output): a white sign on a grey wall with a green stripe 16 px tall across it; the "style" painted
    the stripe the grey of its lightness and kept the rest as the photo."""
    photo = np.full((height, width, 3), 128, np.uint8)
    photo[16:80, 20:140] = 236
    photo[40:56, 28:132] = (60, 150, 80)
    out = photo.copy()
    out[40:56, 28:132] = np.uint8(round(float(np.array([60, 150, 80]) @ LUMA)))
    return photo, out


def test_a_stripe_painted_grey_comes_back_in_the_photos_colour_at_the_styles_lightness() -> None:
    photo, out = sign()
    before = out.copy()
    got = restore_hues(out, photo).astype(np.int16)
    assert np.array_equal(out, before), "the input is never modified"
    stripe = got[44:52, 36:124]
    assert (stripe[..., 1] - np.maximum(stripe[..., 0], stripe[..., 2]) > 40).all(), stripe[0, :4]
    assert np.abs(stripe @ LUMA - out[44:52, 36:124] @ LUMA).max() <= 4, "the style's lightness stays"
    assert np.array_equal(got[:12], out[:12]) and np.array_equal(got[:, :16], out[:, :16]), "the wall is untouched"
    assert len(np.unique(stripe.reshape(-1, 3), axis=0)) <= 4, "flat paint: every new colour counts (look.py)"


def test_an_outline_off_the_photos_edge_and_a_styles_own_hue_are_left_alone() -> None:
    photo, out = sign()
    photo[30, 28:132] = (200, 30, 30)  # a red line a pixel wide: the style drew it a row lower, or not at all
    out[40:56, 28:132] = (70, 140, 120)  # the style's own teal for the green: turned ~40 degrees, not lost
    assert restore_hues(out, photo) is out
    grey = np.full_like(photo, 128)
    assert restore_hues(grey, grey) is grey


def test_the_guards_strength_scales_it_and_hues_false_turns_it_off() -> None:
    photo, out = sign()
    assert restore_hues(out, photo, strength=0.0) is out
    full, half = restore_hues(out, photo).astype(np.int16), restore_hues(out, photo, strength=0.5).astype(np.int16)

    def green(x: np.ndarray) -> float:
        stripe = x[44:52, 36:124]
        return float((stripe[..., 1] - np.maximum(stripe[..., 0], stripe[..., 2])).mean())

    assert green(out.astype(np.int16)) < green(half) < green(full)
    assert green(restore_tone(out, photo).astype(np.int16)) > 40
    assert np.array_equal(restore_tone(out, photo, hues=False), out)
    # a clip's frames get none: the hard mask, found per frame, would flicker at its rim
    assert np.array_equal(ToneTrack(strength=1.0, neutral=True).apply(out, photo), out)
