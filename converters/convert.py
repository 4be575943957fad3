"""The one core function behind ``edge-anime convert`` and the tests (ovc's pattern): checkpoint -> verified IR.

The model folder is built in a hidden temp folder next to the target and renamed into place only after
verification passed, so a failed conversion leaves no half folder and an older good model keeps serving.

Converting the same checkpoint into an existing style folder at another precision adds a variant to that
style (``variants:`` in its manifest, files ``model_<precision>.*``) instead of replacing it: the style is
the weights, and its FP16 and INT8 IRs are two ways to run them, measured and chosen on the box
(``edge_anime.runtime.choice``). A different checkpoint under the same name replaces the folder, as before: variants
of other weights would be another style under one name.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import openvino as ov

from edge_anime.errors import UserError
from edge_anime.models import sha256_file

from .manifest import build_manifest, write_manifest
from .progress import QUIET, Progress
from .quantize import CALIBRATION_COUNT, INT8_CANDIDATES, Int8Setup, calibration_samples, choose_int8, taken_int8
from .samples import Sample, default_photo_dir, load_samples
from .sources import Reference, Source, TorchReference, load_source
from .variants import add_variant, same_weights
from .verify import DEFAULT_SIZES_HW, FLOORS_DB, SYNTHETIC_VERIFY_COUNT, verify_ir

PRECISIONS = ("fp32", "fp16", "int8")
QAT_VARIANT = "int8_qat"  # the variant name of an INT8 IR taken with --int8-ir
TWO_PASS_PRECISIONS = ("fp32", "fp16")  # the pair needs float statistics; int8 styles use their float pair
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FOLDER_MODE = 0o777


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


class ConversionError(UserError):
    """Conversion or verification failed; the message says which step and why."""


def convert(source: Path, *, name: str, precision: str, output_dir: Path, calib_dir: Path | None = None,
            upsample_align: bool | None = None, verify_dir: Path | None = None, floor_db: float | None = None,
            verify_limit: int | None = None, calib_count: int = CALIBRATION_COUNT,
            int8_setups: tuple[Int8Setup, ...] = INT8_CANDIDATES, style: str | None = None,
            verify_sizes_hw: tuple[tuple[int, int], ...] = DEFAULT_SIZES_HW, two_pass: bool = True,
            quantized_ir: Path | None = None, progress: Progress = QUIET) -> Path:
    """Convert ``source`` into ``output_dir/name/`` and return that folder.

    ``progress`` gets one line per step (loading, converting, each verification image, writing); quiet
    unless given (``edge-anime convert`` gives one on stderr).

    ``quantized_ir`` (int8 only): an INT8 IR made elsewhere from these same weights, with the u8 contract (a
    quantization-aware fine-tune, ``training/qat_toon.py``), taken instead of quantizing here. It is held to
    exactly what a quantization made here is: its worst photo against this checkpoint's FP32 IR at
    ``floor_db``, then verification against the source framework; the manifest records its digest and
    ``method: qat``. Weights other than these fail the first gate by far, so the figure is also the check
    that the IR belongs to the checkpoint. Into a folder of the same weights it goes in as variant
    ``int8_qat``, beside the ``int8`` quantized here: the variant choice measures which is faster on a box.

    ``two_pass``: for a float conversion of a state dict, also build the pass-1 / pass-2 pair of tiled
    full-resolution inference (``two_pass_ir``; ``image.resize: full`` needs them for photos that do not fit
    the memory budget whole). TorchScript and ONNX sources cannot be cut open at their GroupNorms: none.

    ``floor_db`` overrides the precision's PSNR floor against the source framework (FLOORS_DB); for int8 it
    also gates the quantization against the FP32 IR on the photos (``choose_int8``), and int8 verifies on
    the calibration photos unless ``verify_dir`` says otherwise: its floor is about photos. Raises a
    ``UserError`` subclass (SourceError, ConversionError) with the reason; nothing is left behind on failure.
    """
    if precision not in PRECISIONS:
        raise ConversionError(f"--precision: '{precision}' is not one of {', '.join(PRECISIONS)}")
    if quantized_ir is not None and precision != "int8":
        raise ConversionError(f"--int8-ir: an INT8 IR is taken for --precision int8 only, not {precision}")
    if quantized_ir is not None and not (quantized_ir.is_file() and quantized_ir.with_suffix(".bin").is_file()):
        raise ConversionError(f"--int8-ir: {quantized_ir}: expected an IR .xml with its .bin beside it")
    if not NAME_PATTERN.match(name):
        raise ConversionError(f"--name: '{name}' must be letters, digits, '.', '_' or '-' (a folder name)")
    if verify_limit is None and verify_dir is None and precision != "int8":
        verify_limit = SYNTHETIC_VERIFY_COUNT  # int8 verifies on the photos, or on every synthetic image
    progress.step(f"loading {source}")
    loaded = load_source(source, name=name, upsample_align=upsample_align)
    progress.step(f"tracing and converting the {loaded.kind.replace('_', ' ')} to OpenVINO"
                  if loaded.kind != "onnx" else "converting the ONNX model to OpenVINO")
    float_model = loaded.float_ov_model()
    reference = loaded.reference_fn()  # one per conversion: it keeps the reference outputs the pair reuses
    output_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".converting", dir=output_dir))
    work.chmod(FOLDER_MODE & ~_umask())  # mkdtemp makes 0700; an installed model is readable like any folder
    try:
        _build(work, loaded, float_model, reference, name=name, style=style, precision=precision,
               calib_dir=calib_dir, calib_count=calib_count, int8_setups=int8_setups, verify_dir=verify_dir,
               verify_limit=verify_limit, floor_db=floor_db if floor_db is not None else FLOORS_DB[precision],
               sizes=verify_sizes_hw, quantized_ir=quantized_ir, progress=progress)
        if two_pass and precision in TWO_PASS_PRECISIONS and loaded.kind == "state_dict":
            assert isinstance(reference, TorchReference)  # a state dict's reference measures the statistics
            _build_two_pass(work, loaded, reference, precision=precision, sample_dir=verify_dir,
                            limit=verify_limit, floor_db=floor_db if floor_db is not None else FLOORS_DB[precision],
                            sizes=verify_sizes_hw, progress=progress)
        target = output_dir / name
        progress.step(f"writing {target}")
        if same_weights(target, work):
            # a QAT IR is a second INT8 variant beside the converter's own, never in its place (add_variant)
            merged = add_variant(target, work, name=QAT_VARIANT if quantized_ir is not None else None)
            shutil.rmtree(work, ignore_errors=True)
            work = merged
        replace_dir(work, target)
        return target
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _build(work: Path, loaded: Source, float_model: ov.Model, reference: Reference, *, name: str,
           style: str | None, precision: str, calib_dir: Path | None, calib_count: int,
           int8_setups: tuple[Int8Setup, ...], verify_dir: Path | None, verify_limit: int | None, floor_db: float,
           sizes: tuple[tuple[int, int], ...], quantized_ir: Path | None = None, progress: Progress = QUIET) -> None:
    from .ir import save_ir, with_u8_io
    from .verify import VerificationError

    layouts = {"layout": loaded.layout, "output_layout": loaded.output_layout}
    quantization: dict[str, Any] | None = None
    if precision == "int8":
        photo_dir = calib_dir if calib_dir is not None else default_photo_dir()
        verify_dir = verify_dir if verify_dir is not None else photo_dir
        validation = [sample for size in sizes for sample in load_samples(verify_dir, size_hw=size, limit=verify_limit)]
        if quantized_ir is not None:
            # calibrated by its own fine-tune: no calibration photos are read (they were, and thrown away)
            calibration: list[Sample] = []
            calib_source = ""
            progress.step(f"scoring {quantized_ir} against the FP32 IR on {len(validation)} images")
            choice = taken_int8(float_model, quantized_ir, validation, **layouts)
        else:
            calibration, calib_source = calibration_samples(calib_dir, count=calib_count)
            progress.step(f"quantizing with NNCF on {len(calibration)} {calib_source} calibration images")
            choice = choose_int8(float_model, calibration, validation, floor_db=floor_db, candidates=int8_setups,
                                 **layouts)
        if choice.min_db < floor_db:
            tried = "; ".join(f"{t['setup']}: min {t['min_db']:.2f} dB ({t['worst_image']})" for t in choice.tried)
            raise ConversionError(
                f"{loaded.path} -> int8: verification failed: against the FP32 IR on {len(validation)} "
                f"{'photos' if verify_dir else 'synthetic images'} the best setup's min PSNR "
                f"{choice.min_db:.2f} dB is below the floor {floor_db:.1f} dB (tried {tried}); keep fp16, "
                f"or give --floor-db to accept less")
        model = choice.model
        quantization = {**choice.setup.to_manifest(), "calibration_images": len(calibration),
                        "calibration_source": calib_source, "candidates": choice.tried,
                        "psnr_vs_fp32_db": {"min": round(choice.min_db, 2), "mean": round(choice.mean_db, 2)}}
        if quantized_ir is not None:  # its ranges came from its own fine-tune, not from these photos
            quantization = {"method": "qat", "ir": quantized_ir.name, "xml_sha256": sha256_file(quantized_ir),
                            "bin_sha256": sha256_file(quantized_ir.with_suffix(".bin")),
                            "psnr_vs_fp32_db": quantization["psnr_vs_fp32_db"]}
    else:
        model = with_u8_io(float_model, **layouts)
    progress.step(f"saving the {precision} IR")
    xml, bin_path = save_ir(model, work, compress_to_fp16=precision == "fp16")
    try:
        result = verify_ir(xml, reference, reference_name=loaded.reference_name, floor_db=floor_db, png_dir=work,
                           sample_dir=verify_dir, sizes_hw=sizes, limit=verify_limit, progress=progress,
                           label=f"the {precision} IR")
    except VerificationError as exc:
        raise ConversionError(f"{loaded.path} -> {precision}: verification failed: {exc}") from exc
    if quantization is not None:
        quantization["psnr_vs_torch_db"] = result.to_manifest()["psnr_db"]
        quality = {"reference": "fp32 IR", "image_source": f"photos:{verify_dir}" if verify_dir else "synthetic",
                   "images": len(choice.scores), "psnr_db": quantization["psnr_vs_fp32_db"]}
    else:  # the source framework runs FP32 weights: verification against it is the figure vs FP32
        check = result.to_manifest()
        quality = {"reference": f"{loaded.reference_name} fp32", "image_source": check["image_source"],
                   "images": len(result.per_image), "psnr_db": check["psnr_db"]}
    manifest = build_manifest(name=name, style=style, precision=precision, source=loaded,
                              source_sha256=sha256_file(loaded.path), xml=xml, bin_path=bin_path,
                              verification=result, quantization=quantization, quality=quality)
    write_manifest(work, manifest)


def _build_two_pass(work: Path, loaded: Source, reference: TorchReference, *, precision: str,
                    sample_dir: Path | None, limit: int | None, floor_db: float, sizes: tuple[tuple[int, int], ...],
                    progress: Progress = QUIET) -> None:
    """Build and verify the tiling pair in ``work`` (its weights in the plain IR's ``.bin``) and list it in the
    manifest written there, with the plain IR's new ``bin_sha256``."""
    from edge_anime.models import read_manifest

    from .samples import load_samples
    from .two_pass import count_norms
    from .two_pass_ir import (
        STATS_REL_TOLERANCE,
        build_pair,
        manifest_entries,
        measure_blend_margin,
        measure_margin,
        verify_pair,
    )
    from .verify import VerificationError

    manifest = read_manifest(work)
    shared = work / str(manifest["ir"]["bin"])  # the pair's weights are the plain IR's (two_pass_ir)
    xml1, xml2 = build_pair(loaded.module, work, precision=precision, plain_xml=work / str(manifest["ir"]["xml"]),
                            plain_bin=shared, progress=progress)
    manifest["ir"]["bin_sha256"] = sha256_file(shared)  # appended to; the plain IR's offsets did not move
    try:
        check1, check2, rel = verify_pair(xml1, xml2, shared, reference, floor_db=floor_db,
                                          stats_tolerance=STATS_REL_TOLERANCE[precision], sizes_hw=sizes,
                                          sample_dir=sample_dir, limit=limit, progress=progress)
    except VerificationError as exc:
        raise ConversionError(f"{loaded.path} -> {precision} tiling pair: verification failed: {exc}") from exc
    progress.step("measuring the tiles' receptive field and blend margin on the torch graph")
    count = count_norms(loaded.module)
    reach = measure_margin(loaded.module, count)
    samples = [sample.rgb for sample in load_samples(sample_dir, size_hw=sizes[0], limit=limit)]
    entries = manifest_entries(precision=precision, xml1=xml1, xml2=xml2, bin_path=shared, checks=(check1, check2),
                               stats_rel_err=rel, count=count,
                               margin_px=measure_blend_margin(loaded.module, samples, reach=reach), reach_px=reach,
                               versions=manifest["versions"], created=manifest["created"])
    manifest.setdefault("variants", {}).update(entries)
    write_manifest(work, manifest)


def replace_dir(new: Path, target: Path) -> None:
    """Put ``new`` at ``target``; an existing ``target`` is moved aside first and removed only after.

    Two renames, not one: POSIX rename cannot replace a non-empty directory. If the process dies between
    them the old model survives under a hidden ``.NAME.old.*`` name next to the target.
    """
    old: Path | None = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        old.rmdir()
        target.rename(old)
    new.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
