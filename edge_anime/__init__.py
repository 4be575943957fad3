"""edge-anime runtime: OpenVINO on CPU, no torch. See docs/contracts.md for how the pieces meet.

The version has one home, ``pyproject.toml``; the installed metadata carries it here, so a wheel, an editable
checkout and ``edge-anime --version`` always agree.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("edge-anime")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
