"""Face landmarks: the Face Mesh IR (``models/detectors/facemesh``) against LiteRT and the detector's keypoints, the
ROI and its mapping back to the picture, and the index constants the drawing code takes."""
from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from edge_anime.config import DeviceSection
from edge_anime.errors import ModelError
from edge_anime.faces import landmarks as lm
from edge_anime.faces.detect import Face, FaceDetector
from edge_anime.faces.landmarks import FaceLandmarker, FaceMesh, MeshSpec, landmarks_info
from edge_anime.models import ModelInfo, load_model_info

FACE_PHOTOS = [f"face_{i}.jpg" for i in range(1, 9)]
# How far a mesh point may lie from the detector's keypoint for the same feature, in face sizes (the detector's
# box side): BlazeFace's keypoints are coarse (an eye's keypoint is the eye's centre within a few px at 160 px).
NEAR = 0.08
MIN_PRESENCE = 0.9  # on a clear frontal face the model is sure


@pytest.fixture(scope="module")
def detector() -> Iterator[FaceDetector]:
    found = FaceDetector(DeviceSection())
    yield found
    found.close()


@pytest.fixture(scope="module")
def landmarker() -> Iterator[FaceLandmarker]:
    made = FaceLandmarker(DeviceSection())
    yield made
    made.close()


def _photo(photos: Path, name: str) -> np.ndarray:
    with Image.open(photos / name) as photo:
        return np.asarray(photo.convert("RGB"))


def _centre(mesh: FaceMesh, indices: tuple[int, ...]) -> np.ndarray:
    return np.asarray(mesh.points[list(indices)].mean(axis=0))


# -- the model ---------------------------------------------------------------------------------------------
def test_converter_rebuilds_the_shipped_ir_and_it_matches_litert(tmp_path: Path) -> None:
    from converters.face_landmarks import MAX_POINT_PX, MAX_PRESENCE_DIFF, convert

    written = convert(output=tmp_path / "facemesh", photos=None)
    made = yaml.safe_load((written / "manifest.yaml").read_text(encoding="utf-8"))
    shipped = landmarks_info().manifest
    assert made["ir"]["xml_sha256"] == shipped["ir"]["xml_sha256"]
    assert made["ir"]["bin_sha256"] == shipped["ir"]["bin_sha256"], "the shipped IR is not what the converter makes"
    assert made["verification"]["reference"] == "litert"
    assert made["verification"]["max_presence_diff"] <= MAX_PRESENCE_DIFF
    # the shipped manifest was verified on the photos: faces, every point within the floor
    assert shipped["verification"]["faces"] >= 8
    assert shipped["verification"]["max_point_px"] <= MAX_POINT_PX
    licence = (landmarks_info().directory / "LICENSE.md").read_text(encoding="utf-8")
    assert (written / "LICENSE.md").read_text(encoding="utf-8") == licence


def test_the_landmark_model_is_not_a_style_and_is_hash_checked(tmp_path: Path) -> None:
    from edge_anime.locations import bundled_models_dir
    from edge_anime.models import style_names

    names = style_names([bundled_models_dir()])
    assert "facemesh" not in names and "detectors" not in names
    copy = tmp_path / "facemesh"
    shutil.copytree(landmarks_info().directory, copy)
    data = bytearray((copy / "model.bin").read_bytes())
    data[100] ^= 0xFF
    (copy / "model.bin").write_bytes(bytes(data))
    with pytest.raises(ModelError, match="sha256"):
        load_model_info(copy)


def test_a_manifest_without_its_landmarks_section_is_named(tmp_path: Path) -> None:
    info = landmarks_info()
    manifest = {k: v for k, v in info.manifest.items() if k != "landmarks"}
    broken = ModelInfo(name=info.name, xml=info.xml, bin=info.bin, precision=info.precision, manifest=manifest)
    with pytest.raises(ModelError, match="'landmarks' must give input_px"):
        MeshSpec.from_manifest(broken)


def test_the_contours_are_loops_of_mesh_points() -> None:
    for name, contour in lm.CONTOURS.items():
        assert len(set(contour)) == len(contour), f"{name} repeats a point"
        assert all(0 <= i < 468 for i in contour), name
    assert len(lm.RIGHT_EYE) == len(lm.LEFT_EYE) == 16 and len(lm.RIGHT_BROW) == len(lm.LEFT_BROW) == 10
    assert lm.RIGHT_EYE[0] == lm.RIGHT_EYE_OUTER and lm.RIGHT_EYE[8] == lm.RIGHT_EYE_INNER
    assert lm.LEFT_EYE[0] == lm.LEFT_EYE_OUTER and lm.LEFT_EYE[8] == lm.LEFT_EYE_INNER
    assert lm.LIPS_OUTER[0] == lm.MOUTH_RIGHT and lm.LIPS_OUTER[10] == lm.MOUTH_LEFT
    assert lm.FACE_OVAL[0] == 10 and lm.CHIN in lm.FACE_OVAL and lm.NOSE_BRIDGE[-1] == lm.NOSE_TIP


