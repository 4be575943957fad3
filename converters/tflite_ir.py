"""A vendored MediaPipe TFLite model -> an IR the runtime runs with a style's ``Engine``: what the face detector
(``converters/face_detector.py``) and the face landmark model (``converters/face_landmarks.py``) share.

The shape of both: check the vendored file's digest, convert it, give it the runtime's input contract (u8 NHWC RGB
named ``image``, the model's float scaling in the graph), join its outputs into one tensor (``Engine.infer``
returns one output), name the nodes by place, run the source framework (LiteRT) on the same inputs, and write the
folder (IR, manifest with digests and the verification, licence) whole or not at all.
"""
from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import openvino as ov
from openvino import opset13 as ops
from openvino.preprocess import ColorFormat, PrePostProcessor

from edge_anime.errors import UserError
from edge_anime.models import MANIFEST_FORMAT, sha256_file

from .convert import FOLDER_MODE, _umask
from .ir import INPUT_NAME, save_ir
from .manifest import package_version, write_manifest

LITERT_HINT = "pip install 'edge-anime[convert]'"


def check_source(tflite: Path, *, vendored: Path, sha256: str, what: str) -> str:
    """The file's sha256; a missing file, or the vendored one changed, is the user's error."""
    if not tflite.is_file():
        raise UserError(f"{tflite}: no such TFLite file (expected {what})")
    digest = sha256_file(tflite)
    if tflite == vendored and digest != sha256:
        raise UserError(f"{tflite}: sha256 {digest[:12]}... is not the vendored file's {sha256[:12]}...")
    return digest


def with_u8_rgb_input(tflite: Path, *, scale: float, mean: float | None = None) -> ov.Model:
    """The TFLite graph (NHWC float input) taking u8 NHWC RGB: ``x / scale`` (then ``- mean``) in the graph."""
    model = ov.convert_model(str(tflite))
    ppp = PrePostProcessor(model)
    inp = ppp.input(0)
    inp.tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_color_format(ColorFormat.RGB)
    inp.model().set_layout(ov.Layout("NHWC"))
    steps = inp.preprocess().convert_element_type(ov.Type.f32).scale(scale)
    if mean is not None:
        steps.mean(mean)
    return ppp.build()


def produced(model: ov.Model) -> list[ov.Output]:
    """What feeds each of the model's Result nodes, in the model's output order."""
    return [result.input_value(0) for result in model.get_results()]


def one_output(model: ov.Model, parts: list[ov.Output], *, axis: int, name: str, output_name: str,
               shape: list[int] | None = None) -> ov.Model:
    """``parts`` concatenated along ``axis`` (then reshaped to ``shape``) as the only output, named
    ``output_name``; the input named ``INPUT_NAME``; every node named by its place.

    OpenVINO names most nodes from a process-wide counter (``Convolution_18843``): the same graph converted after
    other conversions in one process would hash differently. Named by their place instead, so the IR's digest says
    only what the graph is (the tests rebuild each IR and compare with the shipped one). The input and output keep
    their tensor names, which is how the runtime and a person find them."""
    joined = ops.concat(parts, axis=axis)
    if shape is not None:
        joined = ops.reshape(joined, ops.constant(shape, ov.Type.i64), special_zero=False)
    joined.output(0).get_tensor().set_names({output_name})
    out = ov.Model([joined.output(0)], model.get_parameters(), name)
    out.input(0).get_tensor().set_names({INPUT_NAME})
    name_by_place(out)
    return out


def name_by_place(model: ov.Model) -> None:
    """Every node named ``<type>_<index in topological order>`` (see ``one_output``)."""
    for index, op in enumerate(model.get_ordered_ops()):
        op.set_friendly_name(f"{op.get_type_name()}_{index}")


