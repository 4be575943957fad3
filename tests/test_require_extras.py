"""In CI a skip is a failure (issue 44 item 7): `.ci/run` sets EDGE_ANIME_REQUIRE_EXTRAS=1, and a test skipped
for a missing extra, tool or ../shared fails instead of hiding the coverage it stands for. Run for real: pytest
in a subprocess on a small test folder using the suite's own conftest.py."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from deadlines import scaled

TESTS = Path(__file__).resolve().parent


def _run(folder: Path, *, require: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "EDGE_ANIME_REQUIRE_EXTRAS"}
    if require:
        env["EDGE_ANIME_REQUIRE_EXTRAS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "--continue-on-collection-errors",
                           "-o", "addopts=", str(folder)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=scaled(120))


def test_a_skip_for_a_missing_extra_fails_in_ci_and_a_box_skip_does_not(tmp_path: Path) -> None:
    for name in ("conftest.py", "deadlines.py"):  # the suite's conftest and the helper it imports
        shutil.copyfile(TESTS / name, tmp_path / name)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    box: what the box is\n    slow: slow\n")
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\n"
        "def test_needs_a_tool():\n    pytest.skip('frobnicate is not installed')\n\n"
        "@pytest.mark.box\ndef test_needs_a_cpu_feature():\n    pytest.skip('this CPU has no frob unit')\n\n"
        "def test_plain():\n    assert True\n")
    (tmp_path / "test_module_skip.py").write_text(
        "import pytest\npytest.importorskip('no_such_extra_module')\n\ndef test_never():\n    pass\n")
    here = _run(tmp_path, require=False)
    assert here.returncode == 0 and "1 passed, 3 skipped" in here.stdout, here.stdout
    ci = _run(tmp_path, require=True)
    assert ci.returncode != 0, ci.stdout
    assert "frobnicate is not installed" in ci.stdout and "no_such_extra_module" in ci.stdout, ci.stdout
    assert "EDGE_ANIME_REQUIRE_EXTRAS=1" in ci.stdout
    assert "SKIPPED [1] test_skips.py:8: this CPU has no frob unit" in ci.stdout  # the box's skip stays one
    assert "1 failed, 1 passed, 1 skipped, 1 error" in ci.stdout.strip().splitlines()[-1], ci.stdout
