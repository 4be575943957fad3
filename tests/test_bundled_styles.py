"""Every bundled style ships the same set: FP16 IR with its tiling pair, an INT8 variant that holds the 35 dB
floor against FP32, an MIT licence, the tone guard's key, and the checkpoint it was converted from.

A style that lacks any of these silently loses a feature for its users (no INT8 speed, no `resize: full`,
no licence to sell pictures), so the set is checked on the folders as shipped, for every style found.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from edge_anime.config import QUALITY_FLOOR_DB

REPO_ROOT = Path(__file__).resolve().parent.parent
MODELS = REPO_ROOT / "models"
CHECKPOINTS = REPO_ROOT / "training" / "checkpoints"
STYLES = sorted(p.parent.name for p in MODELS.glob("*/manifest.yaml"))


def _manifest(style: str) -> dict:
    return yaml.safe_load((MODELS / style / "manifest.yaml").read_text(encoding="utf-8"))


def test_two_styles_are_bundled() -> None:
    assert {"toon", "cel"} <= set(STYLES), f"bundled styles: {STYLES}"


@pytest.mark.parametrize("style", STYLES)
def test_style_ships_fp16_int8_and_the_tiling_pair(style: str) -> None:
    manifest = _manifest(style)
    assert manifest["precision"] == "fp16" and manifest["upsample_align"] is True
    variants = manifest["variants"]
    assert variants["int8"]["precision"] == "int8"
    assert variants["int8"]["quality"]["psnr_db"]["min"] >= QUALITY_FLOOR_DB, "INT8 worst photo under the floor"
    roles = {v.get("role") for v in variants.values()}
    assert {"gn_stats_out", "gn_stats_in"} <= roles, f"{style}: no tiling pair for image.resize: full"
    for entry in [manifest["ir"], *(v["ir"] for v in variants.values())]:
        for key in ("xml", "bin"):
            assert (MODELS / style / entry[key]).is_file(), f"{style}: {entry[key]} missing"


@pytest.mark.parametrize("style", STYLES)
def test_style_is_mit_and_its_checkpoint_is_kept(style: str) -> None:
    licence = (MODELS / style / "LICENSE.md").read_text(encoding="utf-8")
    assert "**Licence: MIT**" in licence and "../shared/photos" in licence
    source = _manifest(style)["source"]
    checkpoint = CHECKPOINTS / source["file"]
    assert checkpoint.is_file(), f"{style}: {checkpoint} (the IR's source) is not kept"
    assert hashlib.sha256(checkpoint.read_bytes()).hexdigest() == source["sha256"], f"{style}: checkpoint differs"


@pytest.mark.parametrize("style", STYLES)
def test_style_runs_and_is_not_the_photo(style: str) -> None:
    """The shipped IR runs at a user's size and changes the picture: flatter than the photo."""
    import openvino as ov

    rng = np.random.default_rng(3)
    photo = np.clip(rng.normal(128, 40, (1, 96, 128, 3)), 0, 255).astype(np.uint8)
    out = ov.Core().compile_model(MODELS / style / "model.xml", "CPU")({0: photo})[0]
    assert out.shape == photo.shape and out.dtype == np.uint8
    lap = lambda x: np.abs(np.diff(x.astype(np.float32), axis=2)).mean()  # noqa: E731
    assert lap(out) < 0.5 * lap(photo), f"{style}: the noise was not flattened"
