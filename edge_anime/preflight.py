"""Checks of the filesystem a config points at, run by ``config check`` and by ``run`` before it starts.

The schema (``config``) knows types and ranges; only the filesystem knows that ``watch.root: /proc/self/x``
can never hold an inbox, or that ``status_file: /proc/self/status`` would be a failed write every second.
Both commands run these same checks, so a config that passes ``config check`` does not fail at start for
a reason the check could have seen. Nothing here creates or writes anything.

One check differs by who runs it: whether a folder is writable depends on the user, and the operator who
runs ``config check`` is seldom the service's user (``edge-anime``). ``run`` refuses an unwritable folder;
``config check`` reports it as a note and passes.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .config import WATCH_FOLDERS, Config
from .errors import ConfigError

# Kernel filesystems: files there exist, but they are the kernel's, never a place for photos or state.
KERNEL_PREFIXES = ("/proc", "/sys", "/dev")


def _on_kernel_fs(path: Path) -> bool:
    text = os.path.realpath(path)
    return any(text == p or text.startswith(p + "/") for p in KERNEL_PREFIXES)


def _nearest_existing(path: Path) -> Path:
    current = path
    while not os.path.lexists(current) and current != current.parent:
        current = current.parent
    return current


Note = Callable[[str], None]


def _refuse(message: str) -> None:
    raise ConfigError(message)


def check_folder(key: str, path: Path, *, unwritable: Note = _refuse) -> None:
    """``path`` is, or can become, a folder this process writes into; else a ConfigError naming ``key``."""
    if _on_kernel_fs(path):
        raise ConfigError(f"{key}: {path} is on a kernel filesystem (/proc, /sys, /dev); expected a folder on a disk")
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{key}: {path} exists and is not a folder; expected a folder")
    anchor = _nearest_existing(path)
    if not anchor.is_dir():
        raise ConfigError(f"{key}: {path} is under {anchor}, which is not a folder; expected a folder path")
    if not os.access(anchor, os.W_OK | os.X_OK):
        unwritable(f"{key}: {anchor} is not writable by this user (uid {os.getuid()}); "
                   f"make it writable for the user that runs the service or choose another folder for {key}")


def check_file(key: str, path: Path, *, unwritable: Note = _refuse) -> None:
    """``path`` is, or can become, a regular file this process rewrites (temp file beside it, then rename)."""
    if _on_kernel_fs(path):
        raise ConfigError(f"{key}: {path} is on a kernel filesystem (/proc, /sys, /dev); expected a file on a disk "
                          "or in /run")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{key}: {path} exists and is not a regular file")
    check_folder(f"{key} (its folder)", path.parent, unwritable=unwritable)


def check_paths(config: Config, *, unwritable: Note = _refuse) -> None:
    """Every folder and file the watch-folder service writes; ``unwritable`` decides what a folder this user
    cannot write means (``run``: an error; ``config check``: a note)."""
    for name in WATCH_FOLDERS:
        explicit = getattr(config.watch, name)
        check_folder(f"watch.{name}" if explicit is not None else "watch.root", config.watch.folder(name),
                     unwritable=unwritable)
    check_file("service.status_file" if config.service.status_file else "watch.root", config.status_file(),
               unwritable=unwritable)
    if config.device.cache_dir is not None:
        check_folder("device.cache_dir", config.device.cache_dir, unwritable=unwritable)
