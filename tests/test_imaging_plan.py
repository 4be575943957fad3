"""imaging.plan: every resize mode at the photo's exact aspect ratio, the padded shape inference runs at, and
the inference-memory guard (counting that padded shape; checked against the real OpenVINO runtime's peak
memory)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from deadlines import scaled
from PIL import Image

from conftest import REPO_ROOT, synthetic_photo
from edge_anime.config import ImageSection
from edge_anime.errors import InputError
from edge_anime.imaging import decode, estimate_inference_mb, plan
from edge_anime.imaging.geometry import fit_budget, padded_inference_mb, padded_size
from edge_anime.imaging.target import target_size


def _planned(path: Path, model_multiple: int = 8, **image: object) -> tuple[int, int]:
    """Planned (W, H); ``model_multiple`` is the model's, ``image`` the ImageSection's fields."""
    return _plan(path, model_multiple, **image)[0]


def _plan(path: Path, model_multiple: int = 8, **image: object) -> tuple[tuple[int, int], tuple[int, int]]:
    """(planned (W, H), the padded (W, H) inference runs at)."""
    cfg = ImageSection(**image)
    result = plan(decode(path, cfg), cfg, multiple=model_multiple)
    assert result.rgb.flags.c_contiguous and result.rgb.dtype == np.uint8
    assert result.infer_size is not None
    return result.size, result.infer_size


@pytest.mark.parametrize(("size", "padded"), [((248, 260), (248, 264)), ((640, 426), (640, 432)),
                                              ((333, 201), (336, 208)), ((100, 60), (104, 64))])
def test_keep_is_the_exact_size_and_inference_pads_to_the_multiple(
        make_photo: Callable[..., Path], size: tuple[int, int], padded: tuple[int, int]) -> None:
    """Issue #29: snapping to the multiple made 248x260 come out 248x264; now only the inference pads."""
    assert _plan(make_photo("a.png", *size), resize="keep") == (size, padded)


def test_the_larger_multiple_pads(make_photo: Callable[..., Path]) -> None:
    assert _plan(make_photo("b.png", 99, 58), resize="keep", model_multiple=4) == ((99, 58), (104, 64))  # 8 wins
    assert _plan(make_photo("c.png", 99, 58), resize="keep", model_multiple=4, multiple=4) == ((99, 58), (100, 60))
    assert _plan(make_photo("d.png", 100, 60), resize="keep", model_multiple=16) == ((100, 60), (112, 64))


def test_a_tiny_picture_keeps_its_size_and_runs_at_one_multiple(make_photo: Callable[..., Path]) -> None:
    assert _plan(make_photo("tiny.png", 3, 2), resize="keep", model_multiple=4, multiple=4) == ((3, 2), (4, 4))
    assert padded_size((2, 12), 4) == (4, 12) and padded_size((13, 1), 8) == (16, 8)


def test_max_side_shrinks_and_never_enlarges(make_photo: Callable[..., Path]) -> None:
    assert _planned(make_photo("wide.png", 300, 200), resize="max_side", max_side=128) == (128, 85)  # 85.3
    assert _planned(make_photo("tall.jpg", 200, 300), resize="max_side", max_side=128) == (85, 128)
    assert _planned(make_photo("odd.png", 333, 201), resize="max_side", max_side=100) == (100, 60)   # 60.4
    assert _planned(make_photo("small.png", 64, 48), resize="max_side", max_side=128) == (64, 48)


def test_fixed_is_exact_width_by_height(make_photo: Callable[..., Path]) -> None:
    assert _planned(make_photo("a.png", 300, 200), resize="fixed", fixed="96x64") == (96, 64)
    assert _planned(make_photo("b.png", 30, 20), resize="fixed", fixed=[64, 96]) == (64, 96)


def test_center_square_crops_the_middle(tmp_path: Path) -> None:
    stripes = np.zeros((80, 160, 3), np.uint8)
    stripes[:, :40] = (255, 0, 0)
    stripes[:, 40:120] = (0, 200, 0)
    stripes[:, 120:] = (0, 0, 255)
    Image.fromarray(stripes).save(tmp_path / "s.png")
    cfg = ImageSection(resize="center_square", center_square=32)
    result = plan(decode(tmp_path / "s.png", cfg), cfg, multiple=8)
    assert result.size == (32, 32) and result.restore_size == (80, 80)
    assert np.abs(result.rgb.astype(int) - (0, 200, 0)).max() <= 2  # only the green middle is left


