"""The wheel, installed the way an edge box installs it: built from this checkout, put into a fresh venv (not
editable), and run from an empty folder with no path into the source tree. This is the check that the
package carries its default config and bundled style, finds them with importlib.resources, keeps its state
in the XDG folders, and never needs torch.

One module-scoped venv serves every test here; the test that damages the installed model runs last.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomllib
import yaml
from deadlines import scaled

from conftest import REPO_ROOT, synthetic_photo

pytestmark = pytest.mark.slow

INSTALL_TIMEOUT_SECONDS = 600  # a cold pip cache downloads openvino and numpy
RUN_DEADLINE_SECONDS = scaled(120)  # compile from a cold cache + one photo, on a busy 2-core box


@dataclass(frozen=True)
class Installed:
    venv: Path
    home: Path
    env: dict[str, str]
    site_packages: Path

    @property
    def entry(self) -> str:
        return str(self.venv / "bin" / "edge-anime")

    def run(self, *args: str, cwd: Path, timeout: float = 180, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.entry, *args], cwd=cwd, env=env or self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)


def _clean_env(home: Path) -> dict[str, str]:
    """The machine's environment without anything that points into the checkout or at another config."""
    drop = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "EDGE_ANIME_CONFIG", "STATE_DIRECTORY", "CACHE_DIRECTORY",
            "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "PYTEST_CURRENT_TEST")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HOME"] = str(home)
    return env


def _build_isolation() -> list[str]:
    """pip's flag to build with this venv's setuptools when it is the one pyproject.toml asks for: an isolated
    build first installs setuptools into a temporary environment (half the build's ~20 s on a busy 2-core box).
    The backend and the wheel are the same; an older setuptools here gets the isolated build."""
    from importlib.metadata import PackageNotFoundError, version

    required = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    match = re.fullmatch(r"setuptools>=(\d+)", required[0]) if len(required) == 1 else None
    try:
        ours = int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return []
    return ["--no-build-isolation"] if match and ours >= int(match.group(1)) else []


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("wheel")
    dist, venv, home = base / "dist", base / "venv", base / "home"
    home.mkdir()
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *_build_isolation(), "-w",
                            str(dist), str(REPO_ROOT)],
                           capture_output=True, text=True, timeout=INSTALL_TIMEOUT_SECONDS, check=False)
    assert build.returncode == 0, build.stderr
    (wheel,) = dist.glob("edge_anime-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=scaled(120))
    env = _clean_env(home)
    # --no-compile: pip byte-compiled every module of openvino and numpy (a third of the install's time on 2
    # cores); the installed package compiles what it imports on first use, as any read-write venv does.
    install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", "-c",
                              str(REPO_ROOT / "constraints.txt"), str(wheel)],
                             capture_output=True, text=True, timeout=INSTALL_TIMEOUT_SECONDS, check=False, env=env,
                             cwd=base)
    assert install.returncode == 0, install.stderr
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(venv / "bin" / "python"), "-c", purelib],
                          capture_output=True, text=True, check=True, env=env, cwd=base).stdout.strip()
    yield Installed(venv=venv, home=home, env=env, site_packages=Path(site))


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def test_version_comes_from_the_installed_metadata(installed: Installed, empty: Path) -> None:
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    for flag in ("--version", "-V"):
        proc = installed.run(flag, cwd=empty)
        assert (proc.returncode, proc.stdout.strip()) == (0, f"edge-anime {version}"), proc.stderr


def test_the_package_comes_from_site_packages_and_needs_no_torch(installed: Installed, empty: Path) -> None:
    probe = ("import importlib.util, sys, edge_anime, edge_anime.cli, edge_anime.runtime.engine\n"
             "print(edge_anime.__file__)\n"
             "print(importlib.util.find_spec('torch') is None, importlib.util.find_spec('converters') is None)\n"
             "print('\\n'.join(sys.path))\n")
    proc = subprocess.run([str(installed.venv / "bin" / "python"), "-c", probe], cwd=empty, env=installed.env,
                          capture_output=True, text=True, timeout=scaled(60), check=True)
    module_file, no_torch, *paths = proc.stdout.splitlines()
    assert Path(module_file).is_relative_to(installed.site_packages)
    assert no_torch == "True True"  # the runtime installs no torch, and no bare `converters` package
    assert not [p for p in paths if p and Path(p).resolve().is_relative_to(REPO_ROOT)]


