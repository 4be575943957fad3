"""Files in, stylized files out, with the two cores kept on inference.

Three overlapping stages:
  decode pool (``pipeline.decode_threads``): read, decode, plan (resize), then start an async inference;
  OpenVINO ``AsyncInferQueue`` per compiled shape, ``engine.num_requests`` inferences in flight in total;
  encode pool (``pipeline.encode_threads``): finish (alpha, upscale), encode, ``write_atomic``.
Pillow's decode/encode and OpenVINO's inference release the GIL, so threads are enough and the heavy work
of one image overlaps the inference of the others.

Back-pressure: ``submit`` takes one of ``pipeline.max_in_flight`` slots and blocks while none is free; a slot
is given back when the job's ``on_done`` has run. Every queue between the stages therefore holds at most
``max_in_flight`` jobs, which bounds memory without a bounded queue per stage. A second semaphore of
``engine.num_requests`` caps the inferences running across all shapes, so two photo sizes do not put twice
the requests on the cores.

Why ThreadPoolExecutor and not hand-written worker threads: it gives the worker loop, shutdown and
``cancel_futures`` (jobs still waiting when the pipeline closes get their ``on_done`` with an error).
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import openvino as ov
from PIL import Image

from .. import imaging
from ..config import Config
from ..errors import TransientError
from ..fsutil import write_atomic
from ..imaging.decoded import Decoded
from ..imaging.decoder import HEAVY_DECODE_MPX, decode_cost_mpx
from ..imaging.encoder import FORMAT_BY_EXT
from ..imaging.fringe import clean_fringes
from ..imaging.ink import draw_ink
from ..imaging.palette import apply_palette
from ..imaging.tiling import pad_to
from ..imaging.tone import restore_tone
from ..inputs import read_regular
from ..models import InkSpec, ModelInfo, PaletteSpec, ToneSpec
from ..runtime.engine import Engine
from ..runtime.host import usable_cores

if TYPE_CHECKING:
    from ..faces.detect import Face
    from ..faces.restyle import FaceRestyler
    from ..runtime.two_pass import TwoPass

log = logging.getLogger(__name__)

# Stage names, in the order a job passes them; every JobResult carries all of them (0.0 when not reached).
# compile: a static shape compiled (or loaded from the model cache) for this job's size;
# wait: time the decoded image waited for a free inference request.
# detect: the face detector on the planned picture (``image.faces: auto``); faces: the faces' own inferences and
# their paste (edge_anime.faces), after the whole picture's inference and before its palette, and their drawing
# (``image.portrait: auto``) after the tone guard.
# palette: the style's cel palette on the model's output (imaging.palette);
# tone: then the style's tone guard (imaging.tone), before finish and encode. The guard goes after the palette
# because it works from the photo: it pulls back to grey what the photo has grey, whatever entry painted it; its
# time includes the faces' colour fringes (imaging.fringe), cleaned in the ink's keep-out after it.
# Measured on ../shared/photos (toon, 1024 px, JPEG 92): this order gives texture 0.34 and chroma 1.00 where the
# other gave 0.37 and 0.96, with casts no higher.
# ink: the style's lines from the photo (imaging.ink), after the guard (its curve would lighten them) and before
# the portraits are drawn (a drawn face keeps its own lines), faces' boxes left out.
STAGES: tuple[str, ...] = ("read", "decode", "resize", "detect", "compile", "wait", "infer", "faces", "palette",
                           "tone", "ink", "encode", "write")
# Of a face's box (brows to chin): the ink stays off the face and its hair, which the portrait draws with strand lines
# of its own (inked, a blonde crown got black arcs: a rater's "specks in the hair"); beside, above, below.
FACE_INK_MARGIN = (0.5, 0.8, 0.5)


TileCallback = Callable[[int, int], None]  # (tiles done, tiles in the picture), see ``Job``


@dataclass(frozen=True)
class Job:
    """One picture to stylize. From a file (``src``) or from bytes already in memory (``data``; ``src`` then
    only names it in errors); to a file (``dst``, written with fsutil.write_atomic, its suffix picks the
    format) or, with ``dst`` None, back to the caller: as ``JobResult.image`` (the Python API), or with
    ``encode_as`` (an extension: jpg, png, webp) as ``JobResult.data``, the bytes the file would hold, encoded
    by the same stage from the same decoded source (HTTP: metadata after a PNG's pixels is kept as for files).

    A clip's frame (edge_anime/video) comes already decoded and planned (``planned``: read and decode are
    skipped, the rest is a photo's path) and is called back on its own ``notify`` instead of the pipeline's
    ``on_done``, so frames and photos share one pipeline whatever the caller of each.

    ``on_tile`` shows progress inside a picture that runs in tiles (``image.resize: full``, ``two_pass``): it
    is called ``on_tile(done, total)`` once per tile as the tile is blended, in order, ``done`` 1..``total``,
    on the pipeline thread that runs the picture (keep it quick: the next tile waits for it). A picture
    inferred in one piece never calls it; its ``on_done`` is its one step. What it raises is logged, never
    the job's failure: a progress bar's bug must not lose a picture."""

    src: Path  # a str or os.PathLike is taken too (``__post_init__``)
    dst: Path | None
    tag: object = None  # the caller's own data (the Stylizer's future for the job), never read here
    data: bytes | None = field(default=None, repr=False, compare=False)
    planned: Decoded | None = field(default=None, repr=False, compare=False)  # decoded and planned already
    notify: Callable[[JobResult], None] | None = field(default=None, repr=False, compare=False)
    tone: bool = True  # False: the caller runs the tone guard itself (a clip's writer, in frame order)
    palette: bool = True  # False: no cel palette nor lost colours (a clip's frame: chosen per frame, they flicker)
    ink: bool = True  # False: no ink lines (a clip's frame: lines found per frame would flicker on noise)
    on_tile: TileCallback | None = field(default=None, repr=False, compare=False)  # (done, total) per tile
    encode_as: str | None = None  # with dst None: encode to this extension, into JobResult.data
    # The header of ``data`` as the caller read it (``imaging.decoder.decode_header``: the HTTP service refuses
    # a picture by it before a queue slot): the decode lane is chosen by its ``cost_mpx`` instead of a second
    # read. None: the pipeline reads it itself (``decode_cost_mpx``).
    header: Decoded | None = field(default=None, repr=False, compare=False)
    # image.faces: auto: the faces of a clip's frame, found and smoothed over frames by the clip's reader (in the
    # planned picture's pixels); None: the pipeline finds them itself.
    faces: tuple[Face, ...] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        """``src`` and ``dst`` as given: a str or any os.PathLike is taken as docs/api.md shows it (issue 42:
        ``Job(src="a.jpg", dst="b.jpg")`` failed deep in the pipeline on ``'str' object has no attribute
        'name'``); the fields are Paths from here on."""
        if not isinstance(self.src, Path):
            object.__setattr__(self, "src", Path(os.fspath(self.src)))
        if self.dst is not None and not isinstance(self.dst, Path):
            object.__setattr__(self, "dst", Path(os.fspath(self.dst)))


@dataclass
class JobResult:
    job: Job
    error: BaseException | None  # InputError / TransientError / other (a bug); None when ok
    timings_s: dict[str, float]  # per stage, see STAGES; plus "total" (submit to done)
    in_size: tuple[int, int] | None = None  # (W, H) decoded
    out_size: tuple[int, int] | None = None  # (W, H) written
    image: Image.Image | None = None  # the stylized picture, for a job without ``dst`` or ``encode_as``
    data: bytes | None = field(default=None, repr=False)  # the encoded picture, for a job with ``encode_as``
    # image.faces: auto: each face restyled or drawn, as (x, y, w, h) in the output's pixels, largest first; [] else
    faces: list[tuple[int, int, int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class _Work:
    """One job on its way through the stages."""

    job: Job
    submitted: float
    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    planned: Decoded | None = None
    stylized: np.ndarray | None = None
    in_size: tuple[int, int] | None = None
    out_size: tuple[int, int] | None = None
    image: Image.Image | None = None
    encoded: bytes | None = field(default=None, repr=False)  # the output's bytes, for a job with encode_as
    infer_started: float = 0.0
    queue_id: int = 0
    data: bytes | None = field(default=None, repr=False)  # the file's bytes, read on the decode lane
    heavy: bool = False  # on the heavy decode lane (Pipeline._to_heavy_lane)
    feed: np.ndarray | None = field(default=None, repr=False)  # the padded input, alive while it is inferred
    faces: list[Face] = field(default_factory=list)  # image.faces: auto: found in the planned picture

    @property
    def picture(self) -> Decoded:
        """The decoded, planned picture: set by the decode stage before any later stage runs."""
        assert self.planned is not None, "a stage ran before the decode stage"
        return self.planned


def in_flight_slots(configured: int | str, num_requests: int) -> int:
    """``pipeline.max_in_flight``: the number configured, or with ``auto`` two jobs per infer request (one
    inferring while the next is decoded and waiting), which keeps the requests busy without holding more
    decoded pictures than that. Also the HTTP admission's measure (``Stylizer.max_in_flight``)."""
    return 2 * num_requests if configured == "auto" else int(configured)


class Pipeline:
    """decode threads -> AsyncInferQueue -> encode threads; ``on_done`` exactly once per submitted job."""

    def __init__(self, engine: Engine, config: Config, *, on_done: Callable[[JobResult], None],
                 face_engine: Engine | None = None) -> None:
        """``face_engine``: the style faces are restyled in (``model.face_style``); None: ``engine``'s own."""
        self.engine = engine
        self.config = config
        self._on_done = on_done
        self.multiple = max(config.image.multiple, engine.model_info.size_multiple)
        self.max_in_flight = in_flight_slots(config.pipeline.max_in_flight, engine.num_requests)
        self._slots = threading.BoundedSemaphore(self.max_in_flight)
        self._infer_slots = threading.BoundedSemaphore(engine.num_requests)
        self._infer_lock = threading.Lock()
        self._queues: OrderedDict[int, tuple[ov.CompiledModel, ov.AsyncInferQueue]] = OrderedDict()
        # Queues of shapes dropped from the LRU that still had inferences running: kept (with their compiled
        # model) until those finish, then released on a later shape change. Waiting for them instead would
        # idle the cores at every size change (measured: 0.69x images/s on mixed photos with a cache of 1).
        self._retired: list[tuple[ov.CompiledModel, ov.AsyncInferQueue]] = []
        self._running: dict[int, int] = {}  # id(queue) -> inferences started and not yet called back
        self._running_lock = threading.Lock()  # apart from _infer_lock: callbacks never wait on start_async
        decode_threads, encode_threads = stage_threads(config)
        self._decoders = ThreadPoolExecutor(decode_threads, thread_name_prefix="ea-decode")
        # A decode its header says is heavy (imaging.decoder.decode_cost_mpx) runs on a lane of its own, so one
        # huge or many-scan picture never holds up the photos queued behind it (issue 28: 129 s of wait).
        self._heavy_decoders = ThreadPoolExecutor(1, thread_name_prefix="ea-decode-heavy")
        self._encoders = ThreadPoolExecutor(encode_threads, thread_name_prefix="ea-encode")
        self.tone = tone_for(engine.model_info, config)  # the style's guard (None: off), imaging.tone
        self.palette = palette_for(engine.model_info, config)  # the style's cel palette (None: off)
        self.ink = ink_for(engine.model_info, config)  # the style's ink lines (None: off)
        self._twopass: TwoPass | None = None  # for resize: full, its pair compiled at start like the engine
        if config.image.resize == "full":
            from ..runtime.two_pass import TwoPass

            self._twopass = TwoPass(engine)
            self._twopass.prepare()
        self.faces: FaceRestyler | None = None  # image.faces: auto (edge_anime.faces)
        if config.image.faces == "auto":
            from ..faces.restyle import FaceRestyler

            self.faces = FaceRestyler(config, face_engine if face_engine is not None else engine,
                                      chosen_style=face_engine is not None)
        self._state = threading.Condition()
        self._in_flight = 0
        self._closed = False

    # -- public --------------------------------------------------------------------------------------
    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.drain(timeout_s=None)
        self.close()

    @property
    def twopass(self) -> TwoPass | None:
        """The ``two_pass.TwoPass`` that runs ``resize: full`` pictures (None in other modes): a caller that
        knows its photos' size compiles their shapes ahead with it (benchmarks/fullres.py does)."""
        return self._twopass

    @property
    def in_flight(self) -> int:
        """Jobs submitted whose ``on_done`` has not run yet."""
        with self._state:
            return self._in_flight

    def submit(self, job: Job) -> None:
        """Queue one job; blocks while ``max_in_flight`` jobs are in flight (the back-pressure)."""
        if self._closed:
            raise RuntimeError("Pipeline.submit after close()")
        self._slots.acquire()
        with self._state:
            self._in_flight += 1
        work = _Work(job=job, submitted=time.perf_counter())
        try:
            future = self._decoders.submit(self._decode_stage, work)
        except RuntimeError as exc:  # closed between the check and here
            self._finish(work, TransientError(f"{job.src}: pipeline closed before the job ran", stage="queue"))
            raise RuntimeError("Pipeline.submit after close()") from exc
        future.add_done_callback(functools.partial(self._cancelled, work=work, stage="decode"))

    def drain(self, timeout_s: float | None) -> bool:
        """Wait until every submitted job has had its ``on_done``; False when ``timeout_s`` ran out first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._state:
            while self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._state.wait(left)
        return True

    def close(self) -> None:
        """Stop: jobs not started yet get ``on_done`` with a TransientError; those running finish first."""
        self._closed = True
        self._decoders.shutdown(wait=True, cancel_futures=True)
        self._heavy_decoders.shutdown(wait=True, cancel_futures=True)  # after: only the decoders submit to it
        with self._infer_lock:
            queues = [q for _, q in [*self._queues.values(), *self._retired]]
        for queue in queues:
            queue.wait_all()
        self._encoders.shutdown(wait=True, cancel_futures=False)
        with self._infer_lock:
            self._queues.clear()
            self._retired.clear()
            twopass, self._twopass = self._twopass, None
        if twopass is not None:
            twopass.close()
        if self.faces is not None:
            self.faces.close()

    # -- stages --------------------------------------------------------------------------------------
    def _decode_stage(self, work: _Work) -> None:
        try:
            if self._to_heavy_lane(work):
                return
            self._read_decode_plan(work)
            if self.faces is not None:
                self._detect(work)
            if work.picture.full is not None:  # resize: full runs here, its tiles on the same slots
                self._run_full(work)
                return
            self._start_inference(work)
        except BaseException as exc:  # noqa: BLE001 - every failure is this job's result, never the pipeline's
            self._finish(work, exc)

    def _read_decode_plan(self, work: _Work) -> None:
        cfg = self.config
        if work.job.planned is not None:  # a clip's frame: decoded and planned by the clip's reader
            work.planned = work.job.planned
            work.in_size = work.planned.original_size
            return
        if work.data is None:
            self._read(work)
        data, work.data = work.data, None
        decoded_at = time.perf_counter()
        decoded = imaging.decode(work.job.src, cfg.image, data=data)
        del data
        planned_at = time.perf_counter()
        work.in_size = decoded.original_size
        # resize: full sizes its tiles for the inferences whose activations are held at once: pass 2's streams
        requests = self._twopass.streams() if self._twopass is not None else self.engine.num_requests
        work.planned = imaging.plan(decoded, cfg.image, multiple=self.multiple, requests=requests)
        done = time.perf_counter()
        work.timings["decode"] += planned_at - decoded_at  # plus the header read that chose the lane
        work.timings["resize"] = done - planned_at

    def _detect(self, work: _Work) -> None:
        """The picture's faces, before its inference starts: found here, on the decode lane, while the cores run
        the pictures ahead of it; a clip's frame brings its own (smoothed over frames)."""
        assert self.faces is not None
        start = time.perf_counter()
        if work.job.faces is not None:
            work.faces = list(work.job.faces)
        else:
            work.faces = self.faces.detect(work.picture.rgb, name=work.job.src.name)
        work.timings["detect"] = time.perf_counter() - start

    def _read(self, work: _Work) -> None:
        """The file's bytes into ``work.data``, timed apart so the I/O layer shows; decode parses them."""
        start = time.perf_counter()
        work.data = work.job.data if work.job.data is not None else _read_whole(work.job.src)
        work.timings["read"] = time.perf_counter() - start

    def _to_heavy_lane(self, work: _Work) -> bool:
        """Read the file; when its header says the decode is heavy (over ``HEAVY_DECODE_MPX``), hand the job to
        the heavy lane and return True. That lane has one thread: heavy pictures wait for each other, never
        the light ones behind them. A header the decoder refuses (a scan bomb) costs nothing and stays here."""
        if work.heavy or work.job.planned is not None:
            return False
        self._read(work)
        assert work.data is not None
        start = time.perf_counter()
        header = work.job.header
        cost = header.cost_mpx if header is not None else decode_cost_mpx(work.job.src, self.config.image,
                                                                          data=work.data)
        work.timings["decode"] = time.perf_counter() - start
        if cost <= HEAVY_DECODE_MPX:
            return False
        work.heavy = True
        future = self._heavy_decoders.submit(self._decode_stage, work)
        future.add_done_callback(functools.partial(self._cancelled, work=work, stage="decode"))
        return True

    def _start_inference(self, work: _Work) -> None:
        """Pad the planned picture to its ``infer_size`` (a multiple: the compiled shape) and start it; the
        output is cropped back to the picture's own size in ``_inferred``."""
        planned = work.picture
        width, height = planned.infer_size or planned.size
        rgb = work.feed = pad_to(planned.rgb, height, width)
        start = time.perf_counter()
        queue = self._queue_for(self.engine.compiled(height, width))
        compiled_at = time.perf_counter()
        self._infer_slots.acquire()
        work.infer_started = time.perf_counter()
        work.timings["compile"] = compiled_at - start
        work.timings["wait"] = work.infer_started - compiled_at
        try:
            with self._infer_lock:
                # share_inputs: no copy of the picture; ``work.feed`` keeps the array alive until the callback.
                work.queue_id = id(queue)
                self._count_running(work.queue_id, +1)
                try:
                    queue.start_async({0: rgb[None]}, work, share_inputs=True)
                except BaseException:
                    self._count_running(work.queue_id, -1)
                    raise
        except BaseException:
            self._infer_slots.release()
            raise

    def _run_full(self, work: _Work) -> None:
        """A ``resize: full`` picture: whole or in tiles (``two_pass``), in this decode thread, then encoded."""
        start = time.perf_counter()
        on_tile = _guarded(work.job.on_tile, work.job.src) if work.job.on_tile is not None else None
        assert self._twopass is not None  # made at start whenever image.resize is full
        work.stylized = self._twopass.run(work.picture.rgb, work.picture.full, slots=self._infer_slots,
                                          on_tile=on_tile)
        work.timings["infer"] = time.perf_counter() - start
        future = self._encoders.submit(self._encode_stage, work)
        future.add_done_callback(functools.partial(self._cancelled, work=work, stage="encode"))

    def _count_running(self, queue_id: int, delta: int) -> int:
        with self._running_lock:
            count = self._running[queue_id] = self._running.get(queue_id, 0) + delta
            return count

    def _queue_for(self, compiled: ov.CompiledModel) -> ov.AsyncInferQueue:
        key = id(compiled)
        with self._infer_lock:
            entry = self._queues.get(key)
            if entry is not None:
                self._queues.move_to_end(key)
                return entry[1]
            queue = ov.AsyncInferQueue(compiled, self.engine.num_requests)
            queue.set_callback(self._inferred)
            self._queues[key] = (compiled, queue)  # the compiled model is kept alive with its queue
            # Follow the engine's cache (count and memory bound): a queue keeps its compiled model alive.
            for old_key in [k for k, (c, _) in self._queues.items() if k != key and not self.engine.holds(c)]:
                self._retired.append(self._queues.pop(old_key))
            while len(self._queues) > self.engine.device.shape_cache_size:
                self._retired.append(self._queues.popitem(last=False)[1])
        self.prune_retired()
        return queue

    def prune_retired(self) -> None:
        """Drop retired queues whose inferences have all been called back, and with them the last reference
        to an evicted shape's compiled model and its activations (measured: one left over held ~250 MB of a
        512 px f32 shape until the next size change). Called on a size change (decode threads) and when an
        inference ends with queues retired (queued to an encode thread), never inside an OpenVINO callback."""
        with self._infer_lock:
            if not self._retired:
                return
            with self._running_lock:
                finished = [e for e in self._retired if self._running.get(id(e[1]), 0) == 0]
                self._retired = [e for e in self._retired if self._running.get(id(e[1]), 0) > 0]
                self._running = {k: v for k, v in self._running.items() if v > 0}
        for _, old in finished:
            # wait_all releases the GIL until the last callback has returned; dropping a queue while one
            # still runs would make its destructor wait, GIL held, for a callback that needs the GIL.
            old.wait_all()

    def _inferred(self, request: ov.InferRequest, work: _Work) -> None:
        """OpenVINO's callback thread: copy the output out of the request and hand it to the encoders.

        The inference slot is given back last, so a request counts as running until its callback is done."""
        try:
            work.timings["infer"] = time.perf_counter() - work.infer_started
            height, width = work.picture.rgb.shape[:2]  # the padding off: the picture's own size
            work.stylized = np.array(request.get_output_tensor(0).data[0, :height, :width], copy=True)
            work.feed = None
            future = self._encoders.submit(self._encode_stage, work)
            future.add_done_callback(functools.partial(self._cancelled, work=work, stage="encode"))
        except BaseException as exc:  # noqa: BLE001
            self._finish(work, exc)
        finally:
            self._inference_ended(work)

    def _inference_ended(self, work: _Work) -> None:
        idle = self._count_running(work.queue_id, -1) == 0
        self._infer_slots.release()
        if idle and self._retired:  # maybe a dropped shape's last inference: let it go off this callback
            try:
                self._encoders.submit(self.prune_retired)
            except RuntimeError:  # closing: close() drops every queue anyway
                pass

    def _encode_stage(self, work: _Work) -> None:
        try:
            cfg = self.config
            assert work.stylized is not None
            meshes = None  # the faces' landmarks, found once for the restyle's choice and the drawing
            if self.faces is not None and work.faces:
                faced = time.perf_counter()
                meshes = self.faces.meshes(work.picture.rgb, work.faces)
                self.faces.apply(work.stylized, work.picture.rgb, work.faces, meshes=meshes, slots=self._infer_slots)
                work.timings["faces"] = time.perf_counter() - faced
            painted = time.perf_counter()
            if self.palette is not None and work.job.palette:
                work.stylized = apply_palette(work.stylized, self.palette.colours, chroma=self.palette.chroma)
            toned = time.perf_counter()
            work.timings["palette"] = toned - painted
            if self.tone is not None and work.job.tone:
                # the picture as fed to the model: with resize: full the whole one, so every tile gets one map
                # a frame (no palette) gets no lost colours either: a hard mask per frame would flicker at its rim
                work.stylized = restore_tone(work.stylized, work.picture.rgb, strength=self.tone.strength,
                                             neutral=self.tone.neutral, hues=work.job.palette)
            if work.faces and self.palette is not None and work.job.palette:
                # the faces' hair, ears and cap: the ink's keep-out, which the portrait is drawn into next
                work.stylized = clean_fringes(work.stylized, work.picture.rgb,
                                              within=[_widened(face.box, *FACE_INK_MARGIN) for face in work.faces])
            start = time.perf_counter()
            work.timings["tone"] = start - toned
            if self.ink is not None and work.job.ink:
                work.stylized = draw_ink(work.stylized, work.picture.rgb, strength=self.ink.strength,
                                         keep_out=[_widened(face.box, *FACE_INK_MARGIN) for face in work.faces])
                inked = time.perf_counter()
                work.timings["ink"] = inked - start
                start = inked
            if self.faces is not None and work.faces and self.faces.landmarker is not None:
                if not work.stylized.flags.writeable:  # the tone guard may hand back its input, read-only
                    work.stylized = np.array(work.stylized)
                self.faces.draw(work.stylized, work.picture.rgb, work.faces, meshes=meshes)
                drawn = time.perf_counter()
                work.timings["faces"] = work.timings.get("faces", 0.0) + drawn - start  # restyle plus drawing
                start = drawn
            image = imaging.finish(work.stylized, work.picture, cfg.image)
            work.out_size = image.size
            work.stylized = None
            dst = work.job.dst
            if dst is None and work.job.encode_as is None:  # the caller takes the picture itself (the API)
                work.image = image
                work.timings["encode"] = time.perf_counter() - start
            elif dst is None:  # encoded, for a destination in memory (HTTP)
                work.encoded = imaging.encode(image, work.picture, cfg.output, ext=str(work.job.encode_as))
                work.timings["encode"] = time.perf_counter() - start
            else:
                suffix = dst.suffix.lstrip(".").lower()
                ext = suffix if suffix in FORMAT_BY_EXT else "jpg"
                data = imaging.encode(image, work.picture, cfg.output, ext=ext)
                encoded_at = time.perf_counter()
                _write(dst, data)
                work.timings["encode"] = encoded_at - start
                work.timings["write"] = time.perf_counter() - encoded_at
        except BaseException as exc:  # noqa: BLE001
            self._finish(work, exc)
            return
        self._finish(work, None)

    # -- completion ----------------------------------------------------------------------------------
    def _cancelled(self, future: Future[None], work: _Work, stage: str) -> None:
        if future.cancelled():
            self._finish(work, TransientError(f"{work.job.src}: pipeline closed before {stage}", stage=stage))

    def _finish(self, work: _Work, error: BaseException | None) -> None:
        work.timings["total"] = time.perf_counter() - work.submitted
        out_size = work.out_size if error is None else None
        result = JobResult(job=work.job, error=error, timings_s=work.timings, in_size=work.in_size,
                           out_size=out_size, image=work.image if error is None else None,
                           data=work.encoded if error is None else None,
                           faces=_face_boxes(work) if error is None else [])
        work.planned = work.stylized = work.image = work.feed = work.encoded = None
        work.faces = []
        try:
            (work.job.notify or self._on_done)(result)
        except Exception:  # a caller's bug must not take the pipeline's threads down (logged with its traceback)
            log.exception("pipeline: on_done raised for %s", work.job.src)
        finally:
            # The infer request this job ran on keeps ``work`` as its userdata until its next job, on every
            # static shape's queue: without this, each request held its last input's bytes, picture and future
            # (issue 28: 9-19 uploads of 20 MB still mapped after a burst).
            work.job = dataclasses.replace(work.job, data=None, tag=None, planned=None, notify=None, faces=None)
            with self._state:
                self._in_flight -= 1
                self._state.notify_all()
            self._slots.release()


def _face_boxes(work: _Work) -> list[tuple[int, int, int, int]]:
    """The faces restyled, as boxes in the output's pixels (the output may be upscaled from the planned picture)."""
    if not work.faces or work.out_size is None or work.planned is None:
        return []
    height, width = work.planned.rgb.shape[:2]
    out_w, out_h = work.out_size
    return [face.scaled(out_w / width, out_h / height).xywh(out_w, out_h) for face in work.faces]


def tone_for(model: ModelInfo, config: Config) -> ToneSpec | None:
    """The tone guard a style's pictures get: its manifest's ``tone:``, unless ``image.tone: off`` turns it off
    for every style; None when off or at strength 0."""
    spec = model.tone
    if config.image.tone == "off" or not spec.enabled or spec.strength <= 0:
        return None
    return spec


def palette_for(model: ModelInfo, config: Config) -> PaletteSpec | None:
    """The cel palette a style's pictures get: its manifest's ``palette:``, unless ``image.palette: off`` turns
    it off for every style; None when off."""
    spec = model.palette
    if config.image.palette == "off" or not spec.enabled:
        return None
    return spec


def ink_for(model: ModelInfo, config: Config) -> InkSpec | None:
    """The ink lines a style's pictures get: its manifest's ``ink:``, unless ``image.ink: off`` turns them off
    for every style; None when off."""
    spec = model.ink
    if config.image.ink == "off" or not spec.enabled:
        return None
    return spec


def _widened(box: tuple[float, float, float, float], side: float, above: float, below: float
             ) -> tuple[int, int, int, int]:
    """``box`` grown by these shares of its width (each side) and height (above, below), in whole pixels."""
    x0, y0, x1, y1 = box
    width, height = x1 - x0, y1 - y0
    return (math.floor(x0 - side * width), math.floor(y0 - above * height), math.ceil(x1 + side * width),
            math.ceil(y1 + below * height))


def _guarded(callback: TileCallback, src: Path) -> TileCallback:
    """``callback`` with its exceptions logged, not raised: a progress display's bug must not fail the
    picture whose progress it shows."""

    def call(done: int, total: int) -> None:
        try:
            callback(done, total)
        except Exception:
            log.exception("pipeline: on_tile raised for %s", src)

    return call


def stage_threads(config: Config, *, cores: int | None = None) -> tuple[int, int]:
    """(decode threads, encode threads): the configured counts, or "auto" sized from the usable cores.

    Why these ratios: a decode (a camera JPEG, DCT-scaled, then a LANCZOS resize) takes ~1/10 of an
    inference's CPU time and an encode ~1/20. On 2 cores one thread of each keeps both streams fed and a
    second only competes with inference (benchmarks/compare.py threads); on 16 cores one decode thread
    capped the whole box near 9 images/s with the cores two-thirds busy (compare.py scaling, docs/design.md).
    """
    cores = usable_cores() if cores is None else cores
    decode, encode = config.pipeline.decode_threads, config.pipeline.encode_threads
    return (max(1, cores // 4) if decode == "auto" else int(decode),
            max(1, cores // 8) if encode == "auto" else int(encode))


def _read_whole(path: Path) -> bytes:
    """Read the file once (timed as the ``read`` stage) for decode to parse; missing or unreadable inputs,
    devices and FIFOs are InputErrors (``inputs.read_regular``: ``/dev/zero`` would fill the memory)."""
    return read_regular(path)


def _write(path: Path, data: bytes) -> None:
    """write_atomic, with every OSError a TransientError naming the file: the input is kept for a retry
    (a full disk and an outbox without write permission both need time or an operator, not a new input)."""
    try:
        write_atomic(path, data)
    except OSError as exc:
        reason = exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))
        raise TransientError(f"{path}: cannot write output: {reason}", stage="write") from exc
