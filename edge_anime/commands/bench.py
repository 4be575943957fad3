"""`edge-anime bench INPUT_DIR`: run the whole pipeline on real files and say where the time goes."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..config import PRECISION_CHOICES
from ..errors import EXIT_OK
from . import add_config_option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input_dir", type=Path, metavar="INPUT_DIR", help="folder of real photos")
    parser.add_argument("--style", "--model", dest="style", default=None, metavar="NAME|XML",
                        help="the style to measure: a style of model.styles, an installed model's name or an IR "
                             "path (model.path override; --model is the old spelling)")
    parser.add_argument("--variant", default=None, metavar="NAME",
                        help="model.variant override: an IR of the style (fp16, int8; see models list) or auto")
    parser.add_argument("--precision", default=None, choices=PRECISION_CHOICES,
                        help="device.inference_precision override")
    parser.add_argument("--max-side", type=int, default=None, metavar="N",
                        help="resize to at most N px on the long side (sets image.resize: max_side)")
    add_config_option(parser)
    parser.add_argument("--json", type=Path, default=None, metavar="FILE", help="write the full report as JSON")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="timed passes over the files (1)")
    parser.add_argument("--warmup", type=int, default=1, metavar="N",
                        help="untimed passes first, which compile every shape and warm each stream (1)")


def run(args: argparse.Namespace) -> int:
    import logging

    from ..config import load_config
    from ..measure.throughput import format_report, input_files, measure, with_overrides

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    config = with_overrides(load_config(args.config), model=args.style, max_side=args.max_side,
                            variant=args.variant, precision=args.precision)
    files = input_files(args.input_dir, config.watch)
    report = measure(config, files, repeat=args.repeat, warmup=args.warmup)
    print(format_report(report))
    if args.json is not None:
        tmp = args.json.with_name(f".{args.json.name}.tmp")
        tmp.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        os.replace(tmp, args.json)
    return EXIT_OK
