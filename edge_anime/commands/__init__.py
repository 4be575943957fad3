"""One module per CLI command: ``add_arguments(parser)`` and ``run(args) -> int``."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_config_option(parser: argparse.ArgumentParser, *, what: str = "config file", more: str = "") -> None:
    """``--config FILE``, declared once for every command that reads a config: one default, said one way
    (``$EDGE_ANIME_CONFIG`` applies everywhere; bench's and tune's help once said "default: bundled")."""
    parser.add_argument("--config", type=Path, metavar="FILE", default=None,
                        help=f"{what} (default: $EDGE_ANIME_CONFIG, else the bundled configs/default.yaml){more}")
