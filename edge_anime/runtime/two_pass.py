"""Full-resolution inference (``image.resize: full``): the whole picture in one piece, or in tiles normalised
with the whole picture's GroupNorm statistics (issue #17; the IR pair is built by ``convert``, the tile
geometry is ``imaging.tiling``, the sizes ``imaging.fullres``).

Tiled run: pass 1 runs a downscaled copy through the style's pass-1 IR and reads back ``gn_stats``; then
every tile runs through the pass-2 IR with those statistics and its ``tile_origin`` (so the decoder's
upsampling samples where the whole picture's does), and the outputs are blended in run order. All tiles are
one static shape, so pass 2 compiles once per tile size (and the engine's cache keeps it). Tiles are
started asynchronously on ``engine.num_requests`` infer requests taken in turn: waiting on the oldest one
gives the results in order for the blend while the next one is already queued. Each running tile holds one
of the pipeline's inference slots, so tiles and other pictures share the requests as every job does.

Pass 1 compiles with the LATENCY hint (``latency_device``): one stream over every core. On a small box
(up to ``LATENCY_MAX_CORES`` usable cores) the whole picture and pass 2 do too. A full-resolution picture
is one long job, and measured on a 2-core AMX Xeon (f32, toon; the commands are in docs/fullres.md) one
stream did a lone whole picture in half the time THROUGHPUT's one-core stream did (2.63-2.85 against
5.03-5.47 s/MP at 0.3-1 MP) and two at once as fast (2.63-2.83 against 2.70-2.83). A stream holds the
activations of one inference however many requests queue on it, so the tiles are planned for pass 2's
streams (``streams``): on 2 cores tiles of twice the pixels, whose margins are a smaller share (12 MP: 30
tiles of 664x736 instead of 80 of 448x472, 13 % less time). On a bigger box the configured hint stays: on
the lent 16-core Xeon one stream ran 0.67-0.71x the speed of 4-16 (docs/design.md).

Plain infer requests, not an ``AsyncInferQueue``: a queue made and dropped per call deadlocked in its
destructor in ``timing`` (see its history); a request list has no such teardown.

Every wait on an inference is bounded (``wait_limit_s``, ``_done_within``). Issue 42 item 15: a test timed out
at load 15-34 with the main thread "in ``request.wait()``". That was no lost wake-up: no callback is set on
these requests, and ``wait`` waits on the future the plugin's last stage always sets, error or not.
pytest-timeout's signal method (a failed test, the run going on, as reported) runs its handler only once the
main thread is back in Python: a SIGALRM 0.5 s into a 22 s ``wait()`` was handled at 21.9 s, on the
``wait()`` line. So the dump showed a wait that had returned, in a slow run whose 600 s also count the
fixtures' setup (the pair's conversion: about a minute alone). Two hangs were real, in ``_tiles``: two
tiled pictures deadlocked on the pipeline's shared slots, and a tile whose wait raised in the cleanup left
the other tiles' slots taken. Still, a plugin that never finished would hang a picture without a word, so
the waits come in slices (signal handlers and Ctrl-C run between them) and, past the limit, the picture
fails with a ``TransientError`` that says so.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import openvino as ov
from PIL import Image

from ..config import DeviceSection
from ..errors import ConfigError, ModelError, TransientError
from ..imaging.fullres import FullPlan, padded
from ..imaging.planner import resize_image
from ..imaging.tiling import Blender, cut_tile, plan_tiles
from .engine import Engine
from .host import usable_cores

log = logging.getLogger(__name__)

# Up to this many usable cores the whole picture and pass 2 run one stream over every core (module
# docstring): measured even with two one-core streams in a burst on 2 cores, 0.67-0.71x of 4-16 streams on 16.
LATENCY_MAX_CORES = 4

# How long one inference of a full-resolution picture (pass 1, a tile, a whole picture) is waited for before the
# picture is given up as stuck. A tile is sized to the memory budget: about 3 s at 1 MP on 2 cores (2.6-2.9 s/MP,
# module docstring) and 15 s at 6x load (measured, issue 42). A whole picture is at most the budget's few MP:
# 15 minutes is far past either, so only an inference that will never end reaches it.
WAIT_LIMIT_S = 900.0
# The slice each wait blocks in: signal handlers (pytest-timeout, Ctrl-C in a caller on the main thread) run between.
WAIT_SLICE_S = 0.5

STATS_NAME = "gn_stats"
ORIGIN_NAME = "tile_origin"


class TwoPass:
    """Runs ``FullPlan`` s for one style: the plain IR for whole pictures, the pass-1/pass-2 IRs for tiles,
    each on an engine compiled on first use with the plain engine's Core and device settings, at the LATENCY
    hint for pass 1 and, on a small box, for the others (``picture_device``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        self._pair: tuple[Engine, Engine] | None = None
        self._whole: Engine | None = None
        self._picture_device = picture_device(engine.device)  # the whole picture's and pass 2's settings
        self._streams: int | None = None  # pass 2's NUM_STREAMS, set by the first ``streams``
        self.margin_px = 0
        self.wait_limit_s = WAIT_LIMIT_S  # how long one inference is waited for (module docstring)

    def whole_engine(self) -> Engine:
        """The plain IR for whole pictures (a style without a pair runs these too): the plain engine itself
        where ``picture_device`` keeps the configured settings (a big box), else one of its own at the LATENCY
        hint, made on the first whole picture."""
        if self._picture_device == self.engine.device:
            return self.engine
        with self._lock:
            if self._whole is None:
                self._whole = Engine(self.engine.model_info, self._picture_device, core=self.engine.core)
            return self._whole

    def streams(self) -> int:
        """How many inferences' activations the tiles hold at once: pass 2's streams (the plan's
        ``requests``), however many requests queue on them. Read once: the pipeline asks on every picture,
        and a style without a pair would search its manifest and raise each time."""
        if self._streams is None:
            try:
                self._streams = max(1, int(self.pair()[1].effective.get("NUM_STREAMS", 1)))
            except ModelError:
                self._streams = 1  # no pair: whole pictures only, which the plan sizes without it
        return self._streams

    def pair(self) -> tuple[Engine, Engine]:
        """The pass-1 and pass-2 engines; a ``ModelError`` naming the fix when the style has no pair."""
        with self._lock:
            if self._pair is None:
                info = self.engine.model_info
                found = info.tiling_pair()
                if found is None:
                    raise ModelError(
                        f"{info.directory}: style {info.name} has no tiling pair (variants with role "
                        "gn_stats_out/gn_stats_in), which image.resize: full needs for pictures over "
                        "image.memory_budget_mb: re-run 'edge-anime convert' on its checkpoint (fp16 or fp32)")
                first, second = found
                self.margin_px = int(second.manifest["tiling"]["margin_px"])
                self._pair = (Engine(first, latency_device(self.engine.device), core=self.engine.core),
                              Engine(second, pass2_device(self._picture_device), core=self.engine.core))
            return self._pair

    def prepare(self) -> None:
        """Compile the pair now (a service start), or say once that this style can only run whole pictures."""
        try:
            self.pair()
        except ModelError as exc:
            log.warning("image.resize: full: %s", exc)

    def close(self) -> None:
        _prune_given_up()
        with self._lock:
            engines = [*(self._pair or ()), *([self._whole] if self._whole is not None else [])]
            self._pair = self._whole = None
        for engine in engines:
            engine.close()

    # -- running -------------------------------------------------------------------------------------
    def run(self, rgb: np.ndarray, full: FullPlan, *, slots: threading.Semaphore | None = None,
            stats: str = "whole", on_tile: Callable[[int, int], None] | None = None) -> np.ndarray:
        """``rgb`` (H x W x 3 u8 at ``full.size``) -> the stylized picture at the same size.

        ``on_tile(done, total)`` is called on this thread once per tile, after it is blended, in run order
        (``done`` 1..``total``): a tiled picture is minutes of one job, and this is how a progress bar sees
        inside it. A whole picture is one step and does not call it.
        ``stats="own"`` tiles with the plain IR, each tile normalised by itself: the baseline the benchmark
        and tests compare against, never what the service runs."""
        slots = slots if slots is not None else threading.BoundedSemaphore(self.engine.num_requests)
        if not full.tiled:
            return self._run_whole(rgb, slots)
        if stats == "own":
            self.pair()  # for the margin
            compiled_for: Callable[[int, int], ov.CompiledModel] = self.engine.compiled
            extra: Callable[[int, int], dict[Any, np.ndarray]] = lambda top, left: {}  # noqa: E731
        else:
            first, second = self.pair()
            gn_stats = self.statistics(rgb, full, first, slots)
            height, width = padded(full.size)[1], padded(full.size)[0]
            compiled_for = second.compiled

            def extra(top: int, left: int) -> dict[Any, np.ndarray]:
                origin = np.array([[height, width, top, left]], np.float32)
                return {STATS_NAME: gn_stats, ORIGIN_NAME: origin}
        return self._tiles(rgb, full, compiled_for, extra, slots, on_tile)

    def statistics(self, rgb: np.ndarray, full: FullPlan, first: Engine, slots: threading.Semaphore) -> np.ndarray:
        """Pass 1 on the downscaled copy: ``gn_stats`` [1, K, 2]; its activation memory is given back after."""
        small = rgb if full.pass1_size == full.size else np.asarray(
            resize_image(Image.fromarray(rgb), full.pass1_size))
        small = cut_tile(small, 0, 0, *padded_hw(small.shape[0], small.shape[1]))
        compiled = first.compiled(small.shape[0], small.shape[1])
        request = compiled.create_infer_request()
        with slots:
            request.start_async({0: small[None]})
            self._finish(request, "pass 1", small)
            found = np.array(request.get_tensor(STATS_NAME).data, dtype=np.float32, copy=True)
        del request
        _release(compiled, "pass 1")  # the tiles need that memory now; a later pass 1 allocates it again
        return found

    def _run_whole(self, rgb: np.ndarray, slots: threading.Semaphore) -> np.ndarray:
        height, width = rgb.shape[:2]
        canvas = cut_tile(rgb, 0, 0, *padded_hw(height, width))
        engine = self.whole_engine()
        compiled = engine.compiled(canvas.shape[0], canvas.shape[1])
        request = compiled.create_infer_request()
        with slots:
            request.start_async({0: canvas[None]}, share_inputs=True)
            self._finish(request, "the whole picture", canvas)  # its input is shared: kept with it if given up
            out = np.array(request.get_output_tensor(0).data[0, :height, :width], copy=True)
        del request
        if engine is not self.engine:  # the plain engine's shapes are bounded by its own cache and the styles'
            _release(compiled, "whole picture")  # the encode's canvas needs it next, as after the tiles
        return out

    def _tiles(self, rgb: np.ndarray, full: FullPlan, compiled_for: Callable[[int, int], ov.CompiledModel],
               extra: Callable[[int, int], dict[Any, np.ndarray]], slots: threading.Semaphore,
               on_tile: Callable[[int, int], None] | None = None) -> np.ndarray:
        self.pair()
        try:
            plan = plan_tiles(full.size[0], full.size[1], tile=full.tile_px, margin=self.margin_px)
        except ValueError as exc:
            raise ConfigError(f"image.tile_px: {exc} (the style's margin is {self.margin_px} px)") from None
        compiled = compiled_for(plan.tile_h, plan.tile_w)
        requests = [compiled.create_infer_request() for _ in range(max(1, self.engine.num_requests))]
        out = np.empty((full.size[1], full.size[0], 3), np.uint8)
        blender = Blender(plan, out)
        pending: deque[tuple[ov.InferRequest, tuple[int, int, int]]] = deque()
        blended = 0
        stuck = False  # a tile was given up: those queued behind it on the same streams are not waited for

        def collect() -> None:
            nonlocal blended, stuck
            request, where = pending.popleft()
            try:
                if not _done_within(request, self.wait_limit_s):
                    stuck = True
                    raise self._stuck(request, f"tile {blended + 1} of {plan.count}")
                blender.add(*where, request.get_output_tensor(0).data[0])
            finally:
                slots.release()
            blended += 1
            if on_tile is not None:
                on_tile(blended, plan.count)

        try:
            for index, (row, top, left) in enumerate(plan.tiles()):
                if len(pending) == len(requests):
                    collect()
                request = requests[index % len(requests)]
                inputs: dict[Any, np.ndarray] = {0: cut_tile(rgb, top, left, plan.tile_h, plan.tile_w)[None]}
                inputs.update(extra(top, left))
                # Never wait for a slot while holding one: the slots this picture holds are given back only by
                # ``collect`` on this thread, so two tiled pictures blocked in ``acquire`` with the pool split
                # between them would wait for each other for good (issue 42: two threads, 2 slots, no tile
                # ever again). With tiles in flight, a slot that is not free now is made by collecting ours.
                while not slots.acquire(blocking=not pending):
                    collect()
                try:
                    request.start_async(inputs)
                except BaseException:
                    slots.release()
                    raise
                pending.append((request, (row, top, left)))
            while pending:
                collect()
        finally:
            # An error: let what runs finish before its request goes, and give back every slot whatever its
            # wait raises (a slot kept here is one fewer for every later picture of the pipeline, for good).
            while pending:
                request, _ = pending.popleft()
                try:
                    if stuck or not _done_within(request, self.wait_limit_s):
                        stuck = True
                        _give_up(request)
                except Exception:
                    log.debug("tiles: a tile's inference failed after the picture's error", exc_info=True)
                finally:
                    slots.release()
            del requests
            if not stuck:  # the encode's canvas needs that memory next (imaging.fullres counts it so); a new
                _release(compiled, "tiles")  # picture allocates it again, which costs little beside its tiles
        return blender.finish()

    def _finish(self, request: ov.InferRequest, what: str, shared: np.ndarray | None = None) -> None:
        """Wait for the started ``request`` up to ``wait_limit_s``; past it ``_stuck``'s error."""
        if not _done_within(request, self.wait_limit_s):
            raise self._stuck(request, what, shared)

    def _stuck(self, request: ov.InferRequest, what: str, shared: np.ndarray | None = None) -> TransientError:
        """The error for an inference past ``wait_limit_s``, naming ``what`` (the watch folder retries it later,
        ``batch`` lists it); the request is kept running (``_give_up``), with ``shared``, the input it reads."""
        log.error("%s: still running after %.0f s; given up, the request kept until it ends", what, self.wait_limit_s)
        _give_up(request, shared)
        return TransientError(f"{what}: no result from OpenVINO after {self.wait_limit_s:.0f} s (stuck, or the box "
                             "far too loaded); the picture is given up", stage="infer")


# Requests given up while still running, with any input they share: dropping a running InferRequest waits for it
# in its destructor, holding the GIL, which would hang every thread where the limit was to end one picture's wait.
_GIVEN_UP: list[tuple[ov.InferRequest, np.ndarray | None]] = []
_GIVEN_UP_LOCK = threading.Lock()


def _done_within(request: ov.InferRequest, limit_s: float) -> bool:
    """Whether the started ``request`` finished within ``limit_s``, waited for in ``WAIT_SLICE_S`` slices; an
    inference that failed raises here. Only for started requests: ``wait_for`` says False on a fresh one."""
    deadline = time.monotonic() + limit_s
    slice_ms = max(1, int(min(WAIT_SLICE_S, limit_s) * 1000))
    while not request.wait_for(slice_ms):
        if time.monotonic() >= deadline:
            return False
    return True


def _give_up(request: ov.InferRequest, shared: np.ndarray | None = None) -> None:
    """Keep ``request`` (and ``shared``) until it ends; those given up before that have ended are let go."""
    _prune_given_up()
    with _GIVEN_UP_LOCK:
        _GIVEN_UP.append((request, shared))


def _prune_given_up() -> None:
    """Let go of the given-up requests that have ended (their destructors no longer wait)."""
    with _GIVEN_UP_LOCK:
        kept = []
        for entry in _GIVEN_UP:
            try:
                ended = entry[0].wait_for(0)
            except Exception:  # noqa: BLE001 - it ended, with an error nobody waits for now
                ended = True
            if not ended:
                kept.append(entry)
        _GIVEN_UP[:] = kept


def _release(compiled: ov.CompiledModel, what: str) -> None:
    """Give a shape's activation memory back; kept while another picture's inference still runs on it."""
    try:
        compiled.release_memory()
    except RuntimeError:
        log.debug("%s: activation memory still in use by another picture; kept", what)


def picture_device(device: DeviceSection, cores: int | None = None) -> DeviceSection:
    """The whole picture's and pass 2's device settings: LATENCY up to LATENCY_MAX_CORES usable cores, else
    the configured ones."""
    cores = cores if cores is not None else usable_cores()
    return latency_device(device) if cores <= LATENCY_MAX_CORES else device


def pass2_device(device: DeviceSection) -> DeviceSection:
    """Pass 2's device settings: ``device`` at f32 inference precision, whatever precision the style's plain IR
    runs at (issue 41). Measured on an AVX-512 BF16 AMD EPYC (toon fp16 pair, scene_0 at 2048x1536, 768 px
    tiles, pass 1 816x612; ``benchmarks/fullres.py --parts shipped``, docs/fullres.md): with pass 2 at bf16 the
    tiled picture was 23.9 dB from the same tiles at f32, a visibly softer picture, while the whole picture at
    bf16 is 55.4 dB from f32 and pass 1 at bf16 with pass 2 at f32 58.6 dB. Keeping the nodes that do not depend
    on the image (the statistics and ``tile_origin`` arithmetic) at f32 with ``disable_fp16_compression`` did
    not help (23.9 dB), so the whole of pass 2 runs at f32: 63 s against 40 s for those tiles on that box, the
    measured choice's bf16 is kept for pass 1 and whole pictures."""
    return device.model_copy(update={"inference_precision": "f32"})


def latency_device(device: DeviceSection) -> DeviceSection:
    """Pass 1's device settings: one stream over every core. Pass 1 is one request that the tiles wait for;
    in THROUGHPUT's one-core-per-stream setup it left the other cores idle (at 1 MP it ran a third of the
    picture's pixels on one of two cores: a third of the wall time)."""
    return device.model_copy(update={"performance_hint": "LATENCY", "num_streams": "auto", "num_requests": "auto"})


def padded_hw(height: int, width: int) -> tuple[int, int]:
    """(H, W) rounded up to the network's multiple of 4."""
    w, h = padded((width, height))
    return h, w
