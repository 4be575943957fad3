"""`edge-anime stylize INPUT... -o DIR`: stylize files, folders and globs once, through the service's pipeline.

Every input is tried even when others fail; the failures are listed at the end, one line each with the
reason, and the exit status is 1 (70 when one of them was a bug, 74 when writes failed for the box's storage
during the run; before any work starts, 73 for an output folder that cannot be made or written and 78 for a
bad config or model). Output names follow ``output.name_template``, from the input's own name, or from it
with its extension added when another input of its folder would get the same name (``naming.SourceNames``:
``photo_jpg_toon.jpg`` beside ``photo_png_toon.jpg``); a name already taken (on disk or by another input of
the same batch) gets ``-1``, ``-2``... as in the watch folder, so nothing is overwritten, and one line at the
end says which outputs got such a name and why. Folders and globs never take what lies in the output folder
or the watch folder's own folders (``output_skip``). ``--overwrite`` replaces an existing output of
the same name instead (temp then rename, as every write), never an input of the same run.

What it is doing is said on stderr as it happens, through the project's logging (``console_log``): the
first start on a box measures which variant runs fastest for a minute or more, and compiling follows.
Output folders this run made and left empty (every input in them failed, or the start failed) are removed
at the end; a folder that existed before is never touched.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import naming
from ..errors import (
    EXIT_CANTCREAT,
    EXIT_FAILURES,
    EXIT_INTERNAL,
    EXIT_IOERR,
    EXIT_OK,
    UserError,
    failure_reason,
)
from ..inputs import InputFilter, Skip, Source, collect_sources
from . import add_config_option

if TYPE_CHECKING:
    from ..config import Config
    from ..core.pipeline import Job, JobResult
    from ..video.job import ClipResult

NAMES_SHOWN = 5  # outputs named in the end line about suffixed or replaced names; the rest are counted
# The loggers whose INFO lines stylize shows: what the first start does for minutes (measure, compile).
TALKING = ("edge_anime.runtime.choice", "edge_anime.runtime.shortlist")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="image or video files, folders (their images and clips; sub-folders only with -r) or "
                             "glob patterns (quote them: '*.jpg'); a clip becomes NAME_STYLE.mp4")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                        help="folder for the stylized files (created if missing)")
    add_config_option(parser)
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="descend into sub-folders of folder inputs (and '**' in globs); the sub-folder "
                             "structure is mirrored under DIR")
    parser.add_argument("--style", default=None, metavar="NAME",
                        help="one of the styles the config serves (model.path, model.styles); default: model.path")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output of the same name in DIR (atomically) instead of writing "
                             "NAME-1, NAME-2...; an input of this run is never replaced")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bar and no progress lines (warnings and errors still show)")


@dataclass(frozen=True)
class Planned:
    """Where one input's output goes, and why that is not the template's own name when it is not."""

    dst: Path
    wanted: Path  # the name the template gives (its first candidate)
    taken_by: str | None = None  # when dst is not wanted: "it exists" or "another input of this run"
    replaces: bool = False  # --overwrite: dst exists now and is replaced


def output_path(source: Source, out_dir: Path, config: Config, *, style: str, taken: set[Path],
                overwrite: bool = False, inputs: frozenset[Path] = frozenset(),
                names: naming.SourceNames | None = None) -> Planned:
    """The first free output path for ``source``: not given to an earlier input of the batch and, unless
    ``overwrite``, not on disk. With ``overwrite`` an existing file may be replaced, but never a folder nor
    one of the run's ``inputs`` (resolved paths): a template of ``{name}`` would otherwise write over the photo.
    ``names``: the name the output is rendered from (``naming.SourceNames``, batch's rule too); without it,
    the input's own.

    The watch folder's rule (edge_anime/core/naming.py), so both spell clashes, long names and templates alike.
    """
    folder = out_dir / source.subdir
    template, ext = config.output.name_template, naming.output_extension(config, source.path)
    source_name = names(source.path) if names is not None else source.path.name

    def free(name: str) -> bool:
        path = folder / name
        if path in taken or not os.path.lexists(path):
            return path not in taken
        return overwrite and not path.is_dir() and path.resolve() not in inputs

    name = naming.free_output_name(template, source_name=source_name, style=style, ext=ext, is_free=free)
    path = naming.child(folder, name)
    wanted = naming.child(folder, naming.output_name(template, source_name=source_name, style=style,
                                                     ext=ext, n=0, max_bytes=naming.OUTPUT_MAX_BYTES))
    taken.add(path)
    if path != wanted:
        return Planned(path, wanted, "another input of this run" if wanted in taken else "it exists")
    return Planned(path, wanted, replaces=os.path.lexists(path))


class MadeFolders:
    """The output folders this run creates, so the ones it leaves empty can go again (``remove_empty``).

    Made level by level from the deepest folder that already exists: only what this run made is recorded,
    so a folder that existed before the run is never removed, empty or not."""

    def __init__(self) -> None:
        self.made: list[Path] = []

    def make(self, folder: Path) -> None:
        """``mkdir -p``, recording each level made here; raises OSError as mkdir does."""
        missing = []
        for level in [folder, *folder.parents]:
            if os.path.lexists(level):
                break
            missing.append(level)
        for level in reversed(missing):
            try:
                level.mkdir()
            except FileExistsError:  # made meanwhile by someone else: theirs, not ours
                continue
            self.made.append(level)

    def remove_empty(self) -> None:
        """rmdir every folder made here that is still empty, deepest first; one with anything in it stays
        (rmdir refuses it), and so does its parent."""
        for folder in sorted(self.made, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()


def output_skip(out_dir: Path, config: Config) -> Skip:
    """The folders a search of the inputs never enters (``inputs.Skip``): the output folder, and the watch
    folder's own folders (its inbox's work and its outputs), wherever they lie inside an input folder."""
    from ..config import WATCH_FOLDERS

    skip = Skip()
    skip.add(out_dir, "the output folder, -o")
    for name in WATCH_FOLDERS:
        skip.add(config.watch.folder(name), f"the watch folder's {name}, watch.{name}")
    return skip


def without_own_outputs(sources: list[Source], out_dir: Path, config: Config, *, style: str,
                        accept: InputFilter) -> list[Source]:
    """``sources`` less the files that are this run's own outputs: with ``-o`` an input folder itself, an
    earlier run's ``photo_toon.jpg`` beside ``photo.jpg`` was taken as an input and became
    ``photo_toon_toon.jpg`` (issue 42; an output folder inside the input is skipped whole by ``output_skip``).
    A file goes when another input of its folder would be written under its name; said in one line."""
    names = naming.SourceNames(config.output.name_template, style=style,
                               ext_of=functools.partial(naming.output_extension, config),
                               is_input=accept.accepts, named=[source.path for source in sources])
    root = out_dir.resolve()
    produced: dict[Path, Path] = {}  # output path -> the input it is named for
    for source in sources:
        folder = source.path.parent.resolve()
        if (root / source.subdir).resolve() == folder:  # its output lands beside it
            name = naming.output_name(config.output.name_template, source_name=names(source.path), style=style,
                                      ext=naming.output_extension(config, source.path), n=0)
            produced[folder / name] = source.path.resolve()
    # a template that names an input as itself ({stem}.{ext}) does not make it its own output: it stays an input
    kept = [s for s in sources if produced.get(s.path.resolve(), s.path.resolve()) == s.path.resolve()]
    if len(kept) < len(sources):
        print(f"not taken as input: {len(sources) - len(kept)} file(s) in {out_dir} named as the outputs of the "
              "inputs beside them (the output folder, -o, is an input folder)")
    return kept


def make_output_folders(out_dir: Path, folders: list[Path], make: Callable[[Path], None]) -> str | None:
    """Make ``out_dir`` and each folder outputs go to (``make``: mkdir -p, recorded or not), and write a probe
    file in each (``fsutil.probe_write``), before any work: None when all take a file, else one line naming
    the path and why. A read-only mount, an immutable folder, a full disk or a file in place of the folder
    used to be found only after every input had been stylized, each failing on its write."""
    from ..fsutil import probe_write

    if os.path.lexists(out_dir) and not out_dir.is_dir():
        return f"{out_dir}: exists and is not a folder; expected a folder for the outputs (-o)"
    for folder in dict.fromkeys([out_dir, *folders]):
        try:
            make(folder)
            probe_write(folder)
        except OSError as exc:
            where = os.fsdecode(exc.filename) if exc.filename is not None else str(folder)
            if where.startswith(str(folder)) and where != str(folder):
                where = str(folder)  # the probe's temp name says nothing to the person
            return f"{where}: cannot write into the output folder: {exc.strerror or exc}"
    return None


def failures_status(command: str, out_dir: Path, *, failures: int, bugs: int, box: list[str]) -> int:
    """The exit status of a run whose failures were listed: 70 for a bug, 74 when the box's storage failed
    the writes (``box``: those reasons; said in one more line, so the inputs are not blamed), 1 for the
    inputs' own faults, else 0. The watch folder makes the same split (``watch.faults``)."""
    if bugs:
        return EXIT_INTERNAL
    if box:
        print(f"edge-anime {command}: error: {len(box)} write(s) into {out_dir} failed for this box's storage, "
              "not for the inputs (reasons above): make room or fix it (a full disk, a read-only mount, "
              "permissions) and run again", file=sys.stderr)
        return EXIT_IOERR
    return EXIT_FAILURES if failures else EXIT_OK


