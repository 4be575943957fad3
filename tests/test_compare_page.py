"""benchmarks/compare.py BEFORE AFTER: the blind rating page, built from synthetic photos and outputs in tmp_path.

Why these checks: the page is only worth something if a rater cannot tell which folder is which (no folder
name in it, the key kept apart), if the key says truly which letter is which, if a crop is the output's own
pixels (a resampled crop would judge the resampler, not the style), and if a seed gives the same page again.
No ../shared and no OpenVINO: the face detector is replaced by a function that returns one known face.
"""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from PIL import Image

from edge_anime.faces.detect import Face

REPO = Path(__file__).resolve().parents[1]
OLD, NEW = "run_old_zq81", "run_new_kx47"  # folder names the page must never show
FACE_PHOTO_SIZE = (240, 200)  # (w, h) of the one photo the stand-in detector finds a face in


def load_compare() -> ModuleType:
    """benchmarks/compare.py as a module (benchmarks/ is not a package; the script puts itself on sys.path)."""
    if "bench_compare" in sys.modules:
        return sys.modules["bench_compare"]
    spec = importlib.util.spec_from_file_location("bench_compare", REPO / "benchmarks" / "compare.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_compare"] = module
    spec.loader.exec_module(module)
    return module


def scene_photo(rng: np.random.Generator) -> np.ndarray:
    """320x256: flat light-blue sky over the top half (a block centred in the top third is all sky), leafy green
    noise at the bottom, grey noise between."""
    rgb = rng.integers(60, 200, (256, 320, 3)).astype(np.uint8)
    rgb[:136] = (150, 190, 235)
    leaves = rng.integers(0, 90, (96, 320))
    rgb[160:] = np.stack([leaves // 2, 80 + leaves, leaves // 3], -1).astype(np.uint8)
    return rgb


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    """photos/ (p1 with a face, p10 whose outputs sort before p1's, scene, lonely with one output only) and the
    two output folders: OLD at twice the size (every pixel doubled), NEW inverted at the photo's size."""
    rng = np.random.default_rng(3)
    photos, old, new = tmp_path / "photos", tmp_path / OLD, tmp_path / NEW
    for folder in (photos, old, new):
        folder.mkdir()
    pictures = {"p1": rng.integers(0, 255, (FACE_PHOTO_SIZE[1], FACE_PHOTO_SIZE[0], 3)).astype(np.uint8),
                "p10": rng.integers(0, 255, (150, 180, 3)).astype(np.uint8), "scene": scene_photo(rng),
                "lonely": rng.integers(0, 255, (140, 140, 3)).astype(np.uint8)}
    for stem, rgb in pictures.items():
        Image.fromarray(rgb).save(photos / f"{stem}.jpg", quality=95)
        Image.fromarray(rgb.repeat(2, 0).repeat(2, 1)).save(old / f"{stem}_toon.jpg", quality=90)
        if stem != "lonely":
            Image.fromarray(255 - rgb).save(new / f"{stem}_cel.jpg", quality=90)
    return photos, old, new


def fake_faces(rgb: np.ndarray) -> list[Face]:
    """One face, eyes 60 px apart, in the photo of FACE_PHOTO_SIZE; none elsewhere."""
    if rgb.shape[:2] != FACE_PHOTO_SIZE[::-1]:
        return []
    marks = np.array([[90, 95], [150, 95], [120, 125], [120, 150], [70, 105], [170, 105]], np.float32)
    return [Face((60.0, 55.0, 180.0, 175.0), marks, 0.9)]


def test_blind_page_key_crops_and_seed(folders: tuple[Path, Path, Path], tmp_path: Path) -> None:
    compare = load_compare()
    photos, old, new = folders
    out = tmp_path / "page"
    key = compare.build_page(old, new, photos, out, seed=11, find_faces=fake_faces, sheet=True)

    page = (out / "index.html").read_text(encoding="utf-8")
    assert json.loads((out / "key.json").read_text(encoding="utf-8")) == key
    for secret in (OLD, NEW, str(old), "toon", "cel", "before", "after", "seed"):
        assert secret.lower() not in page.lower(), f"the page gives away {secret!r}"
    assert all("before" not in f.name and "after" not in f.name for f in (out / "img").iterdir())
    assert sorted(key["photos"]) == ["p1", "p10", "scene"]  # lonely has an output in one folder only
    assert key["photos"]["p1"]["before_file"].endswith("p1_toon.jpg")  # not p10_toon.jpg, which sorts first
    assert page.count('type="radio"') == 3 * 2 * 5
    assert set(key["photos"]["p1"]["crops"]) == {"eyes", "skin", "hair"}
    assert set(key["photos"]["scene"]["crops"]) == {"sky", "foliage"}
    assert (out / "sheet.jpg").is_file()

    for stem, entry in key["photos"].items():
        assert {entry["A"], entry["B"]} == {"BEFORE", "AFTER"}
        files = {"photo": entry["photo"], "BEFORE": entry["before_file"], "AFTER": entry["after_file"]}
        for kind, boxes in entry["crops"].items():
            for col, box in boxes.items():
                source = files[col if col == "photo" else entry[col]]
                with Image.open(source) as im:
                    expected = np.asarray(im.convert("RGB").crop(tuple(box)))
                with Image.open(out / "img" / f"{entry['section']}_{kind}_{col}.png") as im:
                    got = np.asarray(im.convert("RGB"))
                assert 128 <= got.shape[0] <= 192 and 128 <= got.shape[1] <= 192, (stem, kind, col, got.shape)
                np.testing.assert_array_equal(got, expected, err_msg=f"{stem} {kind} {col}")
    eyes = key["photos"]["p1"]["crops"]["eyes"]
    old_side = "A" if key["photos"]["p1"]["A"] == "BEFORE" else "B"
    left, top, right, bottom = eyes[old_side]  # centred on the eyes' midpoint (120, 95), doubled in OLD
    assert (left + right) / 2 == pytest.approx(240, abs=1) and (top + bottom) / 2 == pytest.approx(190, abs=1)
    assert (right - left, bottom - top) == (192, 144)  # 2.4 x 60 x 2 clamped to 192, 1.2 x 60 x 2

    again = compare.build_page(old, new, photos, tmp_path / "again", seed=11, find_faces=fake_faces)
    assert {s: e["A"] for s, e in again["photos"].items()} == {s: e["A"] for s, e in key["photos"].items()}
    stems = [f"p{i}" for i in range(12)]
    assert compare.a_is_before(stems, 11) == compare.a_is_before(stems, 11)
    assert len({tuple(compare.a_is_before(stems, seed).values()) for seed in range(6)}) > 1
    assert len(set(compare.a_is_before(stems, 11).values())) == 2  # both orders occur on one page
