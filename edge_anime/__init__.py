"""edge-anime runtime: OpenVINO on CPU, no torch. See docs/contracts.md for how the pieces meet."""

__version__ = "0.1.0"
