"""Faces in a picture: BlazeFace (full range, ``models/detectors/blazeface``) on the picture and on tiles of it.

The detector sees a 192 px square. On the whole picture letterboxed into it, a face of 80 px in a 1024 px photo
is 15 px there, at the edge of what the model finds (measured: 28 of 41 faces of 60-80 px found, docs/faces.md).
So a picture larger than a tile is also run in overlapping square tiles of ``TILE_FACES`` x the smallest face asked
for (``image.portrait_min_px`` with the portrait, else ``image.faces_min_px``): such a face is then 16 px or more in
the detector's input. A face cut by a tile's
inner edge is dropped from that tile (the neighbouring tile or the whole view sees it whole), and the views'
detections are merged by MediaPipe's weighted non-maximum suppression.

The detector runs on the style's ``Engine`` code (static shape, model cache, thread-safe), at f32 and with the
THROUGHPUT hint: it is ~2 MFLOP a view, too little to share between two threads (one thread a view: ``square_engine``),
so a picture's views run on the engine's requests at once, one thread each; f32 keeps its scores those the
converter verified against LiteRT.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from PIL import Image

from ..config import DeviceSection
from ..errors import ModelError
from ..locations import bundled_models_dir
from ..models import ModelInfo, load_model_info
from .anchors import decode, ssd_anchors, weighted_nms

if TYPE_CHECKING:
    from ..runtime.engine import Engine

T = TypeVar("T")

log = logging.getLogger(__name__)

DETECTOR_DIR = Path("detectors") / "blazeface"  # under the bundled models folder
TILE_FACES = 12  # a tile's side in smallest faces: 12 x 64 px = 768 px tiles, the smallest face 16 px at 192
TILE_OVERLAP = 0.35  # of a tile's side: more than the largest face a tile alone must find whole
EDGE_MARGIN = 0.02  # of a tile's side: a box this close to a tile's inner edge was cut by it


@dataclass(frozen=True)
class Face:
    """One face in picture pixels: its box (x0, y0, x1, y1), six landmarks (``anchors.KEYPOINTS`` order) and
    the detector's score. The box is the detector's, not clipped: a face cut by the picture's edge keeps its
    size and centre, so its crop is aligned as if it were whole (``xywh`` clips it for reports)."""

    box: tuple[float, float, float, float]
    landmarks: np.ndarray  # 6 x 2 (x, y)
    score: float
    track: int | None = None  # the same number on every frame of a clip where it is the same face (faces.track)

    @property
    def size(self) -> float:
        """The box's larger side: what ``image.faces_min_px`` and the largest-first order compare."""
        return max(self.box[2] - self.box[0], self.box[3] - self.box[1])

    def scaled(self, sx: float, sy: float) -> Face:
        """This face in a picture scaled by (sx, sy): the output's pixels when the output is not the picture
        the model saw (an upscale back to the original size)."""
        x0, y0, x1, y1 = self.box
        factor = np.array([sx, sy], dtype=np.float32)
        return Face((x0 * sx, y0 * sy, x1 * sx, y1 * sy), self.landmarks * factor, self.score, self.track)

    def xywh(self, width: int, height: int) -> tuple[int, int, int, int]:
        """The box within a ``width`` x ``height`` picture, as whole pixels (x, y, w, h): what
        ``JobResult.faces`` and the HTTP answer carry."""
        x0, y0 = round(min(max(self.box[0], 0), width)), round(min(max(self.box[1], 0), height))
        x1, y1 = round(min(max(self.box[2], 0), width)), round(min(max(self.box[3], 0), height))
        return x0, y0, x1 - x0, y1 - y0


@dataclass(frozen=True)
class DetectorSpec:
    """The decoding the detector IR needs, from its manifest's ``detector:`` (written by the converter)."""

    input_px: int
    strides: tuple[int, ...]
    interpolated: bool
    score_min: float
    nms_iou: float

    @classmethod
    def from_manifest(cls, info: ModelInfo) -> DetectorSpec:
        return read_section(info, "detector", lambda s: cls(
            int(s["input_px"]), tuple(int(x) for x in s["strides"]), bool(s["interpolated"]), float(s["score_min"]),
            float(s["nms_iou"])), fields="input_px, strides, interpolated, score_min and nms_iou",
            converter="converters.face_detector")


def read_section(info: ModelInfo, key: str, read: Callable[[dict[str, Any]], T], *, fields: str, converter: str
                 ) -> T:
    """``read`` of the manifest's ``key:`` mapping (a bundled model's decoding, written by its converter); a missing
    or malformed one is a ModelError naming the fields and the command that writes them."""
    section = info.manifest.get(key)
    try:
        if not isinstance(section, dict):
            raise TypeError(key)
        return read(section)
    except (KeyError, TypeError, ValueError):
        raise ModelError(f"{info.directory}/manifest.yaml: '{key}' must give {fields}; re-run python -m "
                         f"{converter}") from None


def detector_info() -> ModelInfo:
    """The bundled detector, hash-checked like a style."""
    return load_model_info(bundled_models_dir() / DETECTOR_DIR)


