"""The shipped YAML configs; installed as the package data edge_anime._bundled.configs (see pyproject.toml).

This file only makes the folder importable, so importlib.resources finds it in a wheel and in an editable
checkout alike.
"""