def litert_interpreter(tflite: Path, *, what: str) -> Any:
    """LiteRT's interpreter on ``tflite``, tensors allocated: the reference the IR is verified against."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as exc:
        raise UserError(f"verifying the {what} needs LiteRT: {LITERT_HINT}") from exc
    interpreter = Interpreter(model_path=str(tflite))
    interpreter.allocate_tensors()
    return interpreter


def compile_f32(xml: Path) -> ov.CompiledModel:
    """The written IR compiled as the runtime compiles a detector: CPU at f32, the precision it was verified at."""
    return ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


# Verifies the IR written in the folder (xml, bin) and returns its manifest; raises UserError to abandon the folder.
Finish = Callable[[Path, Path], dict[str, Any]]


def write_folder(model: ov.Model, output: Path, finish: Finish, *, license_text: str,
                 compress_to_fp16: bool = True) -> Path:
    """Write ``output`` (IR, manifest, LICENSE.md) whole or not at all: built in a temp folder beside it, verified
    by ``finish``, then renamed into place (an interrupted or failed run leaves the old folder as it was)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    work.chmod(FOLDER_MODE & ~_umask())  # mkdtemp makes 0700; the service's user must read the model
    try:
        xml, bin_path = save_ir(model, work, compress_to_fp16=compress_to_fp16)
        write_manifest(work, finish(xml, bin_path))
        (work / "LICENSE.md").write_text(license_text, encoding="utf-8")
        if output.exists():
            shutil.rmtree(output)
        work.rename(output)
    finally:
        if work.exists():
            shutil.rmtree(work)
    return output


def manifest_head(*, name: str, kind: str, precision: str, source: Path, source_sha256: str, origin: str,
                  xml: Path, bin_path: Path, input_px: int) -> dict[str, Any]:
    """The manifest's first keys, as ``edge_anime.models`` reads a style's: name, precision, pinned IR, input."""
    return {
        "format": MANIFEST_FORMAT,
        "name": name,
        "kind": kind,
        "precision": precision,
        "source": {"file": source.name, "sha256": source_sha256, "kind": "tflite", "origin": origin},
        "ir": {"xml": xml.name, "bin": bin_path.name, "xml_sha256": sha256_file(xml),
               "bin_sha256": sha256_file(bin_path)},
        "input": {"name": INPUT_NAME, "layout": "NHWC", "dtype": "u8", "color": "RGB",
                  "shape": [1, input_px, input_px, 3], "size_multiple": 4},
    }


def manifest_tail(verification: dict[str, Any], *, packages: tuple[str, ...]) -> dict[str, Any]:
    """The manifest's last keys: the versions that made it, the verification, when."""
    return {
        "versions": {pkg: package_version(pkg) for pkg in packages},
        "verification": verification,
        "created": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def apache_license(*, what: str, model: str, converter: str, assets: str, year: int, changes: str) -> str:
    """LICENSE.md of a converted MediaPipe model (Apache-2.0): the licence, where its text and provenance are.
    ``changes``: the last paragraph's rest, with its own line breaks."""
    return f"""# Licence: Apache License 2.0

The {what} in this folder is Google's MediaPipe {model}, converted to OpenVINO IR by
edge-anime (`{converter}`). The model is licensed under the Apache License, Version 2.0; the full
text is in the repository at `converters/assets/{assets}/LICENSE-Apache-2.0.txt` and at
https://www.apache.org/licenses/LICENSE-2.0. Where it came from: `converters/assets/{assets}/PROVENANCE.md`.

Copyright {year} The MediaPipe Authors. Changes made: {changes}
"""


class Convert(Protocol):
    def __call__(self, *, tflite: Path, output: Path, photos: Path | None) -> Path: ...


def main(argv: list[str] | None, *, prog: str, doc: str | None, convert: Convert, default_source: Path,
         source_help: str, default_output: Path, repo: Path) -> int:
    """A converter's command line: the TFLite file, the folder written, the verification photos."""
    parser = argparse.ArgumentParser(prog=prog, description=(doc or "").splitlines()[0])
    parser.add_argument("--tflite", type=Path, default=default_source, help=source_help)
    parser.add_argument("--output", type=Path, default=default_output, help="the folder written (replaced whole)")
    parser.add_argument("--photos", type=Path, default=repo.parent / "shared" / "photos",
                        help="verification photos (face_*.jpg, street_*.jpg); synthetic pictures are always added")
    args = parser.parse_args(argv)
    try:
        written = convert(tflite=args.tflite, output=args.output, photos=args.photos)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {written}")
    return 0
