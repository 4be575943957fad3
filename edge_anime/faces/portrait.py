"""Drawn anime features on a stylized face: eyes, brows, nose, mouth, cel skin and blush, placed by landmarks.

Why draw: a network regressed onto a filter of the photo can at best reproduce a filtered photo, and no filter
draws an eye (issue 41: faces rated 2.0 of 5). Anime portraits are a convention, not a texture: large eyes with
an iris, a pupil, a highlight and a heavy upper lash line; thin brows; a nose that is one short stroke; lips in
colour without an outline; skin in two or three flat tones with a blush. Those parts are drawn here from the
face mesh's 468 landmarks (``landmarks.FaceMesh``), in the colours of the photo (iris, lips, hair) and of the
stylized picture (skin), so the face keeps its person and sits in its picture's palette.

Deterministic: the drawing is a pure function of the photo, the stylized picture and the landmarks, so a still
face in a clip is drawn the same in every frame. Shapes are drawn at ``SUPERSAMPLE`` x and reduced, so an eye
of 20 px keeps clean edges. Every length is in units of the face (the distance between the eyes' centres), so the
same drawing serves a 64 px face in a group shot (drawn in its restyle crop) and a selfie (drawn on the picture).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from ..imaging.guided import LUMA
from . import landmarks as lm

# The face mesh's contours (``landmarks``), cut into the open lines the drawing needs: each lid from the outer
# corner to the inner one, each brow as (upper, lower) pairs from its tail to its inner end.
RIGHT_EYE_UPPER = lm.RIGHT_EYE[:9]
RIGHT_EYE_LOWER = (lm.RIGHT_EYE[0], *lm.RIGHT_EYE[9:][::-1], lm.RIGHT_EYE[8])
LEFT_EYE_UPPER = lm.LEFT_EYE[:9]
LEFT_EYE_LOWER = (lm.LEFT_EYE[0], *lm.LEFT_EYE[9:][::-1], lm.LEFT_EYE[8])
RIGHT_BROW = tuple(zip(lm.RIGHT_BROW[:5], lm.RIGHT_BROW[5:][::-1]))
LEFT_BROW = tuple(zip(lm.LEFT_BROW[:5], lm.LEFT_BROW[5:][::-1]))
LIPS_OUTER = lm.LIPS_OUTER
LIPS_INNER_UPPER = lm.LIPS_INNER[:11]
LIPS_INNER_LOWER = (lm.LIPS_INNER[0], *lm.LIPS_INNER[11:][::-1], lm.LIPS_INNER[10])
FACE_OVAL = lm.FACE_OVAL
JAW = (234, 93, 132, 58, 172, 136, 150, 149, 176, 148, 152, 377, 400, 378, 379, 365, 397, 288, 361, 323, 454)
JAW_W = 0.03  # the jaw line's width at the chin (u)
JAW_BEYOND = 0.12  # where the skin is looked for past the jaw line (u)
JAW_SEARCH = (0.05, 0.3)  # the photo's jaw edge is looked for this far inside and outside the mesh's (u)
JAW_EDGE_L = 6.0  # ... where its light falls off by at least this (L*, over 2 of 16 steps)
JAW_SNAP_SPAN = 0.35  # ... on the lower jaw: t within this of the chin (0.5; the jaw's ends are at 0 and 1)
JAW_SMOOTH = 15  # points of the jaw's spline (4 a mesh segment, ~80 in all) the moves are smoothed over
CHEEKS = (50, 280)  # right, left: where the blush sits
CHEEK_SAMPLES = (50, 280, 101, 330, 117, 346, 205, 425)  # skin colour, away from eyes, nose and mouth
NOSE_TIP, NOSE_BOTTOM, NOSE_WINGS = 4, 2, (98, 327)
GLABELLA, BRIDGE = 168, 6  # between the brows, and the nose's bridge between the eyes: where glasses' bridge crosses
RIM = (0.85, 0.3, 0.0)  # a drawn lower rim: half its width (of the eye's), its depth, its centre above the eye's (u)
RIM_W = 0.022  # its line's width (u)
RIM_COLOUR = np.array([70, 64, 66], np.float32)
FRAME_L = 32.0  # with glasses, what is darker than this (fading out over 10 L*) near the eyes is kept: at 20 a thin
# metal lower rim (face_7's, L* 30-40) was painted over, and the frame came out as its top bar alone
GLASSES_L = (30.0, 22.0)  # a frame: its bridge darker than the first (L*), or both top rims than the second (_glasses)
N_POINTS = 468

SUPERSAMPLE = 3
# Colours (sRGB u8) of the convention; tinted by the photo's own where it says so.
INK = np.array([38, 26, 30], np.float32)  # lash line, pupil
EYE_WHITE = np.array([252, 250, 250], np.float32)
LID_SHADOW = np.array([196, 198, 222], np.float32)  # the upper lid's shadow on the eye white
BLUSH = np.array([255, 118, 128], np.float32)
HIGHLIGHT = np.array([255, 255, 255], np.float32)
# a* of the lips over the cheeks' (CIELAB) at which the lips and blush are drawn faintest and fullest: the shared
# faces measured 4-20 bare, 21-31 with lipstick. Raters called the same blush and lip tint on every face "one
# template for all" (blush on men); the photo's own colour sets it instead, not a guess at who the person is.
LIP_REDNESS = (10.0, 30.0)
MOUTH_LINE = np.array([122, 52, 58], np.float32)
MOUTH_INSIDE = np.array([112, 38, 48], np.float32)
TEETH = np.array([248, 244, 240], np.float32)
LIP_PINK = np.array([232, 112, 124], np.float32)
# Shapes, in units of the eyes' distance (``u``) or of the eye's own size.
EYE_RAISE, EYE_LOWER = 2.1, 1.4  # the upper and lower lids moved off the eye's axis by these factors
EYE_WIDEN = 1.2
SHUT_ERASE = 0.16  # a shut eye's photo is painted over this far above and below its middle (u)
CLOSED_EYE = 0.12  # opening / width below which an eye is drawn shut (a smile's curve)
SQUINT = 0.3  # share of skin in the eyes' openings above which both are drawn shut (anime's ^ ^; a stare read wrong)
GAZE_GAIN = 1.5  # the iris's shift from the eye's middle, of the photo's
SMILE = 0.03  # mouth corners this much of the mouth's width above its middle: a smile
IRIS_W, IRIS_H = 0.54, 1.0  # of the eye's width, of the drawn opening
LASH_W = (0.045, 0.11)  # the upper lash line's width at the inner and outer corner (u)
BROW_W = (0.05, 0.018)  # the brow's width at the inner end and the tail (u)
FEATURE_EYE = (0.8, 0.55)  # around the eye, the skin is painted whatever is there: half-axes, times the eye's width
BROW_ERASE = (1.3, 3.0)  # the photo's brow is painted over in a band this much longer and taller than the mesh's
BROW_PAD = (0.1, 0.2, 0.15)  # ... and in one this far above, below and past it in the face's frame (u)
BROW_EYE_GAP = 0.08  # ... keeping this far above the eye's lid (u)
MOUTH_NARROW = (0.75, 0.6)  # the drawn mouth's width and height, of the photo's (a closed mouth)
MOUTH_OPEN_SIZE = (0.92, 0.9)  # ... an open one: a grin keeps its width, or the expression is lost
OPEN_MOUTH = 0.08  # lip gap / mouth width above which the mouth is drawn open
HAIR_REACH = (1.1, 1.3, 1.6)  # how far hair is looked for beside, above and below the face's oval (u)
HAIR_LIKE = 16.0  # CIELAB distance to the hair's colour at which a pixel is half hair
# ... where a lightness difference counts less than a hue one (squared): 1.5 lighter than the hair's colour (a grey
# wall behind black hair differs in L* alone), this darker: hair is shaded over a wide range of L* at one hue, and at
# 1.5 a blonde's darker roots (L* 30 below the ends) were left to the style's blotch.
HAIR_DARKER_SPREAD = 4.0
EDGE_RAMP = 0.06  # a crisp edge (``_crisp``): alpha 0.5 -/+ this brought to 0 and 1
OVAL_BAND = (0.85, 1.15)  # the band where skin and hair meet: the face's oval scaled by these about its middle
GAP_NEAR = 0.2  # in that band, what is neither skin nor hair becomes hair within this of it (u) ...
GAP_SIGMA = 0.15  # ... in the hair's colour carried over at this blur (u)
CRISP_FADE = 0.3  # the crisp edges fade out over this (u) about the top of the brows: the hairline stays soft
MASS_UNIT_PX = 40.0  # hair and skin are drawn where the eyes are at most this far apart, then brought up
# The cel shading of skin and hair follows the photo's light at these scales (u), not its creases and roots: at
# 0.15 / 0.12 face_3's nasolabial folds and eye bags became shadow bands, face_1's roots a dark blob.
SKIN_SHADE_SIGMA, HAIR_SHADE_SIGMA = 0.3, 0.2
# Skin this much darker (L*) than the face's median is drawn in the shadow tone: a side light or a cap's brim, not
# the soft fall-off of a frontal light (at 11, face_5's slightly darker cheek split her face in two halves).
SKIN_SHADOW_L = 15.0
# The skin tests are smoothed at this scale (u) before their steep ramps: at 0.01 the photo's grain decided pixel by
# pixel, and a forehead came out dithered between the drawn skin and the style's (face_8's)
SKIN_TEST_SIGMA = 0.05
SKIN_MIN_L = 22.0  # darker than this (L*, fading in over 8) inside the oval is hair across the face, not skin in shade
NECK = (0.6, 0.9, 0.8)  # the neck's half width and half height, its centre this far below the chin (u)
# the neck is skin in shade: L* tolerances darker and lighter than the cheeks (a lighter pixel is a collar)
NECK_DARKER_L, NECK_LIGHTER_L = 70.0, 6.0
NECK_SHADOW_DEPTH, NECK_SHADOW_SPAN, NECK_SHADOW_TONE = 0.35, 0.3, 0.6  # the chin's shadow: its depth (u), reach
# along the jaw (t from the chin), tone (0 skin, 1 the skin's shadow)
NECK_HUE = 50.0  # degrees of CIELAB hue from the cheeks' at which the neck's paint has faded out (from 30)
CAP_BAND = 1.25  # under a cap, skin in the brim's shade is painted out to the face's oval scaled by this (``_skin``)
STRAND_PX = 0.18  # half the length of a strand line, along the hair's flow (u)
# Hair within this CIELAB distance of the skin is left to the style: its colour test cannot keep the drawn mass off
# the skin. The face photos' hair measures 22-26 (two blondes), 24-29 (face_4's bronze) and 41-73 (dark hair,
# crowd faces included), the ranges being the mesh moved by half a pixel either way. At 25 face_4 sat on the
# line: a detector box moved by 0.3 px took it across, and drawn, his spiky hair came out a blurry brown mass with
# a pale band over the temples (2026-12-05; the style's own spikes are what the blind rounds rated). scikit-image's
# astronaut (mid brown, 26-30) was drawn too, a flat mass cut off square beside her face; the style's has its shape.
FAIR_HAIR = 32.0
FAIR_MIN_L = 60.0  # fair hair (within FAIR_HAIR of the skin) this light (L*) is a blonde's: it is evened out
FAIR_ABOVE = 0.6  # ... from this far above the head's centre (u; the hairline is at about 1) ...
FAIR_BESIDE = 0.9  # ... and from this far beside it (u; its side hair), fully 0.2 further ...
FAIR_CLOSE = 0.12  # ... over the hair's mask closed at this radius (u) ...
FAIR_DROP = 6.0  # ... where the style painted it this many levels of luma darker than the hair's colour ...
FAIR_SIGMA = 0.4  # ... its local colour a blur at this sigma (u)
# The crown's highlight (anime's "angel ring", ``_ring``): a band in the hair's colour lightened this much toward
# white, from this share of the hair's thickness below its outline, at least this thick and with teeth this long
# (shares of the thickness), this many teeth to a half turn, over this far either side of straight up (radians);
# only where the hair is at least this thick (u), and only where the photo's L* varies by this much (standard
# deviation of its fine detail) under it: strands. Caps measured 1.6-1.75, dark hair 2.6-4.4 on the shared faces.
RING_LIGHT = 0.28
RING_DEPTH = (0.16, 0.06, 0.3)
RING_TEETH = 16
RING_SPAN = 1.0
RING_MIN_THICK = 0.25
RING_MIN_DETAIL = 2.1
RING_BINS = 180  # directions the hair's outline is read in
# Where the photo is grey (CIELAB C* up to the first, fading out at the second; lighter than L* 20-30, where a low
# chroma is a colour the eye still reads as grey), the hair is drawn grey of its own lightness: greying temples
# painted in the hair's brown put a cast of 7 on face_4 (issue 41's bound is 6; look.py's cast is the output's
# chroma where the photo has C* < 4; 3.9 with this). Not the skin: pale skin in light has C* under 8, and greyed
# it turned into blotches on face_5's forehead.
GREY_CHROMA = (4.0, 8.0)
GREY_DARK = (20.0, 30.0)
GREY_SOFTEN = 0.12  # the grey weight's blur (u): at 0.02 an ash blonde's hair (C* 3-12) came out in grey and beige


@dataclass(frozen=True)
class Palette:
    """The face's colours, read once from the photo and the stylized picture."""

    skin: np.ndarray
    shadow: np.ndarray
    light: np.ndarray
    iris: np.ndarray
    lips: np.ndarray
    brow: np.ndarray
    skin_lab: np.ndarray  # the photo's skin, CIELAB, for the skin mask
    colour: float  # 0-1: how much redder the photo's lips are than its cheeks (lipstick ~1, bare lips ~0)