def test_stylize_two_photos_from_an_empty_folder(installed: Installed, empty: Path) -> None:
    (empty / "in").mkdir()
    for i in range(2):
        synthetic_photo(96, 64, seed=i).save(empty / "in" / f"p{i}.jpg")
    proc = installed.run("stylize", "in", "-o", "out", cwd=empty)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (empty / "out").iterdir()) == ["p0_toon.jpg", "p1_toon.jpg"]
    # The compiled-model cache went to the XDG cache folder, not into the working folder.
    assert any((installed.home / ".cache" / "edge-anime" / "openvino").iterdir())
    assert sorted(p.name for p in empty.iterdir()) == ["in", "out"]


def test_config_show_prints_the_user_install_folders(installed: Installed, empty: Path) -> None:
    proc = installed.run("config", "show", cwd=empty)
    assert proc.returncode == 0, proc.stderr
    shown = yaml.safe_load(proc.stdout)
    assert "folders for a user install" in proc.stdout
    assert shown["watch"]["root"] == str(installed.home / ".local" / "state" / "edge-anime")
    assert shown["device"]["cache_dir"] == str(installed.home / ".cache" / "edge-anime" / "openvino")
    bundled = installed.site_packages / "edge_anime" / "_bundled" / "models"
    assert shown["model"]["dirs"] == [str(installed.home / ".local" / "share" / "edge-anime" / "models"),
                                      str(bundled)]


def test_config_check_on_the_shipped_service_config(installed: Installed, empty: Path) -> None:
    service_config = installed.site_packages / "edge_anime" / "_bundled" / "configs" / "systemd" / "config.yaml"
    proc = installed.run("config", "check", str(service_config), cwd=empty)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "model toon" in proc.stdout


def test_the_readme_recipe_finds_the_service_files_in_the_wheel(installed: Installed, empty: Path) -> None:
    """The README's service recipe copies the unit, the config and the sysusers/tmpfiles entries out of the
    installed package: its one-liner must find them, byte for byte the checkout's."""
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("CONFIGS=$(")]
    code = line.split("-c '", 1)[1].split("')", 1)[0]
    proc = subprocess.run([str(installed.venv / "bin" / "python"), "-c", code], cwd=empty, env=installed.env,
                          capture_output=True, text=True, timeout=scaled(60), check=True)
    configs = Path(proc.stdout.strip())
    assert configs.is_relative_to(installed.site_packages)
    shipped = sorted(p.name for p in (REPO_ROOT / "configs" / "systemd").iterdir())
    assert shipped == ["config.yaml", "edge-anime-http.service", "edge-anime.service", "edge-anime.sysusers.conf",
                       "edge-anime.tmpfiles.conf"]
    for name in shipped:
        assert (configs / "systemd" / name).read_bytes() == (REPO_ROOT / "configs" / "systemd" / name).read_bytes()
        assert f"$CONFIGS/systemd/{name}" in readme


def test_models_list_shows_the_bundled_style_without_torch(installed: Installed, empty: Path) -> None:
    proc = installed.run("models", "list", cwd=empty)
    assert proc.returncode == 0, proc.stderr
    assert any(line.split()[:2] == ["toon", "fp16"] for line in proc.stdout.splitlines()), proc.stdout


