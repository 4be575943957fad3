"""Check a config file (non-zero exit on any error) or show the effective config with defaults filled in."""
from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

from ..config import Config, effective_yaml, load_config
from ..errors import EXIT_OK, ConfigError
from ..http.token import TOKEN_MIN_CHARS, mode_problem, token_problem
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

    def note(message: str) -> None:
        print(f"edge-anime config: note: {message}", file=sys.stderr)

    check_paths(config, unwritable=note)
    check_token_file(config.http.auth_token_file, unreadable=note)
    from ..core.stylizer import check_clip_variants, style_specs

    more = list(style_specs(config))[1:]  # every style resolves (errors name the file and key) and reads too
    check_clip_variants(config)  # video.variant names a variant every style has
    style = resolve_model(config.model.path, search_dirs=list(config.model.dirs))
    model = style if config.model.variant == "auto" else style.with_variant(config.model.variant)
    for info in {v.name: model.with_variant(v.name) for v in model.variants()}.values():
        read_ir(info)  # every IR a start may choose, so a damaged variant fails here and not at a later start
    for spec in config.model.styles:
        read_ir(resolve_model(spec, search_dirs=list(config.model.dirs)))
    from ..watch.folders import check_style_names

    check_style_names(config)
    print(f"{config.source}: ok (model {model.name}, variants {', '.join(model.variant_names())}; "
          f"{_variant_line(config)}){'; also serves ' + ', '.join(more) if more else ''}")
    return EXIT_OK


def check_token_file(path: Path | None, *, unreadable: Callable[[str], None]) -> None:
    """``http.auth_token_file`` as `serve` will read it: a regular file holding a token of at least
    ``TOKEN_MIN_CHARS``. Checked here because `serve` exits 78 on it otherwise, after `config check` said ok.
    The operator who checks is seldom the service's user: a file this user may not read is a note, as for
    folders (its size still tells an empty one apart). Never opens anything but a regular file: a FIFO
    named here would block the check."""
    if path is None:
        return
    key = "http.auth_token_file"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"{key}: {path} does not exist; expected a file holding the Bearer token "
                          f"(at least {TOKEN_MIN_CHARS} characters)") from None
    except OSError as exc:
        raise ConfigError(f"{key}: {path}: cannot look at it ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{key}: {path} is a folder; expected a file holding the Bearer token")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{key}: {path} is not a regular file (a fifo, socket or device); expected a file "
                          "holding the Bearer token")
    if st.st_size == 0:
        raise ConfigError(f"{key}: {path} is empty; expected a Bearer token of at least {TOKEN_MIN_CHARS} "
                          "characters (e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")
    problem = mode_problem(st.st_mode)  # serve's own rules (http/token.py), so check and start agree
    if problem is not None:
        raise ConfigError(f"{key}: {path}: {problem}")
    try:
        token = path.read_text(encoding="utf-8").strip()
    except PermissionError:
        unreadable(f"{key}: {path} is not readable by this user (uid {os.getuid()}); make sure the service's "
                   "user can read it")
        return
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{key}: {path}: cannot read the token ({why})") from None
    problem = token_problem(token)
    if problem is not None:
        raise ConfigError(f"{key}: {path}: {problem}")


def _variant_line(config: Config) -> str:
    """What a start would run (pinned, only, or the cached measurement), without measuring anything."""
    from ..errors import EdgeAnimeError
    from ..models import resolve_model
    from ..runtime.choice import cached_choice

    try:
        style = resolve_model(config.model.path, search_dirs=list(config.model.dirs), verify=False)
        found = cached_choice(config, style)
    except EdgeAnimeError as exc:
        return f"unknown ({exc})"
    return found if isinstance(found, str) else found.summary()
