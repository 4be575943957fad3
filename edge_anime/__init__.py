"""edge-anime runtime: OpenVINO on CPU, no torch. See docs/contracts.md for how the pieces meet, and
docs/api.md for the Python API (``from edge_anime import Stylizer``).

The version has one home, ``pyproject.toml``; the installed metadata carries it here, so a wheel, an editable
checkout and ``edge-anime --version`` always agree; it is read on first use, like ``Stylizer``, so the CLI's
``--help`` and ``config check`` do not pay for OpenVINO.

``stylizer``, ``pipeline`` and ``naming`` live in ``edge_anime.core`` (issue 44). Their old names still import,
as the very same module objects (``_MovedModules``), so code written against ``edge_anime.pipeline.Job`` or
``edge_anime.stylizer.Stylizer`` (the benchmarks, an embedder) keeps working without a second copy of a class.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.stylizer import Stylizer

__all__ = ["Stylizer", "__version__"]

_MOVED = {f"{__name__}.{name}": f"{__name__}.core.{name}" for name in ("stylizer", "pipeline", "naming")}


class _MovedModules:
    """A finder and loader for the old names of the modules moved into ``core``: the import of an old name
    imports the new one and puts that module in its place in ``sys.modules`` (the import system returns what
    ``sys.modules`` holds once the module ran), so ``edge_anime.stylizer.Stylizer is
    edge_anime.core.stylizer.Stylizer``. Last on ``sys.meta_path``: it answers only for names no file has."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in _MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None  # the default empty module; exec_module swaps it for the real one

    def exec_module(self, module: ModuleType) -> None:
        sys.modules[module.__name__] = importlib.import_module(_MOVED[module.__name__])

    def load_module(self, fullname: str) -> ModuleType:
        """The pre-3.4 loader call, for whoever still makes it (and for the loader protocol); not
        ``importlib.abc``'s classes: importing them costs the CLI's every start 12 ms (importlib.resources)."""
        module = sys.modules[fullname] = importlib.import_module(_MOVED[fullname])
        return module


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


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
        from .core.stylizer import Stylizer

        return Stylizer
    raise AttributeError(f"module 'edge_anime' has no attribute {name!r}")
