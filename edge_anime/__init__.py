"""edge-anime runtime: OpenVINO on CPU, no torch. See docs/contracts.md for how the pieces meet, and
docs/api.md for the Python API (``from edge_anime import Stylizer``).

The version has one home, ``pyproject.toml``; the installed metadata carries it here, so a wheel, an editable
checkout and ``edge-anime --version`` always agree. ``Stylizer`` is imported on first use, so the CLI's
``--help`` and ``config check`` do not pay for OpenVINO.
"""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .stylizer import Stylizer

try:
    __version__ = version("edge-anime")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["Stylizer", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "Stylizer":
        from .stylizer import Stylizer

        return Stylizer
    raise AttributeError(f"module 'edge_anime' has no attribute {name!r}")
