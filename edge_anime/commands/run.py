"""`edge-anime run`: serve the watch folder until SIGTERM/SIGINT (SIGHUP reloads the config).

Exit statuses: 0 after a clean stop (SIGTERM drains in-flight work first); 78 for a bad config, model or
folder (systemd's RestartPreventExitStatus, so a broken install is not restarted in a loop); 70 for a bug.
"""
from __future__ import annotations

import argparse

from . import add_config_option


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_option(parser)


def run(args: argparse.Namespace) -> int:
    from ..service.signals import Flags

    flags = Flags().install()  # first: a SIGTERM held since launch is delivered now, to a handler
    from ..service.runner import WatchService

    return WatchService(args.config, flags=flags).run()
