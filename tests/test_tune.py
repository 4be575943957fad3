"""`edge-anime tune` with a tiny budget writes a config that load_config accepts, plus a chart."""
from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import yaml

from edge_anime.config import load_config
from edge_anime.models import load_model_info
from edge_anime.tune import int8_sibling

CLI_TIMEOUT_S = 300  # seconds


def test_tune_writes_a_loadable_config_and_a_chart(write_config: Callable[..., Path], make_photo: Callable[..., Path],
                                                   tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    for i in range(2):
        make_photo(f"p{i}.jpg", 64, 48, seed=i, folder=photos)
    out, png = tmp_path / "tuned" / "edge-anime.yaml", tmp_path / "tune.png"
    proc = subprocess.run(
        [sys.executable, "-m", "edge_anime", "tune", str(photos), "--config", str(write_config()),
         "--budget", "3", "--max-side", "48", "--write", str(out), "--chart", str(png)],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    assert "as configured" in proc.stdout and "img/s" in proc.stdout
    tuned = load_config(out)
    assert tuned.device.performance_hint in {"LATENCY", "THROUGHPUT"}
    assert tuned.image.max_side == 48
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_int8_sibling_is_found_by_folder_name(random_ir: Path, tmp_path: Path) -> None:
    fp32 = tmp_path / "toon"
    shutil.copytree(random_ir, fp32)
    assert int8_sibling(load_model_info(fp32)) is None
    int8 = tmp_path / "toon_int8"
    shutil.copytree(random_ir, int8)
    manifest = yaml.safe_load((int8 / "manifest.yaml").read_text(encoding="utf-8"))
    manifest["precision"] = "int8"
    (int8 / "manifest.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    found = int8_sibling(load_model_info(fp32))
    assert found is not None and found.directory == int8 and found.precision == "int8"


def test_int8_below_the_quality_floor_is_not_swept(random_ir: Path, tmp_path: Path,
                                                   write_config: Callable[..., Path]) -> None:
    from edge_anime.tune import axes

    fp32, int8 = tmp_path / "toon", tmp_path / "toon_int8"
    shutil.copytree(random_ir, fp32)
    shutil.copytree(random_ir, int8)
    manifest = yaml.safe_load((int8 / "manifest.yaml").read_text(encoding="utf-8"))
    manifest.update(precision="int8", quantization={"psnr_vs_fp32_db": {"min": 30.1, "mean": 30.7}})
    (int8 / "manifest.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    config = load_config(write_config())
    models = dict(axes(config, load_model_info(fp32), cores=2))["model"]
    assert models == [str(fp32 / "model.xml")]
    models = dict(axes(config, load_model_info(fp32), cores=2, int8_floor_db=0.0))["model"]
    assert models == [str(fp32 / "model.xml"), str(int8 / "model.xml")]
