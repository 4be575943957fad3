"""Installed styles; installed as the package data edge_anime._bundled.models (see pyproject.toml).

This file only makes the folder importable, so importlib.resources finds it in a wheel and in an editable
checkout alike; the styles themselves are folders of IR + manifest (docs/contracts.md).
"""
