"""The layering check (``python -m edge_anime.devtools.layers``): the house keeps its layers, and the check
really fails on an import that runs back up or on a cycle (planted in a copy of the package)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from deadlines import scaled

import edge_anime

PACKAGE_DIR = Path(edge_anime.__file__).parent


def _layers(root: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "edge_anime.devtools.layers", *([str(root)] if root else [])]
    return subprocess.run(args, capture_output=True, text=True, timeout=scaled(60), check=False)


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


def test_the_architecture_doc_draws_the_layers_the_check_enforces() -> None:
    """docs/architecture.md's layer table is ``markdown_table`` of the check's own map, word for word: a layer,
    a room or a description changed in ``LAYERS`` (or a package moved in the tree) without
    ``python -m edge_anime.devtools.layers --markdown`` fails here (before, the doc drew 12 layers, the check 13)."""
    from edge_anime.devtools.layers import DOC, doc_table, markdown_table

    root = PACKAGE_DIR.parent
    written = doc_table((root / DOC).read_text(encoding="utf-8"))
    assert written is not None, f"{DOC} lost its layer table's marks"
    assert written == markdown_table(root), f"{DOC} differs from the layer map: python -m " \
                                            "edge_anime.devtools.layers --markdown"


def test_a_room_the_map_names_and_the_tree_lacks_is_a_finding(tmp_path: Path) -> None:
    copy = tmp_path / "edge_anime"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "_bundled"))
    shutil.rmtree(copy / "measure")
    result = _layers(tmp_path)
    assert result.returncode == 1
    assert "layer measure: edge_anime.measure is no module or package" in result.stdout


def test_the_modules_moved_into_core_keep_their_old_names() -> None:
    """``edge_anime.stylizer``, ``.pipeline`` and ``.naming`` moved into ``edge_anime.core`` (issue 44); code
    written against the old names imports the very same modules, and importing the package stays light."""
    code = ("import sys, edge_anime\n"
            "assert 'openvino' not in sys.modules and 'edge_anime.core.stylizer' not in sys.modules\n"
            "from edge_anime.naming import child\n"
            "from edge_anime.pipeline import Job\n"
            "import edge_anime.core.naming as naming, edge_anime.core.pipeline as pipeline\n"
            "assert child is naming.child and Job is pipeline.Job\n"
            "assert sys.modules['edge_anime.naming'] is naming\n"
            "from edge_anime import Stylizer\n"
            "from edge_anime.stylizer import Stylizer as Old\n"
            "assert Old is Stylizer\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(120),
                            check=False)
    assert result.returncode == 0, result.stderr
