"""Which files are inputs: one rule for the watch folder, ``stylize`` and ``bench``.

A name is taken when it has one of ``watch.extensions`` (or of ``video.extensions``, passed as ``also``:
clips take the same rule) and neither it nor a folder on its way matches
``watch.ignore_patterns`` (hidden files, ``.part``, ``.crdownload``... uploads still in progress) or is one
of edge-anime's own temp names. Before this, bench counted hidden and temp files that stylize skipped and
the watch folder never took. A file named explicitly on stylize's command line is the exception: the person
asked for it, so the decoder decides.

Style routing (the watch folder with several styles): a first-level folder of the inbox named after a served
style is a *route*: it is always entered, whatever ``watch.recursive`` says, and its files get that style
(``style_of``). Folders below a route follow ``watch.recursive`` like any other. A *held* name is a style that
a reload stopped serving: its folder is not entered, so the files waiting there stay untouched.

A search never takes what edge-anime itself writes below the folder searched (``Skip``): ``batch in -r -o in/out``
used to take the outputs of the run before as inputs, ``scene_toon_toon_toon.jpg`` after three runs. The
command's output folder and the watch folder's own folders are skipped when they lie inside an input folder,
and the command says so once.

Only regular files are inputs, wherever the name comes from (``read_regular``, ``check_regular``): reading
``/dev/zero`` never ends (the Python API was OOM-killed at 23.8 GB), opening a FIFO waits forever for a writer,
and neither is a picture. The CLI and the watch folder's claim refused them already; the Python API and
clips now do too, with one message naming the file and what it is.
"""
from __future__ import annotations

import contextlib
import fnmatch
import glob
import itertools
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .config import WatchSection
from .errors import InputError, TransientError
from .fsutil import TRANSIENT_ERRNOS, is_temp_name

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class InputFilter:
    """Which names may be taken (``watch`` config): not ignored, a wanted extension, not our own temp files."""

    def __init__(self, watch: WatchSection, *, routes: Iterable[str] = (), held: Iterable[str] = (),
                 also: Iterable[str] = ()) -> None:
        """``routes``/``held``: style folders (see the module docstring); ``also``: more extensions taken beside
        ``watch.extensions`` (``video.extensions``)."""
        self.patterns = list(watch.ignore_patterns)
        self.extensions = {e.lower().lstrip(".") for e in [*watch.extensions, *also]}
        self.recursive = watch.recursive
        self.routes = frozenset(routes)
        self.held = frozenset(held) - self.routes

    def style_of(self, rel: str) -> str | None:
        """The style a route gives ``rel`` (inbox-relative); None for the default style."""
        return self._first_folder_in(rel, self.routes)

    def held_style(self, rel: str) -> str | None:
        """The dropped style whose folder ``rel`` waited in (a claim taken before the reload); else None."""
        return self._first_folder_in(rel, self.held)

    @staticmethod
    def _first_folder_in(rel: str, names: frozenset[str]) -> str | None:
        head, sep, _rest = rel.partition("/")
        return head if sep and head in names else None

    def enters(self, rel_dir: str, *, recursive: bool | None = None) -> bool:
        """Whether the folder ``rel_dir`` is searched: a route always, a held style's folder never, any
        other only in recursive mode; ignored names (hidden, temp) never."""
        parts = rel_dir.split("/")
        if any(self.ignored(p) for p in parts) or parts[0] in self.held:
            return False
        if len(parts) == 1 and parts[0] in self.routes:
            return True
        return self.recursive if recursive is None else recursive

    def ignored(self, name: str) -> bool:
        return is_temp_name(name) or any(fnmatch.fnmatchcase(name, p) for p in self.patterns)

    def accepts(self, rel: str, *, recursive: bool | None = None) -> bool:
        """``rel``: a path relative to the folder searched, '/'-separated; ``recursive`` overrides the
        config's ``watch.recursive`` (stylize's ``-r``)."""
        parts = rel.split("/")
        if len(parts) > 1 and not self.enters("/".join(parts[:-1]), recursive=recursive):
            return False
        if any(self.ignored(p) for p in parts):
            return False
        return self.wanted_extension(parts[-1])

    def wanted_extension(self, name: str) -> bool:
        return "." in name and name.rpartition(".")[2].lower() in self.extensions

    def unwanted(self, rel: str) -> bool:
        """A file someone put there that will never be taken: not a temp or ignored name (those are uploads
        in progress, quiet by design), but an extension outside ``watch.extensions``."""
        parts = rel.split("/")
        return not any(self.ignored(p) for p in parts) and not self.wanted_extension(parts[-1])

    def files_in(self, folder: Path, *, recursive: bool | None = None, skip: Skip | None = None) -> list[Path]:
        """The input files under ``folder`` (sub-folders only when recursive), sorted for repeatable runs;
        folders are never entered through a symlink, as in the watch folder's scan, nor when ``skip`` names
        them (edge-anime's own output folders)."""
        deep = self.recursive if recursive is None else recursive
        found: list[Path] = []
        stack = [folder]
        while stack:
            current = stack.pop()
            for entry in sorted(current.iterdir()):
                rel = entry.relative_to(folder).as_posix()
                if entry.is_dir() and not entry.is_symlink():
                    if self.enters(rel, recursive=deep) and not (skip and skip.covers(entry, within=folder)):
                        stack.append(entry)
                elif entry.is_file() and self.accepts(rel, recursive=deep):
                    found.append(entry)
        return sorted(found)


