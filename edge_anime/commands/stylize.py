"""`edge-anime stylize INPUT... -o DIR`: stylize files, folders and globs once, through the service's pipeline.

Every input is tried even when others fail; the failures are listed at the end, one line each with the
reason, and the exit status is 1 (70 when one of them was a bug, 78 for a bad config or model, before any
work starts). Output names follow ``output.name_template``; a name already taken (on disk or by another
input of the same batch) gets ``-1``, ``-2``... as in the watch folder, so nothing is overwritten.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .. import naming
from ..errors import (
    EXIT_FAILURES,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    InputError,
    ModelError,
    TransientError,
    UserError,
)
from ..inputs import InputFilter

if TYPE_CHECKING:
    from ..config import Config
    from ..pipeline import Job, JobResult
    from ..video.job import ClipResult

@dataclass(frozen=True)
class Source:
    """One input file and the sub-folder (relative to the folder it was found in) mirrored under -o."""

    path: Path
    subdir: Path = Path()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="image or video files, folders (their images and clips; sub-folders only with -r) or "
                             "glob patterns (quote them: '*.jpg'); a clip becomes NAME_STYLE.mp4")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                        help="folder for the stylized files (created if missing)")
    parser.add_argument("--config", type=Path, metavar="FILE", default=None,
                        help="config file (default: $EDGE_ANIME_CONFIG, else the bundled configs/default.yaml)")
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="descend into sub-folders of folder inputs (and '**' in globs); the sub-folder "
                             "structure is mirrored under DIR")
    parser.add_argument("--style", default=None, metavar="NAME",
                        help="one of the styles the config serves (model.path, model.styles); default: model.path")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _folder_sources(folder: Path, *, recursive: bool, accept: InputFilter) -> list[Source]:
    return [Source(p, p.parent.relative_to(folder)) for p in accept.files_in(folder, recursive=recursive)]


def collect_sources(inputs: Sequence[str], *, recursive: bool,
                    accept: InputFilter) -> tuple[list[Source], list[str]]:
    """Expand the command line into files (each once), plus one problem line per input that named nothing.

    A file named explicitly is always tried, whatever its extension: decode says whether it is an image.
    Folders and globs take what the watch folder would take (``inputs.InputFilter``: ``watch.extensions``,
    no ignored or temp names).
    """
    sources: list[Source] = []
    problems: list[str] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            sources += _folder_sources(path, recursive=recursive, accept=accept)
        elif path.is_file():
            sources.append(Source(path))
        elif os.path.lexists(path):
            problems.append(f"{path}: not a regular file")
        elif glob.has_magic(text):
            matches = [Path(m) for m in sorted(glob.glob(text, recursive=recursive))]
            files = [Source(m) for m in matches if m.is_file() and accept.accepts(m.name)]
            folders = [m for m in matches if m.is_dir()]
            for folder in folders:
                files += _folder_sources(folder, recursive=recursive, accept=accept)
            if not files:
                problems.append(f"{text}: no image file matches")
            sources += files
        else:
            problems.append(f"{path}: no such file or folder")
    unique: dict[Path, Source] = {}
    for source in sources:
        unique.setdefault(source.path.resolve(), source)
    return list(unique.values()), problems


def output_path(source: Source, out_dir: Path, config: Config, *, style: str, taken: set[Path]) -> Path:
    """The first free output path for ``source``: not on disk and not given to an earlier input of the batch.

    The watch folder's rule (edge_anime/naming.py), so both spell clashes, long names and templates alike.
    """
    folder = out_dir / source.subdir

    def free(name: str) -> bool:
        return folder / name not in taken and not os.path.lexists(folder / name)

    name = naming.free_output_name(config.output.name_template, source_name=source.path.name, style=style,
                                   ext=naming.output_extension(config, source.path), is_free=free)
    path = naming.child(folder, name)
    taken.add(path)
    return path


def _stylize_all(config: Config, jobs: list[Job], *, style: str, progress: bool) -> list[JobResult | ClipResult]:
    """The one core every entry point runs on (``Stylizer``: the variant chosen for this box, the shared
    pipeline of decode threads, async inference and encoders). Photos first as one batch, then each clip
    (``video.extensions``) with a bar of its frames; the results come back in the order of ``jobs``."""
    from ..stylizer import Stylizer
    from ..video import is_clip

    photos = [job for job in jobs if not is_clip(job.src.name, config.video)]
    with Stylizer(config) as stylizer:
        done: dict[int, JobResult | ClipResult] = {}
        for job, result in zip(photos, stylizer.run_jobs(photos, style=style, progress=progress) if photos else []):
            done[id(job)] = result
        for job in jobs:
            if id(job) not in done:
                assert job.dst is not None
                done[id(job)] = stylizer.run_clip(job.src, job.dst, style=style, progress=progress)
        return [done[id(job)] for job in jobs]


def _describe_failure(result: JobResult | ClipResult) -> tuple[str, bool]:
    """(one line for the list, whether it was a bug)."""
    error = result.error
    if isinstance(error, (InputError, TransientError)):
        text = str(error)
        return (text if str(result.job.src) in text else f"{result.job.src}: {text}"), False
    assert error is not None
    traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
    return f"{result.job.src}: internal error (a bug, traceback above): {type(error).__name__}: {error}", True


def run(args: argparse.Namespace) -> int:
    from ..config import load_config
    from ..pipeline import Job
    from ..stylizer import style_specs

    config = load_config(args.config)
    specs = style_specs(config)  # every style served, resolved: a missing one names its key here
    style = args.style or next(iter(specs))
    if style not in specs:
        raise UserError(f"--style {style}: not served by {config.source}; expected one of {', '.join(specs)} "
                        "(add it to model.styles)")
    try:
        naming.check_style(config.output.name_template, style)
    except naming.UnsafeNameError as exc:
        raise ModelError(str(exc)) from None
    accept = InputFilter(config.watch, also=config.video.extensions)  # clips are taken beside photos
    sources, problems = collect_sources(args.inputs, recursive=args.recursive, accept=accept)
    out_dir: Path = args.output
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"edge-anime stylize: error: {out_dir}: cannot create the output folder: {exc.strerror}",
              file=sys.stderr)
        return EXIT_USAGE
    taken: set[Path] = set()
    jobs = []
    for source in sources:
        dst = output_path(source, out_dir, config, style=style, taken=taken)
        dst.parent.mkdir(parents=True, exist_ok=True)
        jobs.append(Job(src=source.path, dst=dst))
    progress = not args.quiet and sys.stderr.isatty()
    results = _stylize_all(config, jobs, style=style, progress=progress) if jobs else []
    failures = list(problems)
    bugs = 0
    for result in results:
        if not result.ok:
            line, is_bug = _describe_failure(result)
            failures.append(line)
            bugs += is_bug
    done = sum(r.ok for r in results)
    print(f"stylized {done} of {len(results) + len(problems)} input(s) into {out_dir}")
    if not jobs and not problems:
        print("edge-anime stylize: no image files found in the inputs given", file=sys.stderr)
        return EXIT_FAILURES
    if failures:
        print(f"{len(failures)} failed:", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return EXIT_INTERNAL if bugs else EXIT_FAILURES
    return EXIT_OK
