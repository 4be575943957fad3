"""The OpenVINO side of the runtime: one Core, the IR read once, compiled for CPU with the operator's properties.

Shape policy (``device.shape_policy``), decided by measurement on the target box (2 vCPU Xeon, OpenVINO
2026.4, seeded-random AnimeGANv2 generator, THROUGHPUT hint; see ``benchmarks/shapes.py`` and the table in
the README / closing note). Static shapes won on inference time at every size and precision measured and
their extra compile cost is paid once per size and then comes from the model cache, so ``static`` with a small
LRU of compiled sizes is the default; ``dynamic`` stays available for folders where every photo has a
different size and the recompiles would dominate. The figures behind this are in ``SHAPE_DECISION`` below.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import openvino as ov

from ..config import DeviceSection
from ..errors import BYTES_PER_MB, ConfigError, ModelError
from ..fsutil import locked
from ..models import ModelInfo
from . import readback
from .host import box_key, huge_pages_on

log = logging.getLogger(__name__)
MIB = BYTES_PER_MB

# What the config spells -> the OpenVINO element type name the plugin reports back.
# A read-back compile at start-up learns what the plugin chose (streams, threads, requests, precision),
# validates the properties before the first photo arrives and warms the model cache. The size is tiny so
# a cold cache costs a fraction of a second; any multiple of the model's size multiple works.
READBACK_SIDE_PX = 64
# The properties read back and reported by ``describe()``.
REPORTED_PROPERTIES: tuple[str, ...] = (
    "PERFORMANCE_HINT",
    "NUM_STREAMS",
    "INFERENCE_NUM_THREADS",
    "OPTIMAL_NUMBER_OF_INFER_REQUESTS",
    "PERFORMANCE_HINT_NUM_REQUESTS",
    "INFERENCE_PRECISION_HINT",
    "EXECUTION_MODE_HINT",
    "ENABLE_CPU_PINNING",
    "ENABLE_HYPER_THREADING",
    "SCHEDULING_CORE_TYPE",
)

# Plugin property -> the config key that sets it, for messages.
CONFIG_KEYS: dict[str, str] = {
    "PERFORMANCE_HINT": "device.performance_hint",
    "PERFORMANCE_HINT_NUM_REQUESTS": "device.num_requests",
    "NUM_STREAMS": "device.num_streams",
    "INFERENCE_NUM_THREADS": "device.inference_num_threads",
    "ENABLE_CPU_PINNING": "device.enable_cpu_pinning",
    "ENABLE_HYPER_THREADING": "device.enable_hyper_threading",
    "SCHEDULING_CORE_TYPE": "device.scheduling_core_type",
    "EXECUTION_MODE_HINT": "device.execution_mode",
}

# Measured with `python benchmarks/shapes.py` (LATENCY hint, fresh Core per compile, static and dynamic
# inferences interleaved, medians of 3; 2 vCPU Xeon with AMX, box shared with other jobs, so read ratios).
# Kept here so the reason for the default travels with the code.
SHAPE_DECISION = """
size       precision  compile cold s   compile warm s   first infer s     steady infer s    dynamic/static
                      static  dynamic  static  dynamic  static  dynamic   static  dynamic
