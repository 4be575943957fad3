"""The one core function behind ``edge-anime convert`` and the tests (ovc's pattern): checkpoint -> verified IR.

The model folder is built in a hidden temp folder next to the target and renamed into place only after
verification passed, so a failed conversion leaves no half folder and an older good model keeps serving.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from edge_anime.errors import UserError
from edge_anime.models import sha256_file

from .manifest import build_manifest, write_manifest
from .quantize import CALIBRATION_COUNT, DEFAULT_INT8, Int8Setup, calibration_samples, quantize
from .sources import Source, load_source
from .verify import DEFAULT_SIZES_HW, FLOORS_DB, verify_ir

PRECISIONS = ("fp32", "fp16", "int8")
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
            int8_setup: Int8Setup = DEFAULT_INT8, style: str | None = None,
            verify_sizes_hw: tuple[tuple[int, int], ...] = DEFAULT_SIZES_HW) -> Path:
    """Convert ``source`` into ``output_dir/name/`` and return that folder.

    ``floor_db`` overrides the precision's PSNR floor against the source framework (FLOORS_DB). Raises a
    ``UserError`` subclass (SourceError, ConversionError) with the reason; nothing is left behind on failure.
    """
    if precision not in PRECISIONS:
        raise ConversionError(f"--precision: '{precision}' is not one of {', '.join(PRECISIONS)}")
    if not NAME_PATTERN.match(name):
        raise ConversionError(f"--name: '{name}' must be letters, digits, '.', '_' or '-' (a folder name)")
    loaded = load_source(source, name=name, upsample_align=upsample_align)
    float_model = loaded.float_ov_model()
    output_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".converting", dir=output_dir))
    work.chmod(FOLDER_MODE & ~_umask())  # mkdtemp makes 0700; an installed model is readable like any folder
    try:
        _build(work, loaded, float_model, name=name, style=style, precision=precision, calib_dir=calib_dir,
               calib_count=calib_count, int8_setup=int8_setup, verify_dir=verify_dir, verify_limit=verify_limit,
               floor_db=floor_db if floor_db is not None else FLOORS_DB[precision], sizes=verify_sizes_hw)
        target = output_dir / name
        replace_dir(work, target)
        return target
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _build(work: Path, loaded: Source, float_model: Any, *, name: str, style: str | None, precision: str,
           calib_dir: Path | None, calib_count: int, int8_setup: Int8Setup, verify_dir: Path | None,
           verify_limit: int | None, floor_db: float, sizes: tuple[tuple[int, int], ...]) -> None:
    from .ir import save_ir, with_u8_io
    from .verify import VerificationError

    layouts = {"layout": loaded.layout, "output_layout": loaded.output_layout}
    quantization: dict[str, Any] | None = None
    if precision == "int8":
        calibration, calib_source = calibration_samples(calib_dir, count=calib_count)
        model = quantize(float_model, calibration, setup=int8_setup, **layouts)
        quantization = {**int8_setup.to_manifest(), "calibration_images": len(calibration),
                        "calibration_source": calib_source}
    else:
        model = with_u8_io(float_model, **layouts)
    xml, bin_path = save_ir(model, work, compress_to_fp16=precision == "fp16")
    verify_args: dict[str, Any] = {"sample_dir": verify_dir, "sizes_hw": sizes, "limit": verify_limit}
    try:
        if quantization is not None:
            quantization["psnr_vs_fp32_db"] = _int8_vs_fp32(work, xml, float_model, layouts, verify_args)
        result = verify_ir(xml, loaded.reference_fn(), reference_name=loaded.reference_name, floor_db=floor_db,
                           png_dir=work, **verify_args)
    except VerificationError as exc:
        raise ConversionError(f"{loaded.path} -> {precision}: verification failed: {exc}") from exc
    if quantization is not None:
        quantization["psnr_vs_torch_db"] = result.to_manifest()["psnr_db"]
    manifest = build_manifest(name=name, style=style, precision=precision, source=loaded,
                              source_sha256=sha256_file(loaded.path), xml=xml, bin_path=bin_path,
                              verification=result, quantization=quantization)
    write_manifest(work, manifest)


def _int8_vs_fp32(work: Path, int8_xml: Path, float_model: Any, layouts: dict[str, str],
                  verify_args: dict[str, Any]) -> dict[str, float]:
    """INT8 IR against the FP32 IR on the verification images (reported, not gated: the gate is vs torch)."""
    import openvino as ov

    from .ir import with_u8_io
    from .verify import VERIFY_CONFIG, verify_ir

    core = ov.Core()
    fp32 = with_u8_io(float_model.clone(), **layouts)
    compiled: dict[tuple[int, int], Any] = {}

    def reference(rgb: Any) -> Any:
        size = rgb.shape[:2]
        if size not in compiled:
            static = fp32.clone()
            static.reshape({static.input(0): ov.PartialShape([1, size[0], size[1], 3])})
            compiled[size] = core.compile_model(static, "CPU", VERIFY_CONFIG)
        return compiled[size](rgb[None])[0][0]

    result = verify_ir(int8_xml, reference, reference_name="fp32 IR", floor_db=0.0, **verify_args)
    return result.to_manifest()["psnr_db"]


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
