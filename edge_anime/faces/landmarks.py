"""A face's 468 landmarks: MediaPipe's Face Mesh model (``models/detectors/facemesh``) on the face's aligned crop.

The crop is MediaPipe's "detection to ROI" (``face_detection_front_detection_to_roi.pbtxt``): a square centred on
the detector's box, 1.5 times its longer side (the manifest's ``roi_scale``), turned by the eye angle so the eyes
are level (no clamp on the roll, unlike the restyle crop), warped bilinearly to 192 px with the picture's edge
replicated beyond it. The model gives 468 points (x, y, z) in the crop's pixels and a face-presence logit; the
points are mapped back to the picture with ``Placement.crop_to_picture``.

Like the detector, the model runs on the style's ``Engine`` code at f32 with the THROUGHPUT hint
(``detect.square_engine``): ~2 ms a face, a picture's faces side by side on a stream a core, and f32 keeps the
points those the converter verified against LiteRT.

The index constants below are MediaPipe's (``face_mesh_connections.py``: FACEMESH_LIPS, _LEFT_EYE, ...), each
contour written as one ordered loop (or line) of points, so drawing code can take them as polygons. "Right" and
"left" are the subject's, as in MediaPipe: the right eye is on the picture's left.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from ..config import DeviceSection
from ..locations import bundled_models_dir
from ..models import ModelInfo, load_model_info
from .detect import Face, eye_angle, read_section, square_engine
from .paste import Placement, crop

LANDMARKS_DIR = Path("detectors") / "facemesh"  # under the bundled models folder

# Closed loops, from the outer corner along the upper lid to the inner corner and back along the lower lid.
RIGHT_EYE = (33, 246, 161, 160, 159, 158, 157, 173, 133, 155, 154, 153, 145, 144, 163, 7)
LEFT_EYE = (263, 466, 388, 387, 386, 385, 384, 398, 362, 382, 381, 380, 374, 373, 390, 249)
# Closed loops: the upper edge from the outer end to the inner end, then the lower edge back.
RIGHT_BROW = (70, 63, 105, 66, 107, 55, 65, 52, 53, 46)
LEFT_BROW = (300, 293, 334, 296, 336, 285, 295, 282, 283, 276)
# Closed loops from the right mouth corner: the upper lip's edge to the left corner, then the lower lip's back.
LIPS_OUTER = (61, 185, 40, 39, 37, 0, 267, 269, 270, 409, 291, 375, 321, 405, 314, 17, 84, 181, 91, 146)
LIPS_INNER = (78, 191, 80, 81, 82, 13, 312, 311, 310, 415, 308, 324, 318, 402, 317, 14, 87, 178, 88, 95)
# Closed loop from the top of the forehead (10) clockwise on the picture, through the chin (152).
FACE_OVAL = (10, 338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377, 152, 148,
             176, 149, 150, 136, 172, 58, 132, 93, 234, 127, 162, 21, 54, 103, 67, 109)
# Open lines: the bridge from between the eyes down to the tip (1), and the nose's base from wing to wing.
NOSE_BRIDGE = (168, 6, 197, 195, 5, 4, 1)
NOSE_BASE = (98, 97, 2, 326, 327)
# Single points: the eyes' corners and lids, the mouth's corners and the lips' middles.
RIGHT_EYE_OUTER, RIGHT_EYE_INNER, RIGHT_EYE_TOP, RIGHT_EYE_BOTTOM = 33, 133, 159, 145
LEFT_EYE_OUTER, LEFT_EYE_INNER, LEFT_EYE_TOP, LEFT_EYE_BOTTOM = 263, 362, 386, 374
MOUTH_RIGHT, MOUTH_LEFT, LIP_UPPER_INNER, LIP_LOWER_INNER = 61, 291, 13, 14
NOSE_TIP, CHIN = 1, 152
CONTOURS: dict[str, tuple[int, ...]] = {
    "right_eye": RIGHT_EYE, "left_eye": LEFT_EYE, "right_brow": RIGHT_BROW, "left_brow": LEFT_BROW,
    "lips_outer": LIPS_OUTER, "lips_inner": LIPS_INNER, "face_oval": FACE_OVAL, "nose_bridge": NOSE_BRIDGE,
    "nose_base": NOSE_BASE,
}


@dataclass(frozen=True)
class FaceMesh:
    """One face's landmarks in the pixels of the picture they were found in: ``points`` 468 x 2 (x, y) float32,
    ``z`` 468 float32 (depth at the same scale as x, smaller is nearer the camera, 0 near the face's centre plane)
    and ``score``, the model's face-presence probability."""

    points: np.ndarray
    z: np.ndarray
    score: float

    def scaled(self, sx: float, sy: float) -> FaceMesh:
        """These landmarks in a picture scaled by (sx, sy) (z follows x)."""
        return FaceMesh(self.points * np.array([sx, sy], dtype=np.float32), self.z * np.float32(sx), self.score)


@dataclass(frozen=True)
class MeshSpec:
    """How to crop for the landmark IR and read it, from its manifest's ``landmarks:`` (written by the converter)."""

    input_px: int
    points: int
    roi_scale: float
    presence_min: float

    @classmethod
    def from_manifest(cls, info: ModelInfo) -> MeshSpec:
        return read_section(info, "landmarks", lambda s: cls(
            int(s["input_px"]), int(s["points"]), float(s["roi_scale"]), float(s["presence_min"])),
            fields="input_px, points, roi_scale and presence_min", converter="converters.face_landmarks")


def landmarks_info() -> ModelInfo:
    """The bundled landmark model, hash-checked like a style."""
    return load_model_info(bundled_models_dir() / LANDMARKS_DIR)


def roi(face: Face, *, input_px: int, scale: float) -> Placement:
    """MediaPipe's crop for the landmark model: centred on the box, ``scale`` x its longer side, eyes level."""
    x0, y0, x1, y1 = face.box
    return Placement((x0 + x1) / 2, (y0 + y1) / 2, face.size * scale, eye_angle(face), input_px)


def face_crop(rgb: np.ndarray, place: Placement) -> np.ndarray:
    """What the model is fed: ``place``'s square of ``rgb``, warped bilinearly (MediaPipe's ImageToTensor)."""
    return crop(rgb, place, resample=Image.Resampling.BILINEAR)


def mesh_from_output(raw: np.ndarray, place: Placement, *, points: int) -> tuple[np.ndarray, np.ndarray, float]:
    """The IR's one output (points x 3 in crop px, then the presence logit) -> picture (x, y), z, probability."""
    xyz = np.asarray(raw[:points * 3], dtype=np.float64).reshape(points, 3)
    picture = xyz[:, :2] @ place.crop_to_picture()[:, :2].T + place.crop_to_picture()[:, 2]
    z = xyz[:, 2] * (place.side / place.crop_px)
    return picture.astype(np.float32), z.astype(np.float32), _sigmoid(float(raw[points * 3]))


def _sigmoid(logit: float) -> float:
    return 1.0 / (1.0 + math.exp(-logit)) if logit > -60 else 0.0


class FaceLandmarker:
    """``landmarks(rgb, face)``: the 468 points of a face the detector found in an H x W x 3 u8 picture."""

    def __init__(self, device: DeviceSection, *, info: ModelInfo | None = None) -> None:
        info = info if info is not None else landmarks_info()
        self.spec = MeshSpec.from_manifest(info)
        self.engine = square_engine(info, device, self.spec.input_px)

    def close(self) -> None:
        self.engine.close()

    def roi(self, face: Face) -> Placement:
        """Where the model looks for ``face``'s landmarks (``face_crop(rgb, roi)`` is what it is fed)."""
        return roi(face, input_px=self.spec.input_px, scale=self.spec.roi_scale)

    def landmarks(self, rgb: np.ndarray, face: Face) -> FaceMesh | None:
        """The face's landmarks in ``rgb``'s pixels; None when the model sees no face in its crop (presence below
        the manifest's ``presence_min``, MediaPipe's 0.5)."""
        place = self.roi(face)
        return self._mesh(self.engine.infer(face_crop(rgb, place)), place)

    def landmarks_many(self, rgb: np.ndarray, faces: Sequence[Face]) -> list[FaceMesh | None]:
        """``landmarks`` of each face, the crops run together on the engine's requests."""
        places = [self.roi(face) for face in faces]
        outputs = self.engine.infer_all([face_crop(rgb, place) for place in places])
        return [self._mesh(raw, place) for raw, place in zip(outputs, places)]

    def _mesh(self, raw: np.ndarray, place: Placement) -> FaceMesh | None:
        points, z, score = mesh_from_output(raw, place, points=self.spec.points)
        return FaceMesh(points, z, score) if score >= self.spec.presence_min else None
