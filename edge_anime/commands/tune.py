"""`edge-anime tune INPUT_DIR --write FILE`: sweep device settings on this box and write the winning config."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..config import QUALITY_FLOOR_DB
from ..errors import EXIT_OK
from . import add_config_option

MIN_TIMING_SECONDS = 0.2  # per candidate, however short the budget
VARIANT_SHARE = 0.02  # of --budget per candidate for the variant table, so a short budget stays short


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input_dir", type=Path, metavar="INPUT_DIR", help="folder of real photos")
    parser.add_argument("--budget", type=float, default=600.0, metavar="SECONDS",
                        help="time for the whole sweep (600); the config as given is always measured")
    parser.add_argument("--goal", choices=("throughput", "latency"), default="throughput",
                        help="most images/s, or the shortest time for one image")
    parser.add_argument("--write", type=Path, required=True, metavar="FILE", help="where the winning YAML goes")
    parser.add_argument("--chart", type=Path, default=None, metavar="PNG", help="bar chart of the sweep")
    add_config_option(parser, what="starting config")
    parser.add_argument("--style", "--model", dest="style", default=None, metavar="NAME|XML",
                        help="the style to measure: a style of model.styles, an installed model's name or an IR "
                             "path (model.path override; --model is the old spelling)")
    parser.add_argument("--max-side", type=int, default=None, metavar="N", help="image.max_side override")
    parser.add_argument("--int8-floor-db", type=float, default=QUALITY_FLOOR_DB, metavar="DB",
                        help="sweep a variant of the style (int8) only if its manifest's PSNR vs FP32 "
                             "is at least this (%(default)g, the start-up choice's floor)")
    parser.add_argument("--images", type=int, default=8, metavar="N",
                        help="photos per trial, taken in name order (8): fewer trials fit a budget with more")


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..errors import UserError
    from ..measure.sweep import (
        chart,
        sweep,
        table,
        variant_figures,
        variant_quality,
        variant_table,
        winner,
        write_config,
    )
    from ..measure.throughput import input_files, with_overrides
    from ..models import resolve_model
    from ..runtime.choice import timing_shape
    from ..runtime.timing import DEFAULT_SECONDS

    if args.images < 1:
        raise UserError(f"--images: expected an integer >= 1, got {args.images}")
    config = with_overrides(load_config(args.config), model=args.style, max_side=args.max_side)
    files = input_files(args.input_dir, config.watch)[: args.images]
    style = resolve_model(config.model.path, search_dirs=list(config.model.dirs))
    seconds = min(DEFAULT_SECONDS, max(MIN_TIMING_SECONDS, VARIANT_SHARE * args.budget))  # as a first start, or less
    timings = variant_figures(config, style, seconds=seconds)
    variants = variant_table(style, timings, timing_shape(config.image, multiple=style.size_multiple))
    print(variants)
    trials = sweep(config, files, budget_s=args.budget, goal=args.goal, int8_floor_db=args.int8_floor_db,
                   quality_db=variant_quality(style, timings))
    summary = variants + "\n" + table(trials, goal=args.goal)
    print(summary)
    best = winner(trials)
    write_config(config, best, args.write, goal=args.goal, summary=summary)
    print(f"wrote {args.write} ({best.label})")
    if args.chart is not None and chart(trials, args.chart, goal=args.goal):
        print(f"wrote {args.chart}")
    return EXIT_OK
