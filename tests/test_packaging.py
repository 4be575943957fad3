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


def test_every_ir_a_bundled_manifest_names_is_in_the_wheels_package_data() -> None:
    """A new variant's files (the live student's were, once) must match a package-data pattern, or the
    installed style is 'damaged' at its first start: the wheel tests see it, in the slow tier only."""
    import fnmatch

    import yaml

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "edge_anime._bundled.models"]
    named = []
    for manifest in (ROOT / "models").glob("*/manifest.yaml"):
        data = yaml.safe_load(manifest.read_text())
        for entry in [data, *(data.get("variants") or {}).values()]:
            named += [f"{manifest.parent.name}/{entry['ir'][k]}" for k in ("xml", "bin")]
    assert named
    missing = [n for n in named if not any(fnmatch.fnmatch(n, p) for p in patterns)]
    assert missing == [], f"not in [tool.setuptools.package-data] edge_anime._bundled.models: {missing}"