def _not_regular(path: Path, mode: int) -> InputError:
    kind = next((name for test, name in _KINDS if test(mode)), "something else")
    return InputError(f"{path}: is {kind}, not a regular file; expected a picture or clip file", stage="read")


def _read_error(path: Path, exc: OSError) -> Exception:
    if exc.errno in TRANSIENT_ERRNOS:
        return TransientError(f"{path}: {exc.strerror or exc}", stage="read")
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{path}: no such file", stage="read")
    if isinstance(exc, PermissionError):
        return InputError(f"{path}: permission denied", stage="read")
    return InputError(f"{path}: cannot read: {exc.strerror or exc}", stage="read")


def check_regular(path: Path) -> None:
    """InputError unless ``path`` (links followed) is a regular file: for readers that open by name (PyAV),
    before they block on a FIFO or read a device; a missing or unreadable file is an InputError too."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise _read_error(path, exc) from exc
    if not stat.S_ISREG(mode):
        raise _not_regular(path, mode)


def read_regular(path: Path) -> bytes:
    """The whole of ``path``, which must be a regular file (see the module docstring).

    Opened with O_NONBLOCK, so a FIFO is refused at once instead of waiting for a writer (the flag changes
    nothing for a regular file), and checked with ``fstat`` on that very descriptor: a name swapped for a
    device between a check and the read cannot get past. InputError naming the file and what it is;
    TransientError (the input kept) for the box's own faults (EIO, ENOMEM...)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        check_regular(path)  # a socket cannot be opened at all (ENXIO): say what it is rather than the errno
        raise _read_error(path, exc) from exc
    with contextlib.ExitStack() as stack:
        stack.callback(os.close, fd)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise _not_regular(path, mode)
            fh = stack.enter_context(os.fdopen(fd, "rb", closefd=False))
            return fh.read()
        except OSError as exc:
            raise _read_error(path, exc) from exc


@dataclass(frozen=True)
class Source:
    """One input file and the sub-folder (relative to the folder it was found in) mirrored under -o."""

    path: Path
    subdir: Path = Path()


