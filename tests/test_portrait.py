"""The portrait path (``image.portrait: auto``): faces of every size drawn with anime features by their landmarks.

Real OpenVINO (the shipped detector and face mesh, the session's seeded-random style), real photos: scikit-image's
astronaut (public domain, in the test extra, so these run without ../shared) and ../shared/photos where a test
needs a selfie-sized face or a group shot.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFilter

from edge_anime import Stylizer
from edge_anime.config import Config, DeviceSection, load_config
from edge_anime.core.pipeline import JobResult
from edge_anime.faces import portrait
from edge_anime.faces.detect import Face, FaceDetector
from edge_anime.faces.landmarks import FaceLandmarker, FaceMesh
from tests.conftest import style_with
from tests.facesets import groups


@pytest.fixture(scope="module")
def models() -> tuple[FaceDetector, FaceLandmarker]:
    return FaceDetector(DeviceSection()), FaceLandmarker(DeviceSection())


@pytest.fixture(scope="module")
def astronaut() -> np.ndarray:
    from skimage import data

    return np.ascontiguousarray(data.astronaut())  # type: ignore[no-untyped-call]


def _mesh(models: tuple[FaceDetector, FaceLandmarker], rgb: np.ndarray) -> FaceMesh:
    detector, landmarker = models
    (face, *_) = detector.detect(rgb, min_px=64)
    mesh = landmarker.landmarks(rgb, face)
    assert mesh is not None
    return mesh


def _shared(shared_photos: Path, name: str) -> np.ndarray:
    """A photo of ../shared/photos as RGB."""
    with Image.open(shared_photos / f"{name}.jpg") as photo:
        return np.asarray(photo.convert("RGB"))


def _near(rgb: np.ndarray, colour: np.ndarray, tolerance: float) -> int:
    return int((np.abs(rgb.astype(np.float32) - colour).max(axis=2) <= tolerance).sum())


def _eye_box(mesh: FaceMesh, upper: tuple[int, ...], lower: tuple[int, ...], pad: float) -> tuple[slice, slice]:
    pts = mesh.points[list(upper + lower)]
    x0, y0 = np.floor(pts.min(axis=0) - pad).astype(int)
    x1, y1 = np.ceil(pts.max(axis=0) + pad).astype(int)
    return slice(max(0, y0), y1), slice(max(0, x0), x1)


def test_the_features_are_drawn_where_the_eyes_and_mouth_are(models: tuple[FaceDetector, FaceLandmarker],
                                                             astronaut: np.ndarray) -> None:
    mesh = _mesh(models, astronaut)
    canvas = np.full_like(astronaut, 128)  # a flat grey "stylized" picture: anything drawn shows
    box = portrait.draw_portrait(canvas, astronaut, mesh.points)
    assert box is not None
    unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
    for upper, lower in ((portrait.RIGHT_EYE_UPPER, portrait.RIGHT_EYE_LOWER),
                         (portrait.LEFT_EYE_UPPER, portrait.LEFT_EYE_LOWER)):
        eye = canvas[_eye_box(mesh, upper, lower, 0.15 * unit)]
        assert _near(eye, portrait.INK, 24) > 20, "no lash line or pupil drawn"
        assert _near(eye, portrait.HIGHLIGHT, 12) > 3, "no highlight in the iris"
        assert _near(eye, portrait.EYE_WHITE, 12) > 4, "no eye white"
    x0, y0, x1, y1 = box
    outside = np.ones(canvas.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    assert (canvas[outside] == 128).all(), "the drawing reached past the box it returned"


def test_the_drawing_is_deterministic_and_a_tiny_face_is_left_alone(models: tuple[FaceDetector, FaceLandmarker],
                                                                    astronaut: np.ndarray) -> None:
    mesh = _mesh(models, astronaut)
    first, second = np.full_like(astronaut, 90), np.full_like(astronaut, 90)
    portrait.draw_portrait(first, astronaut, mesh.points)
    portrait.draw_portrait(second, astronaut, mesh.points)
    assert np.array_equal(first, second)  # a still face in a clip is drawn the same in every frame
    tiny = mesh.points * 0.02  # eyes a pixel apart: nothing to draw at that size
    untouched = np.full_like(astronaut, 90)
    assert portrait.draw_portrait(untouched, astronaut, tiny) is None
    assert (untouched == 90).all()


def test_what_the_style_drew_between_brow_and_eye_is_painted_over(models: tuple[FaceDetector, FaceLandmarker],
                                                                  astronaut: np.ndarray) -> None:
    """A lid crease or a low brow is dark in the photo, and the style strokes it: both used to pass the skin's test
    for "ink to keep" and stayed between the drawn brow and eye ("ghost marks of the real eyes", a blind rater on
    face_3, face_4 and face_6). A crease of L* ~30 in the photo, stroked green by the "style", is painted over."""
    mesh = _mesh(models, astronaut)
    points = mesh.points
    unit = float(np.linalg.norm(points[159] - points[386]))
    photo, canvas = astronaut.copy(), np.full_like(astronaut, 150)
    yy, xx = np.mgrid[0:photo.shape[0], 0:photo.shape[1]]
    crease = np.zeros(photo.shape[:2], bool)
    for upper, brow in ((portrait.RIGHT_EYE_UPPER, portrait.RIGHT_BROW), (portrait.LEFT_EYE_UPPER, portrait.LEFT_BROW)):
        centre = (points[list(upper)].mean(axis=0) + points[[i for pair in brow for i in pair]].mean(axis=0)) / 2
        crease |= ((xx - centre[0]) / (0.29 * unit)) ** 2 + ((yy - centre[1]) / (0.18 * unit)) ** 2 <= 1
    photo[crease], canvas[crease] = (95, 70, 62), (30, 70, 30)
    luma = np.asarray(Image.fromarray(photo).convert("L"), np.float32) * (100 / 255)
    assert not portrait._glasses(luma, points, unit), "the crease must not read as a frame for this test"
    portrait.draw_portrait(canvas, photo, points)
    painted = canvas[crease].astype(np.float32)
    green = painted[:, 1] - (painted[:, 0] + painted[:, 2]) / 2
    assert float((green > 10).mean()) < 0.05, float((green > 10).mean())  # was 0.39


def test_hair_grey_in_the_photo_is_drawn_grey(models: tuple[FaceDetector, FaceLandmarker],
                                                astronaut: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hair is drawn in the picture's hair colour, but where the photo's hair is grey it stays grey: greying
    temples painted brown put a colour cast on what the photo has neutral (look.py's cast 7.0 on face_4, issue
    41's bound 6). The same drawing with the photo in colour keeps its colour, so the grey comes from the photo.
    (The astronaut's mid brown is 26-30 CIELAB from her skin, within ``FAIR_HAIR``, which leaves it to the style:
    the line is moved under it here, since this is about how drawn hair is coloured.)"""
    monkeypatch.setattr(portrait, "FAIR_HAIR", 20.0)
    mesh = _mesh(models, astronaut)
    brow = int(mesh.points[[70, 300, 105, 334], 1].min())
    greyed = astronaut.copy()
    greyed[:brow] = np.rint(astronaut[:brow] @ np.array([0.299, 0.587, 0.114]))[..., None].astype(np.uint8)
    spreads = {}
    for name, photo in (("colour", astronaut), ("grey", greyed)):
        canvas = astronaut.copy()  # the "stylized" picture keeps the colour hair: only the photo differs
        portrait.draw_portrait(canvas, photo, mesh.points)
        drawn = np.abs(canvas.astype(np.int16) - astronaut).max(axis=2) > 8
        drawn[brow:] = False
        drawn &= portrait._lab(photo)[..., 0] > 30  # lighter than the dark strands, whose chroma no eye reads
        assert drawn.sum() > 2000, f"{name}: the hair above the brows was not drawn"
        spread = canvas.astype(np.int16).max(axis=2) - canvas.min(axis=2)
        spreads[name] = float(np.median(spread[drawn]))
    assert spreads["colour"] >= 40 and spreads["grey"] <= 12, spreads


