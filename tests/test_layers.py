"""The layering check (``python -m edge_anime.devtools.layers``): the house keeps its layers, and the check
really fails on an import that runs back up or on a cycle (planted in a copy of the package)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import edge_anime

PACKAGE_DIR = Path(edge_anime.__file__).parent


def _layers(root: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "edge_anime.devtools.layers", *([str(root)] if root else [])]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_the_package_keeps_its_layers() -> None:
    result = _layers()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 finding(s)" in result.stdout


def test_an_import_back_up_and_a_lazy_cycle_are_both_found(tmp_path: Path) -> None:
    copy = tmp_path / "edge_anime"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "_bundled"))
    geometry = copy / "imaging" / "geometry.py"
    geometry.write_text(geometry.read_text() + "\n\ndef _later() -> None:\n"
                        "    from .fullres import plan_full  # noqa: F401\n"
                        "    from ..service import signals  # noqa: F401\n")
    result = _layers(tmp_path)
    assert result.returncode == 1
    assert "edge_anime.imaging.geometry (imaging) imports edge_anime.service.signals (service)" in result.stdout
    assert "cycle: edge_anime.imaging.fullres -> edge_anime.imaging.geometry" in result.stdout