def _names_lines(planned: list[Planned], results: list[JobResult | ClipResult]) -> list[str]:
    """The lines that say where an output was not written under the template's own name, or replaced a
    file: a person looking for ``a_toon.jpg`` finds ``a_toon-1.jpg`` without being surprised."""
    written = [plan for plan, result in zip(planned, results) if result.ok]
    renamed = [p for p in written if p.taken_by]
    replaced = [p for p in written if p.replaces]
    lines = []
    if renamed:
        shown = ", ".join(f"{p.dst.name} ({p.wanted.name}: {p.taken_by})" for p in renamed[:NAMES_SHOWN])
        more = f" and {len(renamed) - NAMES_SHOWN} more" if len(renamed) > NAMES_SHOWN else ""
        lines.append(f"{len(renamed)} written under a suffixed name because the name was taken: {shown}{more}"
                     + ("; --overwrite replaces existing files instead" if any(
                         p.taken_by == "it exists" for p in renamed) else ""))
    if replaced:
        shown = ", ".join(p.dst.name for p in replaced[:NAMES_SHOWN])
        more = f" and {len(replaced) - NAMES_SHOWN} more" if len(replaced) > NAMES_SHOWN else ""
        lines.append(f"{len(replaced)} existing file(s) replaced (--overwrite): {shown}{more}")
    return lines


