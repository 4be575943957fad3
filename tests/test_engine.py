"""Engine: properties reach the CPU plugin and come back, the model cache is used, the shape LRU stays bounded,
and static and dynamic compiles give the same pictures. Real OpenVINO on the seeded-random IR, tiny sizes."""
from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deadlines import scaled

from conftest import REPO_ROOT
from edge_anime.config import DeviceSection
from edge_anime.errors import ConfigError
from edge_anime.models import ModelInfo, load_model_info
from edge_anime.runtime.engine import IDLE_SHAPE_MB, Engine, compile_properties


@pytest.fixture(scope="module")
def model(random_ir: Path) -> ModelInfo:
    return load_model_info(random_ir)


def _device(cache: Path, **fields: Any) -> DeviceSection:
    """A device section on the model cache ``cache``: the session's (``ov_cache``) where a test only needs
    an engine, a folder of the test's own where it asserts what the cache holds or how many compiles it
    took (another test's blobs or read-back would answer for it)."""
    return DeviceSection(cache_dir=cache, **fields)


def _image(height: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def test_latency_hint_runs_one_stream_and_throughput_at_least_as_many(model: ModelInfo, ov_cache: Path) -> None:
    latency = Engine(model, _device(ov_cache, performance_hint="LATENCY"))
    throughput = Engine(model, _device(ov_cache, performance_hint="THROUGHPUT"))
    assert latency.describe()["effective"]["PERFORMANCE_HINT"] == "LATENCY"
    assert latency.effective["NUM_STREAMS"] == 1
    assert latency.num_requests == latency.effective["OPTIMAL_NUMBER_OF_INFER_REQUESTS"]
    assert throughput.effective["PERFORMANCE_HINT"] == "THROUGHPUT"
    assert throughput.effective["NUM_STREAMS"] >= latency.effective["NUM_STREAMS"]
    assert throughput.num_requests == throughput.effective["OPTIMAL_NUMBER_OF_INFER_REQUESTS"] >= 1


def test_explicit_streams_threads_pinning_precision_are_applied(model: ModelInfo, ov_cache: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    device = _device(ov_cache, performance_hint="THROUGHPUT", num_streams=2, inference_num_threads=2,
                     enable_cpu_pinning=False, inference_precision="f32", num_requests=3,
                     execution_mode="ACCURACY")
    with caplog.at_level(logging.INFO, logger="edge_anime.runtime.engine"):
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
        Engine(model, _device(tmp_path / "a_file" / "cache"))


def test_model_cache_is_populated_then_reused(model: ModelInfo, tmp_path: Path) -> None:
    device = _device(tmp_path / "ovcache")  # its own: "the first start writes blobs" needs a cold cache
    Engine(model, device).infer(_image(32, 48))
    blobs = {p.name: p.stat().st_mtime_ns for p in Path(device.cache_dir).iterdir()}  # type: ignore[arg-type]
    assert blobs, "the first start must write compiled blobs into device.cache_dir"
    Engine(model, device).infer(_image(32, 48))
    again = {p.name: p.stat().st_mtime_ns for p in Path(device.cache_dir).iterdir()}  # type: ignore[arg-type]
    assert again == blobs, "a warm start must load the same blobs, not compile and write new ones"


def test_static_shape_cache_is_a_bounded_lru(model: ModelInfo, ov_cache: Path) -> None:
    engine = Engine(model, _device(ov_cache, shape_cache_size=2))
    start = engine.compiles
    first = engine.compiled(32, 32)
    engine.compiled(32, 48)
    assert engine.compiled(32, 32) is first and engine.compiles == start + 2  # hit: no compile
    engine.compiled(48, 32)  # evicts (32, 48), the least recently used
    assert engine.cached_shapes() == [(32, 32), (48, 32)]
    engine.compiled(32, 48)
    assert engine.compiles == start + 4
    assert len(engine.cached_shapes()) == 2


def test_static_infer_matches_dynamic(model: ModelInfo, ov_cache: Path) -> None:
    image = _image(40, 56, seed=3)
    static = Engine(model, _device(ov_cache, shape_policy="static", inference_precision="f32"))
    dynamic = Engine(model, _device(ov_cache, shape_policy="dynamic", inference_precision="f32"))
    a, b = static.infer(image), dynamic.infer(image)
    assert a.shape == b.shape == image.shape and a.dtype == np.uint8
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    assert diff.max() <= 2 and diff.mean() < 0.05
    assert dynamic.compiled(40, 56) is dynamic.compiled(64, 64)  # one model for every size


def test_infer_refuses_sizes_off_the_multiple(model: ModelInfo, ov_cache: Path) -> None:
    engine = Engine(model, _device(ov_cache))
    with pytest.raises(ValueError, match="multiple"):
        engine.infer(_image(30, 32))
    with pytest.raises(ValueError, match="uint8"):
        engine.infer(np.zeros((32, 32, 3), np.float32))


def test_settings_the_plugin_overrides_are_reported(model: ModelInfo, ov_cache: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    # PERFORMANCE_HINT_NUM_REQUESTS reads back as given; a request the CPU cannot honour shows up in ignored().
    with caplog.at_level(logging.WARNING, logger="edge_anime.runtime.engine"):
        engine = Engine(model, _device(ov_cache, num_requests=2, enable_hyper_threading=True))
    smt = engine.effective["ENABLE_HYPER_THREADING"]
    notes = engine.ignored()
    assert not any("num_requests" in n for n in notes)
    if smt is False:  # a CPU without SMT (one thread per core) turns it off; the operator must hear it
        assert any(n.startswith("device.enable_hyper_threading: asked True") for n in notes)
        assert "enable_hyper_threading" in caplog.text
    assert engine.describe()["ignored"] == notes


def test_shape_cache_also_bounded_by_memory(model: ModelInfo, ov_cache: Path) -> None:
    # 64 MB holds one live 128x128 or 128x160 f32 shape (41 / 46 MB), not both: a new size evicts the previous one.
    engine = Engine(model, _device(ov_cache, shape_cache_size=8, shape_cache_mb=64, num_streams=1,
                                   inference_precision="f32"))
    assert engine.shape_mb(128, 128) < 64 < engine.shape_mb(128, 128) + engine.shape_mb(128, 160)
    engine.compiled(128, 128)
    engine.compiled(128, 160)
    assert engine.cached_shapes() == [(128, 160)]
    roomy = Engine(model, _device(ov_cache, shape_cache_size=8, shape_cache_mb=4096, num_streams=1))
    roomy.compiled(128, 128)
    roomy.compiled(128, 160)
    assert roomy.cached_shapes() == [(128, 128), (128, 160)] and roomy.cache_mb() < 4096


def test_over_the_memory_bound_idle_shapes_give_their_memory_back_and_stay_compiled(model: ModelInfo,
                                                                                   ov_cache: Path) -> None:
    # 64 MB holds one live 104x128 or 112x128 f32 shape (38 / 39 MB) plus a released one (IDLE_SHAPE_MB), not two live.
    engine = Engine(model, _device(ov_cache, shape_cache_size=8, shape_cache_mb=64, num_streams=1,
                                   inference_precision="f32"))
    assert max(engine.shape_mb(104, 128), engine.shape_mb(112, 128)) + IDLE_SHAPE_MB <= 64
    assert engine.shape_mb(104, 128) + engine.shape_mb(112, 128) > 64
    a, b = _image(104, 128, seed=1), _image(112, 128, seed=2)
    first_a, first_b = engine.infer(a), engine.infer(b)
    assert engine.released_shapes() == [(104, 128)] and engine.cache_mb() <= 64
    compiles = engine.compiles
    again_a = engine.infer(a)  # a returns: no compile, its buffers come back, b gives its own up
    assert engine.compiles == compiles
    assert engine.released_shapes() == [(112, 128)] and engine.cached_shapes() == [(112, 128), (104, 128)]
    assert np.array_equal(again_a, first_a) and np.array_equal(engine.infer(b), first_b)
    assert engine.compiles == compiles


# Six shapes of 192 x 192-272 run twice in a fresh process: the RSS the shape cache makes it grow by, the
# peak (VmHWM) over the RSS once the engine has started, against device.shape_cache_mb.
_SHAPES_SCRIPT = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import numpy as np
    from edge_anime.config import DeviceSection
    from edge_anime.runtime.engine import Engine
    from edge_anime.models import load_model_info

    def status_mb(field):
        return int(Path("/proc/self/status").read_text().split(field + ":")[1].split()[0]) / 1024

    device = DeviceSection(performance_hint="LATENCY", num_streams=1, inference_precision="f32",
                           cache_dir=Path(sys.argv[2]), shape_cache_size=16, shape_cache_mb=int(sys.argv[3]))
    engine = Engine(load_model_info(Path(sys.argv[1])), device)
    images = [np.random.default_rng(i).integers(0, 256, (192, 192 + 16 * i, 3), dtype=np.uint8) for i in range(6)]
    engine.infer(np.zeros((64, 64, 3), np.uint8))  # the plugin's own first-inference set-up, not a shape's
    start = status_mb("VmRSS")
    for _ in range(2):
        for image in images:
            engine.infer(image)
    print(json.dumps({"grown_mb": status_mb("VmHWM") - start, "estimate_mb": engine.cache_mb(),
                      "all_live_mb": sum(engine.shape_mb(*i.shape[:2]) for i in images),
                      "kept": len(engine.cached_shapes()), "released": len(engine.released_shapes())}))
""")


@pytest.mark.slow
def test_shape_cache_mb_bounds_the_process_memory(random_ir: Path, tmp_path: Path) -> None:
    """The bound is on real memory, not only on the estimate: cycling through six shapes whose live
    estimate sums to ~440 MB, a 160 MB bound keeps the process's growth within it (+ slack for what is
    not a shape: Python, one picture's buffers), while without the bound it grows past it by the
    estimate's measure (which is what makes the estimate a measured figure, not a guess)."""
    def run(bound_mb: int) -> dict[str, float]:
        out = subprocess.run([sys.executable, "-c", _SHAPES_SCRIPT, str(random_ir), str(tmp_path / "ovcache"),
                              str(bound_mb)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=scaled(300))
        assert out.returncode == 0, out.stderr[-2000:]
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

    bounded, roomy = run(160), run(4096)
    slack_mb = 40
    assert bounded["estimate_mb"] <= 160 and bounded["released"] >= 1, bounded
    assert bounded["grown_mb"] <= 160 + slack_mb, bounded
    assert roomy["released"] == 0 and roomy["grown_mb"] > 160 + slack_mb, roomy
    # The estimate is the memory really used: within 25 % of the growth when nothing is given back.
    assert 0.75 * roomy["all_live_mb"] <= roomy["grown_mb"] <= 1.25 * roomy["all_live_mb"], roomy


def test_cached_size_is_not_held_up_by_another_sizes_compile(model: ModelInfo, ov_cache: Path) -> None:
    """A decode thread whose size is cached gets its model while another size compiles: the test holds the
    cross-process compile flock, so the new size's compile is stuck until the cached lookup has returned."""
    import threading
    import time

    from edge_anime.runtime.engine import cache_lock

    device = _device(ov_cache, shape_cache_size=4)
    engine = Engine(model, device)
    cached = engine.compiled(32, 32)
    got: dict[str, Any] = {}
    with cache_lock(device.cache_dir):
        compiling = threading.Thread(target=lambda: got.update(new=engine.compiled(48, 48)), daemon=True)
        compiling.start()
        deadline = time.monotonic() + scaled(30.0)
        while (48, 48) not in engine._compiling and time.monotonic() < deadline:
            time.sleep(0.01)  # a poll with a deadline: the compile thread has no event to expose
        assert (48, 48) in engine._compiling
        lookup = threading.Thread(target=lambda: got.update(hit=engine.compiled(32, 32)), daemon=True)
        lookup.start()
        lookup.join(timeout=30.0)
        assert got.get("hit") is cached and "new" not in got
    compiling.join(timeout=60.0)
    assert got["new"] is engine.compiled(48, 48) and not engine._compiling


def test_one_size_asked_by_two_threads_compiles_once(model: ModelInfo, ov_cache: Path) -> None:
    import threading

    from edge_anime.runtime.engine import cache_lock

    device = _device(ov_cache, shape_cache_size=4)
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


def test_a_warm_start_reads_the_plugins_choice_instead_of_compiling_for_it(model: ModelInfo, tmp_path: Path,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """``readback``: the read-back compile is ~15 % of a warm service start; an earlier start's identical one
    (same box, OpenVINO, model and properties) answers for it, and anything else asks the plugin again."""
    cache = tmp_path / "ovcache"  # its own: the session's would already hold this read-back
    device = _device(cache, performance_hint="THROUGHPUT", num_streams=2, inference_precision="f32")
    first = Engine(model, device)
    assert first.compiles == 1
    files = list(cache.glob("edge-anime-plugin-*.json"))
    assert len(files) == 1
    warm = Engine(model, device)
    assert warm.compiles == 0 and warm.effective == first.effective and warm.num_requests == first.num_requests
    picture = _image(64, 96)
    assert np.array_equal(warm.infer(picture), first.infer(picture))  # the first photo compiles its shape
    other = Engine(model, _device(cache, performance_hint="THROUGHPUT", num_streams=1,
                                  inference_precision="f32"))
    assert other.compiles == 1 and other.effective["NUM_STREAMS"] == 1  # other properties: asked again
    files[0].write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="edge_anime.runtime.readback"):
        damaged = Engine(model, device)
    assert damaged.compiles == 1 and damaged.effective == first.effective
    assert str(files[0]) in caplog.text and "asking the plugin again" in caplog.text
    assert json.loads(files[0].read_text(encoding="utf-8"))["effective"] == first.effective  # rewritten
    assert Engine(model, device).compiles == 0
