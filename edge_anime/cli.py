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
from typing import Any

from .errors import EXIT_INTERNAL, InputError, TransientError, UserError
from .runtime.host import huge_pages_environment, skip_model_converter
from .service.signals import hold

# command -> (module, add-arguments function, run function, one-line help). Modules are imported only to
# build their own sub-parser; the converters' module imports torch inside its run functions only.
COMMANDS: dict[str, tuple[str, str, str, str]] = {
    "run": ("edge_anime.commands.run", "add_arguments", "run",
            "serve the watch folder (the main job; what systemd runs)"),
    "stylize": ("edge_anime.commands.stylize", "add_arguments", "run", "stylize files, folders or globs once"),
    "batch": ("edge_anime.commands.batch", "add_arguments", "run",
              "stylize a backlog exactly once, here or on a Ray cluster (--ray; needs the ray extra)"),
    "serve": ("edge_anime.commands.serve", "add_arguments", "run",
              "serve the HTTP API and the upload page (needs the http extra; --ray: on a Ray cluster)"),
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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command``, only that command's module is imported to build its
    options (the others are listed by name and help): a warm service start is mostly imports (issue 14's
    READY <= 1 s), and importing every command's module cost ~0.1 s of CPU for nothing."""
    parser = argparse.ArgumentParser(
        prog="edge-anime",
        description="Photo-to-anime on CPU with OpenVINO: a watch folder, one-shot stylize, bench and tune.",
    )
    parser.add_argument("-V", "--version", action=_Version, nargs=0, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, add_name, run_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if command is None or name == command:
            module = importlib.import_module(module_name)
            getattr(module, add_name)(command_parser)
            command_parser.set_defaults(_run=getattr(module, run_name))
    return parser


class _Version(argparse.Action):
    """argparse's ``version`` action, reading the version only when asked: it comes from the installed
    metadata (pyproject is the one place), and importlib.metadata costs ~80 ms of a ~1 s service start."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from . import __version__

        print(f"edge-anime {__version__}")  # stdout, as argparse's own version action prints it
        parser.exit()


def command_of(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), or None."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, run one command, and turn every error into one message and an exit status."""
    words = sys.argv[1:] if argv is None else argv
    command = command_of(words)
    args = build_parser(command if command in COMMANDS else None).parse_args(argv)
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
INFERENCE_COMMANDS = frozenset({"run", "serve", "stylize", "batch", "bench", "tune"})
# Commands that may convert a model, the only ones that need OpenVINO's converter (``host.skip_model_converter``).
CONVERTER_COMMANDS = frozenset({"convert", "models"})


def entry() -> None:
    """The console script and ``python -m edge_anime``: for an inference command, restart once with glibc's
    huge-page tunable (``host.huge_pages_environment``: 10-24 % faster f32 inference), then ``main``.

    ``main`` itself never re-executes, so tests and embedders that call it get exactly their process.
    The restart is an exec (same PID, so systemd's notify and signals are unaffected) made before any
    heavy import; ``EDGE_ANIME_HUGE_PAGES=0`` turns it off.
    """
    hold(sys.argv[1:])  # first: a SIGTERM to `run` from here on waits for its handler (service/signals.py)
    command = command_of(sys.argv[1:])
    if command in INFERENCE_COMMANDS:
        env = huge_pages_environment()
        if env is not None:
            os.execve(sys.executable, [sys.executable, "-m", "edge_anime", *sys.argv[1:]], env)
    if command not in CONVERTER_COMMANDS:
        skip_model_converter()
    sys.exit(main())


if __name__ == "__main__":
    entry()
