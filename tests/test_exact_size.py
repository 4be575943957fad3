"""Issue #29, pad inside, exact size out: photos and clips come out at the exact size their resize mode asks
for, at the photo's own aspect ratio. The network runs them padded up to the multiple, the padding is cropped
off the output, and the compiled shapes stay one per padded size. Real OpenVINO on the quarter-width
seeded-random IR (``narrow_config``): sizes, padding and shapes are the graph's, the same at any width, and the
full width's inference on the issue's 640 x 426 photo was most of this file's time (issue 44)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from deadlines import scaled
from PIL import Image

from conftest import run_pipeline, synthetic_photo
from edge_anime.config import Config, load_config
from edge_anime.core.pipeline import Job
from edge_anime.imaging.geometry import padded_size
from edge_anime.imaging.tiling import PAD_MODE, pad_to
from edge_anime.models import resolve_model
from edge_anime.runtime.engine import Engine

DEADLINE_S = scaled(120.0)  # seconds; generous for a loaded 2-core box, never reached when things work
ISSUE_SIZES = [(248, 260), (640, 426), (333, 201)]  # (W, H): the issue's two, and odd on both sides


def _engine(config: Config) -> Engine:
    return Engine(resolve_model(config.model.path, search_dirs=config.model.dirs), config.device)


def test_photos_come_out_at_exactly_their_size(narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    """``resize: keep``: the output is the input's size to the pixel; one compiled shape per padded size."""
    # room for all three shapes at f32 (the memory bound would otherwise drop the 640x432 one's neighbours)
    config = load_config(narrow_config({"image": {"resize": "keep"}, "device": {"shape_cache_mb": 4096}}))
    engine = _engine(config)
    jobs = []
    for width, height in ISSUE_SIZES:
        src = tmp_path / f"p{width}x{height}.jpg"
        synthetic_photo(width, height, seed=width).save(src, quality=92)
        jobs.append(Job(src=src, dst=tmp_path / f"out{width}x{height}.png"))
    results = run_pipeline(engine, config, jobs, deadline_s=DEADLINE_S)
    for (width, height), result in zip(ISSUE_SIZES, results):
        assert result.ok, result.error
        assert result.out_size == result.in_size == (width, height)
        with Image.open(result.job.dst) as written:
            assert written.size == (width, height)
    padded = sorted((h, w) for w, h in (padded_size(s, 8) for s in ISSUE_SIZES))
    assert sorted(engine.cached_shapes()) == padded  # [(208, 336), (264, 248), (432, 640)]


def test_max_side_and_upscale_keep_the_aspect_and_the_original_size(narrow_config: Callable[..., Path],
                                                                    tmp_path: Path) -> None:
    src = tmp_path / "odd.jpg"
    synthetic_photo(333, 201, seed=2).save(src, quality=92)
    config = load_config(narrow_config({"image": {"resize": "max_side", "max_side": 100}}))
    upscale = load_config(narrow_config({"image": {"resize": "max_side", "max_side": 100,
                                                  "upscale_to_original": True}}, name="up.yaml"))
    small = run_pipeline(_engine(config), config, [Job(src=src, dst=tmp_path / "small.jpg")])[0]
    big = run_pipeline(_engine(upscale), upscale, [Job(src=src, dst=tmp_path / "big.jpg")])[0]
    assert small.out_size == (100, 60)  # 333:201 at 100 px is 100 x 60.4; snapped to 8 it was 100 x 64
    assert big.out_size == (333, 201)


def test_the_crop_takes_off_exactly_the_padding(narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    """A picture with a distinctive border (a one-pixel magenta frame) through the pipeline is, pixel for
    pixel, the network's output on the padded picture with the padding cut off: not shifted by a pixel, and
    its last row and column are the picture's border, not the padding's."""
    config = load_config(narrow_config({"image": {"resize": "keep", "tone": "off", "palette": "off"}}))
    engine = _engine(config)
    width, height = 333, 201
    rgb = np.array(synthetic_photo(width, height, seed=7))
    rgb[:, -1] = rgb[-1, :] = rgb[:, 0] = rgb[0, :] = (255, 0, 255)
    src = tmp_path / "framed.png"
    Image.fromarray(rgb).save(src)
    result = run_pipeline(engine, config, [Job(src=src, dst=None)])[0]
    assert result.ok, result.error
    assert result.image is not None
    out = np.asarray(result.image)
    fed = pad_to(rgb, 208, 336)
    assert fed.shape == (208, 336, 3) and np.array_equal(fed[:height, :width], rgb)
    if PAD_MODE == "edge":  # the padding repeats the frame
        assert (fed[height:, :] == (255, 0, 255)).all() and (fed[:, width:] == (255, 0, 255)).all()
    reference = engine.infer(fed)
    assert out.shape == (height, width, 3)
    assert np.array_equal(out, reference[:height, :width])
    assert not np.array_equal(out, reference[1:height + 1, 1:width + 1])  # a crop one pixel off is not it


@pytest.mark.slow
def test_a_clip_comes_out_at_exactly_its_size_in_one_shape(narrow_config: Callable[..., Path], tmp_path: Path) -> None:
    """The issue's clip frame, 640x426 (it came out 640x424), and 248x260: every frame pads the same, so one
    static shape per clip."""
    pytest.importorskip("av", reason="PyAV is the video extra: pip install -e '.[video]'")
    from test_video import make_clip, read_clip

    from edge_anime import Stylizer

    for width, height in [(640, 426), (248, 260)]:
        src = make_clip(tmp_path / f"c{width}.mp4", seconds=0.25, audio=None, size=(width, height))
        dst = tmp_path / f"c{width}_out.mp4"
        with Stylizer(narrow_config({"image": {"resize": "keep"}}, name=f"c{width}.yaml")) as stylizer:
            result = stylizer.run_clip(src, dst)
            shapes = stylizer.engine.cached_shapes()
        assert result.ok, result.error
        assert result.out_size == (width, height) and read_clip(dst)["size"] == (width, height)
        padded_w, padded_h = padded_size((width, height), 8)
        assert shapes == [(padded_h, padded_w)]