@pytest.mark.parametrize(("name", "wears"), [("face_7", True), ("face_3", False), ("face_5", False)])
def test_glasses_are_told_from_dark_brows(models: tuple[FaceDetector, FaceLandmarker], shared_photos: Path,
                                          name: str, wears: bool) -> None:
    """A frame near the eyes is kept and a bare face's dark brows, lashes and lid shadows are painted over, so the
    drawing must tell them apart: face_7's browline frame from face_3's black brows over deep-set eyes."""
    rgb = _shared(shared_photos, name)
    mesh = _mesh(models, rgb)
    luma = np.asarray(Image.fromarray(rgb).convert("L"), np.float32) * (100 / 255)
    unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
    assert portrait._glasses(luma, mesh.points, unit) is wears
    canvas = np.full_like(rgb, 200)
    portrait.draw_portrait(canvas, rgb, mesh.points)
    below = mesh.points[list(portrait.RIGHT_EYE_LOWER)].mean(axis=0) + np.array([0.0, 0.3 * unit])  # a rim runs here
    x, y = np.rint(below).astype(int)
    rims = _near(canvas[y - round(0.1 * unit):y + round(0.1 * unit), x - round(0.5 * unit):x + round(0.5 * unit)],
                 portrait.RIM_COLOUR, 30)
    assert (rims > 5) is wears, rims  # a frame's lower rim is drawn for glasses, and only for them


def test_the_crown_s_highlight_is_a_band_with_teeth_across_the_top_of_the_hair() -> None:
    """Anime's "angel ring": a lighter band across the top of the hair, its lower edge in teeth, placed by the hair's
    own outline and hairline. A synthetic head: hair between 1.0 and 1.8 units from its centre, over its top half."""
    unit, size = 40.0, 240
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    along, across = (size / 2 - yy) / unit, (size / 2 - xx) / unit  # up the face, and sideways
    r, theta = np.hypot(along, across), np.arctan2(across, along)  # theta 0: straight up
    top_half = (r >= 1.0) & (r <= 1.8) & (np.abs(theta) < np.pi / 2)
    band = portrait._ring(top_half.astype(np.float32), along, across, unit) > 0.5
    assert band.sum() > 100, band.sum()
    depth = (1.8 - r[band]) / 0.8  # 0 at the outline, 1 at the hairline
    top, width, reach = portrait.RING_DEPTH
    assert depth.min() >= top - 0.05 and depth.max() <= top + width + reach + 0.05, (depth.min(), depth.max())
    assert np.abs(theta[band]).max() <= portrait.RING_SPAN, "the band reaches down the sides"
    # the teeth: where the band ends, read per direction over its middle, rises and falls by much of ``reach``
    ends = np.array([depth[np.abs(theta[band] - a) < 0.01].max() for a in np.linspace(-0.5, 0.5, 61)
                     if (np.abs(theta[band] - a) < 0.01).any()])
    teeth, low, high, rising = 0, ends[0], ends[0], True  # peaks that rise and fall by 0.03 (the pixels' steps: 0.01)
    for value in ends:
        if rising and value < high - 0.03:
            teeth, rising, low = teeth + 1, False, value
        elif not rising and value > low + 0.03:
            rising, high = True, value
        low, high = min(low, value), max(high, value)
    assert teeth >= 3 and np.ptp(ends) >= 0.3 * reach, ends.round(2)
    sides_only = ((r >= 1.0) & (r <= 1.8) & (np.abs(theta) > 1.3)).astype(np.float32)  # bald on top
    assert not portrait._ring(sides_only, along, across, unit).any()


