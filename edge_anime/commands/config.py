"""Check a config file (non-zero exit on any error) or show the effective config with defaults filled in."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import Config, effective_yaml, load_config
from ..errors import EXIT_OK
from ..locations import default_locations


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="config_action", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate FILE, including that the model it names exists and is intact")
    check.add_argument("file", type=Path, metavar="FILE", nargs="?", default=None,
                       help="default: $EDGE_ANIME_CONFIG, else the bundled default config")
    show = sub.add_parser("show", help="print FILE as the runtime sees it, defaults and folders filled in")
    show.add_argument("file", type=Path, metavar="FILE", nargs="?", default=None,
                      help="default: $EDGE_ANIME_CONFIG, else the bundled default config")


def run(args: argparse.Namespace) -> int:
    config = load_config(args.file)
    if args.config_action == "show":
        kind = default_locations().kind
        print(f"# {config.source}, as the runtime sees it; `auto` folders are the folders for a {kind} install")
        print(effective_yaml(config), end="")
        print(f"# variant: {_variant_line(config)}")
        return EXIT_OK
    # The same checks `run` makes before it starts: the folders it writes, the model it serves.
    from ..models import read_ir, resolve_model
    from ..preflight import check_paths

    check_paths(config, unwritable=lambda message: print(f"edge-anime config: note: {message}", file=sys.stderr))
    style = resolve_model(config.model.path, search_dirs=list(config.model.dirs))
    model = style if config.model.variant == "auto" else style.with_variant(config.model.variant)
    for info in {v.name: model.with_variant(v.name) for v in model.variants()}.values():
        read_ir(info)  # every IR a start may choose, so a damaged variant fails here and not at a later start
    from ..stylizer import style_specs

    more = list(style_specs(config))[1:]  # every extra style resolves and reads too: run would need them
    for spec in config.model.styles:
        read_ir(resolve_model(spec, search_dirs=list(config.model.dirs)))
    print(f"{config.source}: ok (model {model.name}, variants {', '.join(model.variant_names())}; "
          f"{_variant_line(config)}){'; also serves ' + ', '.join(more) if more else ''}")
    return EXIT_OK


def _variant_line(config: Config) -> str:
    """What a start would run (pinned, only, or the cached measurement), without measuring anything."""
    from ..choice import cached_choice
    from ..errors import EdgeAnimeError
    from ..models import resolve_model

    try:
        style = resolve_model(config.model.path, search_dirs=list(config.model.dirs), verify=False)
        found = cached_choice(config, style)
    except EdgeAnimeError as exc:
        return f"unknown ({exc})"
    return found if isinstance(found, str) else found.summary()