# -- on faces ----------------------------------------------------------------------------------------------
def test_the_mesh_meets_the_detectors_keypoints_on_each_face_photo(detector: FaceDetector, landmarker: FaceLandmarker,
                                                                   shared_photos: Path) -> None:
    for name in FACE_PHOTOS:
        rgb = _photo(shared_photos, name)
        (face,) = detector.detect(rgb, min_px=64)
        mesh = landmarker.landmarks(rgb, face)
        assert mesh is not None, f"{name}: no face in the crop"
        assert mesh.score >= MIN_PRESENCE, f"{name}: presence {mesh.score:.3f}"
        assert mesh.points.shape == (468, 2) and mesh.points.dtype == np.float32 and mesh.z.shape == (468,)
        height, width = rgb.shape[:2]
        assert (mesh.points >= 0).all() and (mesh.points[:, 0] < width).all() and (mesh.points[:, 1] < height).all()
        right_eye = _centre(mesh, (lm.RIGHT_EYE_OUTER, lm.RIGHT_EYE_INNER, lm.RIGHT_EYE_TOP, lm.RIGHT_EYE_BOTTOM))
        left_eye = _centre(mesh, (lm.LEFT_EYE_OUTER, lm.LEFT_EYE_INNER, lm.LEFT_EYE_TOP, lm.LEFT_EYE_BOTTOM))
        mouth = _centre(mesh, (lm.MOUTH_RIGHT, lm.MOUTH_LEFT, lm.LIP_UPPER_INNER, lm.LIP_LOWER_INNER))
        for feature, point, keypoint in (("right eye", right_eye, 0), ("left eye", left_eye, 1), ("mouth", mouth, 3)):
            off = float(np.hypot(*(point - face.landmarks[keypoint]))) / face.size
            assert off < NEAR, f"{name}: the mesh's {feature} is {off:.3f} face sizes from the detector's"
        assert right_eye[0] < left_eye[0], f"{name}: the subject's right eye is on the picture's left"
        assert mesh.points[lm.MOUTH_RIGHT][0] < mesh.points[lm.MOUTH_LEFT][0]
        assert mesh.points[lm.FACE_OVAL[0]][1] < right_eye[1] < mouth[1] < mesh.points[lm.CHIN][1]


def test_a_turned_face_is_measured_in_the_pictures_pixels(detector: FaceDetector, landmarker: FaceLandmarker,
                                                         shared_photos: Path) -> None:
    """The ROI turns with the eyes and the points come back turned: the mesh's eye line follows the picture's roll,
    and the same face turned 30 degrees gives the upright face's points turned about the picture's centre."""
    upright = _photo(shared_photos, "face_3.jpg")
    (face,) = detector.detect(upright, min_px=64)
    base = landmarker.landmarks(upright, face)
    assert base is not None
    turned = np.asarray(Image.fromarray(upright).rotate(30, resample=Image.Resampling.BICUBIC))  # counter-clockwise
    (turned_face,) = detector.detect(turned, min_px=64)
    mesh = landmarker.landmarks(turned, turned_face)
    assert mesh is not None and mesh.score >= MIN_PRESENCE
    eyes = _centre(mesh, lm.LEFT_EYE) - _centre(mesh, lm.RIGHT_EYE)
    assert math.degrees(math.atan2(eyes[1], eyes[0])) == pytest.approx(-30, abs=4)
    centre = np.array([upright.shape[1] / 2, upright.shape[0] / 2])
    angle = math.radians(-30)  # on the picture (y down) a counter-clockwise turn is a negative angle
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    expected = (base.points - centre) @ rotation.T + centre
    drift = np.hypot(*(mesh.points - expected).T)
    assert float(np.median(drift)) < 0.02 * face.size, f"median {np.median(drift):.1f} px"


def test_noise_is_no_face_and_many_is_each_one(detector: FaceDetector, landmarker: FaceLandmarker,
                                              shared_photos: Path) -> None:
    rgb = _photo(shared_photos, "face_1.jpg")
    (face,) = detector.detect(rgb, min_px=64)
    noise = np.random.default_rng(0).integers(0, 256, rgb.shape, dtype=np.uint8)
    assert landmarker.landmarks(noise, face) is None
    one = landmarker.landmarks(rgb, face)
    moved = Face((0.0, 0.0, 0.0, 0.0), face.landmarks, face.score)  # a zero box: its crop is one replicated pixel
    many = landmarker.landmarks_many(rgb, [face, moved, face])
    assert one is not None and many[0] is not None and many[2] is not None and many[1] is None
    np.testing.assert_allclose(many[0].points, one.points, atol=1e-3)
    np.testing.assert_allclose(many[2].points, one.points, atol=1e-3)
    assert landmarker.landmarks_many(rgb, []) == []


def test_a_mesh_scales_with_its_picture(detector: FaceDetector, landmarker: FaceLandmarker, shared_photos: Path
                                        ) -> None:
    rgb = _photo(shared_photos, "face_2.jpg")
    (face,) = detector.detect(rgb, min_px=64)
    mesh = landmarker.landmarks(rgb, face)
    assert mesh is not None
    double = mesh.scaled(2.0, 2.0)
    np.testing.assert_allclose(double.points, mesh.points * 2, rtol=1e-6)
    np.testing.assert_allclose(double.z, mesh.z * 2, rtol=1e-6)
    assert double.score == mesh.score
