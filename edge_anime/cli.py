"""`edge-anime <command>`: a thin dispatcher. Each command lives in its own module with
``add_arguments(parser)`` and ``run(args) -> int``; heavy imports (openvino, torch) happen inside ``run`` so
``--help`` and ``config check`` stay fast. One top-level handler maps the error taxonomy to exit statuses.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from .errors import EXIT_INTERNAL, InputError, TransientError, UserError
from .host import huge_pages_environment
from .service.signals import hold

# command -> (module, add-arguments function, run function, one-line help). Modules are imported only to
# build their own sub-parser; the converters' module imports torch inside its run functions only.
COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "run": ("edge_anime.commands.run", "add_arguments", "run",
            "serve the watch folder (the main job; what systemd runs)"),
    "stylize": ("edge_anime.commands.stylize", "add_arguments", "run", "stylize files, folders or globs once"),
    "serve": ("edge_anime.commands.serve", "add_arguments", "run",
              "serve the HTTP API and the upload page (needs the http extra)"),
    "bench": ("edge_anime.commands.bench", "add_arguments", "run", "measure the whole pipeline on real image files"),
    "tune": ("edge_anime.commands.tune", "add_arguments", "run",
             "sweep device settings on this box and write the winning config"),
    "status": ("edge_anime.commands.status", "add_arguments", "run", "show what the running service is doing"),
    "config": ("edge_anime.commands.config", "add_arguments", "run",
               "check a config file or show it with defaults filled in"),
    "models": ("edge_anime_converters.commands", "add_models_args", "run_models",
               "list installed models or pull published checkpoints"),
    "convert": ("edge_anime_converters.commands", "add_convert_args", "run_convert",
                "convert a PyTorch/TorchScript/ONNX generator to a verified OpenVINO IR"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge-anime",
        description="Photo-to-anime on CPU with OpenVINO: a watch folder, one-shot stylize, bench and tune.",
    )
    from . import __version__  # read from the installed metadata only when a parser is built

    parser.add_argument("-V", "--version", action="version", version=f"edge-anime {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, add_name, run_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        getattr(module, add_name)(command_parser)
        command_parser.set_defaults(_run=getattr(module, run_name))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run one command, and turn every error into one message and an exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args))
    except UserError as exc:
        print(f"edge-anime {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_status
    except (InputError, TransientError) as exc:
        print(f"edge-anime {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - the one place a bug becomes a report instead of a crash
        traceback.print_exc()
        print(
            "edge-anime: internal error (a bug): please report it with the traceback above",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


# Commands that run inference; only they restart themselves for huge pages (see ``entry``).
INFERENCE_COMMANDS = frozenset({"run", "serve", "stylize", "bench", "tune"})


def entry() -> None:
    """The console script and ``python -m edge_anime``: for an inference command, restart once with glibc's
    huge-page tunable (``host.huge_pages_environment``: 10-24 % faster f32 inference), then ``main``.

    ``main`` itself never re-executes, so tests and embedders that call it get exactly their process.
    The restart is an exec (same PID, so systemd's notify and signals are unaffected) made before any
    heavy import; ``EDGE_ANIME_HUGE_PAGES=0`` turns it off.
    """
    hold(sys.argv[1:])  # first: a SIGTERM to `run` from here on waits for its handler (service/signals.py)
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command in INFERENCE_COMMANDS:
        env = huge_pages_environment()
        if env is not None:
            os.execve(sys.executable, [sys.executable, "-m", "edge_anime", *sys.argv[1:]], env)
    sys.exit(main())


if __name__ == "__main__":
    entry()
