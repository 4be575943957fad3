"""edge-anime runtime: OpenVINO on CPU, no torch. See docs/contracts.md for how the pieces meet, and
docs/api.md for the Python API (``from edge_anime import Stylizer``).

The version has one home, ``pyproject.toml``; the installed metadata carries it here, so a wheel, an editable
checkout and ``edge-anime --version`` always agree; it is read on first use, like ``Stylizer``, so the CLI's
``--help`` and ``config check`` do not pay for OpenVINO.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .stylizer import Stylizer

__all__ = ["Stylizer", "__version__"]


def _version() -> str:
    # importlib.metadata pulls in email, socket and more (~45 ms CPU): read only when asked, so the short
    # first process of `edge-anime run` (it re-executes itself for huge pages) does not pay for it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edge-anime")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        return _version()
    if name == "Stylizer":
        from .stylizer import Stylizer

        return Stylizer
    raise AttributeError(f"module 'edge_anime' has no attribute {name!r}")