def test_the_chin_casts_a_crescent_of_shadow_on_the_neck(models: tuple[FaceDetector, FaceLandmarker],
                                                          shared_photos: Path) -> None:
    """Anime's neck: a crescent of shadow hung from the jaw, in a tone between the skin's and its shadow's, so the
    face stands off a neck of its own colour (a blind rater: "the chin line floats over a neck the same colour as the
    face"). face_5's neck, drawn on a flat grey picture: darker just under the chin than lower down, same hue."""
    photo = _shared(shared_photos, "face_5")
    mesh = _mesh(models, photo)
    canvas = np.full_like(photo, 128)
    assert portrait.draw_portrait(canvas, photo, mesh.points) is not None
    unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
    chin = mesh.points[152]
    down = chin - mesh.points[10]
    down /= np.linalg.norm(down)

    def patch(depth: float) -> np.ndarray:
        x, y = np.rint(chin + down * depth * unit).astype(int)
        return canvas[y - 3:y + 4, x - 3:x + 4].reshape(-1, 3).astype(np.float32).mean(axis=0)

    under, lower = patch(0.15), patch(0.7)
    assert (under != 128).any() and (lower != 128).any(), "the neck is painted"
    assert lower.mean() - under.mean() > 6, (under, lower)
    ratio = under / np.maximum(lower, 1)
    assert ratio.max() - ratio.min() < 0.15, "a shade of the same skin, not another colour"


def test_a_warm_shadow_under_the_chin_is_painted_as_neck(models: tuple[FaceDetector, FaceLandmarker]) -> None:
    """Grace Hopper's neck under her chin is skin in deep, warm shade (L* 30-45 at C* ~40): its a*b* only scaled down
    by its L* ratio failed the neck's test, and the style's dark brown smear stayed there ("a beard"). Drawn on a flat
    grey picture, the neck 0.2-0.3 of the eyes' distance under the chin is painted whole."""
    import matplotlib.cbook

    with Image.open(matplotlib.cbook.get_sample_data("grace_hopper.jpg")) as image:
        photo = np.asarray(image.convert("RGB"))
    mesh = _mesh(models, photo)
    canvas = np.full_like(photo, 128)
    assert portrait.draw_portrait(canvas, photo, mesh.points) is not None
    unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
    chin, down = mesh.points[152], mesh.points[152] - mesh.points[10]
    down /= np.linalg.norm(down)
    for depth in (0.2, 0.3):
        x, y = np.rint(chin + down * depth * unit).astype(int)
        patch = canvas[y - 4:y + 5, x - 10:x + 11]
        assert (patch != 128).any(axis=-1).mean() >= 0.95, depth


def _filled(polygons: tuple[np.ndarray, ...], shape: tuple[int, ...]) -> np.ndarray:
    """The polygons (x, y) filled, as a bool mask of ``shape`` (H, W, ...)."""
    from PIL import ImageDraw

    mask = Image.new("L", (shape[1], shape[0]))
    for polygon in polygons:
        ImageDraw.Draw(mask).polygon([(float(x), float(y)) for x, y in polygon], fill=255)
    return np.asarray(mask) > 0


def test_a_thick_brow_under_a_tilted_mesh_is_painted_over_whole(models: tuple[FaceDetector, FaceLandmarker],
                                                                  shared_photos: Path) -> None:
    """face_8's head is tilted and the mesh's brows sit above his thick ones: the brow scaled about its middle in x
    and y covered too little of them, and what was left showed under the drawn brow ("a grey smudge eyebrow",
    cmp43). The two bands together cover the photo's dark brow pixels near the mesh's brows; the eyes stay clear."""
    photo = _shared(shared_photos, "face_8")
    mesh = _mesh(models, photo)
    unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
    lightness = portrait._lab(photo)[..., 0]
    yy, xx = np.mgrid[0:photo.shape[0], 0:photo.shape[1]]
    for brow, upper in ((portrait.RIGHT_BROW, portrait.RIGHT_EYE_UPPER), (portrait.LEFT_BROW, portrait.LEFT_EYE_UPPER)):
        pts = mesh.points[[i for pair in brow for i in pair]]
        near = np.min(np.hypot(xx[..., None] - pts[:, 0], yy[..., None] - pts[:, 1]), axis=-1) < 0.1 * unit
        eye = mesh.points[list(upper)]
        brow_px = near & (lightness < 40) & (yy < eye[:, 1].min() - 0.1 * unit)  # the photo's brow, above the eye
        scaled, framed = portrait._brow_band(mesh.points, brow), portrait._brow_frame_band(mesh.points, brow, unit)
        if brow is portrait.RIGHT_BROW:  # the thick dark one (his left one is light: a few pixels under L* 40)
            assert brow_px.sum() > 100
            both = _filled((scaled, framed), photo.shape)[brow_px].mean()
            alone = _filled((scaled,), photo.shape)[brow_px].mean()
            assert both >= 0.95 and alone <= 0.5, (both, alone)
        lid = _filled((framed,), photo.shape)[np.rint(eye[:, 1]).astype(int), np.rint(eye[:, 0]).astype(int)]
        assert not lid.any(), "the face-frame band stops above the lid"


