"""`edge-anime serve`: the HTTP API and upload page on uvicorn, until SIGTERM/SIGINT.

On SIGTERM/SIGINT the server is asked to stop (edge_anime/http/server.py): it stops accepting, lets the
requests in flight finish (up to ``service.drain_timeout_seconds``), runs the app's shutdown (which closes the
Stylizer) and returns, so the process exits 0. READY=1 goes to systemd only once the style is compiled, when
/readyz says ready; a default style that cannot be built stops the server at once and exits 78 with the
reason (before, /healthz said 200 until systemd's start timeout killed it). The port is bound before
anything else starts: a busy one exits 75 at once with the address, and "ready" is never said of a socket
that is not listening. Exit statuses as `run`: 78 for a bad config or model, 75 for a port in use, 70 for a
bug.

With ``--ray ADDRESS`` the same app is deployed on a Ray cluster instead (edge_anime/http/on_ray.py): Ray
Serve's proxy listens on ``http.host``:``http.port`` and ``ray.serve`` says how many replicas, each with its own
Stylizer. The config is validated here first, so a bad one still exits 78 before anything is deployed.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import EXIT_CONFIG, EXIT_OK, UserError
from . import add_config_option

if TYPE_CHECKING:
    from ..config import Config

INSTALL_HINT = "pip install 'edge-anime[http]'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_option(parser)
    parser.add_argument("--host", default=None, help="address to listen on (default: http.host, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default: http.port, 8080)")
    parser.add_argument("--ray", metavar="ADDRESS", default=None,
                        help="deploy on the Ray cluster at ADDRESS (HOST:PORT of its head, or auto) with Ray "
                             "Serve, replicas as ray.serve says (needs the ray extra; docs/scale.md)")


def run(args: argparse.Namespace) -> int:
    config = _load(args)
    if args.ray is not None:
        return _run_on_ray(config, args)
    try:
        from ..http.app import create_app
        from ..http.server import listen, make_server
    except ImportError as exc:
        raise UserError(f"serve needs the http extra ({exc.name} is missing): {INSTALL_HINT}") from None
    from ..logs import setup_logging
    from ..service.notify import Notifier

    setup_logging(log_format=config.service.log_format, level=config.service.log_level)
    sock = listen(config.http.host, config.http.port)  # PortInUse (75) here, before any style is compiled
    notifier = Notifier()

    def ready() -> None:
        notifier.send(READY=1, STATUS=f"serving http://{config.http.host}:{config.http.port}/")

    def failed(why: str) -> None:  # the default style cannot be built: exit 78 now, not at systemd's timeout
        notifier.send(STATUS=f"failed: {why}"[:200])
        server.should_exit = True

    app = create_app(config, on_ready=ready, on_failure=failed)
    server = make_server(app, config)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: setattr(server, "should_exit", True))

    def reload() -> None:  # in a thread: compiling a style must not stall the event loop or the signal
        try:
            app.state.service.reload(_load(args))
        except UserError as exc:
            logging.getLogger("edge_anime.http").error("reload failed, still serving the previous config: %s", exc)

    signal.signal(signal.SIGHUP, lambda _signum, _frame: threading.Thread(target=reload, daemon=True).start())
    server.run(sockets=[sock])
    failure = app.state.service.failure
    if failure is not None:
        print(f"edge-anime serve: error: {failure}", file=sys.stderr)
        return EXIT_CONFIG
    return EXIT_OK if server.started else EXIT_CONFIG


def _run_on_ray(config: Config, args: argparse.Namespace) -> int:
    """`serve --ray`: the http extra checked here as for one box (the replicas run the same app), then Ray."""
    try:
        import starlette  # noqa: F401 - the replicas' app; said here, before the cluster is touched
    except ImportError as exc:
        raise UserError(f"serve needs the http extra ({exc.name} is missing): {INSTALL_HINT}") from None
    from ..http.on_ray import serve_on_ray
    from ..logs import setup_logging
    from ..service.notify import Notifier

    setup_logging(log_format=config.service.log_format, level=config.service.log_level)
    return serve_on_ray(config, address=args.ray, reload=lambda: _load(args), notify=Notifier().send)


def _load(args: argparse.Namespace) -> Config:
    """The config file with --host/--port on top, validated like the file (so --host 0.0.0.0 needs auth)."""
    from ..config import load_config, parse_config

    config = load_config(args.config)
    if args.host is None and args.port is None:
        return config
    raw = config.model_dump(mode="json", exclude={"source"})
    raw["http"].update({k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None})
    return parse_config(raw, base_dir=Path.cwd(), source=config.source)