512x512    bf16 auto  0.23    0.21     0.08    0.07     0.52    0.94      0.40    0.74      1.87x
1352x1080  bf16 auto  0.20    0.21     0.08    0.06     3.23    35.9      2.87    8.20      2.86x
512x512    f32        0.13    0.15     0.07    0.07     1.87    2.89      2.06    2.95      1.43x
1352x1080  f32        0.21    0.34     0.07    0.09     16.4    35.6      16.4    58.8      3.59x
Static wins inference by 1.4-3.6x; a new size costs one compile (0.1-0.3 s, 0.07 s from the model cache)
plus a slightly slower first inference, far less than one dynamic inference loses. Hence static + LRU.
"""

# What a compiled shape still holds after ``CompiledModel.release_memory()`` gave back its activation
# buffers: measured 15-25 MB of RSS per shape (toon IR, THROUGHPUT with 2 streams, f32 and bf16, 256-768 px,
# FP16 and INT8 IRs; identical outputs after the buffers came back). Kept with headroom. A live shape holds
# this too (measured: compiling a shape adds the same 15-22 MB before its first inference).
IDLE_SHAPE_MB = 24
# Activation memory of a live shape, per pixel and per stream, by what runs (``shape_mb``). Measured with
# ``python benchmarks/memory.py --shape-cost`` (one fresh process, RSS before compile / after one inference
# on every stream / after release_memory; toon IR, THROUGHPUT, 2 streams, 256x256, 512x512, 768x512; the
# intercept of the fit is < 5 MB, so a shape costs IDLE_SHAPE_MB + slope x pixels x streams):
#     FP16 IR at f32 1030 B/px, INT8 IR at f32 387 B/px (AMD EPYC, AVX2, OpenVINO 2026.4.1);
#     bf16 527 B/px (imaging.geometry's measurement, AMX Xeon). ~8 % headroom on each; f16 (AMX-FP16) is
# taken as bf16 and an INT8 IR at bf16 as INT8 at f32 (its float parts then only shrink).
ACTIVATION_BYTES_PER_PX: dict[str, int] = {"f32": 1100, "bf16": 570, "f16": 570, "int8": 420}
def compile_properties(device: DeviceSection) -> dict[str, Any]:
    """The CPU plugin properties for ``device``; "auto" values are left out so the plugin decides them."""
    props: dict[str, Any] = {
        "PERFORMANCE_HINT": device.performance_hint,
        "SCHEDULING_CORE_TYPE": device.scheduling_core_type,
        "EXECUTION_MODE_HINT": device.execution_mode,
    }
    optional = {
        "PERFORMANCE_HINT_NUM_REQUESTS": device.num_requests,
        "NUM_STREAMS": device.num_streams,
        "INFERENCE_NUM_THREADS": device.inference_num_threads,
        "ENABLE_CPU_PINNING": device.enable_cpu_pinning,
        "ENABLE_HYPER_THREADING": device.enable_hyper_threading,
    }
    props.update({key: value for key, value in optional.items() if value != "auto"})
    if device.inference_precision != "auto":
        props["INFERENCE_PRECISION_HINT"] = device.inference_precision
    if device.cache_dir is not None:
        props["CACHE_DIR"] = str(device.cache_dir)
    return props


def _element_name(value: Any) -> str:
    """``<Type: 'bfloat16'>`` -> ``bf16``: the spelling the config uses."""
    if isinstance(value, ov.Type):
        return str(value.to_string())
    return str(value)


def _property_value(value: Any) -> Any:
    """A plugin property as a JSON-friendly Python value."""
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, ov.Type):
        return _element_name(value)
    name = getattr(value, "name", None)
    return str(name) if name is not None else str(value)


def read_back(compiled: ov.CompiledModel) -> dict[str, Any]:
    """What the plugin really uses for a compiled model (properties it does not report are skipped)."""
    found: dict[str, Any] = {}
    for key in REPORTED_PROPERTIES:
        try:
            found[key] = _property_value(compiled.get_property(key))
        except RuntimeError:
            continue
    return found


class Engine:
    """Compiles the model per input size (static policy, bounded LRU) or once (dynamic policy).

    The static cache has two bounds. ``shape_cache_size`` counts compiled shapes. ``shape_cache_mb`` bounds
    their memory: when a shape comes into use and the estimate passes it, the least recently used idle
    shapes first give their activation buffers back (``release_memory``: the compiled model stays, ~20 MB,
    and its next inference allocates again) and only if that is not enough are compiled shapes dropped.
    On photos of many sizes a returning size then costs a page-faulting first inference, not a compile.

    Thread-safe: the pipeline's threads call ``compiled()`` concurrently; a lock guards the cache and a
    compile happens at most once per size while it stays in the cache.
    """

    def __init__(self, model: ModelInfo, device: DeviceSection, *, core: ov.Core | None = None,
                 choice: dict[str, Any] | None = None, first_shape: tuple[int, int] | None = None) -> None:
        self.model_info = model
        self.device = device
        self.choice = choice  # how the variant and precision were chosen (edge_anime.runtime.choice), for reports
        self.core = core if core is not None else ov.Core()
        self.properties = compile_properties(device)  # the cache folder is checked by the compile lock
        try:
            self._model = self.core.read_model(str(model.xml), str(model.bin))
        except RuntimeError as exc:
            raise ModelError(f"{model.xml}: OpenVINO cannot read the IR: {_first_line(exc)}") from exc
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, int], ov.CompiledModel] = OrderedDict()
        self._released: set[tuple[int, int]] = set()  # cached shapes whose activation memory was given back
        self._sync_requests: dict[int, tuple[ov.CompiledModel, ov.InferRequest, threading.Lock]] = {}
        self._compiling: dict[tuple[int, int], threading.Event] = {}  # sizes being compiled, set when done
        self._model_lock = threading.Lock()
        self._dynamic: ov.CompiledModel | None = None
        self.compiles = 0  # how many compile_model calls this engine made (tests and bench read it)
        self.effective = self._plugin_choice(first_shape)
        self.num_requests = self._pick_num_requests(self.effective)
        self._log_choice()

    # -- compile -------------------------------------------------------------------------------------
    def _compile(self, model: ov.Model | str) -> ov.CompiledModel:
        try:
            with cache_lock(self.device.cache_dir):
                compiled = self.core.compile_model(model, self.device.name, self.properties)
        except RuntimeError as exc:
            raise ModelError(
                f"device: the CPU plugin refused the model or a property {sorted(self.properties)}: "
                f"{_first_line(exc)}"
            ) from exc
        with self._lock:
            self.compiles += 1
        return compiled

    def _plugin_choice(self, first_shape: tuple[int, int] | None) -> dict[str, Any]:
        """What the plugin runs with (``read_back``): from a small read-back compile, or, for static shapes, from
        an earlier start's identical one (``readback``: that compile is ~15 % of a warm start).
        ``first_shape`` (H, W): an engine that will run only that size (the variant timing's) reads back from
        that size's compile, kept in the cache: a read-back compile beside it would double its compiled models."""
        if self.device.shape_policy == "dynamic":
            self._dynamic = self._compile(self._model)
            return read_back(self._dynamic)
        if first_shape is not None:
            size = (int(first_shape[0]), int(first_shape[1]))
            compiled = self._cache[size] = self._compile(self._static_model(*size))
            return read_back(compiled)
        side = max(READBACK_SIDE_PX, self.model_info.size_multiple)
        side -= side % self.model_info.size_multiple
        key = self._readback_key(side)
        known = readback.load(self.device.cache_dir, key) if key is not None else None
        if known is not None:
            return known
        effective = read_back(self._compile(self._static_model(side, side)))
        if key is not None:
            readback.save(self.device.cache_dir, key, effective)
        return effective

    def _readback_key(self, side: int) -> dict[str, Any] | None:
        """Everything the plugin's choice can depend on: the box, OpenVINO, the model, the properties; None
        for a model without digests in its manifest (nothing would tell that it changed)."""
        ir = self.model_info.manifest.get("ir") or {}
        if not ir.get("xml_sha256") or not ir.get("bin_sha256"):
            return None
        return {**box_key(), "huge_pages": huge_pages_on(), "openvino": ov.get_version(),
                "model": [str(ir["xml_sha256"]), str(ir["bin_sha256"])],
                "properties": {k: _property_value(v) for k, v in sorted(self.properties.items())},
                "readback_side": side}

    def _static_model(self, height: int, width: int) -> ov.Model:
        with self._model_lock:  # compiles of different sizes run at once; one clone of the source at a time
            static = self._model.clone()
        try:
            static.reshape({static.input(0): ov.PartialShape([1, height, width, 3])})
        except RuntimeError as exc:  # an IR that is not the u8 NHWC contract, or a size it cannot take
            raise ModelError(
                f"{self.model_info.xml}: cannot reshape to 1x{height}x{width}x3: {_first_line(exc)}") from exc
        return static

    def compiled(self, height: int, width: int) -> ov.CompiledModel:
        """The compiled model for one input size: the shared dynamic one, or a static one from the LRU."""
        if self._dynamic is not None:
            return self._dynamic
        key = (int(height), int(width))
        while True:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    if key in self._released:  # its next inference allocates again: make room first
                        self._released.discard(key)
                        self._fit_bounds(key)
                    return hit
                pending = self._compiling.get(key)
                if pending is None:
                    pending = self._compiling[key] = threading.Event()
                    break
            # Another thread compiles this size: wait for it, then look again (its compile may have failed,
            # or the size been evicted already; then this thread compiles it).
            pending.wait()
        # Compiled outside self._lock (one compile per size through the event above), so a decode thread whose
        # size is cached never waits behind another size's compile or the cross-process cache flock.
        try:
            compiled = self._compile(self._static_model(*key))
            with self._lock:
                self._cache[key] = compiled
                self._fit_bounds(key)
        finally:
            with self._lock:
                del self._compiling[key]
            pending.set()
        return compiled

    def _fit_bounds(self, keep: tuple[int, int]) -> None:
        """Bring the cache within its bounds for ``keep`` (just used), under ``self._lock``."""
        for key in list(self._cache):  # least recently used first
            if self.cache_mb() <= self.device.shape_cache_mb:
                break
            if key != keep and key not in self._released:
                self._release(key)
        while len(self._cache) > self.device.shape_cache_size or (
                len(self._cache) > 1 and self.cache_mb() > self.device.shape_cache_mb):
            evicted, old = self._cache.popitem(last=False)
            self._released.discard(evicted)
            self._sync_requests.pop(id(old), None)
            log.debug("shape cache full: dropped %dx%d", evicted[1], evicted[0])

    def release_idle(self, over_mb: float) -> float:
        """Give back the activation memory of live shapes, least recently used first, until ``over_mb`` is
        freed or none is left; returns the MB freed. For the Stylizer's bound over every style: it calls this
        on a style with no job in flight, so no inference of these shapes runs (a shape whose inference does
        run is skipped, as in ``_fit_bounds``). The compiled models stay, so the next use costs a
        page-faulting first inference, not a compile."""
        freed = 0.0
        with self._lock:
            for key in list(self._cache):
                if freed >= over_mb:
                    break
                if key not in self._released and self._release(key):
                    freed += self.shape_mb(*key) - IDLE_SHAPE_MB
        return freed

    def _release(self, key: tuple[int, int]) -> bool:
        """Give one cached shape's activation memory back (under ``self._lock``); False when the plugin
        refuses because an inference of that shape runs: it stays live."""
        try:
            self._cache[key].release_memory()
        except RuntimeError:
            return False
        self._released.add(key)
        log.debug("shape cache: released the activation memory of %dx%d", key[1], key[0])
        return True

    def shape_mb(self, height: int, width: int) -> float:
        """Estimated RSS of one live static shape: its compiled graph (``IDLE_SHAPE_MB``) plus each stream's
        activations at the measured bytes per pixel of what runs (``ACTIVATION_BYTES_PER_PX``)."""
        streams = int(self.effective.get("NUM_STREAMS", 1) or 1)
        return IDLE_SHAPE_MB + streams * height * width * self.activation_bytes_per_px() / MIB

    def activation_bytes_per_px(self) -> int:
        """Bytes per pixel per stream of this engine's activations: an INT8 IR's, or the float precision
        the plugin runs (f32 when it reports none)."""
        if self.model_info.precision == "int8":
            return ACTIVATION_BYTES_PER_PX["int8"]
        precision = str(self.effective.get("INFERENCE_PRECISION_HINT", "f32"))
        return ACTIVATION_BYTES_PER_PX.get(precision, ACTIVATION_BYTES_PER_PX["f32"])

    def cache_mb(self) -> float:
        """Estimated memory of the static shapes held (``device.shape_cache_mb`` bounds it): ``shape_mb`` for
        a live shape, ``IDLE_SHAPE_MB`` for one whose activations were given back. A shape whose inference
        is still running when the bound is applied cannot give them back until it ends, so the process may
        pass the bound by at most the shapes in flight (``engine.num_requests`` of them)."""
        return sum(IDLE_SHAPE_MB if (h, w) in self._released else self.shape_mb(h, w) for h, w in self._cache)

    def memory_mb(self) -> float:
        """``cache_mb`` read under the cache's lock: for callers on other threads (the Stylizer's bound over
        every style), while this engine's own threads may be compiling or evicting a shape."""
        with self._lock:
            return self.cache_mb()

    def released_shapes(self) -> list[tuple[int, int]]:
        """(H, W) of the cached shapes whose activation memory is given back (they allocate on next use)."""
        with self._lock:
            return [key for key in self._cache if key in self._released]

    def holds(self, compiled: ov.CompiledModel) -> bool:
        """Whether ``compiled`` is still in the cache (or is the dynamic model): holders of evicted models
        (the pipeline's queues) drop theirs so the memory really goes."""
        if compiled is self._dynamic:
            return True
        with self._lock:
            return any(c is compiled for c in self._cache.values())

    def close(self) -> None:
        """Drop the compiled models now, while the interpreter is whole: left to its teardown, OpenVINO's
        objects may be destroyed after the threads they need (an abort at exit, seen once in a test)."""
        with self._lock:
            self._cache.clear()
            self._released.clear()
            self._sync_requests.clear()
            self._dynamic = None

    def cached_shapes(self) -> list[tuple[int, int]]:
        """(H, W) of the static models held, least recently used first."""
        with self._lock:
            return list(self._cache)

    # -- inference -----------------------------------------------------------------------------------
    def infer(self, rgb: np.ndarray) -> np.ndarray:
        """H x W x 3 u8 RGB in, the stylized H x W x 3 u8 RGB out; synchronous, one request per size."""
        if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
            raise ValueError(f"Engine.infer: expected H x W x 3 uint8, got {rgb.shape} {rgb.dtype}")
        height, width = rgb.shape[:2]
        multiple = self.model_info.size_multiple
        if height % multiple or width % multiple:
            raise ValueError(f"Engine.infer: {width}x{height} is not a multiple of {multiple} "
                             "(the pipeline pads to it: imaging.tiling.pad_to)")
        compiled = self.compiled(height, width)
        with self._lock:
            entry = self._sync_requests.get(id(compiled))
            if entry is None:
                entry = (compiled, compiled.create_infer_request(), threading.Lock())
                # Kept only while the cache holds the model: eviction pops it under this lock, and an entry
                # added after that would keep the evicted model alive (this call still uses it once).
                if compiled is self._dynamic or any(c is compiled for c in self._cache.values()):
                    self._sync_requests[id(compiled)] = entry
        _, request, request_lock = entry
        with request_lock:
            request.infer({0: np.ascontiguousarray(rgb)[None]}, share_inputs=True)
            return np.array(request.get_output_tensor(0).data[0], copy=True)

    def infer_all(self, pictures: Sequence[np.ndarray], *, slots: threading.Semaphore | None = None
                  ) -> list[np.ndarray]:
        """Several pictures of one size at once, on up to ``num_requests`` requests: the crops of a picture's faces
        (``edge_anime.faces``). ``infer`` one after another would run them on one stream, one core of two.

        ``slots``: the pipeline's inference semaphore, taken before each start and given back in its callback, so
        these count against ``engine.num_requests`` like any picture. One slot is taken at a time and only while
        none is held that a running request will not give back: no deadlock with other callers taking slots."""
        if not pictures:
            return []
        height, width = pictures[0].shape[:2]
        compiled = self.compiled(height, width)
        queue = ov.AsyncInferQueue(compiled, min(len(pictures), self.num_requests))
        results: list[np.ndarray | None] = [None] * len(pictures)
        errors: list[BaseException] = []

        def finished(request: ov.InferRequest, index: int) -> None:
            try:
                results[index] = np.array(request.get_output_tensor(0).data[0], copy=True)
            except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread after wait_all
                errors.append(exc)
            finally:
                if slots is not None:
                    slots.release()

        queue.set_callback(finished)
        try:
            for index, picture in enumerate(pictures):
                if slots is not None:
                    slots.acquire()
                try:
                    queue.start_async({0: np.ascontiguousarray(picture)[None]}, index)
                except BaseException:
                    if slots is not None:
                        slots.release()
                    raise
        finally:
            queue.wait_all()
        if errors:
            raise errors[0]
        return [r for r in results if r is not None]

    # -- reporting -----------------------------------------------------------------------------------
    def _pick_num_requests(self, effective: dict[str, Any]) -> int:
        if self.device.num_requests != "auto":
            return int(self.device.num_requests)
        return max(1, int(effective.get("OPTIMAL_NUMBER_OF_INFER_REQUESTS", 1)))

    def precision_note(self) -> str | None:
        """A sentence when the plugin runs another precision than the config asked for (None when it obeys)."""
        asked = self.device.inference_precision
        got = self.effective.get("INFERENCE_PRECISION_HINT")
        if asked == "auto" or got is None or got == asked:
            return None
        return (
            f"device.inference_precision: asked for {asked}, but this CPU runs {got} "
            f"(it lacks native {asked} compute: bf16 needs AVX512_BF16/AMX, f16 needs AVX512_FP16/AMX-FP16)"
        )

    def ignored(self) -> list[str]:
        """Every property the config set that the plugin read back differently, as ``key: asked X, got Y``.

        The plugin adjusts silently (hyper-threading on a CPU without SMT, more streams than cores, an
        unsupported precision); the operator should see that the YAML line had no effect."""
        notes = []
        for key, asked in self.properties.items():
            if key not in self.effective or key == "INFERENCE_PRECISION_HINT":
                continue
            got = self.effective[key]
            if str(got).upper() != str(asked).upper():
                notes.append(f"{CONFIG_KEYS.get(key, key)}: asked {asked}, the plugin uses {got}")
        note = self.precision_note()
        return notes + ([note] if note else [])

    def describe(self) -> dict[str, Any]:
        """What the plugin chose (streams, threads, precision, optimal requests) plus what was asked."""
        try:
            full_name = str(self.core.get_property(self.device.name, "FULL_DEVICE_NAME"))
        except RuntimeError:
            full_name = self.device.name
        return {
            "model": self.model_info.name,
            "variant": self.model_info.variant_name,
            "model_precision": self.model_info.precision,
            "device": full_name,
            "openvino": ov.get_version(),
            "shape_policy": self.device.shape_policy,
            "shape_cache_size": self.device.shape_cache_size,
            "cache_dir": str(self.device.cache_dir) if self.device.cache_dir is not None else None,
            "requested": {k: v for k, v in self.properties.items() if k != "CACHE_DIR"},
            "effective": dict(self.effective),
            "num_requests": self.num_requests,
            "precision_note": self.precision_note(),
            "ignored": self.ignored(),
            "huge_pages": huge_pages_on(),
            "choice": self.choice,
        }

    def _log_choice(self) -> None:
        eff = self.effective
        if self.choice is not None:
            log.info("engine: %s: running %s", self.model_info.name, self.choice.get("summary"))
        log.info(
            "engine: %s (%s) on %s: hint=%s streams=%s threads=%s precision=%s requests=%d pinning=%s "
            "shapes=%s cache=%s huge_pages=%s",
            self.model_info.name, self.model_info.variant_name, self.device.name, eff.get("PERFORMANCE_HINT"),
            eff.get("NUM_STREAMS"), eff.get("INFERENCE_NUM_THREADS"), eff.get("INFERENCE_PRECISION_HINT"),
            self.num_requests, eff.get("ENABLE_CPU_PINNING"), self.device.shape_policy, self.device.cache_dir,
            huge_pages_on(),
        )
        for note in self.ignored():
            log.warning("engine: %s", note)


def ensure_cache_dir(cache_dir: Path) -> None:
    """Create the model cache folder, or say which key names a folder that cannot be one.

    Checked before the first compile: OpenVINO would otherwise fail deep inside ``compile_model`` (or the
    compile lock's open) with an errno and no hint that ``device.cache_dir`` is the line to change."""
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        writable = os.access(cache_dir, os.W_OK | os.X_OK)
        reason = "" if writable else "not writable by this user"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    if reason:
        raise ConfigError(f"device.cache_dir: {cache_dir}: cannot hold the model cache ({reason}); expected a "
                          "folder edge-anime can create and write, or null to compile without a cache")


@contextlib.contextmanager
def cache_lock(cache_dir: Path | None) -> Iterator[None]:
    """Serialise compiles of processes sharing one model cache.

    Measured here: three workers compiling into one cold ``device.cache_dir`` at once, one start in ten
    died of SIGBUS (OpenVINO maps a cache blob that another process is still writing). Every compile, at
    start and for a new input size later, holds this flock; the others then load the finished blob.
    """
    if cache_dir is None:
        yield
        return
    ensure_cache_dir(Path(cache_dir))
    with locked(Path(cache_dir) / ".edge-anime-compile.lock"):
        yield


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