def test_the_jaw_line_goes_to_the_photo_s_jaw_below_the_mesh_s() -> None:
    """A full face's mesh puts the jaw across the lower cheek; the line moves out to where the photo's light falls
    off (the real jaw, the neck in shade), smoothly, on the lower jaw only, and stays where the photo has no edge."""
    unit, size = 40.0, 240
    jaw_y = 120.0
    jaw = np.stack([np.linspace(40, 200, 81), np.full(81, jaw_y)], axis=1)  # a flat jaw, the chin at the middle
    outward = np.tile([0.0, 1.0], (81, 1))  # down
    t = np.linspace(0, 1, 81)
    lightness = np.full((size, size), 80.0, np.float32)
    edge_y = jaw_y + 0.2 * unit  # the real jaw: 8 px below the mesh's, skin above, a neck in shade below
    lightness[int(edge_y):] = 50.0
    moved = portrait._to_the_edge(jaw, outward, lightness, np.zeros(2), unit, t)
    chin = np.abs(t - 0.5) <= 0.2
    assert np.abs(moved[chin, 1] - edge_y).max() <= 2.5, moved[chin, 1]
    assert np.array_equal(moved[:, 0], jaw[:, 0]), "along its normal only"
    assert np.array_equal(moved[np.abs(t - 0.5) > 0.5 - 0.05], jaw[np.abs(t - 0.5) > 0.5 - 0.05]), "the ends stay"
    assert np.abs(np.diff(moved[:, 1])).max() <= 1.0, "one smooth curve"
    flat = np.full((size, size), 80.0, np.float32)
    assert np.array_equal(portrait._to_the_edge(jaw, outward, flat, np.zeros(2), unit, t), jaw), "no edge: stays"


@pytest.mark.parametrize(("name", "ring"), [("face_5", True), ("face_6", True), ("face_7", False),
                                            ("face_8", False)])
def test_hair_gets_the_crown_s_highlight_and_a_cap_does_not(models: tuple[FaceDetector, FaceLandmarker],
                                                              shared_photos: Path, monkeypatch: pytest.MonkeyPatch,
                                                              name: str, ring: bool) -> None:
    """A cap is found as hair by its colour; the ring's teeth across one read as "a glitch" to a blind rater (face_7),
    so it goes only where the photo shows strands. The reference is the same drawing with the ring's lightening at
    zero: what differs is the ring."""
    rgb = _shared(shared_photos, name)
    mesh = _mesh(models, rgb)
    drawn = rgb.copy()
    portrait.draw_portrait(drawn, rgb, mesh.points)
    monkeypatch.setattr(portrait, "RING_LIGHT", 0.0)
    plain = rgb.copy()
    portrait.draw_portrait(plain, rgb, mesh.points)
    lighter = (drawn.astype(np.int16) - plain).mean(axis=2) > 15
    brows = float(mesh.points[[70, 300, 105, 334], 1].min())
    rows = np.nonzero(lighter.any(axis=1))[0]
    if ring:
        unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
        assert lighter.sum() > 0.1 * unit ** 2, lighter.sum()
        assert rows.max() < brows, "the ring reached below the brows"
    else:
        assert not lighter.any(), lighter.sum()


def _blotted(models: tuple[FaceDetector, FaceLandmarker], rgb: np.ndarray, *, beside: bool = False
             ) -> tuple[FaceMesh, np.ndarray, np.ndarray]:
    """The mesh, a "stylized" picture with a brown blot at the parting (what the style paints on a blonde's darker
    roots), and the blot's pixels; ``beside``: a dark brown streak down her side hair instead, beside the cheek
    (what the style paints in the shadows between strands), an eye's distance out from the face's edge at the
    nose's height and as long as the nose."""
    mesh = _mesh(models, rgb)
    unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
    up = portrait._up(mesh.points)
    yy, xx = np.mgrid[0:rgb.shape[0], 0:rgb.shape[1]]
    if beside:
        edge = mesh.points[234]  # the face's edge on the picture's left, at the eyes' height
        outward = edge - mesh.points[list(portrait.FACE_OVAL)].mean(axis=0)
        outward /= np.linalg.norm(outward)
        start = edge + outward * 0.3 * unit
        t = np.clip(((xx - start[0]) * -up[0] + (yy - start[1]) * -up[1]) / unit, 0, 0.8)  # down from there
        nearest = start[None, None] - up[None, None] * t[..., None] * unit
        blot = np.hypot(xx - nearest[..., 0], yy - nearest[..., 1]) < 0.05 * unit
    else:
        centre = mesh.points[10] + up * 0.45 * unit  # above the top of the forehead
        blot = np.hypot(xx - centre[0], yy - centre[1]) < 0.12 * unit
    stylized = rgb.copy()
    stylized[blot] = (96, 66, 44)
    return mesh, stylized, blot


