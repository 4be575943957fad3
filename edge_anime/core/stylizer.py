"""``Stylizer``: the one door. Every entry point holds one: the watch folder and ``batch`` (``submit_file``, a
future per input file, photo or clip), ``stylize`` (``run_jobs``, which submits each file the same way), HTTP
and the Python API (``run``, ``run_encoded``), and ``bench`` and ``tune``, which measure it.

Whether a file is a photo or a clip is decided in one place, ``submit_file``: a photo is one pipeline job, a
clip goes to the Stylizer's clip lane (``_ClipLane``), one clip at a time on a thread of its own, its frames in
the same pipeline as the photos. Before, each entry point made that choice itself, three times over.

It owns what a caller should not have to assemble: the config (bundled default, a file, or a ``Config``),
the styles and the variant chosen for this box (``runtime.choice.open_engine``), and per style one
``Pipeline`` whose decode threads, asynchronous inference requests and encode threads every caller
shares. Many threads may call
``stylize`` at once: each call is one pipeline job and waits for its own result, so concurrent calls
overlap on the engine's requests exactly as the files of a batch do.

Every input goes through the image policy of the file path (``imaging.decode``: format allow-list, pixel
guard before decoding, EXIF orientation, colour modes; ``imaging.plan``: resize policy, memory budget).
A PIL image is therefore handed over as an uncompressed TIFF: one lossless copy (a few ms at 512 px, a
small share of one inference), in exchange for a single decoder with a single set of guards, instead of
a second path that could drift from the first. TIFF rather than PNG because it keeps every mode Pillow
decodes (CMYK, 16-bit, float) together with EXIF and the ICC profile.

Errors are the project's taxonomy (``edge_anime.errors``): ``InputError`` for a picture that cannot be
stylized (not an image, too many pixels, over the memory budget), ``ConfigError`` / ``ModelError`` (both
``UserError``) when the config or the style is unusable, ``TransientError`` when the pipeline is closing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Union

from PIL import Image

from ..config import AUTO, LIVE_QUALITY_FLOOR_DB, LIVE_VARIANT, Config, load_config
from ..errors import ConfigError, InputError, ModelError, UserError
from ..imaging.decoder import decode_header
from ..imaging.encoder import EXT_BY_CONFIG_FORMAT, FORMAT_BY_EXT, image_extension, same_format_extension
from ..inputs import read_regular
from ..models import MANIFEST_NAME, ModelInfo, resolve_model
from ..runtime.engine import Engine
from .naming import check_style
from .pipeline import Job, JobResult, Pipeline, TileCallback, in_flight_slots

if TYPE_CHECKING:
    from ..config import VideoSection
    from ..imaging.decoded import Decoded
    from ..video.job import ClipResult, Progress

FileResult = Union[JobResult, "ClipResult"]  # what ``submit_file``'s future holds: a photo's or a clip's result

log = logging.getLogger("edge_anime.stylizer")

ImageSource = Image.Image | bytes | bytearray | str | Path
MEMORY_LABEL = Path("<image>")  # how an in-memory picture is named in error messages
_PREMULTIPLIED = {"La": "LA", "RGBa": "RGBA"}  # modes TIFF cannot store -> the straight-alpha mode Pillow converts to
PICTURES = ""  # the variant half of a compiled entry's key for the pictures' own choice (model.variant)
_Key = tuple[str, str]  # (style, variant): (style, PICTURES) for what photos run, (style, name) for video.variant


@dataclass(frozen=True)
class Encoded:
    """A stylized picture as the bytes of a file (``Stylizer.run_encoded``)."""

    data: bytes
    media_type: str  # image/jpeg, image/png or image/webp
    ext: str  # jpg, png or webp: what a file of these bytes is named with
    size: tuple[int, int]  # (W, H)
    timings_s: dict[str, float]  # as ``JobResult.timings_s``; "encode" includes the encoding to bytes
    faces: list[tuple[int, int, int, int]] = dataclasses.field(default_factory=list)  # as ``JobResult.faces``


class StylizerClosed(RuntimeError):
    """``stylize`` on a Stylizer that was closed (a reload swapped it out): use the current one."""


@dataclass
class _Compiled:
    """One style ready to run: its chosen variant, its engine, its pipeline, and the calls using it now."""

    model: ModelInfo
    engine: Engine
    pipeline: Pipeline
    users: int = 0
    owned: bool = True  # False for an engine its owner passed in (the watch folder's): never closed here
    retired: bool = False  # no longer served (a reload dropped it): closed when its last job ends
    face_engine: Engine | None = None  # model.face_style's engine, when faces are restyled in another style
    clips: bool = False  # a variant for clips only (video.variant), beside the style's photos' own

    def close(self) -> None:
        self.pipeline.close()
        if self.owned:
            self.engine.close()
        if self.face_engine is not None:
            self.face_engine.close()


class Stylizer:
    """Styles compiled for this box, and a thread-safe ``stylize``.

    ``with Stylizer() as s: s.stylize(Image.open("a.jpg"))``; ``Stylizer(config="box.yaml")`` for a file.

    The styles served are ``model.path`` (the default, compiled at once) and ``model.styles`` (compiled on
    first use). Compiled styles are kept in an LRU under the shape cache's memory bound
    (``device.shape_cache_mb``, summed over every style's engine): a style over the bound with no call in
    flight is closed, and compiled again from the model cache when it is asked for next.

    Clips may run another variant of a style than its photos (``video.variant``, ``clip_variant``): that IR is
    compiled on the style's first clip and kept in the same LRU, under the same bound, as one more entry
    (keyed ``(style, variant)``; the photos' own is ``(style, PICTURES)``).
    """

    def __init__(self, config: Config | str | Path | None = None, *,
                 engine: tuple[ModelInfo, Engine] | None = None) -> None:
        """``engine``: a style already compiled by its owner (the watch folder serving HTTP beside itself), so
        one process holds one copy of the compiled model; without it the style of ``config`` is opened here."""
        self.config = config if isinstance(config, Config) else load_config(Path(config) if config else None)
        self._specs = style_specs(self.config)  # style name -> model.path spelling, default first
        self._lock = threading.Lock()
        self._compiled: OrderedDict[_Key, _Compiled] = OrderedDict()
        self._pending: dict[_Key, threading.Lock] = {}  # one compile per entry at a time
        self._said: set[tuple[str, str]] = set()  # (style, video.variant) fallbacks already logged
        self._closed = threading.Event()
        self._closers: list[threading.Thread] = []  # retired styles closing: close() joins them
        self._lane = _ClipLane()
        default = next(iter(self._specs))
        check_clip_variants(self.config)  # a video.variant a style lacks stops the start, naming the key
        first = self._open(default, engine)
        self._compiled[(default, PICTURES)] = first
        self.model, self.engine = first.model, first.engine

    # -- the API ---------------------------------------------------------------------------------------
    @property
    def styles(self) -> tuple[str, ...]:
        """The styles this Stylizer serves; the first is the default."""
        return tuple(self._specs)

    @property
    def max_in_flight(self) -> int:
        """Pictures the default style's pipeline works on at once (the HTTP admission's measure)."""
        return in_flight_slots(self.config.pipeline.max_in_flight, self.engine.num_requests)

    def model_of(self, style: str) -> ModelInfo | None:
        """The variant ``style`` runs when it is compiled now (its digests go into error reports), else None."""
        with self._lock:
            entry = self._compiled.get((style, PICTURES))
        return entry.model if entry is not None else None

    def clip_model_of(self, style: str) -> ModelInfo | None:
        """The variant ``style``'s clips run on now when ``video.variant`` gave them one of their own (compiled
        on the style's first clip), else None: its clips run ``model_of``'s."""
        with self._lock:
            entries = [e for (name, variant), e in self._compiled.items() if name == style and variant]
        return entries[-1].model if entries else None

    def compiled_styles(self) -> tuple[str, ...]:
        """The styles whose photos' variant is compiled now, least recently used first."""
        with self._lock:
            return tuple(name for name, variant in self._compiled if variant == PICTURES)

    def stylize(self, image: ImageSource, *, style: str | None = None, timeout: float | None = None) -> Image.Image:
        """One picture in (PIL image, encoded bytes, or a file path), the stylized PIL image out (RGB, or RGBA
        when the input had transparency), at the size the config's image policy gives."""
        result = self.run(image, style=style, timeout=timeout)
        assert result.image is not None
        return result.image

    def run(self, image: ImageSource, *, style: str | None = None, timeout: float | None = None) -> JobResult:
        """``stylize`` with the whole result: the picture in ``image``, the seconds per stage in ``timings_s``
        (the HTTP service's Server-Timing), the decoded and output sizes. Raises as ``stylize`` does."""
        result = self.submit(_job_for(image), style=style).result(timeout=timeout)
        if result.error is not None:
            raise result.error
        return result

    def run_encoded(self, image: ImageSource, *, fmt: str | None = None, name: str | None = None,
                    style: str | None = None, timeout: float | None = None,
                    header: Decoded | None = None) -> Encoded:
        """``run`` to the bytes of a file, by the encoder and the ``output`` settings the file path writes with
        (format, quality and chroma, EXIF and ICC kept or not, transparency flattened on white for JPEG), for a
        destination in memory: the HTTP service answers with these bytes, so a picture answered and the same
        picture written by ``stylize`` are the same bytes. ``fmt``: jpeg, png, webp or same (the input's own
        format, as for files: a path's suffix, else the format its bytes are in), default ``output.format``.
        ``name``: how encoded bytes are named in errors (an upload's file name), instead of ``<image>``.

        The header is read first (``imaging.decoder.decode_header``): a picture the decoder refuses is refused
        before it takes a pipeline slot, with the decoder's message. ``header``: that read already done by a
        caller that had to refuse the picture before taking work on for it (the HTTP service, before its queue
        slot), so it is not done again; the job carries it, and the pipeline chooses the decode lane by it
        (``Job.header``). The pipeline's encode stage encodes it (``Job.encode_as``), from the fully decoded
        source as for a file. Raises as ``run`` does."""
        wanted = fmt or self.config.output.format
        if wanted != "same" and wanted not in EXT_BY_CONFIG_FORMAT:
            raise ValueError(f"fmt={wanted!r}: expected one of {', '.join(EXT_BY_CONFIG_FORMAT)} or same")
        job = _job_for(image)
        if isinstance(image, (str, Path)):
            job = dataclasses.replace(job, data=read_regular(job.src))
        elif name is not None:
            job = dataclasses.replace(job, src=Path(name))
        assert job.data is not None
        source = header if header is not None else decode_header(job.src, self.config.image, data=job.data)
        if wanted != "same":
            ext = EXT_BY_CONFIG_FORMAT[wanted]
        elif isinstance(image, (str, Path)):
            ext = image_extension(self.config.output, job.src)
        else:
            ext = same_format_extension(image.format if isinstance(image, Image.Image) else source.source_format)
        job = dataclasses.replace(job, encode_as=ext, header=source)
        result = self.submit(job, style=style).result(timeout=timeout)
        del job  # the input's bytes go once the pipeline is done with them
        if result.error is not None:
            raise result.error
        assert result.data is not None and result.out_size is not None
        return Encoded(data=result.data, media_type=f"image/{FORMAT_BY_EXT[ext].lower()}", ext=ext,
                       size=result.out_size, timings_s=dict(result.timings_s), faces=list(result.faces))

    def submit(self, job: Job, *, style: str | None = None) -> Future[JobResult]:
        """Start one job on ``style``'s pipeline and return at once (blocking only while the pipeline's
        in-flight slots are all taken). The future's result never raises; a failed job has ``error`` set. The
        result's ``job`` is the job without its ``tag`` and ``data`` (``_settle`` says why).
        The style counts as in use until the job ends, so the LRU never closes it under a running job."""
        future: Future[JobResult] = Future()
        compiled, release = self._hold(style)
        future.add_done_callback(lambda _done: release())
        try:
            compiled.pipeline.submit(dataclasses.replace(job, tag=future))
        except BaseException:
            release()
            raise
        return future

    def submit_file(self, src: str | Path, dst: str | Path, *, style: str | None = None,
                    name: str | None = None, cancel: threading.Event | None = None,
                    on_frame: Callable[[Progress], None] | None = None, on_tile: TileCallback | None = None,
                    video: VideoSection | None = None, clip: bool | None = None) -> Future[FileResult]:
        """One input file into ``dst``, a photo or a clip: the one place that tells them apart
        (``video.is_clip`` by ``video.extensions``), for the watch folder, ``stylize`` and ``batch``.

        A photo is one pipeline job (``submit``; ``on_tile`` as ``Job.on_tile``). A clip (``dst`` an .mp4)
        waits on the clip lane, one clip at a time on a thread of its own, its frames beside the photos in
        flight: a clip already keeps every inference request busy, and each one in work holds a reader, a
        writer and a window of frames. ``name`` names the clip in its progress (``clip_progress``; default
        the file's name), ``on_frame`` is called after each of its frames, and a set ``cancel`` stops it
        (``ClipStopped``: its temp file removed, the input untouched; a clip still waiting is not started).
        ``video``: the clip settings when the caller's config moved on since this Stylizer was built (a
        reload that changed only ``video.*`` needs no recompile); it decides what is a clip too, and which
        variant the clip runs (``video.variant``: a variant other than the photos' is compiled here, on the
        style's first clip, and the next clip after a reload that changed it runs the new one). ``clip``:
        True or False to say it instead of the name (``run_clip`` takes any file as a clip).

        Returns at once (a photo blocks while the in-flight slots are taken). The style (and the clip's
        variant) is compiled before anything is queued, so a style that cannot be served raises here, as
        ``submit`` does (UserError, StylizerClosed; a ``video.variant`` the style lacks is a ConfigError naming
        it); the future's result never raises: the file's own failure is its ``error``."""
        from ..video import is_clip

        src, dst = Path(src), Path(dst)
        settings = self.config.video if video is None else video
        if not (is_clip(src.name, settings) if clip is None else clip):
            photo: Future[Any] = self.submit(Job(src=src, dst=dst, on_tile=on_tile), style=style)
            return photo
        config = self.config if video is None else self.config.model_copy(update={"video": video})
        future: Future[FileResult] = Future()
        variant = self._clip_variant(style, settings)
        compiled, release = self._hold(style, variant)  # held from the queue to the clip's end: never closed

        def work() -> None:
            try:
                result = self._lane.run(compiled.pipeline, config, src, dst, name=name or src.name, cancel=cancel,
                                        on_frame=on_frame)
            finally:
                release()
            future.set_result(result)

        try:
            self._lane.put(work)
        except BaseException:
            release()
            raise
        return future

    def wait_clips(self, timeout_s: float | None = None) -> bool:
        """Wait until the clip lane is idle (every clip submitted has ended and its future is settled); False
        when ``timeout_s`` passed first. A stop cancels its clips, then waits here for them to let go."""
        return self._lane.wait(timeout_s)

    def clip_progress(self) -> Progress | None:
        """The clip in work on the clip lane (frames done and total, frames/s), None when none is: what the
        watch folder's status file and metrics show."""
        return self._lane.current

    def run_jobs(self, jobs: Iterable[Job], *, style: str | None = None,
                 progress: bool = False) -> list[FileResult]:
        """File jobs (``stylize``'s batch), photos and clips alike (``submit_file``): every job's result, in
        order, failures included, never raised.

        The photos share the style's pipeline with concurrent ``stylize`` calls and the clips go to the clip
        lane, their frames among the photos; the job's ``tag`` stays the caller's, on the result's ``job``.
        With ``progress`` one bar counts the files, and moves inside a file that takes long: a tile at a time
        for a picture that runs in tiles (``image.resize: full``), a frame at a time for a clip, so a
        2-minute picture or clip never sits still at 1/4."""
        originals = list(jobs)
        bar = _Bar(len(originals)) if progress else None
        futures: list[Future[Any]] = []
        try:
            for index, job in enumerate(originals):
                on_tile: TileCallback | None = job.on_tile
                on_frame: Callable[[Progress], None] | None = None
                if bar is not None:
                    on_tile = on_tile or functools.partial(bar.tile, index)
                    on_frame = functools.partial(bar.frame, index)
                future: Future[Any]
                if job.dst is None or job.data is not None:  # a picture back to the caller, not a file
                    future = self.submit(dataclasses.replace(job, on_tile=on_tile), style=style)
                else:
                    future = self.submit_file(job.src, job.dst, style=style, on_tile=on_tile, on_frame=on_frame)
                if bar is not None:
                    future.add_done_callback(functools.partial(bar.done, index))
                futures.append(future)
            return [dataclasses.replace(f.result(), job=job) for f, job in zip(futures, originals)]
        finally:
            if bar is not None:
                bar.close()

    def set_styles(self, config: Config) -> tuple[list[str], list[str]]:
        """A reload that changed only ``model.styles``: serve the new list, compiling nothing now (a new style
        compiles on first use, like any) and closing a dropped style once its last job ends. The default
        style and every other setting stay: a change to those needs a new Stylizer. Returns (added, removed);
        a missing style raises ModelError naming its key, and nothing changes."""
        specs = style_specs(config)
        if next(iter(specs)) != self.styles[0]:
            raise ValueError("set_styles keeps the default style; build a new Stylizer to change model.path")
        closing: list[_Compiled] = []
        with self._lock:
            old = self._specs
            added = [name for name in specs if name not in old]
            removed = [name for name in old if name not in specs]
            self._specs, self.config = specs, config
            for key in [k for k in self._compiled if k[0] in removed]:  # its clips' variant goes with it
                closing += self._retire(key)
        for entry in closing:
            entry.close()
        return added, removed

    def handover(self, config: Config) -> Stylizer:
        """A Stylizer for changed image, output or pipeline settings (same model and device sections) that
        takes this one's compiled default style over instead of compiling it again; the other styles compile
        on first use, and so does a clip variant (``video.variant``) on the next clip. Close this one afterwards:
        it then closes its pipelines but not the engine it gave."""
        with self._lock:
            entry = self._compiled.get((self.styles[0], PICTURES))
        if entry is None or config.model != self.config.model or config.device != self.config.device:
            return Stylizer(config)
        successor = Stylizer(config, engine=(entry.model, entry.engine))
        successor._compiled[(successor.styles[0], PICTURES)].owned, entry.owned = entry.owned, False
        return successor

    def run_clip(self, src: str | Path, dst: str | Path, *, style: str | None = None, progress: bool = False,
                 cancel: threading.Event | None = None, on_frame: Callable[[Progress], None] | None = None,
                 video: VideoSection | None = None) -> ClipResult:
        """A video clip (``video.extensions``) into ``dst`` (an .mp4, renamed into place when complete), and
        wait for it: ``submit_file``'s clip lane (edge_anime/video), with a bar of its frames when
        ``progress``.

        The clip's own failures are in the result's ``error``, never raised, as in ``run_jobs``; a style that
        cannot be served raises as ``stylize`` does (UserError, StylizerClosed), before any frame. ``cancel``,
        ``on_frame`` and ``video`` as in ``submit_file``. Needs the ``video`` extra."""
        from ..progressbar import TerminalBar
        from ..video.job import ClipResult

        shown = TerminalBar(unit="frame", desc=Path(src).name) if progress else None
        bar = shown.bar if shown is not None else None

        def tick(now: Progress) -> None:
            if bar is not None:
                bar.total = now.total
                bar.update(now.done - bar.n)
            if on_frame is not None:
                on_frame(now)

        try:
            result = self.submit_file(src, dst, style=style, cancel=cancel, on_frame=tick, video=video,
                                      clip=True).result()
        finally:
            if shown is not None:
                shown.close()
        assert isinstance(result, ClipResult)
        return result

    @contextlib.contextmanager
    def pipeline_for(self, style: str | None = None) -> Iterator[Pipeline]:
        """``style``'s pipeline (compiled now if it was not), held in use for the block: a clip feeds its frames
        to it directly (edge_anime/video), and the LRU never closes it meanwhile."""
        with self._using(style) as compiled:
            yield compiled.pipeline

    def close(self) -> None:
        """Finish what was submitted, then free the threads and the compiled models."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._lane.close()  # the clips queued finish first: each holds its style's pipeline until it ends
        with self._lock:
            compiled, self._compiled = list(self._compiled.values()), OrderedDict()
        for entry in compiled:
            entry.pipeline.drain(timeout_s=None)
            entry.close()
        with self._lock:
            closers, self._closers = self._closers, []
        for closer in closers:  # OpenVINO torn down at exit under a live close aborts the process
            closer.join()

    def __enter__(self) -> Stylizer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- inside ----------------------------------------------------------------------------------------
    def _hold(self, style: str | None, variant: str = PICTURES) -> tuple[_Compiled, Callable[[], None]]:
        """``style`` compiled (now, if it was not) and counted in use until the returned ``release`` is called,
        once, when the job that holds it ends: the LRU and a reload that drops the style never close it under
        a job, and a dropped style closes when its last job releases it (on a thread of its own: the release
        runs on one of the pipeline's threads, which that close would join). ``variant``: a clip's own
        (``_clip_variant``), else the photos'."""
        with self._using(style, variant) as compiled, self._lock:
            compiled.users += 1  # held past the with

        def release() -> None:
            with self._lock:
                compiled.users -= 1
                last = compiled.retired and compiled.users == 0
                self._fit_styles(compiled)
            if last:
                closer = threading.Thread(target=compiled.close, name="edge-anime-retire", daemon=True)
                with self._lock:
                    self._closers.append(closer)
                closer.start()

        return compiled, release

    def _served(self, style: str | None) -> str:
        """The style's name (None: the default), or UserError when it is not served here."""
        name = self.styles[0] if style is None else style
        if name not in self._specs:
            raise UserError(f"style {name!r} is not served here; expected one of {', '.join(self.styles)}")
        return name

    @contextlib.contextmanager
    def _using(self, style: str | None, variant: str = PICTURES) -> Iterator[_Compiled]:
        """The style compiled (now, if it was not), counted as in use so the LRU never closes it meanwhile."""
        key = (self._served(style), variant)
        if self._closed.is_set():
            raise StylizerClosed("Stylizer.stylize after close()")
        with self._lock:
            entry = self._compiled.get(key)
            if entry is not None:
                self._compiled.move_to_end(key)
                entry.users += 1
                self._fit_styles(entry)
        if entry is None:
            entry = self._compile(key)
        try:
            yield entry
        finally:
            with self._lock:
                entry.users -= 1
                last = entry.retired and entry.users == 0
            if last:
                entry.close()

    def _compile(self, key: _Key) -> _Compiled:
        """A style's first use (or its first since the LRU closed it): compiled outside the lock, so calls to
        the styles already compiled go on meanwhile; two first calls at once compile it once."""
        with self._lock:
            pending = self._pending.setdefault(key, threading.Lock())
        with pending:
            with self._lock:
                entry = self._compiled.get(key)
                if entry is not None:
                    entry.users += 1
                    self._compiled.move_to_end(key)
                    return entry
            entry = self._open(key[0], None, variant=key[1])
            with self._lock:
                entry.users += 1
                self._compiled[key] = entry
                self._fit_styles(entry)  # idle styles give their activations back before any is closed
                evicted = self._evict()
        for old in evicted:
            log.info("styles: closing %s (over device.shape_cache_mb with %s compiled)", _label(old),
                     ", ".join(_label(e) for e in self._compiled.values()))
            old.close()
        return entry

    def _clip_variant(self, style: str | None, video: VideoSection) -> str:
        """The variant ``style``'s next clip runs under ``video.variant`` (``clip_variant``), as the key's second
        half: PICTURES when that is what the photos run (auto, a name the photos run, ``live`` for a style
        without a live variant: said once), so no second copy is compiled. A clip variant of the style that
        a reload has since replaced is retired here: it closes once no clip holds it."""
        name = self._served(style)
        chosen: str | None = None
        if video.variant != AUTO:
            chosen = clip_variant(resolve_model(self._specs[name], search_dirs=list(self.config.model.dirs),
                                                verify=False), video.variant)
        if chosen is None and video.variant == LIVE_VARIANT and (name, video.variant) not in self._said:
            self._said.add((name, video.variant))
            log.info("video: style %s has no live variant (uses: [live], %g dB from its teacher); its clips run "
                     "what its photos run (video.variant: live)", name, LIVE_QUALITY_FLOOR_DB)
        photos = self.model_of(name)
        if chosen is not None and (chosen == self.config.model.variant
                                   or (photos is not None and photos.variant_name == chosen)):
            chosen = None
        variant = chosen or PICTURES
        with self._lock:
            stale = [k for k in self._compiled if k[0] == name and k[1] not in (PICTURES, variant)]
            closing = [entry for key in stale for entry in self._retire(key)]
        for entry in closing:
            log.info("video: clips of %s no longer run %s (video.variant changed); closing it", name,
                     entry.model.variant_name)
            entry.close()
        return variant

    def _retire(self, key: _Key) -> list[_Compiled]:
        """Drop ``key`` from the served entries (under the lock); returned when it can be closed now, else it
        closes when its last job releases it."""
        entry = self._compiled.pop(key, None)
        if entry is None:
            return []
        entry.retired = True
        return [entry] if entry.users == 0 else []

    def _fit_styles(self, active: _Compiled) -> None:
        """Keep every style's shapes together under ``device.shape_cache_mb`` (under the lock), when a style
        comes into use and when a job ends: each engine bounds only its own shapes, so two styles that each
        fill the bound would hold twice it. Idle styles, least recently used first, give their activations
        back (no close: closing here would thrash two busy styles through compiles, and a close on a job's
        thread can outlive the interpreter); a style with work in flight keeps its memory until it is idle."""
        over = sum(e.engine.memory_mb() for e in self._compiled.values()) - self.config.device.shape_cache_mb
        for entry in self._compiled.values():
            if over <= 0:
                return
            if entry is not active and entry.users == 0 and not entry.retired:
                entry.pipeline.prune_retired()
                over -= entry.engine.release_idle(over)

    def _evict(self) -> list[_Compiled]:
        """Styles to close, least recently used first, while their engines' memory is over the bound (under
        the lock). A style in use stays; the newest always stays."""
        evicted = []
        for key in list(self._compiled)[:-1]:
            if sum(e.engine.memory_mb() for e in self._compiled.values()) <= self.config.device.shape_cache_mb:
                break
            if self._compiled[key].users == 0:
                evicted.append(self._compiled.pop(key))
        return evicted

    def _open(self, name: str, engine: tuple[ModelInfo, Engine] | None, *, variant: str = PICTURES) -> _Compiled:
        owned = engine is None
        if engine is None:
            engine = self._open_engine(self._specs[name], variant=variant or None)
        model, compiled_engine = engine
        if variant:
            photos = self.model_of(name)
            log.info("video: clips of %s run %s (video.variant), compiled on its first clip; its photos run %s",
                     name, model.variant_name, photos.variant_name if photos is not None else "model.variant's")
        check_style(self.config.output.name_template, model.style)
        face_engine = self._face_engine(model)
        try:
            pipeline = Pipeline(compiled_engine, self.config, on_done=_settle, face_engine=face_engine)
        except BaseException:
            if face_engine is not None:
                face_engine.close()
            raise
        return _Compiled(model, compiled_engine, pipeline, owned=owned, face_engine=face_engine, clips=bool(variant))

    def _open_engine(self, spec: str, *, variant: str | None = None) -> tuple[ModelInfo, Engine]:
        """``spec``'s style compiled at the photos' variant (model.variant), or at ``variant`` (a clip's)."""
        from ..runtime.choice import open_engine  # OpenVINO is imported here, not when edge_anime is

        update: dict[str, str] = {"path": spec} if variant is None else {"path": spec, "variant": variant}
        model_config = self.config.model.model_copy(update=update)
        return open_engine(self.config.model_copy(update={"model": model_config}))

    def _face_engine(self, model: ModelInfo) -> Engine | None:
        """``model.face_style``'s engine for a style whose faces it restyles (image.faces: auto); None when faces
        are off or restyled in the picture's own style."""
        face_style = self.config.model.face_style
        if self.config.image.faces != "auto" or face_style is None or face_style in (model.name, model.style):
            return None
        try:
            return self._open_engine(face_style)[1]
        except ModelError as exc:  # resolved like model.path: say which key named it
            raise ModelError(f"model.face_style: {str(exc).removeprefix('model.path: ')}") from exc


class _Bar:
    """``run_jobs``'s progress bar: whole files plus the finished share of the pictures running in tiles and
    of the clip in work (tqdm takes a fractional count). Ticked from pipeline threads, so under a lock."""

    def __init__(self, total: int) -> None:
        from ..progressbar import TerminalBar

        self._shown = TerminalBar(total, unit="img")
        self._bar = self._shown.bar
        self._lock = threading.Lock()
        self._finished = 0
        self._partial: dict[int, float] = {}

    def tile(self, index: int, done: int, total: int) -> None:
        with self._lock:
            self._partial[index] = done / total
            self._bar.set_postfix_str(f"tiles {done}/{total}", refresh=False)
            self._show()

    def frame(self, index: int, progress: Progress) -> None:
        if progress.total:
            self.tile(index, min(progress.done, progress.total), progress.total)

    def done(self, index: int, _future: Future[FileResult]) -> None:
        with self._lock:
            self._partial.pop(index, None)
            self._finished += 1
            if not self._partial:
                self._bar.set_postfix_str("", refresh=False)
            self._show()

    def close(self) -> None:
        self._shown.close()

    def _show(self) -> None:
        self._bar.n = round(self._finished + sum(self._partial.values()), 3)
        self._bar.refresh()


class _ClipLane:
    """The Stylizer's clips, one at a time on a thread of their own (started with the first clip), in the
    order submitted; ``current`` is the one in work. Why one lane: a clip keeps every inference request busy
    by itself, and each clip in work holds a reader, a writer and a window of frames; photos submitted
    meanwhile still go straight to the pipeline and interleave with its frames."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._waiting = 0  # clips queued or in work
        self._idle = threading.Condition(self._lock)
        self.current: Progress | None = None

    def put(self, work: Callable[[], None]) -> None:
        """Queue ``work`` (never blocks); StylizerClosed once the lane is closed."""
        with self._lock:
            if self._closed:
                raise StylizerClosed("Stylizer.submit_file after close()")
            self._queue.put(work)
            self._waiting += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="ea-video", daemon=True)
                self._thread.start()

    def run(self, pipeline: Pipeline, config: Config, src: Path, dst: Path, *, name: str,
            cancel: threading.Event | None, on_frame: Callable[[Progress], None] | None) -> ClipResult:
        """One clip on the lane's thread; what it raises (a bug) is its result's error, never the lane's end:
        every later clip would wait forever."""
        from ..video.job import ClipResult, ClipStopped, Progress, stylize_clip

        if cancel is not None and cancel.is_set():  # stopped while it waited: untouched, not started
            error = ClipStopped(f"{src}: stopped before the clip was started; it will be done again", stage="video")
            return ClipResult(job=Job(src=src, dst=dst), error=error, timings_s={})
        progress = Progress(name)
        self.current = progress
        try:
            return stylize_clip(pipeline, config, src, dst, progress=progress, cancel=cancel, on_frame=on_frame)
        except Exception as exc:
            log.exception("video: clip %s could not run", src)
            return ClipResult(job=Job(src=src, dst=dst), error=exc, timings_s={},
                              variant=pipeline.engine.model_info.variant_name)
        finally:
            self.current = None

    def close(self) -> None:
        """Refuse new clips, let the queued ones finish, and end the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def wait(self, timeout_s: float | None) -> bool:
        """Wait until no clip is queued or in work; False when ``timeout_s`` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: self._waiting == 0, timeout_s)

    def _serve(self) -> None:
        while (work := self._queue.get()) is not None:
            try:
                work()
            finally:
                with self._idle:
                    self._waiting -= 1
                    self._idle.notify_all()


def clip_variant(style: ModelInfo, setting: str) -> str | None:
    """The variant of ``style`` its clips run under ``video.variant`` = ``setting``: a name the style has, the
    style's live variant for ``live`` (``ModelInfo.live_variant``, the one ``http.live.variant: auto`` runs),
    or None for what its photos run (auto, or live on a style without one). A name the style lacks is a
    ConfigError naming the key and listing the style's variants: the fix is in the config.

    Why clips may run another IR than photos: a clip is thousands of frames seen in motion, like the booth's
    mirror, where a student 30-32 dB from its teacher is the same drawing at ~4x the frames; a photo is looked
    at on its own, and keeps the variant held to 35 dB."""
    if setting == AUTO:
        return None
    if setting == LIVE_VARIANT:
        return style.live_variant()
    names = style.variant_names()
    if setting not in names:
        raise ConfigError(f"video.variant: '{setting}' is not a variant of style {style.name} "
                          f"({style.directory / MANIFEST_NAME}); expected one of: {', '.join(names)}, or auto or "
                          f"{LIVE_VARIANT} (edge-anime models list)")
    return setting


def check_clip_variants(config: Config) -> None:
    """``video.variant`` checked against every style ``config`` serves (manifests only, nothing compiled): at
    start, and by a reload before it is applied, so a name a style lacks is said then, not at its first clip."""
    if config.video.variant in (AUTO, LIVE_VARIANT):
        return
    for spec in (config.model.path, *config.model.styles):
        clip_variant(resolve_model(spec, search_dirs=list(config.model.dirs), verify=False), config.video.variant)


def _label(entry: _Compiled) -> str:
    """How the log names a compiled entry: its style, and the variant when it runs clips only."""
    return f"{entry.model.style} ({entry.model.variant_name}, clips)" if entry.clips else entry.model.style


def style_specs(config: Config) -> dict[str, str]:
    """Style name -> how ``model.path``/``model.styles`` spell it, the default first; each one resolved (its
    manifest read and its digests checked), so a missing style is a config error naming its key at start."""
    specs: dict[str, str] = {}
    for key, spec in [("model.path", config.model.path),
                      *((f"model.styles[{i}]", s) for i, s in enumerate(config.model.styles))]:
        try:
            info = resolve_model(spec, search_dirs=list(config.model.dirs))
        except ModelError as exc:  # named with its file too: a list item's error named no file (issue 42)
            where = f"{config.source}: " if config.source else ""
            raise ModelError(f"{where}{key}: {exc}".replace(f"{key}: model.path: ", f"{key}: ")) from None
        specs.setdefault(info.style, spec)
    return specs


def _settle(result: JobResult) -> None:
    """The pipeline's ``on_done``: hand the result to the caller waiting on the job's future.

    The result handed over carries a copy of the job without the future and without the input's bytes: with
    them, future -> result -> job -> future is a reference cycle, and an upload's bytes and its stylized
    picture stayed alive until Python's cyclic collector happened to run (issue 28: 9-19 uploads of 20 MB
    still mapped after a burst of 10-at-a-time rounds). Without it they go the moment the caller lets go."""
    future = result.job.tag
    if isinstance(future, Future):
        job = dataclasses.replace(result.job, tag=None, data=None, header=None)
        future.set_result(dataclasses.replace(result, job=job))


def _job_for(image: ImageSource) -> Job:
    if isinstance(image, (str, Path)):
        return Job(src=Path(image), dst=None)
    if isinstance(image, (bytes, bytearray)):
        return Job(src=MEMORY_LABEL, dst=None, data=bytes(image))
    if isinstance(image, Image.Image):
        return Job(src=MEMORY_LABEL, dst=None, data=_as_tiff(image))
    raise TypeError(f"stylize takes a PIL image, encoded image bytes or a file path, not {type(image).__name__}")


def _as_tiff(image: Image.Image) -> bytes:
    """A lossless, uncompressed copy the decoder reads like any file (see the module docstring)."""
    buffer = io.BytesIO()
    options: dict[str, object] = {"compression": None}
    exif = image.getexif()
    if exif:
        options["exif"] = exif.tobytes()
    icc = image.info.get("icc_profile")
    if icc:
        options["icc_profile"] = icc
    try:
        _with_alpha_band(image).save(buffer, format="TIFF", **options)
    except (OSError, ValueError) as exc:
        raise InputError(f"{MEMORY_LABEL}: a {image.mode} image of {image.size[0]}x{image.size[1]} cannot be "
                         f"handed to the decoder: {exc}", stage="decode") from None
    return buffer.getvalue()


def _with_alpha_band(image: Image.Image) -> Image.Image:
    """``image`` with its transparency as an alpha band where TIFF would lose it: TIFF keeps a palette but not
    which entries are transparent (PNG's tRNS, a palette of RGBA colours), nor a transparent colour of an L or
    RGB picture, and it cannot store premultiplied alpha (La, RGBa). Those go as RGBA, so the API keeps the
    alpha that the same picture opened from its file keeps (the decoder turns it into RGB + alpha the same
    way); every other mode goes as it is."""
    if image.mode in _PREMULTIPLIED:
        return image.convert(_PREMULTIPLIED[image.mode])
    palette_alpha = image.mode == "P" and image.palette is not None and image.palette.mode == "RGBA"
    if "transparency" in image.info or palette_alpha:
        return image.convert("RGBA")
    return image


__all__: Sequence[str] = ("Encoded", "ImageSource", "Stylizer", "StylizerClosed")