class FaceDetector:
    """``detect(rgb)``: every face of at least ``min_px`` in an H x W x 3 u8 picture, largest first."""

    def __init__(self, device: DeviceSection, *, info: ModelInfo | None = None) -> None:
        info = info if info is not None else detector_info()
        self.spec = DetectorSpec.from_manifest(info)
        self.engine = square_engine(info, device, self.spec.input_px)
        self.anchors = ssd_anchors(self.spec.input_px, self.spec.strides, interpolated=self.spec.interpolated)

    def close(self) -> None:
        self.engine.close()

    def detect(self, rgb: np.ndarray, *, min_px: int) -> list[Face]:
        height, width = rgb.shape[:2]
        boxes, marks, scores = [], [], []
        windows = views(width, height, min_px)
        n = self.spec.input_px
        # every view on the engine's requests at once: one thread each (``square_engine``), so a picture's 21
        # views of 24 px faces take both cores' time without a second thread's wait on each tiny inference
        outputs = self.engine.infer_all([letterbox(rgb[y0:y0 + side, x0:x0 + side], n, scale=n / side)
                                         for x0, y0, side in windows])
        for (x0, y0, side), raw in zip(windows, outputs):
            found = self._found(raw, x0, y0, side)
            if side < max(width, height):
                found = _uncut(found, x0, y0, side, width, height)
            boxes.append(found[0])
            marks.append(found[1])
            scores.append(found[2])
        all_scores = np.concatenate(scores)
        if not all_scores.size:
            return []
        merged = weighted_nms(np.concatenate(boxes), np.concatenate(marks), all_scores, threshold=self.spec.nms_iou)
        faces = [Face((float(box[0]), float(box[1]), float(box[2]), float(box[3])), landmarks, score)
                 for box, landmarks, score in merged]
        return sorted((f for f in faces if f.size >= min_px), key=lambda f: -f.size)

    def _found(self, raw: np.ndarray, x0: int, y0: int, side: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Detections in the square window (x0, y0, side) of the picture, black beyond its edges, in picture px,
        from the detector's ``raw`` output on it."""
        boxes, landmarks, scores = decode(raw, self.anchors, self.spec.input_px)
        keep = scores > self.spec.score_min
        offset = np.array([x0, y0], dtype=np.float32)
        return (boxes[keep] * side + np.tile(offset, 2), landmarks[keep] * side + offset, scores[keep])


def square_engine(info: ModelInfo, device: DeviceSection, side: int) -> Engine:
    """The ``Engine`` for a small bundled model of one ``side`` square input (the detector, the landmarks): the
    THROUGHPUT hint and f32 whatever the styles' settings. A view of the detector is ~2 MFLOP: on one stream over
    two cores each inference waited on its second thread, and a 1024 px picture's 21 views cost 119-145 ms of CPU
    for 65-79 ms of wall time; on a stream a core, the views run side by side (``Engine.infer_all``) for 93-101 ms
    of CPU in 65-71 ms (2-vCPU EPYC, 2026-12-05; the same boxes to the bit). f32 keeps the outputs those the
    converter verified against LiteRT."""
    from ..runtime.engine import Engine  # OpenVINO is imported here, not when edge_anime.faces is

    own = device.model_copy(update={"performance_hint": "THROUGHPUT", "num_streams": "auto", "num_requests": "auto",
                                    "inference_num_threads": "auto", "inference_precision": "f32"})
    return Engine(info, own, first_shape=(side, side))


def letterbox(rgb: np.ndarray, side: int, *, scale: float | None = None) -> np.ndarray:
    """``rgb`` resized by ``scale`` (default: its longer side to ``side``) into the top-left of a black ``side``
    square: what the detector is fed, here and in the converter's check against LiteRT."""
    scale = side / max(rgb.shape[:2]) if scale is None else scale
    fitted = Image.fromarray(rgb).resize((max(1, round(rgb.shape[1] * scale)), max(1, round(rgb.shape[0] * scale))),
                                         Image.Resampling.BILINEAR)
    square = np.zeros((side, side, 3), np.uint8)
    square[:fitted.height, :fitted.width] = np.asarray(fitted)
    return square


def views(width: int, height: int, min_px: int) -> list[tuple[int, int, int]]:
    """The square windows (x0, y0, side) the detector runs on: the whole picture, then tiles when a tile of
    ``TILE_FACES`` smallest faces is smaller than the picture."""
    longest = max(width, height)
    found = [(0, 0, longest)]
    tile = TILE_FACES * max(1, min_px)
    if tile * 1.1 >= longest:
        return found
    step = max(1, int(tile * (1 - TILE_OVERLAP)))
    return found + [(x, y, tile) for y in _starts(height, tile, step) for x in _starts(width, tile, step)]


def _starts(length: int, tile: int, step: int) -> list[int]:
    if length <= tile:
        return [0]
    starts = list(range(0, length - tile + 1, step))
    if starts[-1] + tile < length:
        starts.append(length - tile)
    return starts


def _uncut(found: tuple[np.ndarray, np.ndarray, np.ndarray], x0: int, y0: int, side: int, width: int,
           height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Only the boxes no inner edge of the tile cuts (an edge that is also the picture's cuts nothing)."""
    boxes = found[0]
    margin = EDGE_MARGIN * side
    keep = np.ones(len(boxes), bool)
    if x0 > 0:
        keep &= boxes[:, 0] > x0 + margin
    if y0 > 0:
        keep &= boxes[:, 1] > y0 + margin
    if x0 + side < width:
        keep &= boxes[:, 2] < x0 + side - margin
    if y0 + side < height:
        keep &= boxes[:, 3] < y0 + side - margin
    return found[0][keep], found[1][keep], found[2][keep]


def eye_angle(face: Face) -> float:
    """The roll of the face (radians): the line from the subject's right eye (left in the picture) to the left."""
    right, left = face.landmarks[0], face.landmarks[1]
    return math.atan2(float(left[1] - right[1]), float(left[0] - right[0]))