def _wait_for(predicate: Callable[[], bool], *, deadline_s: float, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return
        assert proc.poll() is None, f"the service exited early with {proc.returncode}"
        time.sleep(0.1)
    raise AssertionError(f"not done within {deadline_s} s")


def test_watch_folder_with_only_a_root_turns_one_photo_into_one_output(installed: Installed, empty: Path) -> None:
    root = empty / "box"
    (empty / "config.yaml").write_text(yaml.safe_dump({"watch": {"root": str(root)}}), encoding="utf-8")
    proc = subprocess.Popen([installed.entry, "run", "--config", "config.yaml"], cwd=empty, env=installed.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(lambda: (root / "inbox").is_dir(), deadline_s=RUN_DEADLINE_SECONDS, proc=proc)
        synthetic_photo(96, 64).save(root / ".drop.jpg")
        os.replace(root / ".drop.jpg", root / "inbox" / "drop.jpg")  # appears complete, as rsync and cp -T do
        _wait_for(lambda: (root / "done" / "drop.jpg").is_file(), deadline_s=RUN_DEADLINE_SECONDS, proc=proc)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=scaled(60))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert [p.name for p in (root / "outbox").iterdir()] == ["drop_toon.jpg"]
    assert list((root / "inbox").iterdir()) == [] and list((root / "failed").iterdir()) == []


def test_the_face_models_ship_hash_checked_and_run_without_torch(installed: Installed, empty: Path) -> None:
    """The detector and the landmark IR (models/detectors/) come with the wheel, load with their digests checked,
    and find a face's landmarks; neither is listed as a style."""
    probe = ("import numpy as np\n"
             "from edge_anime.config import DeviceSection\n"
             "from edge_anime.faces.detect import Face, detector_info\n"
             "from edge_anime.faces.landmarks import FaceLandmarker, landmarks_info\n"
             "print(detector_info().name, landmarks_info().name)\n"
             "grey = np.full((256, 256, 3), 128, np.uint8)\n"
             "face = Face((64.0, 64.0, 192.0, 192.0), np.array([[100, 110], [156, 110]] + [[128, 150]] * 4, "
             "np.float32), 0.9)\n"
             "print(FaceLandmarker(DeviceSection()).landmarks(grey, face))\n")
    proc = subprocess.run([str(installed.venv / "bin" / "python"), "-c", probe], cwd=empty, env=installed.env,
                          capture_output=True, text=True, timeout=scaled(120), check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["blazeface facemesh", "None"]  # a flat grey crop holds no face
    listed = installed.run("models", "list", cwd=empty)
    assert listed.returncode == 0 and "facemesh" not in listed.stdout and "blazeface" not in listed.stdout


def test_the_python_api_example_runs_from_the_wheel(installed: Installed, empty: Path) -> None:
    """docs/api.md's example, as written, with only the wheel installed (the bundled style, no checkout)."""
    text = (REPO_ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    proc = subprocess.run([str(installed.venv / "bin" / "python"), "-c", code], cwd=empty, env=installed.env,
                          capture_output=True, text=True, timeout=scaled(300), check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "('toon',)" and (empty / "out_toon.png").is_file()


def test_full_resolution_tiles_with_the_bundled_pair_without_torch(installed: Installed, empty: Path) -> None:
    """``image.resize: full`` on the bundled style, forced into tiles: the wheel carries the tiling pair (its
    XMLs; its weights are model.bin's) and runs it with only the runtime installed."""
    bundled = installed.site_packages / "edge_anime" / "_bundled" / "models" / "toon"
    assert (bundled / "model_fp16_pass1.xml").is_file() and (bundled / "model_fp16_pass2.xml").is_file()
    synthetic_photo(480, 360).save(empty / "a.jpg")
    (empty / "full.yaml").write_text(yaml.safe_dump({"image": {"resize": "full", "tile_px": 256,
                                                               "memory_budget_mb": 400}}), encoding="utf-8")
    code = ("import importlib.util\n"
            "from edge_anime import Stylizer\n"
            "from edge_anime.imaging.fullres import plan_full\n"
            "with Stylizer('full.yaml') as s:\n"
            "    full = plan_full((480, 360), s.config.image, requests=s.engine.num_requests)\n"
            "    out = s.stylize('a.jpg')\n"
            "    pair = s.engine.model_info.tiling_pair()\n"
            "print(full.tiled, out.size, pair[1].xml.name, importlib.util.find_spec('torch') is None)\n")
    proc = subprocess.run([str(installed.venv / "bin" / "python"), "-c", code], cwd=empty, env=installed.env,
                          capture_output=True, text=True, timeout=scaled(300), check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "(480,", "360)", "model_fp16_pass2.xml", "True"], proc.stdout


def test_a_damaged_bundled_style_is_a_clear_error(installed: Installed, empty: Path) -> None:
    """Last in this module on purpose (pytest runs a module in file order): it removes the installed model.bin."""
    model_bin = installed.site_packages / "edge_anime" / "_bundled" / "models" / "toon" / "model.bin"
    model_bin.unlink()
    synthetic_photo(96, 64).save(empty / "a.jpg")
    proc = installed.run("stylize", "a.jpg", "-o", "out", cwd=empty)
    assert proc.returncode == 78, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and str(model_bin) in proc.stderr
    assert "pip install --force-reinstall edge-anime" in proc.stderr