def test_center_square_enlarges_small_faces(make_photo: Callable[..., Path]) -> None:
    assert _planned(make_photo("face.jpg", 40, 50), resize="center_square", center_square=64) == (64, 64)


def test_alpha_is_resized_alongside(tmp_path: Path) -> None:
    rgba = synthetic_photo(200, 100).convert("RGBA")
    alpha = np.full((100, 200), 255, np.uint8)
    alpha[:, :100] = 0
    rgba.putalpha(Image.fromarray(alpha))
    rgba.save(tmp_path / "t.png")
    cfg = ImageSection(resize="max_side", max_side=64)
    result = plan(decode(tmp_path / "t.png", cfg), cfg, multiple=8)
    assert result.alpha is not None and result.alpha.shape == (32, 64)
    assert (result.alpha[:, :28] == 0).all() and (result.alpha[:, 36:] == 255).all()


def test_over_budget_downscales_keeping_aspect(make_photo: Callable[..., Path]) -> None:
    cfg = ImageSection(resize="keep", memory_budget_mb=100)
    path = make_photo("big.png", 800, 600)
    result = plan(decode(path, cfg), cfg, multiple=8)
    width, height = result.size
    assert result.infer_size == padded_size(result.size, 8)
    assert padded_inference_mb((width, height), 8) <= 100 < padded_inference_mb((width + 8, height + 8), 8)
    assert abs(width / height - 800 / 600) < 0.01  # the aspect to the pixel, not to the multiple
    assert result.restore_size == (800, 600)


def test_over_budget_refused_names_file_and_key(make_photo: Callable[..., Path]) -> None:
    cfg = ImageSection(resize="keep", memory_budget_mb=100, over_budget="refuse")
    path = make_photo("big.png", 800, 600)
    with pytest.raises(InputError) as info:
        plan(decode(path, cfg), cfg, multiple=8)
    assert info.value.stage == "plan" and str(path) in str(info.value)
    assert "image.memory_budget_mb=100" in str(info.value) and "800x600" in str(info.value)


def test_a_24_megapixel_photo_fits_a_small_box() -> None:
    """6000 x 4000 at `keep` with the default 1 GB budget: planned under budget, aspect kept."""
    cfg = ImageSection(resize="keep")
    width, height = target_size((6000, 4000), cfg, multiple=8)  # type: ignore[misc]
    assert estimate_inference_mb(6000, 4000) > 20_000
    assert padded_inference_mb((width, height), 8) <= cfg.memory_budget_mb
    assert abs(width / height - 1.5) < 0.005 and width > 1000
    assert fit_budget((6000, 4000), 1, multiple=8) is None


@pytest.mark.slow
def test_budget_estimate_holds_on_the_real_runtime(random_ir: Path) -> None:
    """Compile and run the real IR at the size the guard picks for a 300 MB budget, f32 (the worst case),
    in a fresh process: its peak memory growth stays within the budget."""
    budget_mb = 300
    planned = target_size((4000, 3000), ImageSection(resize="keep", memory_budget_mb=budget_mb), multiple=8)
    assert planned is not None
    width, height = padded_size(planned, 8)  # what runs
    script = textwrap.dedent(f"""
        import numpy as np, openvino as ov, psutil
        def peak_kb():  # VmHWM: unlike ru_maxrss, not inherited from the parent (pytest) across exec
            return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
        core = ov.Core()
        model = core.read_model({str(random_ir / "model.xml")!r})
        model.reshape({{model.input(0): ov.PartialShape([1, {height}, {width}, 3])}})
        image = np.random.default_rng(0).integers(0, 256, (1, {height}, {width}, 3), dtype=np.uint8)
        before_kb = psutil.Process().memory_info().rss / 1024
        compiled = core.compile_model(model, "CPU", {{"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
                                                      "INFERENCE_PRECISION_HINT": "f32"}})
        compiled.create_infer_request().infer({{0: image}})
        print((peak_kb() - before_kb) / 1024)
    """)
    grown_mb = float(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                                    cwd=REPO_ROOT, timeout=scaled(300)).stdout.split()[-1])
    assert grown_mb <= budget_mb, (width, height, grown_mb)
    assert grown_mb > 0.5 * (estimate_inference_mb(width, height) - 56), "estimate far too pessimistic"