@dataclass
class Held:
    """The portrait's yes/no choices for one face across a clip's frames (hair drawn or not, strands or a cap, eyes
    shut, glasses), so a face is not drawn one way in a frame and the other way in the next. Each choice is made on
    a measure against its line, and several faces sit near theirs: with the camera shaking by up to 0.6 px, a still
    photo's face_3 had its hair drawn and left to the style by turns (11 changes in 20 frames) and face_5's drawn
    with strands and as a cap (8); held, 0 and 0. Once made, a choice changes only when its measure is past its
    line by a margin (``MARGINS``): a real change (a hat put on, a grin) still goes through within a frame or two."""

    said: dict[str, bool] = field(default_factory=dict)


# Each choice's margin, in its measure's units (``_past``): the samples off the skin that make hair (of 150 at the
# drawing's scale), the hair's CIELAB distance from the skin, the hair mask's area over its least (0.3 u squared), the
# strands' fine detail (L*), the share of skin in the eyes' openings, the glasses' darkest frame against its line (L*)
MARGINS = {"hair": 6.0, "dark hair": 2.0, "hair mass": 0.25, "strands": 0.3, "shut": 0.05, "bare": 3.0}


def _past(held: Held | None, choice: str, value: float, line: float, *, strict: bool = False) -> bool:
    """Whether ``value`` is at or past ``line`` (past it, with ``strict``); with ``held``, a choice made before for
    this face stays unless ``value`` is past the line the other way by ``MARGINS[choice]``."""
    before = held.said.get(choice) if held is not None else None
    if before is not None:
        line = line - MARGINS[choice] if before else line + MARGINS[choice]
    now = value > line if strict else value >= line
    if held is not None:
        held.said[choice] = now
    return now


def draw_portrait(canvas: np.ndarray, photo: np.ndarray, points: np.ndarray, held: Held | None = None
                  ) -> tuple[int, int, int, int] | None:
    """Draw the face whose 468 landmarks (x, y in ``canvas`` pixels) are ``points`` onto ``canvas`` (the stylized
    picture or a face's stylized crop, H x W x 3 u8, changed in place); ``photo`` is the same view of the photo.
    ``held``: the face's choices in the clip's frames so far (a still picture has none). Returns the pixels changed
    (x0, y0, x1, y1), or None when the face is too small or off the canvas."""
    unit = float(np.linalg.norm(_centre(points, RIGHT_EYE_UPPER + RIGHT_EYE_LOWER)
                                - _centre(points, LEFT_EYE_UPPER + LEFT_EYE_LOWER)))
    if unit < 6 or points.shape != (N_POINTS, 2):
        return None
    box = _region(points, unit, canvas.shape[1], canvas.shape[0], margin=HAIR_REACH)
    if box is None:
        return None
    x0, y0, x1, y1 = box
    sheet = Sheet(canvas[y0:y1, x0:x1].astype(np.float32), (x0, y0))
    local_photo = photo[y0:y1, x0:x1]
    palette = _palette(sheet.rgb, local_photo, points - (x0, y0), unit)
    luma = np.asarray(Image.fromarray(np.ascontiguousarray(local_photo)).convert("L"), np.float32) * (100 / 255)
    # without glasses, nothing dark around the eyes and brows is a frame to keep: the photo's brows, lashes and lid
    # shadows are painted over whatever their darkness (face_3's black brows stayed beside the drawn ones)
    glasses = _glasses(luma, points - (x0, y0), unit, held)
    cover = _masses(sheet, local_photo, points, unit, palette, glasses=glasses, held=held)
    # both eyes or neither: no stray wink
    shut = _past(held, "shut", _squint(local_photo, points - (x0, y0), palette), SQUINT, strict=True)
    # the photo's brows painted over in the face's frame (``_brow_frame_band``) before the eyes are drawn: painted
    # after them, the band's soft edge took the top off the drawn lash line, "a smudgy eyeshadow above the lids" (cmp44)
    framed = tuple(_brow_frame_band(points, brow, unit) for brow in (RIGHT_BROW, LEFT_BROW))
    sheet.paint(palette.skin, np.clip(1.4 * sheet.mask(polygons=framed, blur_px=0.04 * unit), 0, 1)
                * _frames(sheet, luma, glasses, points) * (1 - cover))
    for upper, lower in ((RIGHT_EYE_UPPER, RIGHT_EYE_LOWER), (LEFT_EYE_UPPER, LEFT_EYE_LOWER)):
        part, (photo_part, luma_part) = sheet.around(points[list(upper + lower)], 0.7 * unit, local_photo, luma)
        _eye(part, photo_part, luma_part, points, upper, lower, unit, palette, shut=shut, glasses=glasses)
    for brow in (RIGHT_BROW, LEFT_BROW):
        part, (luma_part, cover_part) = sheet.around(points[[i for pair in brow for i in pair]], 0.5 * unit, luma,
                                                     cover)
        _brow(part, luma_part, points, brow, unit, palette, glasses=glasses, cover=cover_part)
    if glasses:
        for upper, lower in ((RIGHT_EYE_UPPER, RIGHT_EYE_LOWER), (LEFT_EYE_UPPER, LEFT_EYE_LOWER)):
            _rim(sheet.around(points[list(upper + lower)], 0.9 * unit)[0], points, upper, lower, unit)
    nose, (photo_part,) = sheet.around(points[[NOSE_TIP, NOSE_BOTTOM, *NOSE_WINGS]], 0.4 * unit, local_photo)
    _nose(nose, photo_part, points, unit, palette)
    _mouth(sheet.around(points[list(LIPS_OUTER)], 0.3 * unit)[0], points, unit, palette)
    canvas[y0:y1, x0:x1] = np.clip(np.rint(sheet.rgb), 0, 255).astype(np.uint8)
    return box


def _masses(sheet: Sheet, photo: np.ndarray, points: np.ndarray, unit: float, palette: Palette, *,
            glasses: bool, held: Held | None = None) -> np.ndarray:
    """The hair and the skin, the large flat areas: drawn where the eyes are at most ``MASS_UNIT_PX`` apart (a
    selfie's are ~150 px: 5x fewer pixels, 1.3 s -> 0.3 s for an 860 px one), as layers brought up to the
    sheet's size and laid over it. The features (eyes, brows, mouth) are then drawn at full size. Returns where
    the hair covers the sheet (0..1), which the brows' erasing leaves alone (``_crisp``)."""
    cover = np.zeros((sheet.height, sheet.width), np.float32)
    scale = min(1.0, MASS_UNIT_PX / unit)
    if scale >= 1.0:
        lab = _lab(photo)
        drawn = _hair(sheet, photo, lab, points, unit, palette, held)
        _skin(sheet, lab, points, unit, palette, glasses=glasses, capped=drawn == "cap")
        return cover
    size = (max(1, round(sheet.width * scale)), max(1, round(sheet.height * scale)))
    small_photo = np.asarray(Image.fromarray(np.ascontiguousarray(photo)).resize(size, Image.Resampling.BOX))
    base = np.stack([_resize_f(sheet.rgb[..., c], size) for c in range(3)], axis=-1)
    hair, skin = Sheet(base, (0, 0), layered=True), Sheet(base, (0, 0), layered=True)
    hair.origin = skin.origin = sheet.origin * scale
    small_points, small_unit = points * scale, unit * scale
    lab = _lab(small_photo)
    drawn = _hair(hair, small_photo, lab, small_points, small_unit, palette, held)
    strands = drawn == "strands"
    _skin(skin, lab, small_points, small_unit, palette, glasses=glasses, beside=hair.alpha if strands else None,
          capped=drawn == "cap")
    full = (sheet.width, sheet.height)
    if not strands:  # soft edges, as drawn: a cap's brim drawn crisp bared the tan band under it (cmp28)
        colour, alpha = _brought_up(_over(hair, skin), full)
        sheet.rgb = sheet.rgb * (1 - alpha[..., None]) + colour
        return cover
    return _crisp(sheet, _brought_up((hair.colour, hair.alpha), full), _brought_up((skin.colour, skin.alpha), full),
                  points, unit)


Layer = tuple[np.ndarray | None, np.ndarray | None]  # premultiplied colour (H x W x 3) and alpha (H x W)
HairKind = Literal["strands", "cap", "none"]  # what ``_hair`` drew


def _over(bottom: Sheet, top: Sheet) -> Layer:
    """Two layers as one: ``top`` over ``bottom`` (premultiplied), what painting both on one layer would give."""
    assert bottom.colour is not None and bottom.alpha is not None and top.colour is not None and top.alpha is not None
    return bottom.colour * (1 - top.alpha[..., None]) + top.colour, bottom.alpha * (1 - top.alpha) + top.alpha


