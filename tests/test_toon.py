"""The bundled "toon" style: its target, its training script, and the shipped checkpoint/IR pair.

The shipped IR is what every fresh install serves, so it is checked against a rebuild from the shipped
checkpoint (a stale or hand-edited IR would otherwise go unnoticed) and run at the sizes users send.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
TOON_DIR = REPO_ROOT / "models" / "toon"
CHECKPOINT = REPO_ROOT / "training" / "checkpoints" / "toon.pt"  # models/ holds what the runtime reads
REFERENCE_KEYS = REPO_ROOT.parent / "shared" / "reference" / "animeganv2_state_dict.tsv"
MODELS_BUDGET_BYTES = 24 * 1024 * 1024  # issue 27: two styles, each FP16 + INT8 + the tiling pair
VERIFY_TOLERANCE_DB = 3.0  # fp16 rebuilds differ by rounding; a different model differs by tens of dB
# Above this, IR vs torch differ by ~1/100 of a u8 level RMS; thread scheduling alone moves it by a few dB.
SAME_IN_U8_DB = 60.0
REBUILD_MATCH_FLOOR_DB = 45.0  # shipped vs rebuilt IR outputs, u8 PSNR
MARGIN_OVER_FLAT_DB = 6.0  # shipped model vs its target, over a flat mean-colour picture (now ~9 dB)


def _step_image(size_px: int = 64) -> np.ndarray:
    """Left half dark blue, right half light orange, plus noise: one strong edge and texture to flatten."""
    rng = np.random.default_rng(0)
    img = np.empty((size_px, size_px, 3), np.float32)
    img[:, : size_px // 2] = (40, 60, 140)
    img[:, size_px // 2 :] = (230, 170, 90)
    img += rng.normal(0, 8, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


# --- target ---------------------------------------------------------------------------------------

def test_target_inks_edges_and_flattens_texture() -> None:
    from training.target import toonify

    photo = _step_image()
    toon = toonify(photo)
    assert toon.shape == photo.shape and toon.dtype == np.uint8
    assert np.array_equal(toon, toonify(photo)), "the target must be deterministic"
    lum = toon.astype(np.float32).mean(axis=2)
    edge_band = lum[8:-8, 28:36]
    flat_right = lum[8:-8, 44:56]
    assert edge_band.min() < 0.5 * flat_right.mean(), "no dark ink line along the strong edge"
    assert flat_right.std() < 0.5 * photo[8:-8, 44:56].astype(np.float32).mean(axis=2).std(), "texture not flattened"


def test_target_rejects_non_rgb_u8() -> None:
    from training.target import toonify

    with pytest.raises(ValueError, match="RGB uint8"):
        toonify(np.zeros((8, 8), np.uint8))


# --- training script ------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_a_few_training_steps_write_a_loadable_checkpoint(tmp_path: Path, precision: str) -> None:
    torch = pytest.importorskip("torch")
    from edge_anime_converters.generator import Generator
    from training.train_toon import train

    out = tmp_path / "toon.pt"
    summary = train(workdir=tmp_path / "run", steps=3, budget_min=5.0, crop_px=32, batch=2, lr=1e-3, seed=7,
                    threads=1, ckpt_every=2, preview_every=2, pool_cache=tmp_path / "pool.npz", out=out,
                    resume=False, pool_kwargs={"names": ["chelsea"], "long_sides_px": (64,), "jitters": 2},
                    precision=precision, ink_weight=3.0)
    assert summary["steps"] == 3 and np.isfinite(summary["ema_l1"])
    assert (tmp_path / "run" / "preview.png").is_file() and (tmp_path / "pool.npz").is_file()
    state = torch.load(out, weights_only=True)
    assert all(v.dtype == torch.float16 and v.is_contiguous() for v in state.values())  # channels-last undone
    Generator(upsample_align=True).load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    assert "done:" in (tmp_path / "run" / "train.log").read_text()


def test_scene_jitter_casts_and_flattens_reproducibly() -> None:
    from training.data import scene_jitter

    rng_photo = np.random.default_rng(0)
    photo = rng_photo.integers(0, 256, (32, 48, 3), dtype=np.uint8)
    first = scene_jitter(photo, np.random.default_rng(1))
    assert first.shape == photo.shape and first.dtype == np.uint8
    assert np.array_equal(first, scene_jitter(photo, np.random.default_rng(1)))  # seeded: same pool every run
    assert first.astype(np.float32).std(axis=(0, 1)).mean() < photo.astype(np.float32).std(axis=(0, 1)).mean()


def test_ink_weight_marks_the_targets_dark_lines_only() -> None:
    torch = pytest.importorskip("torch")
    from training.train_toon import ink_weight_map

    target = torch.full((1, 3, 16, 16), 0.5)
    target[..., :, 8] = -1.0  # a one-pixel black line on grey, in the generator's [-1, 1] units
    weight = ink_weight_map(target, 3.0)
    assert torch.allclose(weight[..., :, 8], torch.tensor(4.0))  # 1 + the full ink weight on the line
    assert torch.all(weight[..., :, :6] == 1.0) and torch.all(weight[..., :, 11:] == 1.0)  # flat grey: 1


@pytest.mark.slow  # ~40 s on a loaded box: training's refit, whole images through torch
def test_output_refit_lowers_l1_on_whole_images() -> None:
    pytest.importorskip("torch")
    from edge_anime_converters.generator import seeded_random_generator
    from training.data import build_pool
    from training.refit import refit_output_layer

    pool = build_pool(seed=3, names=["coffee"], long_sides_px=(96,), jitters=1)
    before, after = refit_output_layer(seeded_random_generator(5), pool, seed=3, long_side_px=96)
    assert after < before


# --- shipped model --------------------------------------------------------------------------------

shipped = pytest.mark.skipif(not (TOON_DIR / "model.xml").is_file(), reason=f"no shipped toon IR in {TOON_DIR}")


@shipped
def test_shipped_checkpoint_has_the_published_keys() -> None:
    torch = pytest.importorskip("torch")
    from edge_anime_converters.generator import Generator

    state = torch.load(CHECKPOINT, weights_only=True)
    Generator(upsample_align=True).load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    if REFERENCE_KEYS.is_file():
        rows = [ln.split("\t") for ln in REFERENCE_KEYS.read_text().splitlines()
                if ln.strip() and not ln.startswith("#")]
        published = {key: shape for key, shape in rows}
        ours = {k: "x".join(map(str, v.shape)) for k, v in state.items()}
        assert ours == published


@shipped
def test_models_folder_stays_under_budget() -> None:
    total = sum(p.stat().st_size for p in (REPO_ROOT / "models").rglob("*") if p.is_file())
    assert total < MODELS_BUDGET_BYTES, f"models/ ships {total / 2**20:.1f} MiB"


@shipped
def test_no_bundled_picture_shows_the_shared_photos() -> None:
    """An INT8 variant is verified on ../shared/photos (faces of real people among them), which are read where
    they are and never copied into the repository: a bundled style keeps those figures, not their pictures."""
    checked = 0
    for manifest_path in sorted((REPO_ROOT / "models").glob("*/manifest.yaml")):
        manifest = yaml.safe_load(manifest_path.read_text(encoding="utf-8"))
        for name, entry in [("default", manifest), *(manifest.get("variants") or {}).items()]:
            verification = entry.get("verification") or {}
            if str(verification.get("image_source", "")).startswith("photos"):
                assert verification["per_image"], f"{manifest_path}: {name} lost its figures"
                assert verification.get("side_by_side") is None, f"{manifest_path}: {name}"
                checked += 1
    assert checked >= 3  # toon's int8 and int8_qat, cel's int8
    assert not list((REPO_ROOT / "models").glob("*/verify_int8*.png"))


@shipped
@pytest.mark.parametrize("hw", [(256, 256), (512, 512), (352, 480)])
def test_shipped_ir_runs_at_any_allowed_size(hw: tuple[int, int]) -> None:
    import openvino as ov
    from skimage import data

    from training.target import resize_long_side

    photo = resize_long_side(data.chelsea(), max(hw) + 8)[: hw[0], : hw[1]]
    pad = ((0, hw[0] - photo.shape[0]), (0, hw[1] - photo.shape[1]), (0, 0))
    photo = np.ascontiguousarray(np.pad(photo, pad, mode="reflect"))
    model = ov.Core().read_model(TOON_DIR / "model.xml")
    model.reshape({0: [1, *hw, 3]})
    out = ov.Core().compile_model(model, "CPU")({0: photo[None]})[0]
    assert out.shape == (1, *hw, 3) and out.dtype == np.uint8
    assert float(np.abs(out[0].astype(np.int16) - photo).mean()) > 0.0, "the model must change the picture"


@shipped
@pytest.mark.slow
def test_shipped_model_follows_its_target_far_better_than_a_flat_picture() -> None:
    """A guard against shipping untrained or broken weights, not a quality bar (docs/toon.md has those).

    Against the target the model still scores below the unmodified photo on PSNR (ink a pixel off costs
    more than no ink), so the honest floor is relative: it must beat the target's own mean colour by a wide
    margin.
    """
    import openvino as ov
    from skimage import data
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    from training.target import STYLES, TUNED_LONG_SIDE_PX, resize_long_side, toonify

    photo = resize_long_side(data.astronaut(), TUNED_LONG_SIDE_PX)
    target = toonify(photo, params=STYLES["toon"])
    pred = ov.Core().compile_model(TOON_DIR / "model.xml", "CPU")({0: photo[None]})[0][0]
    flat = np.broadcast_to(target.reshape(-1, 3).mean(axis=0).round().astype(np.uint8), target.shape)
    psnr = peak_signal_noise_ratio(target, pred, data_range=255)
    flat_psnr = peak_signal_noise_ratio(target, flat, data_range=255)
    assert psnr > flat_psnr + MARGIN_OVER_FLAT_DB, f"toon model {psnr:.1f} dB vs flat colour {flat_psnr:.1f} dB"
    assert structural_similarity(target, pred, channel_axis=2, data_range=255) > structural_similarity(
        target, flat, channel_axis=2, data_range=255)


@shipped
@pytest.mark.slow
def test_rebuilt_ir_matches_the_shipped_one(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import openvino as ov
    from skimage import data
    from skimage.metrics import peak_signal_noise_ratio

    from edge_anime_converters.convert import convert
    from training.target import resize_long_side

    shipped_manifest = yaml.safe_load((TOON_DIR / "manifest.yaml").read_text(encoding="utf-8"))
    # One synthetic image at each of the shipped verification's sizes: the torch reference of the full-width
    # generator is this test's cost (~4 s a 352x480 image on one thread of a quiet core), and a conversion
    # error is systematic (every image shows it); the photo below is the IR-against-IR check.
    rebuilt_dir = convert(CHECKPOINT, name="toon", precision="fp16", output_dir=tmp_path, two_pass=False,
                          verify_limit=1)
    rebuilt_manifest = yaml.safe_load((Path(rebuilt_dir) / "manifest.yaml").read_text(encoding="utf-8"))
    assert rebuilt_manifest["source"]["sha256"] == shipped_manifest["source"]["sha256"]
    for key in ("min", "mean"):
        a = shipped_manifest["verification"]["psnr_db"][key]
        b = rebuilt_manifest["verification"]["psnr_db"][key]
        assert abs(a - b) <= VERIFY_TOLERANCE_DB or min(a, b) >= SAME_IN_U8_DB, (
            f"verification psnr_db.{key}: shipped {a}, rebuilt {b}")
    shipped_rows = {(r["image"], tuple(r["size"])): r["psnr_db"] for r in shipped_manifest["verification"]["per_image"]}
    rebuilt_rows = {(r["image"], tuple(r["size"])): r["psnr_db"] for r in rebuilt_manifest["verification"]["per_image"]}
    assert {size for _, size in rebuilt_rows} == {tuple(s) for s in shipped_manifest["verification"]["sizes"]}
    for row, b in rebuilt_rows.items():  # the same image at the same size, image by image
        a = shipped_rows[row]
        assert abs(a - b) <= VERIFY_TOLERANCE_DB or min(a, b) >= SAME_IN_U8_DB, f"{row}: shipped {a}, rebuilt {b}"
    photo = resize_long_side(data.coffee(), 128)[:84, :128]
    core = ov.Core()
    outs = [core.compile_model(Path(d) / "model.xml", "CPU")({0: np.ascontiguousarray(photo)[None]})[0][0]
            for d in (TOON_DIR, rebuilt_dir)]
    psnr = peak_signal_noise_ratio(outs[0], outs[1], data_range=255)
    assert psnr > REBUILD_MATCH_FLOOR_DB, f"shipped vs rebuilt IR: {psnr:.1f} dB"
