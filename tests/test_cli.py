"""The `edge-anime` dispatcher: commands, exit statuses, and what importing it costs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from deadlines import scaled

from conftest import REPO_ROOT
from edge_anime.cli import main
from edge_anime.errors import EXIT_CONFIG, EXIT_USAGE


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edge_anime", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=scaled(120))


def test_help_lists_the_commands() -> None:
    proc = _run("--help")
    assert proc.returncode == 0
    for command in ("stylize", "config", "run"):
        assert command in proc.stdout


def test_version_is_printed_on_stdout() -> None:
    """``--version`` reads the metadata only when asked (cli._Version), and prints where argparse's does."""
    for flag in ("--version", "-V"):
        proc = _run(flag)
        assert (proc.returncode, proc.stdout.startswith("edge-anime "), proc.stderr) == (0, True, "")


def test_console_script_is_installed() -> None:
    script = shutil.which("edge-anime", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("edge-anime console script not installed in this environment (pip install -e .)")
    proc = subprocess.run([script, "stylize", "--help"], capture_output=True, text=True, timeout=scaled(60))
    assert proc.returncode == 0 and "-o DIR" in proc.stdout and "--recursive" in proc.stdout


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["stylize", "photo.jpg"])  # no -o
    assert info.value.code == EXIT_USAGE and "-o" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["paint"])
    assert info.value.code == EXIT_USAGE


def test_user_error_is_one_line_exit_78(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", str(tmp_path / "missing.yaml")]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert err == f"edge-anime config: error: {tmp_path / 'missing.yaml'}: config file not found\n"


def test_cli_and_stylize_modules_import_no_heavy_libraries() -> None:
    """Building the parser (what --help and config check pay) imports neither torch nor openvino."""
    script = textwrap.dedent("""
        import json, sys
        import edge_anime, edge_anime.commands.stylize, edge_anime.imaging
        from edge_anime.cli import build_parser
        build_parser()
        print(json.dumps(sorted(m for m in ("torch", "nncf", "openvino") if m in sys.modules)))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=scaled(60))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_stylize_without_config_uses_the_bundled_default(tmp_path: Path, make_photo: Callable[..., Path],
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """No --config: configs/default.yaml applies (model.path: toon). Either the bundled model is installed and
    the photo is stylized, or the one-line error names that file's key; never a traceback."""
    monkeypatch.delenv("EDGE_ANIME_CONFIG", raising=False)
    status = main(["stylize", str(make_photo("a.jpg", 64, 48)), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if status == EXIT_CONFIG:
        assert "model.path" in err and "toon" in err
    else:
        assert status == 0 and len(list((tmp_path / "out").iterdir())) == 1


def test_runtime_commands_run_without_openvinos_converter(tmp_path: Path, make_photo: Callable[..., Path],
                                                          write_config: Callable[..., Path]) -> None:
    """``host.skip_model_converter``: a stylize process (the console script's ``entry``) stylizes with
    openvino loaded and its converter never imported (~0.15 s of a warm start); ``convert`` in a process
    keeps the converter (tests/test_convert.py runs it the same way)."""
    script = textwrap.dedent("""
        import atexit, json, sys
        atexit.register(lambda: print(json.dumps({"openvino": "openvino" in sys.modules,
                                                  "ovc": repr(sys.modules.get("openvino.tools.ovc", "absent"))})))
        sys.argv = ["edge-anime", *sys.argv[1:]]
        from edge_anime.cli import entry
        entry()
    """)
    photo, out = make_photo("a.jpg", 64, 48), tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", script, "stylize", str(photo), "-o", str(out),
                           "--config", str(write_config())], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=scaled(120),
                          env={**os.environ, "EDGE_ANIME_HUGE_PAGES": "0"})  # no re-exec: one process
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"openvino": True, "ovc": "None"}
    assert [p.name for p in out.iterdir()] == ["a_randgen.jpg"]