def _brought_up(layer: Layer, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """A small layer brought up to ``size`` (bilinear): its colour (premultiplied) and its alpha."""
    colour, alpha = layer
    assert colour is not None and alpha is not None
    return (np.stack([_resize_f(colour[..., c], size) for c in range(3)], axis=-1),
            np.clip(_resize_f(alpha, size), 0, 1))


def _steep(alpha: np.ndarray) -> np.ndarray:
    """An alpha's edge made crisp: 0 below 0.5 - ``EDGE_RAMP``, 1 above 0.5 + ``EDGE_RAMP``."""
    return np.asarray(np.clip((alpha - 0.5) / (2 * EDGE_RAMP) + 0.5, 0, 1), np.float32)


def _crisp(sheet: Sheet, hair: tuple[np.ndarray, np.ndarray], skin: tuple[np.ndarray, np.ndarray],
           points: np.ndarray, unit: float) -> np.ndarray:
    """Hair and skin laid over the sheet with crisp edges where they meet, as anime draws hair over a face. Drawn
    small and brought up, their edges were ramps some 15 px wide on a selfie with the style's blur between them:
    "the hair cuts into the face, a lopsided, blurry-edged face shape" (face_5, every round), "the face-to-hair
    boundary soft and blurry" (face_6). From the brows down (``CRISP_FADE``) the hair's edge is made crisp
    (``_steep``); in a band about the face's oval (``OVAL_BAND``) the skin's is too, and what is neither skin nor
    hair there becomes hair where hair is near (``GAP_NEAR``, in the hair's colour carried over at ``GAP_SIGMA``).
    Inside the band the skin keeps its soft paint: steepened there, it bared the photo's dark eye corners as dots
    (face_3). Above the brows nothing changes: the hairline drawn crisp was "a ragged brown fringe" to two raters
    (face_6). The skin's own drawing keeps off this hair (``_skin``'s ``beside``). Returns the hair's cover."""
    (hair_colour, hair_alpha), (skin_colour, skin_alpha) = hair, skin
    ring = points[list(FACE_OVAL)].astype(np.float64)
    middle = ring.mean(axis=0)
    core, outer = (sheet.mask(polygons=(middle + (ring - middle) * k,), blur_px=0.05 * unit) for k in OVAL_BAND)
    # not across the top of the head: there the hairline drawn crisp came out a ragged brown fringe (face_6, two
    # raters); from the brows down the sides and the jaw (what face_3 and face_5 gained) it is crisp
    up = _up(points)
    brows = points[[i for pair in RIGHT_BROW + LEFT_BROW for i in pair]]
    top = brows[int(np.argmax(brows @ up))]  # the highest brow point
    sides = np.clip(0.5 - sheet.along(top, up) / (CRISP_FADE * unit), 0, 1).astype(np.float32)
    band = outer * (1 - core) * sides
    cover = hair_alpha + (_steep(hair_alpha) - hair_alpha) * sides
    hair_colour = _unpremultiplied(hair_colour, hair_alpha) * cover[..., None]
    skin_cover = skin_alpha + (_steep(skin_alpha) - skin_alpha) * np.maximum(cover, outer) * (1 - core) * sides
    near, carried = _reach(cover, hair_colour, unit)
    gap = band * _steep(near) * (1 - _steep(skin_alpha)) * (1 - cover)
    hair_colour = hair_colour + carried * gap[..., None]
    cover = np.asarray(cover + gap, np.float32)
    skin_colour = _unpremultiplied(skin_colour, skin_alpha) * skin_cover[..., None]
    sheet.rgb = (sheet.rgb * (1 - cover[..., None]) + hair_colour) * (1 - skin_cover[..., None]) + skin_colour
    return cover


def _reach(cover: np.ndarray, colour: np.ndarray, unit: float) -> tuple[np.ndarray, np.ndarray]:
    """Where the hair is within ``GAP_NEAR`` (0..1, 0.5 at that distance) and the hair's colour carried there (its
    colour blurred at ``GAP_SIGMA``, over its cover). Both are smooth, so they are computed at the layers' own
    scale (``MASS_UNIT_PX`` between the eyes) and brought up: at the sheet's size their five blurs were a third of
    a selfie's portrait. Near is a blur of the cover at half the reach, times 20: a half plane's blur is 1/40 two
    sigmas out (Pillow's MaxFilter of that size took 1.7 s)."""
    height, width = cover.shape
    step = max(1, int(unit // MASS_UNIT_PX))
    small = (max(1, width // step), max(1, height // step))

    def shrunk(values: np.ndarray) -> np.ndarray:
        image = Image.fromarray(np.ascontiguousarray(np.clip(values, 0, 255), np.float32), "F")
        reduced: np.ndarray = np.clip(np.rint(np.asarray(image.resize(small, Image.Resampling.BOX))), 0, 255)
        return reduced.astype(np.uint8)

    near = _blur(np.uint8(shrunk((cover > 0.5) * 255.0) > 127) * 255, GAP_NEAR * unit / step / 2) / 255 * 20
    weight = _blur(shrunk(cover * 255.0), GAP_SIGMA * unit / step) / 255
    carried = [_blur(shrunk(colour[..., c]), GAP_SIGMA * unit / step) / np.maximum(weight, 1e-3) for c in range(3)]
    full = (width, height)
    return _resize_f(np.asarray(near, np.float32), full), np.stack([_resize_f(c, full) for c in carried], axis=-1)


def _unpremultiplied(colour: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.asarray(colour / np.maximum(alpha, 1e-4)[..., None], np.float32)


def _resize_f(channel: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """One float channel resized (bilinear; Pillow's "F" mode keeps it float)."""
    image = Image.fromarray(np.ascontiguousarray(channel, np.float32), "F")
    return np.asarray(image.resize(size, Image.Resampling.BILINEAR), np.float32)


class Sheet:
    """A region of the canvas in float, and masks drawn on it at ``SUPERSAMPLE`` x in canvas coordinates.

    ``layered``: paints go to a layer (premultiplied ``colour`` and its ``alpha``) instead of ``rgb``, which stays
    the picture the drawing reads from; ``picture * (1 - alpha) + colour`` is then what painting on it would
    have given, so a layer drawn small can be brought up and laid over the picture at full size."""

    def __init__(self, rgb: np.ndarray, origin: tuple[int, int], *, layered: bool = False) -> None:
        self.rgb = rgb
        self.origin = np.array(origin, np.float64)
        self.height, self.width = rgb.shape[:2]
        self.colour = np.zeros_like(rgb) if layered else None
        self.alpha = np.zeros(rgb.shape[:2], np.float32) if layered else None

    def mask(self, *, polygons: tuple[np.ndarray, ...] = (), ellipses: tuple[tuple[np.ndarray, float, float], ...] = (),
             blur_px: float = 0.0) -> np.ndarray:
        """Filled polygons and ellipses ((centre, rx, ry), canvas px) as a 0..1 mask of the sheet's size.

        Drawn only in the shapes' own box (and the blur's reach): a face has ~25 shapes, and drawing each over the
        whole face at 3x cost a 1024 px selfie 0.8 s."""
        out = np.zeros((self.height, self.width), np.float32)
        corners = [p for p in polygons if len(p) >= 3] + [np.array([[c[0] - rx, c[1] - ry], [c[0] + rx, c[1] + ry]])
                                                          for c, rx, ry in ellipses]
        if not corners:
            return out
        every = np.vstack(corners) - self.origin
        reach = 2 + math.ceil(3 * blur_px)
        x0, y0 = max(0, math.floor(every[:, 0].min()) - reach), max(0, math.floor(every[:, 1].min()) - reach)
        x1 = min(self.width, math.ceil(every[:, 0].max()) + reach)
        y1 = min(self.height, math.ceil(every[:, 1].max()) + reach)
        if x1 <= x0 or y1 <= y0:
            return out
        shift = self.origin + np.array([x0, y0], np.float64)
        image = Image.new("L", ((x1 - x0) * SUPERSAMPLE, (y1 - y0) * SUPERSAMPLE), 0)
        draw = ImageDraw.Draw(image)
        for polygon in polygons:
            if len(polygon) >= 3:
                draw.polygon(_scaled(polygon, shift), fill=255)
        for centre, rx, ry in ellipses:
            (cx, cy), = _scaled(np.asarray(centre)[None], shift)
            draw.ellipse((cx - rx * SUPERSAMPLE, cy - ry * SUPERSAMPLE, cx + rx * SUPERSAMPLE, cy + ry * SUPERSAMPLE),
                         fill=255)
        small = image.resize((x1 - x0, y1 - y0), Image.Resampling.BOX)
        if blur_px > 0:
            small = small.filter(ImageFilter.GaussianBlur(blur_px))
        out[y0:y1, x0:x1] = np.asarray(small, np.float32) / 255.0
        return out

    def along(self, point: np.ndarray, direction: np.ndarray) -> np.ndarray:
        """Each pixel's offset from ``point`` (canvas px) along ``direction`` (a unit vector): how far up the face,
        below the eyes or above the brows a pixel lies."""
        across = (np.arange(self.width, dtype=np.float32) + np.float32(self.origin[0] - point[0])) * direction[0]
        down = (np.arange(self.height, dtype=np.float32) + np.float32(self.origin[1] - point[1])) * direction[1]
        offset: np.ndarray = (across[None, :] + down[:, None]).astype(np.float32)  # one row and one column, summed
        return offset

    def around(self, pts: np.ndarray, margin: float, *aligned: np.ndarray) -> tuple[Sheet, tuple[np.ndarray, ...]]:
        """The part of this sheet within ``margin`` of ``pts`` (canvas px), as a sheet that paints into this one (a
        view), and the same part of each array in ``aligned``: a feature's masks cost its own box, not the face's."""
        local = np.asarray(pts, np.float64) - self.origin
        x0, y0 = max(0, math.floor(local[:, 0].min() - margin)), max(0, math.floor(local[:, 1].min() - margin))
        x1 = max(x0 + 1, min(self.width, math.ceil(local[:, 0].max() + margin)))
        y1 = max(y0 + 1, min(self.height, math.ceil(local[:, 1].max() + margin)))
        part = Sheet(self.rgb[y0:y1, x0:x1], (0, 0))
        part.origin = self.origin + np.array([x0, y0], np.float64)
        return part, tuple(a[y0:y1, x0:x1] for a in aligned)

    def paint(self, colour: np.ndarray, alpha: np.ndarray) -> None:
        """Blend ``colour`` (3, or H x W x 3) over the sheet where ``alpha`` (H x W, 0..1) says: only in the box
        where it is not zero (most shapes cover a few % of the face)."""
        rows, cols = np.flatnonzero((alpha > 0).any(axis=1)), np.flatnonzero((alpha > 0).any(axis=0))
        if not rows.size:
            return
        y0, y1, x0, x1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
        a = np.clip(alpha[y0:y1, x0:x1], 0.0, 1.0)[..., None]
        c = np.broadcast_to(colour, self.rgb.shape)[y0:y1, x0:x1] if np.ndim(colour) == 3 else colour
        if self.colour is not None and self.alpha is not None:
            self.colour[y0:y1, x0:x1] = self.colour[y0:y1, x0:x1] * (1 - a) + c * a  # premultiplied "over"
            self.alpha[y0:y1, x0:x1] = self.alpha[y0:y1, x0:x1] * (1 - a[..., 0]) + a[..., 0]
            return
        self.rgb[y0:y1, x0:x1] += (c - self.rgb[y0:y1, x0:x1]) * a


def _scaled(pts: np.ndarray, origin: np.ndarray) -> list[tuple[float, float]]:
    """Canvas points -> Pillow's coordinates on a supersampled image whose corner is ``origin``."""
    local = (np.asarray(pts, np.float64) - origin) * SUPERSAMPLE
    return [(float(x), float(y)) for x, y in local]


def _centre(points: np.ndarray, idx: tuple[int, ...]) -> np.ndarray:
    return np.asarray(points[list(idx)].mean(axis=0))


def _region(points: np.ndarray, unit: float, width: int, height: int, *,
            margin: tuple[float, float, float] = (0.35, 0.35, 0.35)) -> tuple[int, int, int, int] | None:
    """The canvas pixels the drawing may touch: the face's oval and a margin (sides, top, bottom; in ``unit``)
    for lashes and blush, or for the hair."""
    oval = points[list(FACE_OVAL)]
    side, top, bottom = (m * unit for m in margin)
    x0, y0 = max(0, math.floor(oval[:, 0].min() - side)), max(0, math.floor(oval[:, 1].min() - top))
    x1, y1 = min(width, math.ceil(oval[:, 0].max() + side)), min(height, math.ceil(oval[:, 1].max() + bottom))
    return (x0, y0, x1, y1) if x1 - x0 > 4 and y1 - y0 > 4 else None


def _lab(rgb: np.ndarray) -> np.ndarray:
    """sRGB u8 (..., 3) -> CIELAB (D65), for colour distances."""
    c = np.asarray(rgb, np.float32) / 255.0
    c = np.where(c > 0.04045, ((c + 0.055) / 1.055) ** 2.4, c / 12.92)
    xyz = c @ np.array([[0.4124, 0.2126, 0.0193], [0.3576, 0.7152, 0.1192], [0.1805, 0.0722, 0.9505]], np.float32)
    xyz /= np.array([0.9505, 1.0, 1.089], np.float32)
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def _sample(image: np.ndarray, pts: np.ndarray, radius: float) -> np.ndarray:
    """The pixels within ``radius`` of each point (those on the image), stacked: n x 3."""
    h, w = image.shape[:2]
    r = max(1, round(radius))
    out = []
    for x, y in pts:
        xi, yi = round(float(x)), round(float(y))
        patch = image[max(0, yi - r):min(h, yi + r + 1), max(0, xi - r):min(w, xi + r + 1)]
        if patch.size:
            out.append(patch.reshape(-1, 3))
    return np.concatenate(out).astype(np.float32) if out else np.zeros((1, 3), np.float32) + 128


def _polygon_pixels(image: np.ndarray, polygon: np.ndarray) -> np.ndarray:
    """The pixels of ``image`` inside ``polygon`` (image coordinates): n x 3 (the polygon's centre if none)."""
    h, w = image.shape[:2]
    m = Image.new("L", (w, h), 0)
    ImageDraw.Draw(m).polygon([(float(x), float(y)) for x, y in polygon], fill=255)
    sel = np.asarray(m) > 0
    if sel.sum() < 3:
        return _sample(image, polygon.mean(axis=0)[None], 1)
    return image[sel].astype(np.float32)


def _saturate(rgb: np.ndarray, gain: float, *, toward: np.ndarray | None = None, mix: float = 0.0) -> np.ndarray:
    grey = rgb.mean()
    out = grey + (rgb - grey) * gain
    if toward is not None:
        out = out * (1 - mix) + toward * mix
    return np.asarray(np.clip(out, 0, 255), np.float32)


def _palette(stylized: np.ndarray, photo: np.ndarray, pts: np.ndarray, unit: float) -> Palette:
    """Skin from the stylized picture (its palette), iris, lips and brows from the photo, each pushed toward the
    convention: lighter warm skin, a saturated iris, pink lips."""
    cheeks = pts[list(CHEEK_SAMPLES)]
    skin = np.median(_sample(stylized, cheeks, 0.06 * unit), axis=0)
    skin = _saturate(skin, 1.1, toward=np.array([255, 226, 212], np.float32), mix=0.2)
    shadow = np.clip(skin * np.array([0.88, 0.76, 0.78], np.float32), 0, 255)
    light = skin + (255 - skin) * 0.4
    iris_px = np.concatenate([_polygon_pixels(photo, pts[list(RIGHT_EYE_UPPER + RIGHT_EYE_LOWER[::-1])]),
                              _polygon_pixels(photo, pts[list(LEFT_EYE_UPPER + LEFT_EYE_LOWER[::-1])])])
    luma = iris_px.mean(axis=1)
    dark = iris_px[luma <= np.percentile(luma, 35)]
    iris = _saturate(dark.mean(axis=0), 2.2, toward=np.array([150, 82, 50], np.float32), mix=0.5)
    lips_px = _polygon_pixels(photo, pts[list(LIPS_OUTER)])
    lips = _saturate(np.median(lips_px, axis=0), 1.3, toward=LIP_PINK, mix=0.45)
    brow_px = _sample(photo, np.array([(pts[a] + pts[b]) / 2 for a, b in RIGHT_BROW + LEFT_BROW]), 0.03 * unit)
    brow = np.clip(np.percentile(brow_px, 30, axis=0) * 0.7, 0, 255).astype(np.float32)
    skin_lab = np.median(_lab(_sample(photo, pts[list(CHEEK_SAMPLES)], 0.06 * unit)), axis=0)
    lips_a = float(np.median(_lab(lips_px)[:, 1])) if len(lips_px) else skin_lab[1]
    colour = float(np.clip((lips_a - float(skin_lab[1]) - LIP_REDNESS[0]) / (LIP_REDNESS[1] - LIP_REDNESS[0]), 0, 1))
    return Palette(skin, shadow, light, np.clip(iris, 0, 255), lips, brow, skin_lab, colour)


def _up(points: np.ndarray) -> np.ndarray:
    """The face's up direction in the picture (unit vector from the chin to the forehead)."""
    d = points[FACE_OVAL[0]] - points[lm.CHIN]
    return np.asarray(d / max(float(np.linalg.norm(d)), 1e-6), np.float64)


def _hair(sheet: Sheet, photo: np.ndarray, lab: np.ndarray, points: np.ndarray, unit: float, palette: Palette,
          held: Held | None = None) -> HairKind:
    """Hair as flowing masses: flat tones (shadow, base, a highlight band) in the picture's own hair colour, and
    strand lines along the hair's flow, where the photo has the colour found above the forehead and at the
    temples. "strands" when it is drawn and the photo shows strands at the crown (``_strand_detail``): hair whose edges
    may be drawn crisp. "cap" when what is drawn shows none: a cap or a hat, whose brim shades the forehead under
    it (``_skin``). "none" when nothing is drawn (a bald head, a hat the colour of the skin, fair hair)."""
    up = _up(points)
    side = np.array([up[1], -up[0]])
    seeds = [points[10] + up * 0.3 * unit, points[10] + up * 0.5 * unit,
             points[54] + (up * 0.3 - side * 0.1) * unit, points[284] + (up * 0.3 + side * 0.1) * unit,
             points[127] - side * 0.25 * unit, points[356] + side * 0.25 * unit]
    samples = _lab(_sample(photo, np.array(seeds) - sheet.origin, 0.05 * unit))
    not_skin = samples[np.linalg.norm(samples - palette.skin_lab, axis=1) > 18.0]
    if not _past(held, "hair", len(not_skin), 40):
        return "none"
    ref = np.median(not_skin, axis=0)
    # hair near the skin's colour: not drawn (below)
    fair = not _past(held, "dark hair", float(np.linalg.norm(ref - palette.skin_lab)), FAIR_HAIR)
    d = lab - ref
    spread = np.where(d[..., 0] < 0, HAIR_DARKER_SPREAD, 1.5)
    like = np.exp(-(d[..., 0] ** 2 / spread + d[..., 1] ** 2 + d[..., 2] ** 2) / (2 * HAIR_LIKE ** 2))
    head = points[list(FACE_OVAL)].mean(axis=0) + up * 0.4 * unit
    yy, xx = np.mgrid[0:sheet.height, 0:sheet.width].astype(np.float64)
    rel_x, rel_y = xx + sheet.origin[0] - head[0], yy + sheet.origin[1] - head[1]
    along_up = -(rel_x * up[0] + rel_y * up[1]) / unit  # > 0 below the head's centre
    across = (rel_x * side[0] + rel_y * side[1]) / unit
    near = np.clip(2.0 - np.hypot(across / 1.6, np.maximum(-along_up, 0) / 1.9), 0, 1)
    near *= np.clip(3.2 - along_up, 0, 1)  # long hair, down to the shoulders
    chin = float(-((points[lm.CHIN] - head) @ up)) / unit
    near *= 1 - np.clip(along_up - chin + 0.2, 0, 1) * np.clip(1.6 - np.abs(across) / 0.7, 0, 1)  # not the neck
    # not on the face, but on dark hair falling across it, which the skin leaves alone (``SKIN_MIN_L``): left to the
    # style there, it came out a pale notch bitten out of face_5's temple
    face = sheet.mask(polygons=(points[list(FACE_OVAL)],), blur_px=0.03 * unit)
    face *= np.clip((lab[..., 0] - SKIN_MIN_L) / 8.0, 0, 1)
    mask = np.clip(like * 2.0 - 0.5, 0, 1) * near * (1 - face)
    mask = np.asarray(Image.fromarray(np.uint8(mask * 255)).filter(ImageFilter.GaussianBlur(0.02 * unit)),
                      np.float32) / 255
    if not _past(held, "hair mass", float(mask.sum()) / (0.3 * unit) ** 2, 1.0):
        return "none"
    if fair:  # it cannot be told from the neck and shoulders: left to the style, evened out above and beside the face
        if ref[0] >= FAIR_MIN_L:
            crown = np.clip(-along_up - FAIR_ABOVE, 0, 1)
            sides = np.clip((np.abs(across) - FAIR_BESIDE) / 0.2, 0, 1)
            _even_out(sheet, mask, np.maximum(crown, sides) * (1 - face) * np.maximum(_hue_of(lab, ref), mask), unit)
        return "none"
    luma = np.uint8(np.clip(lab[..., 0] * 2.55, 0, 255))
    smooth = _masked_blur(lab[..., 0], mask, HAIR_SHADE_SIGMA * unit) * 2.55  # its own shading, not the background's
    inside = mask > 0.5
    base = np.median(sheet.rgb[inside], axis=0) if inside.any() else palette.brow
    shade = smooth - float(np.median(smooth[inside])) if inside.any() else smooth * 0
    dark = 1 / (1 + np.exp(-(-shade - 14.0) / 3.0))
    bright = 1 / (1 + np.exp(-(shade - 22.0) / 3.0))
    shadow, light = base * 0.62, base + (255 - base) * 0.3
    tone = base + (shadow - base) * dark[..., None]
    tone = tone + (light - tone) * bright[..., None]
    grey = _grey(lab, unit)
    sheet.paint(_greyed(tone, grey), mask)  # opaque: at 0.9 the style's blotches showed through the flat mass
    ring = _ring(mask, -along_up, across, unit) * mask
    strands = _past(held, "strands", _strand_detail(lab[..., 0], ring > 0.5, unit), RING_MIN_DETAIL)
    if strands:
        sheet.paint(_greyed(base + (255 - base) * RING_LIGHT, grey), ring)
    lines = _strands(luma, unit)
    sheet.paint(_greyed(shadow * 0.55, grey), mask * lines * 0.75)
    return "strands" if strands else "cap"


def _hue_of(lab: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """0..1: a coloured pixel (C* from 4, fully from 8) of ``ref``'s hue (within about 37 degrees, none past 53):
    a blonde's dark roots are of her hair's hue, a blue or pink wall behind her is not."""
    hue = np.arctan2(lab[..., 2], lab[..., 1]) - math.atan2(float(ref[2]), float(ref[1]))
    coloured = np.clip((np.hypot(lab[..., 1], lab[..., 2]) - 4.0) / 4.0, 0, 1)
    return np.asarray(np.clip((np.cos(hue) - 0.6) / 0.2, 0, 1) * coloured, np.float32)


def _square_filter(values: np.ndarray, size: int, pick: Callable[[np.ndarray, np.ndarray], np.ndarray]
                   ) -> np.ndarray:
    """The max (``pick=np.maximum``) or min of every ``size`` x ``size`` square, edges extended: Pillow's MaxFilter
    and MinFilter to the value, row by row then column by column. Pillow ranks the whole square at every pixel: a
    closing at 11 px took 41 ms at 250 x 250 px, this 1.4 ms."""
    reach = size // 2
    out = values
    for axis in (0, 1):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (reach, reach)
        padded = np.pad(out, pad, mode="edge")
        length = out.shape[axis]
        result = padded.take(range(length), axis=axis)
        for shift in range(1, size):
            result = pick(result, padded.take(range(shift, shift + length), axis=axis))
        out = result
    return out


def _even_out(sheet: Sheet, mask: np.ndarray, where: np.ndarray, unit: float) -> None:
    """A blonde's hair as the style painted it, less its dark blots and streaks. Fair hair is left to the style (it
    cannot be told from the neck), which paints the photo's darker roots at the parting as a brown blot with ink
    ticks, and the shadows between strands down the sides as dark brown streaks: the flaws raters named first on
    both blondes of ../shared/photos in every round ("dark streak noise through hair", cmp52 and cmp53, where a
    picture without them was preferred on face_2 by both raters). Pixels darker than the hair's colour (the larger of
    its local and its median colour) by more than ``FAIR_DROP`` levels of luma are painted that colour; the rest
    keeps the style's paint. The hair's mask has a hole where the roots are (too dark and brown for the hair's
    colour): closed over ``FAIR_CLOSE``, then kept to ``where`` (the crown above the hairline and the side hair
    beside the face, ``FAIR_ABOVE`` and ``FAIR_BESIDE``; off the face, the hair's hue: a closed mask reached into the
    dark background above face_2's head). The neck is out already: the hair's mask leaves it out (``_hair``)."""
    size = 2 * max(1, round(FAIR_CLOSE * unit)) + 1
    closed = _square_filter(_square_filter(np.uint8(np.clip(mask * 255, 0, 255)), size, np.maximum), size, np.minimum)
    hair = closed.astype(np.float32) / 255 * where
    inside = hair > 0.5
    if not inside.any():
        return
    local = np.stack([_masked_blur(sheet.rgb[..., c] / 2.55, hair, FAIR_SIGMA * unit) * 2.55 for c in range(3)],
                     axis=-1)
    colour = np.maximum(local, np.median(sheet.rgb[inside], axis=0))
    lift = np.clip((colour @ LUMA - sheet.rgb @ LUMA - FAIR_DROP) / 8.0, 0, 1) * np.clip(hair * 3, 0, 1)
    sheet.paint(colour, lift)


def _ring(mask: np.ndarray, along: np.ndarray, across: np.ndarray, unit: float) -> np.ndarray:
    """The crown's highlight, anime's "angel ring" (0..1): a band across the top of the hair at a share of its
    thickness (``RING_DEPTH``), its upper edge following the head's outline and its lower edge in uneven teeth.
    Placed by the hair's own shape, read per direction from the head's centre (``along``, ``across``: each pixel's
    offset from it up the face and sideways, in units of ``unit``): its outline (the farthest hair) and its inner
    edge (the nearest: the hairline), so a high crown, a fringe and parted hair each get it across their own top."""
    r, theta = np.hypot(along, across), np.arctan2(across, along)  # theta 0: straight up
    bins = np.clip(((theta + np.pi) / (2 * np.pi) * RING_BINS).astype(int), 0, RING_BINS - 1)
    hair = mask > 0.5
    outer, inner = np.zeros(RING_BINS), np.full(RING_BINS, np.inf)
    np.maximum.at(outer, bins[hair], r[hair])
    np.minimum.at(inner, bins[hair], r[hair])
    inner = np.minimum(inner, outer)  # a direction without hair: no thickness
    centres = (np.arange(RING_BINS) + 0.5) / RING_BINS * 2 * np.pi - np.pi
    kernel = np.ones(7) / 7  # 14 degrees: one strand of hair sticking out does not bend the band
    outline, hairline = (np.interp(theta, centres, np.convolve(np.pad(edge, 3, mode="edge"), kernel, mode="valid"))
                         for edge in (outer, inner))
    thick = np.maximum(outline - hairline, 1e-6)
    depth = (outline - r) / thick  # 0 at the outline, 1 at the hairline
    span = np.clip(1 - np.abs(theta) / RING_SPAN, 0, 1)  # the band narrows to nothing toward the temples
    # spikes (a triangle wave squared: narrow points, wide gaps), of uneven length
    tooth = np.abs(((theta / np.pi * RING_TEETH) % 2) - 1) ** 2 * (0.65 + 0.35 * np.cos(7.3 * theta + 1.0))
    top, width, reach = RING_DEPTH
    bottom = top + (width + reach * tooth) * np.sqrt(span)
    ramp = thick * unit * 0.8  # the band's edges over ~1.5 px where it is drawn: its steps at 1.5 read as jagged
    band = np.clip((depth - top) * ramp, 0, 1) * np.clip((bottom - depth) * ramp, 0, 1)
    return np.asarray(band * (span > 0.05) * (thick > RING_MIN_THICK), np.float32)


def _strand_detail(lightness: np.ndarray, where: np.ndarray, unit: float) -> float:
    """How much the photo shows strands where the ring would go (its L*'s fine detail; strands from
    ``RING_MIN_DETAIL``): a cap is found as hair by its colour, and a rater saw the ring's teeth across one as "a
    glitch". 0 where there is no ring."""
    if not where.any():
        return 0.0
    detail = lightness - _blur(np.uint8(np.clip(lightness * 2.55, 0, 255)), 0.05 * unit) / 2.55
    return float(np.std(detail[where]))


def _grey(lab: np.ndarray, unit: float) -> np.ndarray:
    """0..1: how grey the photo is here (``GREY_CHROMA``, ``GREY_DARK``), softened so the hair's scattered grey
    strands do not mottle a flat mass while a grey temple or sideburn stays grey."""
    chroma = np.hypot(lab[..., 1], lab[..., 2])
    lo, hi = GREY_CHROMA
    dark_lo, dark_hi = GREY_DARK
    weight = np.clip((hi - chroma) / (hi - lo), 0, 1) * np.clip((lab[..., 0] - dark_lo) / (dark_hi - dark_lo), 0, 1)
    return _blur(np.uint8(weight * 255), GREY_SOFTEN * unit) / 255


def _greyed(colour: np.ndarray, grey: np.ndarray) -> np.ndarray:
    """``colour`` (3, or H x W x 3) pulled toward the grey of its own luma by ``grey`` (H x W)."""
    full = np.broadcast_to(np.asarray(colour, np.float32), (*grey.shape, 3))
    return np.asarray(full + ((full @ LUMA)[..., None] - full) * grey[..., None], np.float32)


def _features(sheet: Sheet, points: np.ndarray, unit: float) -> np.ndarray:
    """0..1: the eyes with their lids and the brows, generously (``FEATURE_EYE`` of the eye's width around it, the
    brow band ``_brow_band``): what the portrait draws itself, painted over with the skin first."""
    ellipses: list[tuple[np.ndarray, float, float]] = []
    polygons: list[np.ndarray] = []
    sides = ((RIGHT_EYE_UPPER, RIGHT_EYE_LOWER, RIGHT_BROW), (LEFT_EYE_UPPER, LEFT_EYE_LOWER, LEFT_BROW))
    for upper, lower, brow in sides:
        eye = points[list(upper + lower)].astype(np.float64)
        width = float(np.linalg.norm(points[upper[0]] - points[upper[-1]]))
        ellipses.append((eye.mean(axis=0), FEATURE_EYE[0] * width, FEATURE_EYE[1] * width))
        polygons.append(_brow_band(points, brow))
    return sheet.mask(ellipses=tuple(ellipses), polygons=tuple(polygons), blur_px=0.05 * unit)


def _brow_band(points: np.ndarray, pairs: tuple[tuple[int, int], ...]) -> np.ndarray:
    """The polygon the photo's brow is painted over in: the mesh's brow scaled by ``BROW_ERASE`` about its middle."""
    band = np.vstack([points[[a for a, _ in pairs]], points[[b for _, b in pairs]][::-1]]).astype(np.float64)
    return np.asarray(band.mean(axis=0) + (band - band.mean(axis=0)) * np.array(BROW_ERASE))


def _brow_frame_band(points: np.ndarray, pairs: tuple[tuple[int, int], ...], unit: float) -> np.ndarray:
    """The second polygon the photo's brow is painted over in: the mesh's brow widened in the face's own frame,
    ``BROW_PAD`` above, below (but ``BROW_EYE_GAP`` clear of the eye's lid) and past each end. Why beside
    ``_brow_band`` (which covers a thick brow low over the eye, face_3's): on a tilted head that band thins to nothing
    at the brow's inner end, and where the mesh sits above a thick brow the photo's showed under the drawn one,
    "a grey smudge eyebrow" (face_8, cmp43)."""
    up = _up(points)
    upper = points[[a for a, _ in pairs]].astype(np.float64)
    lower = points[[b for _, b in pairs]].astype(np.float64)
    axis = upper[-1] - upper[0]
    axis /= max(float(np.linalg.norm(axis)), 1e-6)
    lids = [points[list(RIGHT_EYE_UPPER)], points[list(LEFT_EYE_UPPER)]]
    lid = min(lids, key=lambda eye: float(np.linalg.norm(eye.mean(axis=0) - lower.mean(axis=0))))
    room = float(((lower.mean(axis=0) - lid) @ up).min())  # from the brow's lower edge down to the lid's top
    above, below, past = (pad * unit for pad in BROW_PAD)
    below = float(np.clip(room - BROW_EYE_GAP * unit, 0.0, below))
    upper, lower = upper + up * above, lower - up * below
    for edge in (upper, lower):
        edge[0] -= axis * past
        edge[-1] += axis * past
    return np.vstack([upper, lower[::-1]])


def _masked_blur(values: np.ndarray, weight: np.ndarray, sigma: float) -> np.ndarray:
    """A blur of ``values`` (0..100) over the pixels ``weight`` selects only (normalised convolution), so a region's
    shading is not pulled by what lies beside it (hair by the bright wall behind it)."""
    w = np.clip(weight, 0, 1)
    num = _blur(np.uint8(np.clip(values * w * 2.55, 0, 255)), sigma)
    den = _blur(np.uint8(w * 255), sigma)
    return np.asarray(num / np.maximum(den, 1.0) * (255 / 2.55), np.float32)


def _blur(gray: np.ndarray, sigma: float) -> np.ndarray:
    """A Gaussian blur of a u8 picture, as float (Pillow's; numpy has none and scipy is not a dependency)."""
    return np.asarray(Image.fromarray(gray).filter(ImageFilter.GaussianBlur(sigma)), np.float32)


def _strands(luma: np.ndarray, unit: float) -> np.ndarray:
    """Strand lines, 0..1: the photo's dark fine detail smoothed along the hair's flow (a line integral along the
    structure tensor's tangent), so lines follow the strands of the photo, at half resolution for speed."""
    small = np.asarray(Image.fromarray(luma).resize((max(1, luma.shape[1] // 2), max(1, luma.shape[0] // 2)),
                                                     Image.Resampling.BOX), np.float32)
    u = unit / 2
    detail = small - _blur(np.uint8(np.clip(small, 0, 255)), 0.04 * u)
    gy, gx = np.gradient(_blur(np.uint8(np.clip(small, 0, 255)), 0.015 * u))
    def smooth(a: np.ndarray) -> np.ndarray:
        lo, hi = float(a.min()), float(a.max())
        scaled = np.uint8(np.clip((a - lo) / max(hi - lo, 1e-6) * 255, 0, 255))
        return _blur(scaled, 0.1 * u) / 255 * (hi - lo) + lo
    jxx, jyy, jxy = smooth(gx * gx), smooth(gy * gy), smooth(gx * gy)
    angle = 0.5 * np.arctan2(2 * jxy, jxx - jyy) + np.pi / 2  # the tangent: across the strongest gradient
    tx, ty = np.cos(angle), np.sin(angle)
    h, w = small.shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    total = detail.copy()
    steps = 8
    for sign in (-1.0, 1.0):
        px, py = xx.copy(), yy.copy()
        for _ in range(steps):
            px = np.clip(px + sign * tx[np.clip(py.astype(int), 0, h - 1), np.clip(px.astype(int), 0, w - 1)]
                         * STRAND_PX * u / steps, 0, w - 1)
            py = np.clip(py + sign * ty[np.clip(py.astype(int), 0, h - 1), np.clip(px.astype(int), 0, w - 1)]
                         * STRAND_PX * u / steps, 0, h - 1)
            total += detail[py.astype(int), px.astype(int)]
    line = total / (2 * steps + 1)
    spread = float(np.std(line)) + 1e-6
    lines = np.clip((-line - 1.0 * spread) / spread, 0, 1)
    return np.asarray(Image.fromarray(np.uint8(lines * 255)).resize((luma.shape[1], luma.shape[0]),
                                                                     Image.Resampling.BILINEAR), np.float32) / 255


def _spline(pts: np.ndarray, per_segment: int = 6) -> np.ndarray:
    """A Catmull-Rom curve through ``pts`` (open): the lids and brows as curves, not as the mesh's polygons."""
    p = np.vstack([2 * pts[0] - pts[1], pts, 2 * pts[-1] - pts[-2]])
    t = np.linspace(0, 1, per_segment, endpoint=False)[:, None]
    out = []
    for i in range(1, len(p) - 2):
        p0, p1, p2, p3 = p[i - 1], p[i], p[i + 1], p[i + 2]
        out.append(0.5 * ((2 * p1) + (-p0 + p2) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t * t
                          + (-p0 + 3 * p1 - 3 * p2 + p3) * t * t * t))
    out.append(pts[-1][None])
    return np.vstack(out)


def _stroke(curve: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """A polygon around ``curve`` whose width varies along it (``widths``, one per point): a tapered brush line."""
    d = np.gradient(curve, axis=0)
    n = np.stack([-d[:, 1], d[:, 0]], axis=1)
    n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-6)
    half = (widths / 2)[:, None]
    return np.vstack([curve + n * half, (curve - n * half)[::-1]])


def _skin(sheet: Sheet, lab: np.ndarray, points: np.ndarray, unit: float, palette: Palette, *,
          glasses: bool, beside: np.ndarray | None = None, capped: bool = False) -> None:
    """The skin in flat cel tones (light, base, shadow from the photo's smoothed shading): in the face's oval and
    on the ears, neck and hands near it where the photo is skin (bangs, glasses and dark hair keep the picture's
    own drawing), and below the eyes also over stubble and creases (a painted face with a photo's wrinkles read as
    a mask); with ``capped`` (``_hair`` drew a cap) also the forehead in its brim's shade; then the blush."""
    ring = points[list(FACE_OVAL)]
    centre, up = ring.mean(axis=0), _up(points)
    oval = sheet.mask(polygons=(centre + (ring - centre) * 0.97,), blur_px=0.06 * unit)
    head = sheet.mask(ellipses=((centre + up * 0.2 * unit, 1.7 * unit, 2.6 * unit),), blur_px=0.3 * unit)
    d = lab - palette.skin_lab
    likeness = np.exp(-((d[..., 0] / 55.0) ** 2 + (d[..., 1] / 10.0) ** 2 + (d[..., 2] / 12.0) ** 2))
    likeness = _blur(np.uint8(likeness * 255), SKIN_TEST_SIGMA * unit) / 255
    # inside the oval, skin in shade (a cap's brim, a side light) is bluer and greyer than the cheeks: looser there
    shaded = np.exp(-((d[..., 0] / 70.0) ** 2 + (d[..., 1] / 18.0) ** 2 + (d[..., 2] / 20.0) ** 2))
    shaded = _blur(np.uint8(shaded * 255), SKIN_TEST_SIGMA * unit) / 255
    # steep ramps: a half-painted pixel shows the style's mottle through the paint (a blotch on the forehead)
    # not over dark hair that falls across the face (at L* 10 against the cheeks' 72 it passed the loose test, and
    # the skin cut a block out of face_5's hair beside her eye)
    not_hair = np.clip((lab[..., 0] - SKIN_MIN_L) / 8.0, 0, 1)
    skin = np.maximum(oval * np.clip(shaded * 4.0 - 1.0, 0, 1) * not_hair, head * np.clip(likeness * 4.0 - 2.0, 0, 1))
    shade = _masked_blur(lab[..., 0], np.maximum(skin, oval), SKIN_SHADE_SIGMA * unit)
    shade -= float(np.median(shade[oval > 0.5])) if (oval > 0.5).any() else palette.skin_lab[0]
    dark = 1 / (1 + np.exp(-(-shade - SKIN_SHADOW_L) / 1.5))  # a soft step: a cel band, not a gradient
    bright = 1 / (1 + np.exp(-(shade - 8.0) / 1.5))
    tone = palette.skin + (palette.shadow - palette.skin) * dark[..., None]
    tone = tone + (palette.light - tone) * (0.35 * bright)[..., None]  # shine on a forehead read as a white blotch
    eyes = (_centre(points, RIGHT_EYE_UPPER) + _centre(points, LEFT_EYE_UPPER)) / 2
    down = -sheet.along(eyes, up)
    lower_face = np.clip(down / (0.3 * unit), 0, 1) * sheet.mask(polygons=(centre + (ring - centre) * 0.9,),
                                                                 blur_px=0.05 * unit)
    not_black = np.clip((lab[..., 0] - 14.0) / 6.0, 0, 1)  # glasses' frames stay; jaw shadows and stubble go
    inked = sheet.rgb.mean(axis=2) * (100 / 255)
    # the style's darkest ink stays where the photo is dark too (a glasses' frame it drew), not where the style inked
    # a crease or eye bags the portrait is there to paint over
    kept = np.maximum(np.clip((inked - 18.0) / 8.0, 0, 1), np.clip((lab[..., 0] - 35.0) / 10.0, 0, 1))
    # around the eyes and brows all is painted (a glasses' frame kept): the photo's brows and lid creases are dark, so
    # the style's strokes there passed ``kept`` and stayed between the drawn brows and eyes as "ghost marks"
    around = _features(sheet, points, unit) * _frames(sheet, lab[..., 0], glasses, points)
    if beside is not None:  # not over hair drawn crisp: the eye's ellipse was a pink bump in face_5's temple hair
        around *= 1 - beside
    sheet.paint(tone, np.maximum(np.maximum(skin * kept, lower_face * not_black), around))
    # the neck, under the chin and about as wide as the jaw's middle: skin in shade there is too dark for the test
    # above (face_1's stayed the style's grey mottle, face_4's photo), so its a*b* are compared with the cheeks'
    # scaled by its L* ratio (shade scales the reflectance) and its L* may be far darker; a collar, grey or blue,
    # is far off in a*b*, and a warm white one lighter than the cheeks (face_6's turtleneck) is out by
    # ``NECK_LIGHTER_L``. Beyond the neck the same looser test painted skin into a blonde's hair.
    ratio = np.clip(lab[..., 0] / max(float(palette.skin_lab[0]), 1.0), 0.3, 1.0)
    # a*b* anywhere from the cheeks' scaled by that ratio up to the cheeks' own: a deep shadow under the chin keeps its
    # warmth (Grace Hopper's, L* 25-55 at C* ~40, failed the scaled test alone and stayed the style's dark brown
    # smear, "a beard" on a woman's chin)
    reach = np.clip((lab[..., 1] * palette.skin_lab[1] + lab[..., 2] * palette.skin_lab[2])
                    / max(float(palette.skin_lab[1] ** 2 + palette.skin_lab[2] ** 2), 1.0), ratio, 1.0)
    da, db = lab[..., 1] - palette.skin_lab[1] * reach, lab[..., 2] - palette.skin_lab[2] * reach
    side = np.array([up[1], -up[0]])
    angle = np.linspace(0, 2 * np.pi, 32, endpoint=False)[:, None]
    neck = (points[lm.CHIN] - up * NECK[2] * unit + side * np.cos(angle) * NECK[0] * unit
            + up * np.sin(angle) * NECK[1] * unit)
    in_shade = np.exp(-((d[..., 0] / np.where(d[..., 0] < 0, NECK_DARKER_L, NECK_LIGHTER_L)) ** 2
                        + (da / 14.0) ** 2 + (db / 16.0) ** 2))
    # and of the skin's hue: a white collar in shade is as pale as pale skin, but bluish (face_6's: hue -56 degrees
    # against her cheeks' 4 and her neck's 18)
    hue = np.degrees(np.arctan2(lab[..., 2], lab[..., 1]) - np.arctan2(palette.skin_lab[2], palette.skin_lab[1]))
    hue = np.abs((hue + 180.0) % 360.0 - 180.0)
    in_shade *= np.where(np.hypot(lab[..., 1], lab[..., 2]) < 3.0, 1.0, np.clip((NECK_HUE - hue) / 20.0, 0, 1))
    if capped:
        # under a cap: the strip of forehead between the mesh's oval and the brim is skin in the brim's shade, darker
        # and redder than the cheeks (face_8's: L* 63-73 at a* 14 against 79 and 9), so the skin's test left it
        # half painted and the style's tan showed through, "a brown smudge under the cap brim" (four raters of
        # seven, 2026-12-05). It gets the neck's test, at the skin test's blur (the strip is a few pixels high, and
        # at the neck's blur the black brim beside it took it under the threshold), in the skin's cel tones
        brim = sheet.mask(polygons=(centre + (ring - centre) * CAP_BAND,), blur_px=0.03 * unit) * (1 - oval)
        brim *= np.clip(sheet.along(eyes, up) / (0.3 * unit), 0, 1)  # above the eyes: the forehead, not the cheeks
        shaded_skin = _blur(np.uint8(in_shade * 255), SKIN_TEST_SIGMA * unit) / 255
        sheet.paint(tone, brim * np.clip((shaded_skin - 0.5) * 8, 0, 1) * not_hair)
    in_shade = _blur(np.uint8(in_shade * 255), 0.12 * unit) / 255  # one shape, not the photo's speckle
    neck_skin = sheet.mask(polygons=(neck,), blur_px=0.1 * unit) * np.clip((in_shade - 0.5) * 8, 0, 1) * not_black
    # in the skin's own tone: the whole neck in the shadow tone read as a dark block under a lit face, and the
    # chin's shadow as a band under the jaw as "a dark brown band across the neck" (a blind rater, three photos)
    sheet.paint(palette.skin, neck_skin * (1 - oval))
    jaw = _spline(points[list(JAW)], 4)
    right, left = points[list(CHEEKS)]
    blush = sheet.mask(ellipses=((right, 0.3 * unit, 0.15 * unit), (left, 0.3 * unit, 0.15 * unit)),
                       blur_px=0.08 * unit)
    sheet.paint(BLUSH, (0.1 + 0.22 * palette.colour) * blush * oval)
    # a drawn face has an outline: the jaw from ear to ear, thin at the ends; not along a cheek where the skin goes on
    # past it (a turned head's mesh jaw runs inside the face's edge: "a double jawline", face_4), and never at the
    # chin, where what goes on past it is the neck
    t = np.linspace(0, 1, len(jaw))
    widths = JAW_W * unit * np.clip(np.sin(np.pi * t) * 1.8, 0.1, 1.0)
    outward = jaw - centre
    outward /= np.maximum(np.linalg.norm(outward, axis=1, keepdims=True), 1e-6)
    jaw = _to_the_edge(jaw, outward, lab[..., 0], sheet.origin, unit, t)
    beyond = np.rint(jaw + outward * JAW_BEYOND * unit - sheet.origin).astype(int)
    inside = (beyond[:, 0] >= 0) & (beyond[:, 0] < sheet.width) & (beyond[:, 1] >= 0) & (beyond[:, 1] < sheet.height)
    past = np.zeros(len(jaw), np.float32)
    # nor where hair drawn with a crisp edge (``beside``, ``_crisp``) goes on past it: that edge is the outline there,
    # and a jaw line a few pixels inside it read as "a stray line down the cheek" (face_6, cmp29)
    reaches = skin if beside is None else np.maximum(skin, beside)
    past[inside] = reaches[beyond[inside, 1], beyond[inside, 0]]
    widths *= np.where((np.abs(t - 0.5) > 0.15) & (past > 0.5), 0.0, 1.0)
    # the chin's shadow on the neck, as anime draws it: a crescent under the chin in a tone between the skin's and its
    # shadow's, so the face stands off a neck of its own colour ("the chin line floats over a neck the same colour as
    # the face", cmp42, five of eight faces)
    middle = np.abs(t - 0.5) <= NECK_SHADOW_SPAN
    depth = NECK_SHADOW_DEPTH * unit * np.cos(np.pi / 2 * (t[middle] - 0.5) / NECK_SHADOW_SPAN)
    crescent = np.vstack([jaw[middle], (jaw[middle] - up * depth[:, None])[::-1]])
    shade_tone = palette.skin + (palette.shadow - palette.skin) * NECK_SHADOW_TONE
    # hung from the jaw line itself: under the face's oval (1 - oval) it came out a band a strip below the line, and on
    # the neck's own test alone it started where the neck is in shade, "a stripe a little below the jaw" (face_1,
    # cmp47: her neck is lit right under the chin, lighter than her cheeks); the skin's test covers that strip
    sheet.paint(shade_tone, np.maximum(neck_skin, skin) * sheet.mask(polygons=(crescent,), blur_px=0.015 * unit))
    sheet.paint(palette.shadow * 0.62, 0.75 * sheet.mask(polygons=(_stroke(jaw, widths),)) * not_hair)  # not on hair


def _to_the_edge(jaw: np.ndarray, outward: np.ndarray, lightness: np.ndarray, origin: np.ndarray, unit: float,
                 t: np.ndarray) -> np.ndarray:
    """The lower jaw line moved out along ``outward`` to where the photo's light falls off most within
    ``JAW_SEARCH`` (the real jaw's edge, the neck in shade below it), where it falls off by at least
    ``JAW_EDGE_L``; elsewhere it stays. Why: on a full face the mesh's jaw runs across the lower cheek, above the
    real one, and the style draws the real one too: "double jawline outline" (face_4, a blind rater, cmp38)."""
    steps = np.linspace(-JAW_SEARCH[0], JAW_SEARCH[1], 16) * unit
    light = _blur(np.uint8(np.clip(lightness * 2.55, 0, 255)), 0.02 * unit) / 2.55
    at = jaw[:, None, :] + outward[:, None, :] * steps[None, :, None] - origin  # K x 16 x 2
    cols = np.clip(np.rint(at[..., 0]).astype(int), 0, light.shape[1] - 1)
    rows = np.clip(np.rint(at[..., 1]).astype(int), 0, light.shape[0] - 1)
    profile = light[rows, cols]
    drop = profile[:, :-2] - profile[:, 2:]  # darker outward: > 0
    best = drop.argmax(axis=1)
    strong = drop[np.arange(len(jaw)), best] >= JAW_EDGE_L
    lower = np.abs(t - 0.5) <= JAW_SNAP_SPAN
    offset = np.where(strong & lower, steps[best + 1], 0.0)
    # one smooth curve, not a staircase of picks: a running median, then a mean, over JAW_SMOOTH points
    half = JAW_SMOOTH // 2
    offset = np.median(np.lib.stride_tricks.sliding_window_view(np.pad(offset, half, mode="edge"), JAW_SMOOTH), axis=1)
    offset = np.convolve(np.pad(offset, half, mode="edge"), np.full(JAW_SMOOTH, 1 / JAW_SMOOTH), mode="valid")
    moved: np.ndarray = jaw + outward * offset[:, None]
    return moved


def _squint(photo: np.ndarray, pts: np.ndarray, palette: Palette) -> float:
    """How much of the eyes' openings (the mesh's lids, ``photo``'s pixels) is skin: ~0.4 in a grin's narrowed
    eyes, at most ~0.22 in open ones. The mesh itself cannot tell: it gave a grinning squint (0.27) a wider
    opening over width than a smiling woman's open eyes (0.26)."""
    fractions = []
    for upper, lower in ((RIGHT_EYE_UPPER, RIGHT_EYE_LOWER), (LEFT_EYE_UPPER, LEFT_EYE_LOWER)):
        lab = _lab(_polygon_pixels(photo, pts[list(upper + lower[::-1])]))
        distance = np.linalg.norm((lab - palette.skin_lab) * np.array([0.5, 1.0, 1.0], np.float32), axis=1)
        fractions.append(float((distance < 12.0).mean()))
    return sum(fractions) / len(fractions)


def _expression(points: np.ndarray) -> tuple[bool, bool]:
    """(the mouth is open, the mouth smiles): an open smile is a grin, drawn with the eyes shut in arcs."""
    up_in = points[list(LIPS_INNER_UPPER)].astype(np.float64)
    low_in = points[list(LIPS_INNER_LOWER)].astype(np.float64)
    width = float(np.linalg.norm(points[lm.MOUTH_LEFT] - points[lm.MOUTH_RIGHT])) + 1e-6
    is_open = float(np.max(np.linalg.norm(low_in - up_in, axis=1))) > OPEN_MOUTH * width
    middle = (points[lm.LIP_UPPER_INNER] + points[lm.LIP_LOWER_INNER]) / 2
    corners = (points[lm.MOUTH_LEFT] + points[lm.MOUTH_RIGHT]) / 2
    return is_open, float((corners - middle) @ _up(points)) > SMILE * width


def _eye(sheet: Sheet, photo: np.ndarray, luma: np.ndarray, points: np.ndarray, upper_idx: tuple[int, ...],
         lower_idx: tuple[int, ...], unit: float, palette: Palette, *, shut: bool = False,
         glasses: bool = True) -> None:
    """One anime eye over the photo's: the opening enlarged, white, a tall iris with a pupil and two highlights
    where the photo's iris is, a heavy upper lash line with a flick at the outer corner, a light lower line.
    A nearly shut eye, or both eyes of a grin that narrows them (``shut``), are drawn shut: the lash line's arc."""
    upper, lower = points[list(upper_idx)].astype(np.float64), points[list(lower_idx)].astype(np.float64)
    outer, inner = upper[0], upper[-1]
    axis = inner - outer
    width = float(np.linalg.norm(axis))
    if width < 2:
        return
    ax = axis / width
    normal = np.array([-ax[1], ax[0]])  # points down the face for the right eye, up for the left: fixed below
    mid = (outer + inner) / 2
    if np.dot(normal, _centre(points, (NOSE_BOTTOM,)) - mid) < 0:
        normal = -normal  # "down" is toward the nose's base
    opening = float(np.dot(lower - upper, normal).max())
    def shaped(curve: np.ndarray, factor: float, widen: float = EYE_WIDEN) -> np.ndarray:
        rel = curve - mid
        along, off = rel @ ax, rel @ normal
        return np.asarray(mid + np.outer(along * widen, ax) + np.outer(off * factor, normal))

    # the photo's eye painted over: its lashes and shadow reach past the mesh's lids; in the outer ring dark
    # strokes, in the photo or as the style inked them (glasses' frames), are kept
    core = sheet.mask(polygons=(np.vstack([shaped(upper, 1.6, 1.15), shaped(lower, 1.6, 1.15)[::-1]]),),
                      blur_px=0.03 * unit)
    ring = sheet.mask(polygons=(np.vstack([shaped(upper, 2.8, 1.35), shaped(lower, 2.4, 1.35)[::-1]]),),
                      blur_px=0.06 * unit)
    frames = _frames(sheet, luma, glasses, points)
    if shut or opening < CLOSED_EYE * width:
        # a shut eye's mesh opening is a sliver: the photo's slit and lower lashes stayed under the drawn arc
        core = np.maximum(core, sheet.mask(ellipses=((mid, 0.62 * width, SHUT_ERASE * unit),), blur_px=0.04 * unit))
    sheet.paint(palette.skin, np.maximum(core, ring * frames))

    up, low = _spline(shaped(upper, EYE_RAISE)), _spline(shaped(lower, EYE_LOWER))
    if shut or opening < CLOSED_EYE * width:
        _lash(sheet, up, unit, outer_first=True)
        return
    opening_drawn = float(np.dot(low.mean(axis=0) - up.mean(axis=0), normal)) * 2 + 1e-6
    white = sheet.mask(polygons=(np.vstack([up, low[::-1]]),))
    sheet.paint(EYE_WHITE, white)
    centre = _iris_centre(photo, sheet.origin, upper, lower, mid, normal)
    centre = centre - normal * 0.12 * opening_drawn  # anime irises sit high, under the lid
    rx, ry = IRIS_W * width * EYE_WIDEN / 2, IRIS_H * opening_drawn / 2 * 1.05
    iris = sheet.mask(ellipses=((centre, rx, ry),)) * white
    grid_y = (np.arange(sheet.height)[:, None] + sheet.origin[1] - (centre[1] - ry)) / (2 * ry)
    ramp = np.clip(grid_y, 0, 1)[..., None]
    colour = palette.iris * (0.22 + 0.9 * ramp) + 10 * ramp
    sheet.paint(np.clip(colour, 0, 255), iris)
    rim = iris - sheet.mask(ellipses=((centre, rx * 0.86, ry * 0.9),)) * white
    sheet.paint(palette.iris * 0.3, np.clip(rim, 0, 1) * 0.9)
    sheet.paint(INK, sheet.mask(ellipses=((centre + normal * 0.05 * ry, rx * 0.42, ry * 0.46),)) * white)
    lid = np.clip(white - sheet.mask(polygons=(np.vstack([up + normal * 0.28 * opening_drawn, low[::-1]]),)), 0, 1)
    sheet.paint(LID_SHADOW, lid * (1 - iris) * 0.8)
    sheet.paint(palette.iris * 0.25, lid * iris * 0.5)
    glint = (centre - ax * 0.32 * rx * np.sign(np.dot(ax, [1.0, 0.0]) or 1.0) - normal * 0.38 * ry)
    small = centre + ax * 0.35 * rx * np.sign(np.dot(ax, [1.0, 0.0]) or 1.0) + normal * 0.42 * ry
    sheet.paint(HIGHLIGHT, sheet.mask(ellipses=((glint, 0.3 * rx, 0.26 * ry), (small, 0.13 * rx, 0.11 * ry))) * white)
    _lash(sheet, up, unit, outer_first=True)
    n = len(low)
    t = np.linspace(0, 1, n)
    lower_w = 0.022 * unit * np.clip(1.4 - 1.6 * t, 0, 1)  # from the outer corner, fading inward
    sheet.paint(INK * 1.6, 0.7 * sheet.mask(polygons=(_stroke(low, lower_w),)))


def _lash(sheet: Sheet, up: np.ndarray, unit: float, *, outer_first: bool) -> None:
    """The upper lash line: thick at the outer corner with a flick past it, thin at the inner."""
    curve = up if outer_first else up[::-1]
    flick_dir = curve[0] - curve[min(4, len(curve) - 1)]
    flick_dir /= max(float(np.linalg.norm(flick_dir)), 1e-6)
    flick = curve[0] + flick_dir * 0.12 * unit + np.array([0.0, 0.02 * unit])
    curve = np.vstack([flick[None], curve])
    t = np.linspace(0, 1, len(curve))
    widths = unit * (LASH_W[1] + (LASH_W[0] - LASH_W[1]) * t) * np.clip(t * 6, 0.25, 1.0)
    sheet.paint(INK, sheet.mask(polygons=(_stroke(curve, widths),)))


def _iris_centre(photo: np.ndarray, origin: np.ndarray, upper: np.ndarray, lower: np.ndarray, mid: np.ndarray,
                 normal: np.ndarray) -> np.ndarray:
    """Where the photo's iris is: the centroid of the eye opening's darkest pixels, along the eye's axis only
    (the drawn iris is as tall as the opening); the opening's middle when the eye shows no dark part."""
    polygon = np.vstack([upper, lower[::-1]]) - origin
    h, w = photo.shape[:2]
    m = Image.new("L", (w, h), 0)
    ImageDraw.Draw(m).polygon([(float(x), float(y)) for x, y in polygon], fill=255)
    sel = np.asarray(m) > 0
    if sel.sum() < 6:
        return mid
    ys, xs = np.nonzero(sel)
    luma = photo[ys, xs].astype(np.float32).mean(axis=1)
    weight = np.clip(np.percentile(luma, 40) - luma, 0, None)
    if weight.sum() <= 0:
        return mid
    found = np.array([np.sum(xs * weight) / weight.sum(), np.sum(ys * weight) / weight.sum()]) + origin
    along = found - mid
    along -= normal * np.dot(along, normal)
    width = float(np.linalg.norm(upper[-1] - upper[0]))
    along *= GAZE_GAIN  # a glance is drawn bolder than it is: at the photo's own shift it read as a stare
    shift = float(np.linalg.norm(along))
    if shift > 0.28 * width:
        along *= 0.28 * width / shift
    return np.asarray(mid + along)


def _frames(sheet: Sheet, luma: np.ndarray, glasses: bool, points: np.ndarray) -> np.ndarray:
    """0..1: where the sheet may be painted over near the eyes: not on dark hair beyond the face's oval (painted
    skin there was a pale notch in face_5's hair at her temple), and with glasses not on what is dark in the photo
    (``luma``, L*) or as the style inked it (it draws a light tortoiseshell frame as ink)."""
    outside = 1 - sheet.mask(polygons=(points[list(FACE_OVAL)],), blur_px=1.0)
    allowed = 1 - outside * (1 - np.clip((luma - SKIN_MIN_L) / 8.0, 0, 1))
    if not glasses:
        return np.asarray(allowed, np.float32)
    inked = sheet.rgb.mean(axis=2) * (100 / 255)
    return np.asarray(np.minimum(allowed, np.clip((np.minimum(luma, inked) - FRAME_L) / 10.0, 0, 1)), np.float32)


def _rim(sheet: Sheet, points: np.ndarray, upper_idx: tuple[int, ...], lower_idx: tuple[int, ...],
         unit: float) -> None:
    """A lens's lower rim under the eye, a thin line: the frame's top bar is kept where the photo or the style has
    it dark, but a thin metal or light rim is not, and a rater saw "glasses cut to the top frame only"."""
    eye = points[list(upper_idx + lower_idx)].astype(np.float64)
    outer, inner = points[upper_idx[0]].astype(np.float64), points[upper_idx[-1]].astype(np.float64)
    axis = (inner - outer) / max(float(np.linalg.norm(inner - outer)), 1e-6)
    down = np.array([-axis[1], axis[0]])
    if np.dot(down, _centre(points, (NOSE_BOTTOM,)) - eye.mean(axis=0)) < 0:
        down = -down
    centre = eye.mean(axis=0) - down * RIM[2] * unit
    half_w = RIM[0] * float(np.linalg.norm(inner - outer))
    angle = np.linspace(0.1, np.pi - 0.1, 24)[:, None]  # the lower half, from the outer side round to the inner
    # a squared-off ellipse (a superellipse's exponent 0.6): a lens, not a monocle
    c, sn = np.cos(angle), np.sin(angle)
    curve = centre + np.sign(c) * np.abs(c) ** 0.6 * axis * half_w + sn ** 0.6 * down * RIM[1] * unit
    widths = np.full(len(curve), RIM_W * unit)
    sheet.paint(RIM_COLOUR, 0.85 * sheet.mask(polygons=(_stroke(curve, widths),)))


def _glasses(luma: np.ndarray, pts: np.ndarray, unit: float, held: Held | None = None) -> bool:
    """Whether the face wears glasses with a dark frame (``pts`` in ``luma``'s pixels, L*): a frame's bridge
    crosses the nose between the eyes, or its top rim runs between each eye and its brow, where a bare face is
    lit skin. On ../shared/photos (L* of the darkest bridge patch; the median over the eye's width of the darkest
    point between lid and brow, the lighter eye's): face_7's browline frame 57 / 17; the bare faces 42-91 / 36-79
    (face_3's deep-set eyes under black brows: 42 / 36 and 26)."""
    def darkest(a: np.ndarray, b: np.ndarray) -> float:
        r = max(1, round(0.03 * unit))
        values = []
        for t in np.linspace(0.0, 1.0, 7):
            x, y = np.rint(a + (b - a) * t).astype(int)
            patch = luma[max(0, y - r):y + r + 1, max(0, x - r):x + r + 1]
            values.append(float(np.median(patch)) if patch.size else 100.0)
        return min(values)

    p = pts.astype(np.float64)
    bridge = darkest(p[GLABELLA], p[BRIDGE]) - GLASSES_L[0]
    if held is None and bridge < 0:
        return True
    rims = []
    for upper, brow in ((RIGHT_EYE_UPPER, RIGHT_BROW), (LEFT_EYE_UPPER, LEFT_BROW)):
        lids, brows = p[list(upper)], p[[b for _, b in brow]]  # both from the outer corner in
        across = [darkest(lids[round(t * (len(lids) - 1))] * 0.75 + brows[round(t * (len(brows) - 1))] * 0.25,
                          lids[round(t * (len(lids) - 1))] * 0.25 + brows[round(t * (len(brows) - 1))] * 0.75)
                  for t in np.linspace(0.15, 0.85, 8)]
        rims.append(float(np.median(across)))
    # bare where both the bridge and the lighter rim are at least as light as their lines
    return not _past(held, "bare", min(bridge, max(rims) - GLASSES_L[1]), 0.0)


def _brow(sheet: Sheet, luma: np.ndarray, points: np.ndarray, pairs: tuple[tuple[int, int], ...], unit: float,
          palette: Palette, *, glasses: bool, cover: np.ndarray) -> None:
    """A thin tapered brow a little above the photo's, which is painted over with the skin. The band painted over
    reaches well below the mesh's brow (``BROW_ERASE``): at 1.6 its height a rater saw "faint photo eyebrows behind
    the drawn ones"; a glasses' frame under it, dark in the photo or as the style drew it, stays, and so does hair
    drawn crisp over the brow's tail (``cover``; painted over, it was a soft skin-coloured glow in the hair)."""
    upper = points[[a for a, _ in pairs]].astype(np.float64)
    lower = points[[b for _, b in pairs]].astype(np.float64)
    frames = _frames(sheet, luma, glasses, points)
    band = _brow_band(points, pairs)  # ``_brow_frame_band`` was painted over before the eyes (``draw_portrait``)
    sheet.paint(palette.skin, np.clip(1.4 * sheet.mask(polygons=(band,), blur_px=0.04 * unit), 0, 1) * frames
                * (1 - cover))
    centre = upper * 0.55 + lower * 0.45
    curve = _spline(centre, 5)
    t = np.linspace(0, 1, len(curve))  # 0 at the tail (outer), 1 at the inner end
    thick = float(np.median(np.linalg.norm(upper - lower, axis=1)))  # a heavy brow stays heavier when drawn
    inner = max(BROW_W[0] * unit, 0.45 * thick)
    widths = BROW_W[1] * unit + (inner - BROW_W[1] * unit) * np.sqrt(t)
    sheet.paint(palette.brow, 0.92 * sheet.mask(polygons=(_stroke(curve, widths),)))


def _nose(sheet: Sheet, photo: np.ndarray, points: np.ndarray, unit: float, palette: Palette) -> None:
    """The nose as one short stroke on its shaded side, the nostrils painted over."""
    tip, bottom = points[NOSE_TIP].astype(np.float64), points[NOSE_BOTTOM].astype(np.float64)
    wings = points[list(NOSE_WINGS)].astype(np.float64)
    nose = np.vstack([wings[0], tip, wings[1], bottom])
    nose = nose.mean(axis=0) + (nose - nose.mean(axis=0)) * 1.5
    sheet.paint(palette.skin, np.clip(1.5 * sheet.mask(polygons=(nose,), blur_px=0.06 * unit), 0, 1))
    side_luma = [float(_sample(photo, (w - sheet.origin)[None], 0.05 * unit).mean()) for w in wings]
    shaded = wings[int(np.argmin(side_luma))]
    start = tip + (shaded - tip) * 0.35
    end = bottom + (shaded - bottom) * 0.3
    curve = np.vstack([start, (start + end) / 2 + (shaded - tip) * 0.08, end])
    widths = 0.028 * unit * np.array([0.4, 1.0, 0.6])
    sheet.paint(palette.shadow * 0.75, 0.85 * sheet.mask(polygons=(_stroke(_spline(curve, 4), np.interp(
        np.linspace(0, 1, 9), [0, 0.5, 1], widths)),)))


def _mouth(sheet: Sheet, points: np.ndarray, unit: float, palette: Palette) -> None:
    """Lips in colour without an outline, a little narrower than the photo's; a closed mouth is a line between
    them, an open one a dark inside with the teeth as one white band."""
    outer = points[list(LIPS_OUTER)].astype(np.float64)
    up_in = points[list(LIPS_INNER_UPPER)].astype(np.float64)
    low_in = points[list(LIPS_INNER_LOWER)].astype(np.float64)
    centre = outer.mean(axis=0)

    is_open = _expression(points)[0]

    def narrow(p: np.ndarray) -> np.ndarray:
        size = np.array(MOUTH_OPEN_SIZE if is_open else MOUTH_NARROW)
        if not is_open:  # coloured lips are drawn fuller: they are the face's feature, as in the photo
            size = size + np.array([0.1, 0.35]) * palette.colour
        return np.asarray(centre + (p - centre) * size)

    erase = centre + (outer - centre) * 1.2  # the photo's lips, to past their soft edge
    sheet.paint(palette.skin, np.clip(1.6 * sheet.mask(polygons=(erase,), blur_px=0.06 * unit), 0, 1))
    lips = sheet.mask(polygons=(narrow(outer),), blur_px=0.015 * unit)
    sheet.paint(palette.lips, (0.25 + 0.45 * palette.colour) * lips)
    if is_open:
        inside = narrow(np.vstack([up_in, low_in[::-1][1:-1]]))
        sheet.paint(MOUTH_INSIDE, sheet.mask(polygons=(inside,)))
        teeth_lower = up_in + (low_in - up_in) * 0.4
        sheet.paint(TEETH, 0.95 * sheet.mask(polygons=(narrow(np.vstack([up_in, teeth_lower[::-1]])),))
                    * sheet.mask(polygons=(inside,)))
        return
    line = _spline(narrow((up_in + low_in) / 2), 4)
    t = np.linspace(0, 1, len(line))
    widths = 0.032 * unit * np.clip(np.sin(np.pi * t) * 1.5, 0.2, 1.0)
    sheet.paint(MOUTH_LINE, 0.9 * sheet.mask(polygons=(_stroke(line, widths),)))