def _crown_lift(rgb: np.ndarray, mesh: FaceMesh, stylized: np.ndarray, monkeypatch: pytest.MonkeyPatch
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The drawing, the same drawing with the crown's lift out of reach, and how much lighter (luma) the first is."""
    drawn, plain = stylized.copy(), stylized.copy()
    portrait.draw_portrait(drawn, rgb, mesh.points)
    with monkeypatch.context() as patch:
        patch.setattr(portrait, "FAIR_DROP", 1000.0)
        portrait.draw_portrait(plain, rgb, mesh.points)
    luma = np.array([0.299, 0.587, 0.114])
    return drawn, plain, drawn @ luma - plain @ luma


@pytest.mark.parametrize("name", ["face_1", "face_2"])
def test_a_blonde_s_crown_loses_its_dark_blot(models: tuple[FaceDetector, FaceLandmarker], shared_photos: Path,
                                              monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A blonde's hair is left to the style, which paints the photo's darker roots at the parting as a brown blot
    (what raters named first on face_1 and face_2, every round): such a blot painted on the "stylized" picture at
    her parting is lifted to her hair's colour, above the brows only. (face_1's hair is 23.6-25.7 CIELAB from her
    skin, with the pipeline's mesh or the one found on the photo alone: before ``FAIR_HAIR`` was 32 the second took
    it past the line, and her hair was drawn as dark hair is.)"""
    rgb = _shared(shared_photos, name)
    mesh, stylized, blot = _blotted(models, rgb)
    drawn, plain, lifted = _crown_lift(rgb, mesh, stylized, monkeypatch)
    assert float(np.median(lifted[blot])) > 40, np.median(lifted[blot])
    _lift_stays_off_face_and_neck(mesh, drawn, plain)


def test_a_blonde_s_side_hair_loses_its_dark_streaks(models: tuple[FaceDetector, FaceLandmarker],
                                                     shared_photos: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The style paints the shadows between a blonde's strands down the sides as dark brown streaks ("dark streak
    noise through hair", two raters, face_2, each preferring the picture without them): a brown streak painted down
    face_2's side hair beside her cheek is lifted to her hair's colour, the face and the neck left alone."""
    rgb = _shared(shared_photos, "face_2")
    mesh, stylized, streak = _blotted(models, rgb, beside=True)
    drawn, plain, lifted = _crown_lift(rgb, mesh, stylized, monkeypatch)
    assert float(np.median(lifted[streak])) > 40, np.median(lifted[streak])
    _lift_stays_off_face_and_neck(mesh, drawn, plain)


def _lift_stays_off_face_and_neck(mesh: FaceMesh, drawn: np.ndarray, plain: np.ndarray) -> None:
    """Nothing of the lift on the face (its oval shrunk to 0.9 about its middle: hair falls across the oval's rim at
    the temples, and is lifted there), nor under the chin within the jaw's width (the neck)."""
    changed = np.abs(drawn.astype(np.int16) - plain).max(axis=2) > 0
    ring = mesh.points[list(portrait.FACE_OVAL)]
    centre = ring.mean(axis=0)
    face = Image.new("L", (drawn.shape[1], drawn.shape[0]), 0)
    ImageDraw.Draw(face).polygon([(float(x), float(y)) for x, y in centre + (ring - centre) * 0.9], fill=255)
    assert not (changed & (np.asarray(face) > 0)).any(), "the lift reached into the face"
    left, right = sorted((float(mesh.points[172, 0]), float(mesh.points[397, 0])))  # the jaw below the ears
    chin = int(mesh.points[152, 1])
    assert not changed[chin:, int(left):int(right) + 1].any(), "the lift reached the neck"


def test_the_forehead_under_a_cap_s_brim_is_painted_as_skin(models: tuple[FaceDetector, FaceLandmarker],
                                                             shared_photos: Path, monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Under a cap (face_8's), the strip of forehead between the mesh's oval and the brim is skin in the brim's shade,
    darker and redder than the cheeks: the skin's test left it half painted and the style's tan showed through, "a
    brown smudge under the cap brim" (four raters of seven). Drawn on the photo itself, most of that strip now
    changes (painted in the skin's tones), and nothing changes outside the band (``CAP_BAND``) or below the eyes."""
    rgb = _shared(shared_photos, "face_8")
    mesh = _mesh(models, rgb)
    drawn, plain = rgb.copy(), rgb.copy()
    portrait.draw_portrait(drawn, rgb, mesh.points)
    with monkeypatch.context() as patch:
        patch.setattr(portrait, "CAP_BAND", 1.0)  # the band is the oval itself: nothing beyond it
        portrait.draw_portrait(plain, rgb, mesh.points)
    ring = mesh.points[list(portrait.FACE_OVAL)]
    centre = ring.mean(axis=0)

    def inside(scale: float) -> np.ndarray:
        canvas = Image.new("L", (rgb.shape[1], rgb.shape[0]), 0)
        ImageDraw.Draw(canvas).polygon([(float(x), float(y)) for x, y in centre + (ring - centre) * scale], fill=255)
        return np.asarray(canvas) > 0

    eyes = int(mesh.points[[159, 386], 1].mean())
    lit = np.asarray(Image.fromarray(rgb).convert("L")) > 100  # skin, not the black brim
    strip = inside(1.2) & ~inside(1.0) & lit
    strip[eyes:] = False
    changed = np.abs(drawn.astype(np.int16) - plain).max(axis=2) > 0
    assert strip.sum() > 50, strip.sum()
    assert changed[strip].mean() > 0.5, changed[strip].mean()
    assert not changed[~inside(1.3)].any(), "the band reached beyond the face's oval scaled 1.25"
    assert not changed[eyes + 1:].any(), "the band reached below the eyes"


def test_fair_but_darker_hair_keeps_its_dark_marks(models: tuple[FaceDetector, FaceLandmarker], shared_photos: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Hair as near the skin's colour but darker than ``FAIR_MIN_L`` keeps what the style drew: there the dark marks
    are the drawing (face_4's brown spikes: L* 50 against his skin's 73, 24 CIELAB apart with the pipeline's mesh).
    face_2's hair (L* 72) with the bound above it is such a head: her blot stays, nothing else changes either."""
    rgb = _shared(shared_photos, "face_2")
    mesh, stylized, _ = _blotted(models, rgb)
    monkeypatch.setattr(portrait, "FAIR_MIN_L", 80.0)
    drawn, plain, _ = _crown_lift(rgb, mesh, stylized, monkeypatch)
    assert np.array_equal(drawn, plain)


def test_hair_and_skin_meet_in_a_crisp_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawn small and brought up, a selfie's hair and skin met in ramps some 15 px wide with the style's blur between
    them ("a lopsided, blurry-edged face", face_5): about the face's oval they now meet in a step. Layers as
    ``_masses`` brings them up: skin fading out and hair fading in over 20 px each, 7 px apart, at the oval's edge;
    along the row the colour goes from skin to hair within a few pixels and the style's grey never shows. With
    the edge's ramp at 0.5 (``_steep`` then changes nothing) and no gap filled the same layers make the old ramp.
    Above the brows nothing changes."""
    height, width = 400, 460
    points = np.zeros((portrait.N_POINTS, 2))
    t = np.linspace(0, 2 * np.pi, len(portrait.FACE_OVAL), endpoint=False) - np.pi / 2  # from the top, clockwise
    points[list(portrait.FACE_OVAL)] = np.stack([200 + 150 * np.cos(t), 200 + 150 * np.sin(t)], axis=1)
    brows = [i for pair in portrait.RIGHT_BROW + portrait.LEFT_BROW for i in pair]
    points[brows] = np.stack([np.linspace(140, 260, len(brows)), np.full(len(brows), 120.0)], axis=1)  # above the row
    x = np.arange(width, dtype=np.float32)[None, :].repeat(height, 0)
    skin_alpha, hair_alpha = np.clip((353 - x) / 20, 0, 1), np.clip((x - 340) / 20, 0, 1)
    skin = (np.array([240, 200, 180], np.float32) * skin_alpha[..., None], skin_alpha)
    hair = (np.array([20, 20, 30], np.float32) * hair_alpha[..., None], hair_alpha)
    luma = np.array([0.299, 0.587, 0.114])
    between, crisp = {}, portrait.EDGE_RAMP
    for ramp in (crisp, 0.5):
        monkeypatch.setattr(portrait, "EDGE_RAMP", ramp)
        if ramp == 0.5:  # no gap filled either: the layers as they were laid
            monkeypatch.setattr(portrait, "GAP_NEAR", 0.0)
        sheet = portrait.Sheet(np.full((height, width, 3), 128.0, np.float32), (0, 0))
        cover = portrait._crisp(sheet, hair, skin, points, 100.0)
        row = sheet.rgb[200, 300:400] @ luma
        between[ramp] = int(((row > 40) & (row < 190)).sum())
        if ramp != 0.5:
            assert not (np.abs(row - 128) < 10).any(), "the style's grey shows between skin and hair"
            assert cover[200, 360] == pytest.approx(1.0) and cover[200, 320] == 0.0
            # above the brows the hairline keeps its ramp (drawn crisp it was "a ragged brown fringe", face_6)
            assert cover[60, 345] == pytest.approx(hair_alpha[60, 345], abs=1e-3)
    assert between[crisp] <= 3 and between[0.5] >= 10, between


@pytest.mark.parametrize(("name", "crisp"), [("face_5", True), ("face_7", False)])
def test_a_cap_keeps_soft_edges(models: tuple[FaceDetector, FaceLandmarker], shared_photos: Path,
                                monkeypatch: pytest.MonkeyPatch, name: str, crisp: bool) -> None:
    """Crisp edges are for hair with strands (face_5's): a cap's brim drawn crisp bared the tan band under it, and a
    blind rater preferred the soft one on both caps (cmp28). face_7's cap is drawn the same whatever the ramp."""
    rgb = _shared(shared_photos, name)
    mesh = _mesh(models, rgb)
    drawn, soft = rgb.copy(), rgb.copy()
    portrait.draw_portrait(drawn, rgb, mesh.points)
    monkeypatch.setattr(portrait, "EDGE_RAMP", 0.5)
    monkeypatch.setattr(portrait, "GAP_NEAR", 0.0)
    monkeypatch.setattr(portrait, "OVAL_BAND", (1.0, 1.0))
    portrait.draw_portrait(soft, rgb, mesh.points)
    assert np.array_equal(drawn, soft) != crisp


def _config(write_config: Callable[..., Path], folder: Path, random_ir: Path, **image: object) -> Path:
    style = style_with(random_ir, folder, "faces", {"crop_px": 256, "scale": 1.5})  # restyled up to 213 px
    return write_config({"model": {"path": str(style)},
                         "image": {"faces": "auto", "tone": "off", "palette": "off", "max_side": 1024, **image}})


def _portrait_on_and_off(config: Config, src: Path) -> tuple[JobResult, JobResult]:
    """``src`` stylized with ``config`` (the portrait on) and with ``image.portrait: off``."""
    plain = config.model_copy(update={"image": config.image.model_copy(update={"portrait": "off"})})
    results = []
    for each in (config, plain):
        with Stylizer(each) as stylizer:
            results.append(stylizer.run(src))
    return results[0], results[1]


@pytest.mark.slow  # two Stylizers: ~25 s on a loaded 2-core box
def test_a_selfie_is_drawn_though_too_large_to_restyle(write_config: Callable[..., Path], narrow_ir: Path,
                                                       tmp_path: Path, shared_photos: Path,
                                                       models: tuple[FaceDetector, FaceLandmarker],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    src = shared_photos / "face_5.jpg"  # 862 px, one face of ~440 px: twice what the style restyles
    with caplog.at_level(logging.INFO, logger="edge_anime"):
        on, off = _portrait_on_and_off(load_config(_config(write_config, tmp_path, narrow_ir)), src)
    assert off.faces == [], "without the portrait a selfie is left to the picture"
    # ... and said so: found and too large, not "no face" (issue 42 item 21)
    assert "faces: face_5.jpg: 1 face(s) over the" in caplog.text
    assert len(on.faces) == 1 and on.faces[0][2] > 300
    assert on.image is not None and off.image is not None
    a, b = np.asarray(on.image), np.asarray(off.image)
    with Image.open(src) as photo:
        mesh = _mesh(models, np.asarray(photo.convert("RGB")))
    eye = _eye_box(mesh, portrait.RIGHT_EYE_UPPER, portrait.RIGHT_EYE_LOWER, 10)
    assert _near(a[eye], portrait.INK, 24) > 50 and _near(a[eye], portrait.EYE_WHITE, 12) > 50
    assert np.array_equal(a[:40, :40], b[:40, :40]) and np.array_equal(a[:40, -40:], b[:40, -40:])


@pytest.mark.slow
def test_small_faces_of_a_group_are_restyled_and_drawn(write_config: Callable[..., Path], narrow_ir: Path,
                                                       tmp_path: Path, shared_photos: Path) -> None:
    group = groups(shared_photos, 1, seed=11, long_side=900, faces=(3, 3), sizes=(90.0, 180.0))[0]
    src = tmp_path / "group.png"
    group.image.save(src)
    on, off = _portrait_on_and_off(load_config(_config(write_config, tmp_path, narrow_ir)), src)
    # the same faces, restyled both ways (the portrait looks for smaller faces too, in smaller tiles of the picture,
    # and the views' merge moves a box by a pixel or two)
    assert len(on.faces) == 3 and len(off.faces) == 3
    assert np.abs(np.array(on.faces) - np.array(off.faces)).max() <= 4, (on.faces, off.faces)
    a, b = np.asarray(on.image), np.asarray(off.image)
    for x, y, w, h in on.faces:
        face_on, face_off = a[y:y + h, x:x + w], b[y:y + h, x:x + w]
        assert _near(face_on, portrait.INK, 24) > _near(face_off, portrait.INK, 24) + 10, (x, y, w, h)


@pytest.mark.slow  # two Stylizers
def test_a_crowd_s_small_faces_are_drawn_without_their_restyle(write_config: Callable[..., Path], narrow_ir: Path,
                                                              tmp_path: Path, shared_photos: Path) -> None:
    """Faces of 32-64 px (a crowd's, under image.faces_min_px) are drawn, not restyled: found with the portrait on,
    absent with it off, their features drawn in ink, and the face pass pastes none of them."""
    group = groups(shared_photos, 1, seed=5, long_side=900, faces=(3, 3), sizes=(40.0, 56.0))[0]
    src = tmp_path / "crowd.png"
    group.image.save(src)
    config = load_config(_config(write_config, tmp_path, narrow_ir))
    on, off = _portrait_on_and_off(config, src)
    assert off.faces == [], "under faces_min_px and the portrait off: left to the picture"
    assert len(on.faces) == 3 and all(w < 64 for _, _, w, _ in on.faces), on.faces
    a, b = np.asarray(on.image), np.asarray(off.image)
    for x, y, w, h in on.faces:
        assert _near(a[y:y + h, x:x + w], portrait.INK, 24) > _near(b[y:y + h, x:x + w], portrait.INK, 24) + 5
    with Stylizer(config) as stylizer:
        faces = next(iter(stylizer._compiled.values())).pipeline.faces
        assert faces is not None
        rgb = np.asarray(group.image)
        found, _ = faces.find(rgb)
        assert len(found) == 3 and faces.apply(rgb.copy(), rgb, found) == [], "a small face is drawn only"


def test_a_false_small_face_the_mesh_turns_down_is_not_kept(write_config: Callable[..., Path], random_ir: Path,
                                                            tmp_path: Path, shared_photos: Path) -> None:
    """scene_11's clouds hold a false face of ~56 px (detector score 0.61) at 1024 px: the portrait's search for
    small faces finds it, and the face mesh turns it down, so nothing is drawn or listed there."""
    with Image.open(shared_photos / "scene_11.jpg") as photo:
        picture = photo.convert("RGB")
    picture.thumbnail((1024, 1024))
    rgb = np.asarray(picture)
    with Stylizer(load_config(_config(write_config, tmp_path, random_ir))) as stylizer:
        faces = next(iter(stylizer._compiled.values())).pipeline.faces
        assert faces is not None
        assert [f for f in faces.detector.detect(rgb, min_px=32) if f.size < 64], "the false face is found"
        assert faces.find(rgb) == ([], 0)


def test_a_face_the_mesh_does_not_see_is_only_restyled(write_config: Callable[..., Path], random_ir: Path,
                                                       tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    noise = rng.integers(0, 256, (320, 320, 3), dtype=np.uint8)
    fake = Face((110.0, 110.0, 210.0, 210.0), np.array([[140, 150], [180, 150], [160, 170], [160, 190],
                                                          [120, 150], [200, 150]], np.float32), 0.9)
    with Stylizer(load_config(_config(write_config, tmp_path, random_ir))) as stylizer:
        faces = next(iter(stylizer._compiled.values())).pipeline.faces
        assert faces is not None and faces.landmarker is not None
        assert faces.landmarker.landmarks(noise, fake) is None
        whole = stylizer.engine.infer(noise)
        result = whole.copy()
        assert len(faces.apply(result, noise, [fake])) == 1  # restyled and pasted, nothing drawn, no error


def test_a_grin_is_drawn_with_shut_eyes_and_an_open_mouth(models: tuple[FaceDetector, FaceLandmarker],
                                                          shared_photos: Path) -> None:
    rgb = _shared(shared_photos, "face_4")  # a wide grin, eyes narrowed by it
    mesh = _mesh(models, rgb)
    assert portrait._expression(mesh.points) == (True, True)  # open, smiling
    canvas = np.full_like(rgb, 128)
    portrait.draw_portrait(canvas, rgb, mesh.points)
    unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
    for upper, lower in ((portrait.RIGHT_EYE_UPPER, portrait.RIGHT_EYE_LOWER),
                         (portrait.LEFT_EYE_UPPER, portrait.LEFT_EYE_LOWER)):
        eye = canvas[_eye_box(mesh, upper, lower, 0.15 * unit)]
        assert _near(eye, portrait.INK, 24) > 10, "the shut eye's arc"
        assert _near(eye, portrait.EYE_WHITE, 12) == 0, "a grin's narrowed eyes are drawn shut, not staring"
    mouth = canvas[_eye_box(mesh, portrait.LIPS_INNER_UPPER, portrait.LIPS_INNER_LOWER, 0.05 * unit)]
    assert _near(mouth, portrait.TEETH, 10) > 10, "the grin keeps its teeth"


@pytest.mark.parametrize("size", [3, 5, 11])
def test_the_square_filter_is_pillow_s_max_and_min_filter(size: int) -> None:
    """The blonde's closing (``_even_out``) runs on a separable max / min: the same values as Pillow's rank filters,
    edges included, on odd shapes and a mask of scattered levels."""
    rng = np.random.default_rng(size)
    values = (rng.random((37, 61)) > 0.6).astype(np.uint8) * rng.integers(0, 256, (37, 61)).astype(np.uint8)
    for pick, pillow in ((np.maximum, ImageFilter.MaxFilter(size)), (np.minimum, ImageFilter.MinFilter(size))):
        expected = np.asarray(Image.fromarray(values).filter(pillow))
        np.testing.assert_array_equal(portrait._square_filter(values, size, pick), expected)


def test_hair_near_the_skin_s_colour_stays_the_style_s_wherever_the_mesh_sits(
        models: tuple[FaceDetector, FaceLandmarker], shared_photos: Path) -> None:
    """face_4's bronze hair is 24-29 CIELAB from his skin: at the old line (25) a detector box 0.3 px away drew it, as a
    blurry brown mass with a pale band over the temples, where the blind rounds had rated the style's spikes. With
    the mesh moved by up to half a pixel either way his crown (above the forehead, where ``_hair`` paints) stays
    the style's each time; face_5's dark hair (61 from her skin) is drawn each time."""
    for name, drawn in (("face_4", False), ("face_5", True)):
        rgb = _shared(shared_photos, name)
        mesh = _mesh(models, rgb)
        unit = float(np.linalg.norm(mesh.points[159] - mesh.points[386]))
        centre = mesh.points[10] + portrait._up(mesh.points) * 0.6 * unit
        x0, y0 = (centre - 0.3 * unit).astype(int)
        x1, y1 = (centre + 0.3 * unit).astype(int)
        for dx in (-0.5, -0.25, 0.0, 0.25, 0.5):
            for dy in (-0.5, 0.0, 0.5):
                canvas = rgb.copy()
                portrait.draw_portrait(canvas, rgb, mesh.points + np.array([dx, dy], np.float32))
                changed = float((canvas[y0:y1, x0:x1] != rgb[y0:y1, x0:x1]).any(axis=2).mean())
                assert (changed > 0.9) if drawn else (changed < 0.3), (name, dx, dy, changed)


def test_a_clip_s_face_keeps_its_choices_where_a_still_s_would_flip(models: tuple[FaceDetector, FaceLandmarker],
                                                                    shared_photos: Path) -> None:
    """face_3's short hair leaves 39-40 of 150 samples off his skin as the mesh moves by up to half a pixel, and
    40 is the least that makes hair: drawn alone, each place decides anew and his hair is drawn at some and left to
    the style at others (in a shaking clip it came and went 11 times in 20 frames). With one ``Held`` across the
    places, as a clip's tracked face has, the first choice stays. A fresh ``Held`` draws what no ``Held`` draws."""
    rgb = _shared(shared_photos, "face_3")
    mesh = _mesh(models, rgb)
    shifts = [np.array([dx, dy], np.float32) for dx in (-0.5, -0.25, 0.0, 0.25, 0.5) for dy in (-0.5, 0.0, 0.5)]
    alone, kept = set(), set()
    held = portrait.Held()
    for shift in shifts:
        each = portrait.Held()
        portrait.draw_portrait(rgb.copy(), rgb, mesh.points + shift, each)
        alone.add(each.said["hair"])
        portrait.draw_portrait(rgb.copy(), rgb, mesh.points + shift, held)
        kept.add(held.said["hair"])
    assert alone == {True, False}, "the premise: drawn alone, face_3's hair is decided both ways"
    assert len(kept) == 1, kept
    for name in ("face_3", "face_7"):  # face_7 wears glasses: both ways of deciding them agree
        photo = _shared(shared_photos, name)
        points = _mesh(models, photo).points
        plain, fresh = photo.copy(), photo.copy()
        portrait.draw_portrait(plain, photo, points)
        portrait.draw_portrait(fresh, photo, points, portrait.Held())
        np.testing.assert_array_equal(plain, fresh)