class _ConsoleFormatter(logging.Formatter):
    """Progress as plain lines (``choice: measuring ...``), warnings and errors with their level in front,
    each argument escaped as in the service's log (``logs.escaped``): one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        from ..logs import escaped

        text = escaped(record).getMessage()
        return text if record.levelno < logging.WARNING else f"{record.levelname.lower()}: {text}"


@contextlib.contextmanager
def console_log(*, quiet: bool) -> Iterator[None]:
    """stylize's own log on stderr for the length of the command: the progress lines of ``TALKING`` (the
    variant measurement, compiling) and every warning of edge_anime; with ``quiet``, warnings only.
    Everything is put back afterwards, so a caller of ``main()`` (tests, an embedder) keeps its logging."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_ConsoleFormatter())
    handler.addFilter(lambda r: r.levelno >= logging.WARNING or (not quiet and r.name in TALKING))
    package = logging.getLogger("edge_anime")
    talkers = [logging.getLogger(name) for name in TALKING]
    levels = [t.level for t in talkers]
    package.addHandler(handler)
    if not quiet:
        for talker in talkers:
            talker.setLevel(logging.INFO)
    try:
        yield
    finally:
        package.removeHandler(handler)
        for talker, level in zip(talkers, levels):
            talker.setLevel(level)


def _unknown_style(style: str, specs: dict[str, str], config: Config) -> str:
    """``--style`` names no served style: the served ones, and the closest served or installed name."""
    from ..config import close_matches
    from ..models import style_names

    served = list(specs)
    installed = [n for n in style_names(list(config.model.dirs)) if n not in served]
    message = f"--style {style}: not served by {config.source}; expected one of {', '.join(served)}"
    if style in installed:
        return f"{message}; {style} is installed: add it to model.styles to serve it"
    close = close_matches(style, served + installed)
    if close and close[0] in served:
        return f"{message}; did you mean '{close[0]}'?"
    if close:
        return f"{message}; did you mean '{close[0]}'? It is installed: add it to model.styles to serve it"
    return f"{message} (add another style to model.styles)"


