"""``Stylizer``: the one core behind ``stylize``, the Python API (and, next, the HTTP service).

It owns what a caller should not have to assemble: the config (bundled default, a file, or a ``Config``),
the style and the variant chosen for this box (``choice.open_engine``), and one ``Pipeline`` whose decode
threads, asynchronous inference requests and encode threads every caller shares. Many threads may call
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

import dataclasses
import io
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import TracebackType

from PIL import Image

from .config import Config, load_config
from .engine import Engine
from .errors import InputError, UserError
from .models import ModelInfo
from .naming import UnsafeNameError, check_style
from .pipeline import Job, JobResult, Pipeline

ImageSource = Image.Image | bytes | bytearray | str | Path
MEMORY_LABEL = Path("<image>")  # how an in-memory picture is named in error messages


class StylizerClosed(RuntimeError):
    """``stylize`` on a Stylizer that was closed (a reload swapped it out): use the current one."""


class Stylizer:
    """Styles compiled for this box, and a thread-safe ``stylize``.

    ``with Stylizer() as s: s.stylize(Image.open("a.jpg"))``; ``Stylizer(config="box.yaml")`` for a file.
    """

    def __init__(self, config: Config | str | Path | None = None, *,
                 engine: tuple[ModelInfo, Engine] | None = None) -> None:
        """``engine``: a style already compiled by its owner (the watch folder serving HTTP beside itself), so
        one process holds one copy of the compiled model; without it the style of ``config`` is opened here."""
        self.config = config if isinstance(config, Config) else load_config(Path(config) if config else None)
        self.model: ModelInfo
        if engine is None:
            from .choice import open_engine  # OpenVINO is imported here, not when edge_anime is

            engine = open_engine(self.config)
        self.model, self.engine = engine
        try:
            check_style(self.config.output.name_template, self.model.style)
        except UnsafeNameError as exc:
            raise UserError(str(exc)) from None
        self._pipeline = Pipeline(self.engine, self.config, on_done=_settle)
        self._closed = threading.Event()

    # -- the API ---------------------------------------------------------------------------------------
    @property
    def styles(self) -> tuple[str, ...]:
        """The styles this Stylizer serves; the first is the default."""
        return (self.model.style,)

    @property
    def max_in_flight(self) -> int:
        """Pictures the pipeline works on at once; a caller queueing more only waits (the HTTP admission)."""
        return self._pipeline.max_in_flight

    def stylize(self, image: ImageSource, *, style: str | None = None, timeout: float | None = None) -> Image.Image:
        """One picture in (PIL image, encoded bytes, or a file path), the stylized PIL image out (RGB, or RGBA
        when the input had transparency), at the size the config's image policy gives."""
        result = self.run(image, style=style, timeout=timeout)
        assert result.image is not None
        return result.image

    def run(self, image: ImageSource, *, style: str | None = None, timeout: float | None = None) -> JobResult:
        """``stylize`` with the whole result: the picture in ``image``, the seconds per stage in ``timings_s``
        (the HTTP service's Server-Timing), the decoded and output sizes. Raises as ``stylize`` does."""
        self._check_style(style)
        return self._submit(_job_for(image, tag=Future()), timeout=timeout)

    def run_jobs(self, jobs: Iterable[Job], *, progress: bool = False) -> list[JobResult]:
        """File jobs (``stylize``'s batch): every job's result, in order, failures included, never raised.

        The jobs share the pipeline with concurrent ``stylize`` calls; each is submitted with a future of its
        own (the job's ``tag`` stays the caller's, on the result's ``job``)."""
        originals = list(jobs)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(originals), unit="img", dynamic_ncols=True)

        def tick(_done: Future[JobResult]) -> None:
            if bar is not None:
                bar.update(1)

        futures: list[Future[JobResult]] = []
        try:
            for job in originals:
                future: Future[JobResult] = Future()
                future.add_done_callback(tick)
                futures.append(future)
                self._pipeline.submit(dataclasses.replace(job, tag=future))
            return [dataclasses.replace(f.result(), job=job) for f, job in zip(futures, originals)]
        finally:
            if bar is not None:
                bar.close()

    def close(self) -> None:
        """Finish what was submitted, then free the threads and the compiled models."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._pipeline.drain(timeout_s=None)
        self._pipeline.close()

    def __enter__(self) -> Stylizer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- inside ----------------------------------------------------------------------------------------
    def _check_style(self, style: str | None) -> None:
        if style is not None and style not in self.styles:
            raise UserError(f"style {style!r} is not served here; expected one of {', '.join(self.styles)}")

    def _submit(self, job: Job, *, timeout: float | None) -> JobResult:
        if self._closed.is_set():
            raise StylizerClosed("Stylizer.stylize after close()")
        self._pipeline.submit(job)
        result: JobResult = job.tag.result(timeout=timeout)
        if result.error is not None:
            raise result.error
        return result


def _settle(result: JobResult) -> None:
    """The pipeline's ``on_done``: hand the result to the caller waiting on the job's future."""
    future = result.job.tag
    if isinstance(future, Future):
        future.set_result(result)


def _job_for(image: ImageSource, *, tag: Future[JobResult]) -> Job:
    if isinstance(image, (str, Path)):
        return Job(src=Path(image), dst=None, tag=tag)
    if isinstance(image, (bytes, bytearray)):
        return Job(src=MEMORY_LABEL, dst=None, tag=tag, data=bytes(image))
    if isinstance(image, Image.Image):
        return Job(src=MEMORY_LABEL, dst=None, tag=tag, data=_as_tiff(image))
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
        image.save(buffer, format="TIFF", **options)
    except (OSError, ValueError) as exc:
        raise InputError(f"{MEMORY_LABEL}: a {image.mode} image of {image.size[0]}x{image.size[1]} cannot be "
                         f"handed to the decoder: {exc}", stage="decode") from None
    return buffer.getvalue()


__all__: Sequence[str] = ("ImageSource", "Stylizer", "StylizerClosed")
