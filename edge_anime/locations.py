"""Where the runtime finds what it ships and where it keeps what it makes, for each way it is installed.

What ships (the default config, the bundled style) is package data, found with ``importlib.resources``:
``configs/`` and ``models/`` of the repository are installed as ``edge_anime._bundled.configs`` and
``edge_anime._bundled.models`` (pyproject's package-dir), so a wheel and an editable checkout find them the
same way and no path is computed from the source tree.

What the runtime makes (the watch folders, converted styles) goes where the person who installed it would
look, in this order:

1. **systemd** (``StateDirectory=`` sets ``$STATE_DIRECTORY``): ``/var/lib/edge-anime``, the unit's folder,
   owned by its user.
2. **a checkout** (an editable install: the package sits beside ``pyproject.toml``): ``var/`` and ``models/``
   in the checkout, where a developer looks and ``.gitignore`` expects.
3. **a user's install** (a wheel in a venv): the XDG base directories, ``$XDG_STATE_HOME/edge-anime``
   (``~/.local/state/edge-anime``) and ``$XDG_DATA_HOME/edge-anime/models``. Not the current folder: a
   service started from a different folder (a login shell, cron, a desktop launcher) would silently watch a
   different inbox, and `stylize` run in a photo folder would litter it. The watch folders are the queue's
   state (claims, work/, journal), which is what XDG_STATE_HOME is for and what systemd itself maps
   ``StateDirectory=`` to for user services.

The compiled-model cache (``device.cache_dir``) is a cache, not state: ``openvino/`` under ``$CACHE_DIRECTORY``
(systemd's ``CacheDirectory=``, ``/var/cache/edge-anime``), else under the unit's ``$STATE_DIRECTORY/cache``,
else ``$XDG_CACHE_HOME/edge-anime/openvino`` (``~/.cache/edge-anime/openvino``), a checkout included: its
blobs (one per style, precision and input size: 100 after a day of use) belong to the box, not to the
source tree, and cleaning the user's cache folder is what frees them.
``edge-anime run`` logs the inbox it watches and ``edge-anime config show`` prints every resolved path.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

APP_NAME = "edge-anime"
BUNDLED_CONFIGS_PACKAGE = "edge_anime._bundled.configs"
BUNDLED_MODELS_PACKAGE = "edge_anime._bundled.models"
DEFAULT_CONFIG_NAME = "default.yaml"


def _package_folder(package: str) -> Path:
    """The folder of a data package; always a real folder here (the wheel is installed unzipped)."""
    return Path(str(resources.files(package)))


def bundled_config_path() -> Path:
    """The shipped ``configs/default.yaml``."""
    return _package_folder(BUNDLED_CONFIGS_PACKAGE) / DEFAULT_CONFIG_NAME


def bundled_configs_dir() -> Path:
    """The shipped ``configs/`` folder (default.yaml, systemd/)."""
    return _package_folder(BUNDLED_CONFIGS_PACKAGE)


def bundled_models_dir() -> Path:
    """The shipped ``models/`` folder: the bundled style, always searched last for a model given by name."""
    return _package_folder(BUNDLED_MODELS_PACKAGE)


def checkout_root() -> Path | None:
    """The repository root when running from an editable checkout, else None (a wheel install)."""
    root = _package_folder(BUNDLED_CONFIGS_PACKAGE).parent
    if (root / "pyproject.toml").is_file() and (root / "edge_anime").is_dir():
        return root
    return None


@dataclass(frozen=True)
class Locations:
    """The default folders for one kind of install (``kind`` is what ``config show`` reports)."""

    kind: str  # "systemd", "checkout" or "user"
    state: Path  # watch.root
    cache: Path  # device.cache_dir
    models: Path  # model.dirs (before the bundled folder)


def _first_dir(value: str) -> Path:
    """systemd passes a colon-separated list when a directive names several folders; ours names one."""
    return Path(value.split(":")[0])


def _xdg(env: Mapping[str, str], name: str, fallback: str) -> Path:
    """``$XDG_*`` if set to an absolute path (the spec says relative values are to be ignored), else
    ``$HOME/fallback`` (``env``'s HOME when it has an absolute one, else the user's home)."""
    value = env.get(name, "")
    if value and os.path.isabs(value):
        return Path(value)
    home = env.get("HOME", "")
    return (Path(home) if home and os.path.isabs(home) else Path(os.path.expanduser("~"))) / fallback


def _cache(env: Mapping[str, str]) -> Path:
    """``device.cache_dir``'s default: systemd's CacheDirectory, else its StateDirectory, else the user's cache
    folder (XDG), for every kind of install: compiled blobs never land in a checkout."""
    if env.get("CACHE_DIRECTORY"):
        return _first_dir(env["CACHE_DIRECTORY"]) / "openvino"
    if env.get("STATE_DIRECTORY"):
        return _first_dir(env["STATE_DIRECTORY"]) / "cache" / "openvino"
    return _xdg(env, "XDG_CACHE_HOME", ".cache") / APP_NAME / "openvino"


def default_locations(env: Mapping[str, str] | None = None) -> Locations:
    """The default state, cache and model folders for the way this process was installed and started."""
    env = os.environ if env is None else env
    cache = _cache(env)
    state_dir = env.get("STATE_DIRECTORY")
    if state_dir:
        state = _first_dir(state_dir)
        return Locations(kind="systemd", state=state, cache=cache, models=state / "models")
    root = checkout_root()
    if root is not None:
        return Locations(kind="checkout", state=root / "var", cache=cache, models=root / "models")
    return Locations(
        kind="user",
        state=_xdg(env, "XDG_STATE_HOME", ".local/state") / APP_NAME,
        cache=cache,
        models=_xdg(env, "XDG_DATA_HOME", ".local/share") / APP_NAME / "models",
    )
