"""Engine: properties reach the CPU plugin and come back, the model cache is used, the shape LRU stays bounded,
and static and dynamic compiles give the same pictures. Real OpenVINO on the seeded-random IR, tiny sizes."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_anime.config import DeviceSection
from edge_anime.engine import Engine, compile_properties
from edge_anime.errors import ConfigError
from edge_anime.models import ModelInfo, load_model_info


@pytest.fixture(scope="module")
def model(random_ir: Path) -> ModelInfo:
    return load_model_info(random_ir)


def _device(tmp_path: Path, **fields: Any) -> DeviceSection:
    fields.setdefault("cache_dir", tmp_path / "ovcache")
    return DeviceSection(**fields)


def _image(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_latency_hint_runs_one_stream_and_throughput_at_least_as_many(model: ModelInfo, tmp_path: Path) -> None:
    latency = Engine(model, _device(tmp_path, performance_hint="LATENCY"))
    throughput = Engine(model, _device(tmp_path, performance_hint="THROUGHPUT"))
    assert latency.describe()["effective"]["PERFORMANCE_HINT"] == "LATENCY"
    assert latency.effective["NUM_STREAMS"] == 1
    assert latency.num_requests == latency.effective["OPTIMAL_NUMBER_OF_INFER_REQUESTS"]
    assert throughput.effective["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert throughput.effective["NUM_STREAMS"] >= latency.effective["NUM_STREAMS"]
    assert throughput.num_requests == throughput.effective["OPTIMAL_NUMBER_OF_INFER_REQUESTS"] >= 1


def test_explicit_streams_threads_pinning_precision_are_applied(model: ModelInfo, tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    device = _device(tmp_path, performance_hint="THROUGHPUT", num_streams=2, inference_num_threads=2,
                     enable_cpu_pinning=False, inference_precision="f32", num_requests=3,
                     execution_mode="ACCURACY")
    with caplog.at_level(logging.INFO, logger="edge_anime.engine"):
        engine = Engine(model, device)
    eff = engine.effective
    assert eff["NUM_STREAMS"] == 2
    assert eff["INFERENCE_NUM_THREADS"] == 2
    assert eff["ENABLE_CPU_PINNING"] is False
    assert eff["INFERENCE_PRECISION_HINT"] == "f32"
    assert eff["EXECUTION_MODE_HINT"] == "ACCURACY"
    assert engine.num_requests == 3  # the configured number wins over the plugin's optimum
    assert engine.precision_note() is None
    assert "streams=2 threads=2 precision=f32" in caplog.text


def test_auto_values_are_left_to_the_plugin(tmp_path: Path) -> None:
    props = compile_properties(DeviceSection(cache_dir=None))
    assert "NUM_STREAMS" not in props and "INFERENCE_PRECISION_HINT" not in props and "CACHE_DIR" not in props
    assert props["PERFORMANCE_HINT"] == "THROUGHPUT"


def test_a_cache_dir_that_cannot_be_a_folder_is_a_config_error_naming_the_key(model: ModelInfo,
                                                                             tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(ConfigError, match=r"device\.cache_dir: .*a_file/cache: cannot hold the model cache"):
        Engine(model, _device(tmp_path, cache_dir=tmp_path / "a_file" / "cache"))


def test_model_cache_is_populated_then_reused(model: ModelInfo, tmp_path: Path) -> None:
    device = _device(tmp_path)
    Engine(model, device).infer(_image(32, 48))
    blobs = {p.name: p.stat().st_mtime_ns for p in Path(device.cache_dir).iterdir()}  # type: ignore[arg-type]
    assert blobs, "the first start must write compiled blobs into device.cache_dir"
    Engine(model, device).infer(_image(32, 48))
    again = {p.name: p.stat().st_mtime_ns for p in Path(device.cache_dir).iterdir()}  # type: ignore[arg-type]
    assert again == blobs, "a warm start must load the same blobs, not compile and write new ones"


def test_static_shape_cache_is_a_bounded_lru(model: ModelInfo, tmp_path: Path) -> None:
    engine = Engine(model, _device(tmp_path, shape_cache_size=2))
    start = engine.compiles
    first = engine.compiled(32, 32)
    engine.compiled(32, 48)
    assert engine.compiled(32, 32) is first and engine.compiles == start + 2  # hit: no compile
    engine.compiled(48, 32)  # evicts (32, 48), the least recently used
    assert engine.cached_shapes() == [(32, 32), (48, 32)]
    engine.compiled(32, 48)
    assert engine.compiles == start + 4
    assert len(engine.cached_shapes()) == 2


def test_static_infer_matches_dynamic(model: ModelInfo, tmp_path: Path) -> None:
    image = _image(40, 56, seed=3)
    static = Engine(model, _device(tmp_path, shape_policy="static", inference_precision="f32"))
    dynamic = Engine(model, _device(tmp_path, shape_policy="dynamic", inference_precision="f32"))
    a, b = static.infer(image), dynamic.infer(image)
    assert a.shape == b.shape == image.shape and a.dtype == np.uint8
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    assert diff.max() <= 2 and diff.mean() < 0.05
    assert dynamic.compiled(40, 56) is dynamic.compiled(64, 64)  # one model for every size


def test_infer_refuses_sizes_off_the_multiple(model: ModelInfo, tmp_path: Path) -> None:
    engine = Engine(model, _device(tmp_path))
    with pytest.raises(ValueError, match="multiple"):
        engine.infer(_image(30, 32))
    with pytest.raises(ValueError, match="uint8"):
        engine.infer(np.zeros((32, 32, 3), np.float32))


def test_settings_the_plugin_overrides_are_reported(model: ModelInfo, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    # PERFORMANCE_HINT_NUM_REQUESTS reads back as given; a request the CPU cannot honour shows up in ignored().
    with caplog.at_level(logging.WARNING, logger="edge_anime.engine"):
        engine = Engine(model, _device(tmp_path, num_requests=2, enable_hyper_threading=True))
    smt = engine.effective["ENABLE_HYPER_THREADING"]
    notes = engine.ignored()
    assert not any("num_requests" in n for n in notes)
    if smt is False:  # a CPU without SMT (one thread per core) turns it off; the operator must hear it
        assert any(n.startswith("device.enable_hyper_threading: asked True") for n in notes)
        assert "enable_hyper_threading" in caplog.text
    assert engine.describe()["ignored"] == notes


def test_shape_cache_also_bounded_by_memory(model: ModelInfo, tmp_path: Path) -> None:
    # 64 MB allows one 64x64 shape per stream or so: every new size evicts the previous one, the newest stays.
    engine = Engine(model, _device(tmp_path, shape_cache_size=8, shape_cache_mb=64, num_streams=1))
    engine.compiled(64, 64)
    engine.compiled(64, 96)
    assert engine.cached_shapes() == [(64, 96)]
    roomy = Engine(model, _device(tmp_path, shape_cache_size=8, shape_cache_mb=4096, num_streams=1))
    roomy.compiled(64, 64)
    roomy.compiled(64, 96)
    assert roomy.cached_shapes() == [(64, 64), (64, 96)] and roomy.cache_mb() < 4096


def test_over_the_memory_bound_idle_shapes_give_their_memory_back_and_stay_compiled(model: ModelInfo,
                                                                                   tmp_path: Path) -> None:
    # 100 MB holds one live 64-px shape (~60 MB estimated) plus released ones (IDLE_SHAPE_MB each), not two live.
    engine = Engine(model, _device(tmp_path, shape_cache_size=8, shape_cache_mb=100, num_streams=1,
                                   inference_precision="f32"))
    a, b = _image(64, 64, seed=1), _image(64, 96, seed=2)
    first_a, first_b = engine.infer(a), engine.infer(b)
    assert engine.released_shapes() == [(64, 64)] and engine.cache_mb() <= 100
    compiles = engine.compiles
    again_a = engine.infer(a)  # a returns: no compile, its buffers come back, b gives its own up
    assert engine.compiles == compiles
    assert engine.released_shapes() == [(64, 96)] and engine.cached_shapes() == [(64, 96), (64, 64)]
    assert np.array_equal(again_a, first_a) and np.array_equal(engine.infer(b), first_b)
    assert engine.compiles == compiles


def test_cached_size_is_not_held_up_by_another_sizes_compile(model: ModelInfo, tmp_path: Path) -> None:
    """A decode thread whose size is cached gets its model while another size compiles: the test holds the
    cross-process compile flock, so the new size's compile is stuck until the cached lookup has returned."""
    import threading
    import time

    from edge_anime.engine import cache_lock

    device = _device(tmp_path, shape_cache_size=4)
    engine = Engine(model, device)
    cached = engine.compiled(32, 32)
    got: dict[str, Any] = {}
    with cache_lock(device.cache_dir):
        compiling = threading.Thread(target=lambda: got.update(new=engine.compiled(48, 48)), daemon=True)
        compiling.start()
        deadline = time.monotonic() + 30.0
        while (48, 48) not in engine._compiling and time.monotonic() < deadline:
            time.sleep(0.01)  # a poll with a deadline: the compile thread has no event to expose
        assert (48, 48) in engine._compiling
        lookup = threading.Thread(target=lambda: got.update(hit=engine.compiled(32, 32)), daemon=True)
        lookup.start()
        lookup.join(timeout=30.0)
        assert got.get("hit") is cached and "new" not in got
    compiling.join(timeout=60.0)
    assert got["new"] is engine.compiled(48, 48) and not engine._compiling


def test_one_size_asked_by_two_threads_compiles_once(model: ModelInfo, tmp_path: Path) -> None:
    import threading

    from edge_anime.engine import cache_lock

    device = _device(tmp_path, shape_cache_size=4)
    engine = Engine(model, device)
    start = engine.compiles
    got: list[Any] = []
    with cache_lock(device.cache_dir):  # both threads ask before the first compile can finish
        threads = [threading.Thread(target=lambda: got.append(engine.compiled(40, 40)), daemon=True)
                   for _ in range(2)]
        for thread in threads:
            thread.start()
    for thread in threads:
        thread.join(timeout=60.0)
    assert len(got) == 2 and got[0] is got[1] and engine.compiles == start + 1
