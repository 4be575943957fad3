"""The pipeline's decode lanes (issue 28, item 2): a decode its header says is heavy runs on a lane of its own,
so the photos queued behind it are not held up; a scan bomb is refused on the common lane at once. Real
OpenVINO on the seeded-random IR, one decode thread (the 2-core box's "auto"), real progressive JPEGs."""
from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from pathlib import Path

import pytest
from deadlines import scaled
from test_imaging_decode import progressive_jpeg

from conftest import synthetic_photo
from edge_anime import Stylizer
from edge_anime.config import ImageSection
from edge_anime.core.pipeline import Job, JobResult
from edge_anime.errors import InputError
from edge_anime.imaging.decoder import HEAVY_DECODE_MPX, MAX_JPEG_SCANS, decode_cost_mpx

DEADLINE_S = scaled(120.0)


@pytest.fixture
def one_decode_thread(write_config: Callable[..., Path]) -> Iterator[Stylizer]:
    with Stylizer(write_config({"pipeline": {"decode_threads": 1}})) as stylizer:
        yield stylizer


def _png(seed: int) -> bytes:
    buffer = io.BytesIO()
    synthetic_photo(96, 64, seed=seed).save(buffer, "PNG")
    return buffer.getvalue()


def test_photos_behind_a_heavy_decode_are_not_held_up(one_decode_thread: Stylizer) -> None:
    """A 4096 x 4096 progressive JPEG of 100 scans (allowed, 0.7 s to decode on 2 EPYC cores) first, three small
    photos after it: before, the one decode thread gave them its turn only when the big one was decoded."""
    heavy = progressive_jpeg(4096, MAX_JPEG_SCANS)
    assert decode_cost_mpx(Path("heavy.jpg"), ImageSection(), data=heavy) > HEAVY_DECODE_MPX
    big: Future[JobResult] = one_decode_thread.submit(Job(src=Path("heavy.jpg"), dst=None, data=heavy))
    small = [one_decode_thread.submit(Job(src=Path(f"small{i}.png"), dst=None, data=_png(i))) for i in range(3)]
    done, _ = wait(small, timeout=DEADLINE_S)
    assert len(done) == 3 and all(f.result().ok for f in small), [f.result().error for f in done]
    assert not big.done(), "the small photos waited for the heavy decode"
    result = big.result(timeout=DEADLINE_S)
    assert result.ok and result.in_size == (4096, 4096), result.error


def test_a_scan_bomb_is_refused_on_the_common_lane_at_once(one_decode_thread: Stylizer) -> None:
    bomb = progressive_jpeg(2048, 500)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"<image>: a progressive JPEG of more than 100 scans"):
        one_decode_thread.stylize(bomb, timeout=DEADLINE_S)
    assert time.perf_counter() - start < 1.0
    assert one_decode_thread.stylize(synthetic_photo(96, 64)).size == (96, 64)