def chosen_style(config: Config, requested: str | None) -> str:
    """``--style`` (default: ``model.path``'s style), checked to be served and to fit the output template;
    every served style is resolved first, so a missing one names its config key before any work."""
    from ..core.stylizer import style_specs

    specs = style_specs(config)
    style = requested or next(iter(specs))
    if style not in specs:
        raise UserError(_unknown_style(style, specs, config))
    naming.check_style(config.output.name_template, style)
    return style


def _stylize_all(config: Config, jobs: list[Job], *, style: str, progress: bool) -> list[JobResult | ClipResult]:
    """The one core every entry point runs on (``Stylizer``: the variant chosen for this box, the shared
    pipeline of decode threads, async inference and encoders, and its clip lane): every file through
    ``Stylizer.run_jobs``, which tells photos from clips (``submit_file``); the results come back in the order
    of ``jobs``, under one bar of files."""
    from ..core.stylizer import Stylizer

    with Stylizer(config) as stylizer:
        return stylizer.run_jobs(jobs, style=style, progress=progress)


def _describe_failure(result: JobResult | ClipResult) -> tuple[str, bool, bool]:
    """(one line for the list, whether it was a bug, whether it was the box's storage); a bug's traceback
    goes to stderr first."""
    from ..watch.faults import Kind, classify

    error = result.error
    assert error is not None
    line, is_bug = failure_reason(error, result.job.src)
    if is_bug:
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        line = line.replace("(a bug)", "(a bug, traceback above)", 1)
    return line, is_bug, classify(error) is Kind.BOX


def run(args: argparse.Namespace) -> int:
    with console_log(quiet=args.quiet):
        folders = MadeFolders()
        try:
            return _run(args, folders)
        finally:
            folders.remove_empty()


def _run(args: argparse.Namespace, folders: MadeFolders) -> int:
    from ..config import load_config
    from ..core.pipeline import Job

    config = load_config(args.config)
    style = chosen_style(config, args.style)
    accept = InputFilter(config.watch, also=config.video.extensions)  # clips are taken beside photos
    out_dir: Path = args.output
    skip = output_skip(out_dir, config)
    sources, problems = collect_sources(args.inputs, recursive=args.recursive, accept=accept, skip=skip)
    if (said := skip.said()) is not None:
        print(said)
    sources = without_own_outputs(sources, out_dir, config, style=style, accept=accept)
    taken: set[Path] = set()
    inputs = frozenset(source.path.resolve() for source in sources)
    names = naming.SourceNames(config.output.name_template, style=style,
                               ext_of=functools.partial(naming.output_extension, config),
                               is_input=accept.accepts, named=[source.path for source in sources])
    planned = [output_path(source, out_dir, config, style=style, taken=taken, overwrite=args.overwrite,
                           inputs=inputs, names=names) for source in sources]
    error = make_output_folders(out_dir, [plan.dst.parent for plan in planned], folders.make) if planned else None
    if error is not None:
        print(f"edge-anime stylize: error: {error}", file=sys.stderr)
        return EXIT_CANTCREAT
    jobs = [Job(src=source.path, dst=plan.dst) for source, plan in zip(sources, planned)]
    progress = not args.quiet and sys.stderr.isatty()
    results = _stylize_all(config, jobs, style=style, progress=progress) if jobs else []
    failures: list[str] = list(problems)
    bugs = 0
    box: list[str] = []
    for result in results:
        if not result.ok:
            line, is_bug, is_box = _describe_failure(result)
            failures.append(line)
            bugs += is_bug
            if is_box:
                box.append(line)
    done = sum(r.ok for r in results)
    print(f"stylized {done} of {len(results) + len(problems)} input(s) into {out_dir}")
    for line in _names_lines(planned, results):
        print(line)
    if not jobs and not problems:
        print("edge-anime stylize: no image files found in the inputs given", file=sys.stderr)
        return EXIT_FAILURES
    if failures:
        print(f"{len(failures)} failed:", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
    return failures_status("stylize", out_dir, failures=len(failures), bugs=bugs, box=box)
