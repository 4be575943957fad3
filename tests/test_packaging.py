"""The wheel ships every package of the runtime: a new sub-package missing from pyproject's list builds a wheel
that imports nowhere but the checkout (edge_anime.core was, once), which only the slow wheel tests would see."""
from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_runtime_package_is_in_the_wheel_list() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "edge_anime").rglob("__init__.py")
               if "__pycache__" not in init.parts and "_bundled" not in init.parts}
    missing = on_disk - listed
    assert missing == set(), f"missing from pyproject.toml [tool.setuptools] packages: {missing}"
    assert "edge_anime.core" in listed
