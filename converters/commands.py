"""argparse glue for ``edge-anime convert`` and ``edge-anime models pull|list``.

The CLI builds every sub-parser at start, so this module imports nothing heavy: torch, NNCF and ONNX are
imported inside the run functions, and ``models list`` needs none of them (the runtime box has no torch).
Errors are raised as ``UserError`` subclasses; ``edge_anime.cli.main`` prints them as one line and maps
them to an exit status.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from edge_anime.errors import UserError

PRECISION_CHOICES = ("fp32", "fp16", "int8")
INSTALL_HINT = "pip install 'edge-anime[convert]'"
BYTES_PER_MB = 1024 * 1024


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _hw(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HxW like 352x480, got '{text}'") from None
    if h % 4 or w % 4 or h <= 0 or w <= 0:
        raise argparse.ArgumentTypeError(f"{text}: H and W must be positive multiples of 4")
    return h, w


def add_convert_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("checkpoint", type=Path, help="state dict (.pt/.pth), TorchScript archive or .onnx")
    parser.add_argument("--name", help="model name and folder name (default: the checkpoint's file stem)")
    parser.add_argument("--precision", choices=PRECISION_CHOICES, default="fp16",
                        help="fp16 (default): compressed weights; int8: NNCF post-training quantization")
    parser.add_argument("--output", type=Path, default=None,
                        help="writes OUTPUT/NAME/ (default: the first of the config's model.dirs, where the "
                             "runtime looks for a style by name)")
    parser.add_argument("--config", type=Path, metavar="FILE", default=None,
                        help="config whose model.dirs gives the default --output (default: bundled)")
    parser.add_argument("--calib", type=Path, metavar="DIR",
                        help="int8 calibration photos (default: ../shared/photos when present, else synthetic)")
    parser.add_argument("--calib-count", type=int, default=None, metavar="N", help="int8 calibration images (64)")
    parser.add_argument("--upsample-align", type=_bool, default=None, metavar="true|false",
                        help="decoder bilinear align_corners (default: per published name; else true)")
    parser.add_argument("--verify-images", type=Path, metavar="DIR",
                        help="photos for verification (default: built-in synthetic images)")
    parser.add_argument("--verify-count", type=int, default=None, metavar="N",
                        help="at most N verification images per size (default: fp32/fp16 3 synthetic images, "
                             "or every photo of --verify-images; int8 every photo)")
    parser.add_argument("--verify-size", type=_hw, action="append", metavar="HxW",
                        help="verification size, repeatable (default: 256x256 and 352x480)")
    parser.add_argument("--floor-db", type=float, default=None,
                        help="PSNR floor vs the source framework (default: fp32 45, fp16 40, int8 35; "
                             "int8 also vs the FP32 IR on the photos)")
    parser.add_argument("--int8-ir", type=Path, default=None, metavar="XML",
                        help="with --precision int8: take this INT8 IR of the same weights (a QAT fine-tune) "
                             "instead of quantizing; held to the same floor against FP32")
    parser.add_argument("--style", help="word used for {style} in output names (default: the name)")
    parser.add_argument("--two-pass", type=_bool, default=True, metavar="true|false",
                        help="fp32/fp16 of a state dict: also build the verified pass-1/pass-2 IR pair that "
                             "image.resize: full tiles large photos with (default: true)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no step lines on stderr (each says the seconds since the start)")


def run_convert(args: argparse.Namespace) -> int:
    """Convert, verify, install; print where the model went and its figures."""
    _check_paths(args)
    try:
        from .convert import QAT_VARIANT, convert
        from .progress import QUIET, to_stderr
        from .quantize import CALIBRATION_COUNT
        from .verify import DEFAULT_SIZES_HW
    except ImportError as exc:
        raise UserError(f"convert needs torch, NNCF and ONNX ({exc.name} is missing): {INSTALL_HINT}") from exc
    name = args.name or args.checkpoint.stem
    folder = convert(
        args.checkpoint, name=name, precision=args.precision, output_dir=args.output or _model_dirs(args)[0],
        calib_dir=args.calib,
        upsample_align=args.upsample_align, verify_dir=args.verify_images, floor_db=args.floor_db,
        verify_limit=args.verify_count, calib_count=args.calib_count or CALIBRATION_COUNT, style=args.style,
        verify_sizes_hw=tuple(args.verify_size) if args.verify_size else DEFAULT_SIZES_HW,
        two_pass=args.two_pass, quantized_ir=args.int8_ir, progress=QUIET if args.no_progress else to_stderr(),
    )
    from edge_anime.models import load_model_info

    style = load_model_info(folder)
    written = args.precision if args.precision in style.variant_names() else style.variant_names()[0]
    if args.int8_ir is not None and QAT_VARIANT in style.variant_names():
        written = QAT_VARIANT
    manifest = style.with_variant(written).manifest  # the IR this run wrote, a variant or the default
    check = manifest["verification"]
    print(f"{folder}: {manifest['precision']} from {manifest['source']['kind']} {manifest['source']['file']}; "
          f"PSNR vs {check['reference']} min {check['psnr_db']['min']:.2f} dB, mean {check['psnr_db']['mean']:.2f} dB "
          f"(floor {check['floor_db']} dB); side by side: {folder / str(check['side_by_side'])}")
    pair = style.tiling_pair(verify=False)
    if pair is not None:
        tiling = pair[1].manifest
        print(f"{folder}: tiling pair {', '.join(p.variant_name for p in pair)} (image.resize: full): pass 2 with "
              f"PyTorch's statistics min {tiling['verification']['psnr_db']['min']:.2f} dB, margin "
              f"{tiling['tiling']['margin_px']} px")
    if len(style.variant_names()) > 1:
        print(f"{folder}: variants {', '.join(style.variant_names())} (model.variant: auto measures which runs)")
    if "quantization" in manifest:
        q = manifest["quantization"]
        if q.get("method") == "qat":
            print(f"int8: taken from {args.int8_ir} (quantization-aware training); "
                  f"PSNR vs fp32 IR min {q['psnr_vs_fp32_db']['min']:.2f} dB")
        else:
            print(f"int8: preset {q['preset']}, ignored {q['ignore'] or 'nothing'}, ranges "
                  f"{q.get('range_estimator') or 'NNCF default'}, {q['calibration_images']} calibration images; "
                  f"PSNR vs fp32 IR min {q['psnr_vs_fp32_db']['min']:.2f} dB")
        for tried in q.get("candidates", [])[:-1]:
            print(f"int8: tried first: {tried['setup']}: min {tried['min_db']:.2f} dB ({tried['worst_image']})")
    return 0


def _check_paths(args: argparse.Namespace) -> None:
    """Rules across flags, checked before any heavy import (benchmark_app's pattern)."""
    if not args.checkpoint.is_file():
        raise UserError(f"CHECKPOINT: {args.checkpoint} does not exist or is not a file")
    for flag, value in (("--calib", args.calib), ("--verify-images", args.verify_images)):
        if value is not None and not value.is_dir():
            raise UserError(f"{flag}: {value} is not a folder")
    if args.calib is not None and args.precision != "int8":
        print("edge-anime convert: note: --calib is used only with --precision int8", file=sys.stderr)


def add_models_args(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="models_command", metavar="{pull,list}", required=True)
    pull = sub.add_parser("pull", help="download a published checkpoint (or any URL), check it, record sha256")
    pull.add_argument("spec", metavar="NAME|URL",
                      help="face_paint_512_v1, face_paint_512_v2, celeba_distill, paprika, or an http(s) URL")
    pull.add_argument("--dest", type=Path, default=None, help="folder for the checkpoint (default: checkpoints)")
    pull.add_argument("--retries", type=int, default=None, help="attempts after the first (default: 3)")
    pull.add_argument("--timeout", type=float, default=None, help="seconds per socket operation (default: 30)")
    pull.add_argument("--max-mb", type=float, default=None, metavar="MB",
                      help="refuse a download over this size (default: 512 for a URL; a published name is "
                           "never allowed over 16)")
    pull.add_argument("--max-seconds", type=float, default=None, metavar="S",
                      help="give up on one attempt after this long (default: 600)")
    pull.add_argument("--no-progress", action="store_true", help="no progress bar")
    pull.add_argument("--mirror", metavar="URL", default=None,
                      help="base URL holding NAME.pt for a published name (a LAN mirror for an offline box); "
                           "the pinned digests still apply")
    listing = sub.add_parser("list", help="installed models: name, precision, size, verified PSNR")
    listing.add_argument("--dir", type=Path, action="append", default=None,
                         help="model folder to look in, repeatable (default: the config's model.dirs)")
    listing.add_argument("--config", type=Path, metavar="FILE", default=None,
                         help="config whose model.dirs are listed (default: bundled)")


def run_models(args: argparse.Namespace) -> int:
    if args.models_command == "list":
        return _run_list(args.dir or _model_dirs(args))
    return _run_pull(args)


def _model_dirs(args: argparse.Namespace) -> list[Path]:
    """The folders the runtime searches for a style by name (``model.dirs``, the bundled folder last)."""
    from edge_anime.config import load_config

    return list(load_config(args.config).model.dirs)


def _run_pull(args: argparse.Namespace) -> int:
    try:
        from . import pull as pull_mod
    except ImportError as exc:
        raise UserError(f"models pull needs torch to check the file ({exc.name} is missing): {INSTALL_HINT}") from exc
    options: dict[str, Any] = {"progress": not args.no_progress}
    if args.dest is not None:
        options["dest"] = args.dest
    if args.retries is not None:
        options["retries"] = args.retries
    if args.timeout is not None:
        options["timeout_s"] = args.timeout
    if args.mirror is not None:
        options["base_url"] = args.mirror
    for flag, value in (("--max-mb", args.max_mb), ("--max-seconds", args.max_seconds), ("--timeout", args.timeout)):
        if value is not None and not value > 0:
            raise UserError(f"models pull {flag}: expected a number above 0, got {value:g}")
    options["limits"] = pull_mod.Limits(
        max_bytes=None if args.max_mb is None else int(args.max_mb * pull_mod.MIB),
        max_seconds=pull_mod.MAX_SECONDS if args.max_seconds is None else args.max_seconds)
    pulled = pull_mod.pull(args.spec, **options)
    print(f"{pulled.path}: {pulled.size_bytes} bytes from {pulled.url}")
    print(f"sha256 {pulled.sha256}  (also in {pulled.path.name}.sha256)")
    print(f"licence: {pulled.licence}")
    print(f"next: edge-anime convert {pulled.path} --name {pulled.path.stem}")
    return 0


def _run_list(dirs: list[Path]) -> int:
    """A table of installed models; reading manifests only, so it works on a box without torch."""
    from edge_anime.models import list_models

    models = list_models(dirs)
    if not models:
        print(f"no models in {', '.join(str(d) for d in dirs)}; convert one with 'edge-anime convert'")
        return 0
    rows = [("NAME", "VARIANT", "SIZE", "VERIFIED PSNR", "VS FP32", "FOLDER")]
    for style in models:
        for spec in style.variants():  # one row per IR: model.variant names it, auto picks among them
            info = style.with_variant(spec.name, verify=False)
            size_mb = sum(p.stat().st_size for p in (info.xml, info.bin) if p.is_file()) / BYTES_PER_MB
            figure = "none" if spec.quality_db is None else f"{spec.quality_db:.1f} dB"
            if "pictures" not in spec.uses:  # a distilled student: its figure is its mean against its teacher
                figure = f"{spec.quality_mean_db or 0:.1f} dB mean vs its teacher; {', '.join(spec.uses)} only"
            rows.append((style.name if spec.default else "", spec.name + (" *" if spec.default else ""),
                         f"{size_mb:.1f} MB", _psnr_text(info.manifest), figure,
                         str(style.directory) if spec.default else ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print("* the style's default IR; `model.variant: auto` measures which variant runs fastest on this box")
    return 0


def _psnr_text(manifest: dict[str, Any]) -> str:
    check = manifest.get("verification") or {}
    psnr = check.get("psnr_db") or {}
    if "min" not in psnr:
        return "unverified"
    return f"{psnr['min']:.1f} dB min vs {check.get('reference', '?')}"
