"""`edge-anime bench` through the real CLI on tiny real files: the JSON carries images_per_s and the diagnosis.
Timing figures are never asserted beyond being measured (benchmarks are not timed tests)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from deadlines import scaled

from edge_anime.core.pipeline import STAGES
from edge_anime.measure.throughput import percentile

CLI_TIMEOUT_S = scaled(300)  # seconds; a loaded 2-core box, never reached when things work


@pytest.mark.slow
def test_bench_json_has_images_per_s_and_stage_breakdown(write_config: Callable[..., Path],
                                                         make_photo: Callable[..., Path], random_ir: Path,
                                                         tmp_path: Path) -> None:
    photos = tmp_path / "photos"
    for i, size in enumerate([(96, 64), (64, 96), (80, 80)]):
        make_photo(f"p{i}.jpg", *size, seed=i, folder=photos)
    (photos / "notes.txt").write_text("not an image", encoding="utf-8")  # skipped: not an image extension
    report_path = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "edge_anime", "bench", str(photos), "--config", str(write_config()),
         "--style", str(random_ir / "model.xml"), "--max-side", "64", "--json", str(report_path),
         "--warmup", "0", "--repeat", "2"],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["images_per_s"] > 0 and report["ok"] == 3 and report["failed"] == 0
    assert len(report["passes_images_per_s"]) == 2
    assert set(STAGES) <= set(report["stages_s_per_image"])
    assert report["latency_s"]["p95"] >= report["latency_s"]["p50"] > 0
    assert report["peak_rss_mb"] > 0 and report["cpu_utilisation_pct"] > 0 and 0 < report["infer_busy_pct"] <= 101
    assert report["plugin"]["effective"]["NUM_STREAMS"] >= 1
    assert "images/s" in proc.stdout and "stage" in proc.stdout


def test_bench_refuses_a_folder_without_images(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "edge_anime", "bench", str(tmp_path)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 78 and "no images" in proc.stderr


def test_percentile_is_nearest_rank() -> None:
    values = [0.1 * i for i in range(1, 21)]
    assert percentile(values, 50) == values[9] and percentile(values, 95) == values[18]
    assert percentile([2.0], 95) == 2.0


def test_timed_pass_keeps_the_input_format_with_format_same(write_config: Callable[..., Path],
                                                           make_photo: Callable[..., Path],
                                                           tmp_path: Path) -> None:
    """bench writes what `run` would: with ``output.format: same`` a PNG input gives a PNG output."""
    from edge_anime.core.stylizer import Stylizer
    from edge_anime.measure.throughput import timed_pass

    files = [make_photo("a.png", 64, 48), make_photo("b.jpg", 48, 64)]
    out = tmp_path / "out"
    out.mkdir()
    with Stylizer(write_config({"image": {"max_side": 64}, "output": {"format": "same"}})) as stylizer:
        figures = timed_pass(stylizer, files, out)
    assert figures.ok == 2
    assert [r.job.dst.suffix for r in figures.results] == [".png", ".jpg"]
    assert all(r.out_size is not None for r in figures.results)


@pytest.mark.slow
def test_bench_counts_the_cores_it_is_pinned_to(write_config: Callable[..., Path], make_photo: Callable[..., Path],
                                                 random_ir: Path, tmp_path: Path) -> None:
    """Under taskset (a container cpuset, systemd CPUAffinity=) the CPU share and the thread pools follow
    the affinity mask, not the machine's core count."""
    photos = tmp_path / "photos"
    make_photo("p.jpg", 64, 64, seed=1, folder=photos)
    report_path = tmp_path / "bench.json"
    first_cpu = min(os.sched_getaffinity(0))
    proc = subprocess.run(
        [sys.executable, "-m", "edge_anime", "bench", str(photos), "--config", str(write_config()),
         "--style", str(random_ir / "model.xml"), "--json", str(report_path), "--warmup", "0"],
        capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
        preexec_fn=lambda: os.sched_setaffinity(0, {first_cpu}))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert report["cores"] == 1
    assert report["pipeline"]["decode_threads"] == report["pipeline"]["encode_threads"] == 1
    assert report["plugin"]["effective"]["NUM_STREAMS"] == 1
