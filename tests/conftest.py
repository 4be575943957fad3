"""Shared fixtures: one seeded-random checkpoint and its IR per test session, one OpenVINO model cache per
test session, real photos when present.

Converting costs a few seconds of the two cores, so it happens once per session; tests copy the model
folder when they need to damage it. Compiling costs about as much again per shape, so every config the
fixtures write (and every subprocess started on one) points ``device.cache_dir`` at one session folder:
each shape of each model compiles once per run, not once per test.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import struct
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from deadlines import scaled
from PIL import Image

# torch's intra-op threads (OpenMP) wait at every op's barrier for threads the box has not scheduled: with two
# xdist workers of two threads each on two cores, or any load beside them, a 40 x 56 forward pass of the generator
# took 1.8 s instead of 0.17 s with one thread (measured at a load of 5). One thread for each test process and the
# children it starts (they inherit the environment), set before any test imports torch; OpenVINO threads with
# TBB and ignores it. A value the person running the tests set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_PHOTOS = REPO_ROOT.parent / "shared" / "photos"
SEED = 1234


@pytest.fixture(scope="session")
def shared_photos() -> Path:
    """The real evaluation photos; tests that need them skip (with the reason) where ../shared is missing."""
    if not SHARED_PHOTOS.is_dir() or not any(SHARED_PHOTOS.glob("*.jpg")):
        pytest.skip(f"real photos not available at {SHARED_PHOTOS} (../shared is missing on this machine)")
    return SHARED_PHOTOS


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Path]) -> Path:
    """``build(folder)``'s result, built once for the whole run: under ``pytest -n 2`` the session fixtures below
    were built by each worker (two conversions, two tiling pairs of a minute each), now the first worker to ask
    builds into a folder beside both workers' temp folders, under a lock, and the other waits and reuses it.
    What is built is read-only to the tests (they copy a model folder to damage it)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # pytest-N/, shared by pytest-N/popen-gw0 and popen-gw1
    folder, record = root / f"run-{name}", root / f"run-{name}.built"
    with open(root / f"run-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.is_file():
            return Path(record.read_text(encoding="utf-8"))
        folder.mkdir(exist_ok=True)
        result = build(folder)
        record.write_text(str(result), encoding="utf-8")
        return result


@pytest.fixture(scope="session")
def seeded_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dict in the published checkpoint format, with seeded random weights."""
    torch = pytest.importorskip("torch")
    from edge_anime_converters.generator import seeded_random_generator

    def build(folder: Path) -> Path:
        path = folder / "random_gen.pt"
        torch.save(seeded_random_generator(SEED).state_dict(), path)
        return path

    return once_per_run(tmp_path_factory, "ckpt", build)


# Quarter-width (Generator(width=0.25)): the same graph, layers and op types as the published shape at ~1/16 of
# its multiply-adds. Tests whose claim is about the graph and the pipeline, not the model's size, use it where
# the full width costs minutes: an INT8 quantization's statistics over 256 px calibration photos took 25 s of
# the two cores at width 1.0 and 3 s at 0.25 (issue 44).
NARROW_WIDTH = 0.25


@pytest.fixture(scope="session")
def narrow_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dict like ``seeded_checkpoint``'s at ``NARROW_WIDTH`` (the converter reads the width from it)."""
    torch = pytest.importorskip("torch")
    from edge_anime_converters.generator import seeded_random_generator

    def build(folder: Path) -> Path:
        path = folder / "narrow_gen.pt"
        torch.save(seeded_random_generator(SEED, width=NARROW_WIDTH).state_dict(), path)
        return path

    return once_per_run(tmp_path_factory, "narrow-ckpt", build)


@pytest.fixture(scope="session")
def random_ir(tmp_path_factory: pytest.TempPathFactory, seeded_checkpoint: Path) -> Path:
    """An fp32 model folder (model.xml/.bin + manifest.yaml) converted from ``seeded_checkpoint``."""
    from edge_anime_converters.convert import convert

    # Two small synthetic images at one size: the fixture needs a real IR, not the full verification that
    # tests/test_convert.py covers; this keeps the run's one conversion to a few seconds.
    return once_per_run(tmp_path_factory, "models", lambda out: convert(
        seeded_checkpoint, name="randgen", precision="fp32", output_dir=out, verify_limit=2,
        verify_sizes_hw=((64, 96),), two_pass=False))


@pytest.fixture(scope="session")
def narrow_ir(tmp_path_factory: pytest.TempPathFactory, narrow_checkpoint: Path) -> Path:
    """Like ``random_ir`` (fp32, named randgen), converted from ``narrow_checkpoint``: for tests whose claim is
    about what runs around the style (faces found, cropped, restyled and pasted back; a clip's frames; the
    service's counts), not the style's own pixels, on pictures large enough that the full width's inference was
    most of their time (issue 44)."""
    from edge_anime_converters.convert import convert

    return once_per_run(tmp_path_factory, "narrow-models", lambda out: convert(
        narrow_checkpoint, name="randgen", precision="fp32", output_dir=out, verify_limit=2,
        verify_sizes_hw=((64, 96),), two_pass=False))


# Session fixtures whose first use costs more than a few seconds of the two cores: every test that needs one
# (directly or through another fixture) is in the slow tier, so `pytest -m "not slow"` never builds it.
SLOW_FIXTURES = {"two_pass_ir": "the tiling pair's conversion measures its margins on the torch graph: ~10 s"}


# In CI (.ci/run sets it) a skip is a failure: a test skipped for a missing extra (starlette, av, torch), tool
# (chromium, curl, ffmpeg) or ../shared would otherwise hide the coverage it stands for, and CI would be green
# with a part of the suite never run (issue 44). A developer's box without an extra still skips, with its reason.
REQUIRE_EXTRAS = os.environ.get("EDGE_ANIME_REQUIRE_EXTRAS") == "1"
REQUIRED_SKIP = ("skipped where every extra, tool and ../shared must be present (EDGE_ANIME_REQUIRE_EXTRAS=1): "
                 "install what it needs; the skip said: ")


def _skip_reason(longrepr: object) -> str:
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if REQUIRE_EXTRAS and report.skipped and not hasattr(report, "wasxfail") and not item.get_closest_marker("box"):
        report.outcome = "failed"
        report.longrepr = REQUIRED_SKIP + _skip_reason(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    """A module that skips itself whole (``pytest.importorskip`` at its top) is a failure too in CI."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if REQUIRE_EXTRAS and report.skipped:
        report.outcome = "failed"
        report.longrepr = REQUIRED_SKIP + _skip_reason(report.longrepr)


# pytest-timeout's limit on one test (setup, call and teardown), by tier: a fast test takes seconds on an idle
# 2-core box, so one past a minute has hung or belongs in the slow tier; a slow one gets ten. Both are scaled to
# the box as each test starts (tests/deadlines.py), so a loaded box stretches them and a hang still ends. A test
# that needs another limit says @pytest.mark.timeout(...) itself.
FAST_TEST_LIMIT_S = 60.0
SLOW_TEST_LIMIT_S = 600.0


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Give each test its tier's limit, before pytest-timeout's own wrapper reads the ``timeout`` marker. A limit
    asked for by hand (``--timeout``, ``$PYTEST_TIMEOUT``; 0 turns it off, say under a debugger) is left to rule."""
    by_hand = item.config.getoption("timeout", None) is not None or os.environ.get("PYTEST_TIMEOUT")
    if item.get_closest_marker("timeout") is None and not by_hand:
        limit = SLOW_TEST_LIMIT_S if item.get_closest_marker("slow") else FAST_TEST_LIMIT_S
        item.add_marker(pytest.mark.timeout(round(scaled(limit))))
    yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` the tests that need a fixture of ``SLOW_FIXTURES``, wherever they live."""
    for item in items:
        if any(name in SLOW_FIXTURES for name in getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def two_pass_ir(tmp_path_factory: pytest.TempPathFactory, narrow_checkpoint: Path) -> Path:
    """An fp32 model folder converted from ``narrow_checkpoint``, with the tiling pair of ``image.resize: full``
    (pass 1 / pass 2 IRs) beside it. Narrow: what its tests claim is about the pair and the tiling (the split,
    the statistics passed between the passes, the margins, the blend, the slots), which are the same graph and
    receptive field at any width; the full width cost ~25 s of the two cores to convert (the margins are
    measured on the torch graph) and most of each tiled run (issue 44). The full-width pair is tested as the
    bundled toon's (tests/test_fullres.py: its tiles, the memory budget that is sized for that width)."""
    from edge_anime_converters.convert import convert

    return once_per_run(tmp_path_factory, "models2", lambda out: convert(
        narrow_checkpoint, name="randgen2", precision="fp32", output_dir=out, verify_limit=1,
        verify_sizes_hw=((64, 96),), two_pass=True))


def synthetic_photo(width: int, height: int, *, seed: int = 0) -> Image.Image:
    """A smooth, photo-like RGB picture (gradients plus blobs), for tests that must not need ../shared."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.zeros((height, width, 3), np.float32)
    for c in range(3):
        fx, fy, phase = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0, 6.28)
        img[..., c] = 127 + 100 * np.sin(xx / width * fx * 6.28 + phase) * np.cos(yy / height * fy * 6.28)
    img += rng.normal(0, 6, img.shape)
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8), "RGB")


@pytest.fixture
def make_photo(tmp_path: Path) -> Callable[..., Path]:
    """Write a synthetic photo: ``make_photo("a.jpg", 96, 64, mode="RGB")``."""

    def make(name: str, width: int = 96, height: int = 64, *, mode: str = "RGB", seed: int = 0,
             folder: Path | None = None, **save_kwargs: Any) -> Path:
        path = (folder or tmp_path) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        img = synthetic_photo(width, height, seed=seed)
        if mode != "RGB":
            img = img.convert(mode)
        img.save(path, **save_kwargs)
        return path

    return make


@pytest.fixture(scope="session")
def ov_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``device.cache_dir`` of the whole run (OpenVINO's CACHE_DIR, the plugin read-back, the measured
    variant decisions). Every config ``write_config`` writes points here, so a shape compiled by one test
    (in this process or in a service it starts) is an import for every later one. A test about what the
    cache holds (blobs written, a decision kept or damaged) gives its own folder instead: others' entries
    would answer for it."""
    return tmp_path_factory.mktemp("ovcache")


@pytest.fixture
def write_config(tmp_path: Path, random_ir: Path, ov_cache: Path) -> Callable[..., Path]:
    """Write a config YAML into tmp_path using the random IR and the session's model cache; ``overrides``
    are merged per section.

    The precision is pinned to f32: the random IR has one variant, and with ``auto`` every new size or
    device setting measured the plugin's precisions for a few seconds first (a start's real behaviour, but
    paid again by each such test). Tests of the measurement itself say ``inference_precision: auto``."""

    def write(overrides: dict[str, dict[str, Any]] | None = None, *, name: str = "config.yaml") -> Path:
        data: dict[str, dict[str, Any]] = {
            "model": {"path": str(random_ir / "model.xml")},
            "device": {"cache_dir": str(ov_cache), "inference_precision": "f32"},
            "image": {"resize": "max_side", "max_side": 128},
            "watch": {"root": str(tmp_path / "watch"), "settle_seconds": 0.3, "poll_interval_seconds": 0.1},
        }
        for section, values in (overrides or {}).items():
            data.setdefault(section, {}).update(values)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return path

    return write


@pytest.fixture
def narrow_config(write_config: Callable[..., Path], narrow_ir: Path) -> Callable[..., Path]:
    """``write_config`` with ``model.path`` on ``narrow_ir`` (an override's own ``model.path`` still wins): for
    the tests whose claim is about what runs around the style (a clip's frames, timing, grade and sound; a
    photo's size; the files written), not the style's own pixels. Same name (randgen), graph and size multiple
    as ``random_ir``, at ~1/16 of its arithmetic: a 24-frame clip at 96 px took 1.6 CPU s on the full width
    and 0.55 s on this one (issue 44)."""

    def write(overrides: dict[str, dict[str, Any]] | None = None, *, name: str = "config.yaml") -> Path:
        merged: dict[str, dict[str, Any]] = {"model": {"path": str(narrow_ir / "model.xml")}}
        for section, values in (overrides or {}).items():
            merged.setdefault(section, {}).update(values)
        return write_config(merged, name=name)

    return write


@pytest.fixture
def services() -> Iterator[list[Any]]:
    """Started `edge-anime run` processes (test_service.Service), killed at the end whatever happened."""
    started: list[Any] = []
    yield started
    for svc in started:
        svc.kill()


@pytest.fixture
def config(write_config: Callable[..., Path], tmp_path: Path) -> Callable[..., Path]:
    """A config for the service; overrides merge per section. Drain 20 s, retries fast."""

    def make(overrides: dict[str, dict[str, Any]] | None = None, *, name: str = "config.yaml") -> Path:
        merged: dict[str, dict[str, Any]] = {
            "watch": {"retry": {"initial_seconds": 0.2, "max_seconds": 1.0, "max_attempts": 50}},
            "service": {"drain_timeout_seconds": 20.0},
        }
        for section, values in (overrides or {}).items():
            merged.setdefault(section, {}).update(values)
        return write_config(merged, name=name)

    return make


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def png_chunk(tag: bytes, data: bytes) -> bytes:
    """One PNG chunk (length, tag, data, CRC), for writing bombs and damaged PNGs byte by byte."""
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A real tmpfs on ``folder`` (tests run as root in CI): a disk to fill, or a read-only one (``ro``, which
    even root cannot write). Skips with the reason where mounting is refused."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs to fill: the box's own disk running full."""
    with mounted_tmpfs(tmp_path / "tmpfs", "size=2m") as mount:
        yield mount


def style_with(random_ir: Path, folder: Path, key: str, value: object) -> Path:
    """A copy of the seeded style in ``folder/style`` with its manifest's ``key`` set to ``value`` (None: the
    key removed), for the tests of one manifest mapping (tone, palette) as a person would edit it."""
    import shutil

    import yaml

    from edge_anime.models import MANIFEST_NAME

    style = folder / "style"
    shutil.copytree(random_ir, style)
    manifest = yaml.safe_load((style / MANIFEST_NAME).read_text(encoding="utf-8"))
    if value is None:
        manifest.pop(key, None)
    else:
        manifest[key] = value
    (style / MANIFEST_NAME).write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
    return style


def run_pipeline(engine: Any, config: Any, jobs: Iterable[Any], *, deadline_s: float = 180.0) -> list[Any]:
    """Every job through one ``Pipeline`` on ``engine``, results in the order of ``jobs``: the pipeline tests'
    own driver (the runtime's callers all go through a Stylizer). Fails when the pipeline does not drain
    within ``deadline_s`` (scaled to the box), a loaded 2-core box's bound, never reached when things work."""
    from edge_anime.core.pipeline import Pipeline

    jobs = list(jobs)
    deadline_s = scaled(deadline_s)
    results: dict[int, Any] = {}
    lock = threading.Lock()

    def done(result: Any) -> None:
        with lock:
            results[id(result.job)] = result

    with Pipeline(engine, config, on_done=done) as pipeline:
        for job in jobs:
            pipeline.submit(job)
        assert pipeline.drain(deadline_s), f"the pipeline did not drain within {deadline_s} s"
    return [results[id(job)] for job in jobs]


def decode_damaged(originals: dict[str, bytes], folder: Path, *, seed: int, count: int,
                   max_flips: int) -> dict[str, int]:
    """Seeded byte flips (and a cut in 3 of 10) of ``originals`` (extension -> file bytes), each decoded and
    planned as the pipeline would at 64 px: {"ok": n, "refused": n}. Anything but an InputError naming the
    file is raised (the watch folder would report it as a bug); a hang is the calling test's timeout."""
    import random

    from edge_anime.config import ImageSection
    from edge_anime.errors import InputError
    from edge_anime.imaging import decode, plan

    rng = random.Random(seed)
    cfg = ImageSection(resize="max_side", max_side=64)
    outcomes = {"ok": 0, "refused": 0}
    for i in range(count):
        ext = rng.choice(sorted(originals))
        data = bytearray(originals[ext])
        for _ in range(rng.randint(1, max_flips)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        path = folder / f"damaged_{i}.{ext}"
        path.write_bytes(bytes(data))
        try:
            plan(decode(path, cfg), cfg, multiple=8)
            outcomes["ok"] += 1
        except InputError as exc:
            assert str(path) in str(exc)
            outcomes["refused"] += 1
    return outcomes