@dataclass
class Skip:
    """Folders a search never takes inputs from: the run's output folder and the watch folder's own folders
    (``folders``: why each is skipped, by resolved path), and those a search met (``met``), for the one line
    the command prints. Only a folder strictly inside the one searched is skipped: naming a folder itself
    (``batch done/ -o x``) is asking for it."""

    folders: dict[Path, str] = field(default_factory=dict)
    met: dict[Path, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.folders)

    def add(self, folder: Path, why: str) -> None:
        self.folders.setdefault(Path(os.path.realpath(folder)), why)

    def covers(self, path: Path, *, within: Path) -> bool:
        """Whether the folder ``path``, met in a search of ``within``, is one of ``folders`` (or inside one)
        that lies strictly below ``within``; the skipped folder is recorded in ``met`` when it is."""
        real, top = Path(os.path.realpath(path)), Path(os.path.realpath(within))
        for folder, why in self.folders.items():
            if top in folder.parents and (real == folder or folder in real.parents):
                self.met.setdefault(folder, why)
                return True
        return False

    def said(self) -> str | None:
        """The one line saying which folders were skipped, or None when the search met none."""
        if not self.met:
            return None
        shown = ", ".join(f"{folder} ({why})" for folder, why in self.met.items())
        return f"not taken as input (edge-anime's own output): {shown}"


class Problem(str):
    """One line for an input that named nothing (``in/a:b.jpg: no such file or folder``), which also keeps the
    input as given (``input``): a reader of failed.jsonl gets it whole, where splitting the line at its first
    ':' cut ``in/a:b.jpg`` to ``in/a``."""

    input: str

    def __new__(cls, given: str, reason: str) -> Problem:
        line = super().__new__(cls, f"{given}: {reason}")
        line.input = given
        return line


def _folder_sources(folder: Path, *, recursive: bool, accept: InputFilter, skip: Skip | None) -> list[Source]:
    return [Source(p, p.parent.relative_to(folder))
            for p in accept.files_in(folder, recursive=recursive, skip=skip)]


def _skipped_below(folder: Path, top: Path, skip: Skip | None) -> bool:
    """``folder`` (a glob's match, or a matched file's folder) is a skipped folder, or inside one, strictly
    below ``top``, the part of the pattern before its first wildcard (``in`` of ``in/**/*.jpg``)."""
    return skip is not None and skip.covers(folder, within=top)


def _fixed_part(pattern: str) -> Path:
    """The folder a glob pattern starts from: its leading components without a wildcard."""
    fixed = list(itertools.takewhile(lambda part: not glob.has_magic(part), Path(pattern).parts))
    return Path(*fixed) if fixed else Path()


def collect_sources(inputs: Sequence[str], *, recursive: bool, accept: InputFilter,
                    skip: Skip | None = None) -> tuple[list[Source], list[Problem]]:
    """Expand the command line into files (each once), plus one problem line per input that named nothing.

    A file named explicitly is always tried, whatever its extension: decode says whether it is an image.
    Folders and globs take what the watch folder would take (``inputs.InputFilter``: ``watch.extensions``,
    no ignored or temp names), and nothing inside a folder ``skip`` names.
    """
    sources: list[Source] = []
    problems: list[Problem] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            sources += _folder_sources(path, recursive=recursive, accept=accept, skip=skip)
        elif path.is_file():
            sources.append(Source(path))
        elif os.path.lexists(path):
            problems.append(Problem(str(path), "not a regular file"))
        elif glob.has_magic(text):
            top = _fixed_part(text)
            matches = [Path(m) for m in sorted(glob.glob(text, recursive=recursive))]
            files = [Source(m) for m in matches
                     if m.is_file() and accept.accepts(m.name) and not _skipped_below(m.parent, top, skip)]
            folders = [m for m in matches if m.is_dir() and not _skipped_below(m, top, skip)]
            for folder in folders:
                files += _folder_sources(folder, recursive=recursive, accept=accept, skip=skip)
            if not files:
                problems.append(Problem(text, "no image file matches"))
            sources += files
        else:
            problems.append(Problem(str(path), "no such file or folder"))
    unique: dict[Path, Source] = {}
    for source in sources:
        unique.setdefault(source.path.resolve(), source)
    return list(unique.values()), problems
