"""One naming rule for every file the runtime names: outputs (stylize and the watch folder), inputs set aside
in done/ or failed/, and their error reports.

Why one module: the template, the "first free suffixed name" rule, the length limit and the one-component
check used to be written in four places, and each copy missed a case (a 240-byte name that fits the
filesystem but not with the temp prefix; a manifest ``style`` of ``../../x`` that escaped the outbox).

- ``render``: ``output.name_template`` with the input's parts, checked to be one path component.
- ``fit``: shorten a name to a byte budget, keeping the extension and a hash of what was cut (so two long
  names that share a prefix stay apart).
- ``suffixed`` / ``first_free``: ``a.jpg``, ``a-1.jpg``, ``a-2.jpg``... each candidate fitted to the budget.
- ``output_extension``: ``mp4`` for a clip, else what ``output.format`` says for a photo.
- ``child``: the one place a formatted name becomes a path; refuses anything but one component.
- ``SourceNames``: which name an input's output is rendered from (``stylize`` and ``batch``): its own, or,
  when another input of its folder would get the same output name (``photo.jpg`` and ``photo.png`` with
  ``format: jpeg``), its name with its extension (``qualified_name``: ``photo_jpg_toon.jpg``).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ModelError
from ..fsutil import TEMP_OVERHEAD_BYTES

if TYPE_CHECKING:
    from ..config import Config

NAME_MAX_BYTES = 255          # Linux NAME_MAX on every filesystem we write to (ext4, xfs, btrfs, tmpfs, nfs)
MAX_SUFFIX = 10_000           # clashes tried before giving up on a name
HASH_CHARS = 8                # hex digits of the cut part's sha1 kept in a shortened name
SHORTENED_MARK = "~"          # between the kept prefix and the hash: "very-long-na~1a2b3c4d.jpg"
# A file written through fsutil.write_atomic has a longer hidden temp name first: its name must leave room.
OUTPUT_MAX_BYTES = NAME_MAX_BYTES - TEMP_OVERHEAD_BYTES


def output_extension(config: Config, src: Path) -> str:
    """The extension of ``src``'s output: ``mp4`` for a clip, else what ``output.format`` says for a photo.
    Imported here, not above: every command's module imports ``naming``, and ``--help`` needs no Pillow."""
    from ..imaging.encoder import image_extension
    from ..video import OUTPUT_EXTENSION, is_clip

    return OUTPUT_EXTENSION if is_clip(src.name, config.video) else image_extension(config.output, src)


class UnsafeNameError(ValueError):
    """A formatted name that is not exactly one path component ('/', NUL, '.', '..', empty)."""


def name_bytes(name: str) -> int:
    """Length as the kernel counts it (undecodable bytes round-trip through surrogateescape)."""
    return len(os.fsencode(name))


def check_component(name: str, *, what: str = "name") -> str:
    """``name`` unchanged when it is one path component; UnsafeNameError naming it otherwise."""
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafeNameError(f"{what} {name!r} is not a single file name (no '/', '.', '..' or NUL allowed)")
    return name


def child(folder: Path, name: str, *, what: str = "output name") -> Path:
    """``folder / name``, checked at the point of writing: the result is always directly inside ``folder``."""
    return folder / check_component(name, what=what)


def _split_ext(name: str) -> tuple[str, str]:
    """('stem', '.ext') for 'stem.ext'; ('name', '') without a dot or for a dot-file."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        return name, ""
    return stem, "." + ext


def _cut(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` within ``max_bytes`` encoded bytes, never splitting a character."""
    out: list[str] = []
    used = 0
    for ch in text:
        size = name_bytes(ch)
        if used + size > max_bytes:
            break
        out.append(ch)
        used += size
    return "".join(out)


def fit(name: str, max_bytes: int = NAME_MAX_BYTES) -> str:
    """``name`` when it fits in ``max_bytes``; else its stem cut short + ``~<hash>`` + its extension.

    The hash is of the whole original name, so the result is stable (a retry picks the same name) and two
    names that differ only after the cut stay different. An extension too long to keep is cut too.
    """
    if name_bytes(name) <= max_bytes:
        return name
    stem, ext = _split_ext(name)
    digest = hashlib.sha1(os.fsencode(name)).hexdigest()[:HASH_CHARS]
    tail = SHORTENED_MARK + digest
    if name_bytes(ext) > max_bytes // 2:
        ext = ""
    room = max_bytes - name_bytes(tail) - name_bytes(ext)
    return _cut(stem, max(room, 0)) + tail + ext


def suffixed(name: str, n: int) -> str:
    """``a_toon.jpg`` -> ``a_toon-2.jpg``: the n-th alternative when a name is taken (n = 0: the name)."""
    if n == 0:
        return name
    stem, ext = _split_ext(name)
    return f"{stem}-{n}{ext}"


def candidate(name: str, n: int, *, max_bytes: int = NAME_MAX_BYTES) -> str:
    """The n-th alternative of ``name``, fitted first so the suffix is never the part that is cut."""
    suffix_bytes = 0 if n == 0 else len(f"-{n}")
    return suffixed(fit(name, max_bytes - suffix_bytes), n)


def first_free(make: Callable[[int], str], is_free: Callable[[str], bool], *, what: str) -> str:
    """The first of ``make(0)``, ``make(1)``... that ``is_free`` accepts; each checked to be one component.

    ``is_free`` may also reserve the name (an O_EXCL create): it is called once per candidate, in order.
    """
    for n in range(MAX_SUFFIX):
        option = check_component(make(n))
        if is_free(option):
            return option
    raise FileExistsError(f"no free name for {what} after {MAX_SUFFIX} tries")


def free_name(name: str, is_free: Callable[[str], bool], *, max_bytes: int = NAME_MAX_BYTES) -> str:
    """The first free of ``name``, ``name-1``... fitted to ``max_bytes`` (done/ and failed/ moves)."""
    return first_free(lambda n: candidate(name, n, max_bytes=max_bytes), is_free, what=repr(name))


def render(template: str, *, source_name: str, style: str, ext: str, n: int = 0) -> str:
    """``output.name_template`` for one input; one path component, whatever the manifest's ``style`` says.

    Templates without ``{n}`` get the clash suffix from ``suffixed``; templates with it number themselves.
    """
    stem = source_name.rpartition(".")[0] or source_name
    return check_component(template.format(stem=stem, style=style, ext=ext, name=source_name, n=n),
                           what="output name")


def output_name(template: str, *, source_name: str, style: str, ext: str, n: int,
                max_bytes: int = OUTPUT_MAX_BYTES) -> str:
    """The n-th candidate output name for ``source_name``, fitted to ``max_bytes``."""
    if "{n}" in template:
        return fit(render(template, source_name=source_name, style=style, ext=ext, n=n), max_bytes)
    return candidate(render(template, source_name=source_name, style=style, ext=ext), n, max_bytes=max_bytes)


def free_output_name(template: str, *, source_name: str, style: str, ext: str, is_free: Callable[[str], bool],
                     max_bytes: int = OUTPUT_MAX_BYTES) -> str:
    """The first output name for ``source_name`` that ``is_free`` accepts (stylize and the watch folder)."""
    return first_free(lambda n: output_name(template, source_name=source_name, style=style, ext=ext, n=n,
                                            max_bytes=max_bytes), is_free, what=f"the output of {source_name!r}")


def check_style(template: str, style: str) -> None:
    """Refuse, before any work, a model whose manifest ``style`` would make output names that are not one
    file name (``style: ../../x`` used to write outside the outbox). Raises ModelError saying so: the style's
    manifest (or the template) is what must change, wherever the style is started (Stylizer, ``stylize``)."""
    try:
        render(template, source_name="photo.jpg", style=style, ext="jpg")
    except UnsafeNameError as exc:
        raise ModelError(f"the model's style {style!r} in output.name_template {template!r} makes {exc}; "
                              "fix the manifest's style or the template") from None


def qualified_name(name: str) -> str:
    """``photo.jpg`` -> ``photo_jpg.jpg``: the name an output is rendered from when another input of the same
    folder would get the same output name; with the input's own extension in its stem, the template makes
    ``photo_jpg_toon.jpg``, still a name of that input alone."""
    stem, ext = _split_ext(name)
    return f"{stem}_{ext[1:]}{ext}" if ext else name


class SourceNames:
    """Which name each input's output is rendered from: the input's own, or ``qualified_name`` when another
    input in the same folder would get the same output name. One rule for ``stylize`` and ``batch``.

    Why by the folder on disk and not by this run's inputs nor by their order: ``batch`` counts an output that
    exists as done, so a name must say which input it belongs to on every run. Suffixing in the order given
    did not: ``photo.png`` alone got ``photo_toon.jpg``; with ``photo.jpg`` beside it on the next run,
    ``photo.jpg`` took ``photo_toon.jpg`` (already there: counted done, never stylized) and ``photo.png``
    became ``photo_toon-1.jpg``. Deciding by the run's inputs fails the same way for ``batch in/*.png`` then
    ``batch in/*.jpg``. The folder's inputs are ``is_input``'s files in it (the folder rule: wanted
    extensions, no hidden or temp names) and the run's ``named`` files (asked for by name, whatever their
    extension). Without a clash (the common case) nothing changes: ``photo_toon.jpg``.
    """

    def __init__(self, template: str, *, style: str, ext_of: Callable[[Path], str],
                 is_input: Callable[[str], bool], named: Iterable[Path] = ()) -> None:
        self.template = template
        self.style = style
        self.ext_of = ext_of
        self.is_input = is_input
        self._named: dict[Path, set[str]] = {}
        for path in named:
            self._named.setdefault(path.parent, set()).add(path.name)
        self._outputs: dict[Path, dict[str, int]] = {}

    def plain(self, path: Path) -> str:
        """The template's own first name for ``path``'s output, as if it had no neighbour."""
        return output_name(self.template, source_name=path.name, style=self.style, ext=self.ext_of(path), n=0)

    def __call__(self, path: Path) -> str:
        """The name ``path``'s output is rendered from: ``path.name``, or ``qualified_name`` of it on a clash."""
        clashes = self._clashes(path.parent)
        return qualified_name(path.name) if clashes.get(self.plain(path), 0) > 1 else path.name

    def _clashes(self, folder: Path) -> dict[str, int]:
        """Output name -> how many inputs of ``folder`` would get it (listed once per folder)."""
        if folder not in self._outputs:
            names = set(self._named.get(folder, ()))
            try:
                with os.scandir(folder) as entries:
                    names.update(e.name for e in entries if self.is_input(e.name) and e.is_file())
            except OSError:  # gone or unreadable: the inputs named are all that is known
                pass
            counts: dict[str, int] = {}
            for name in names:
                plain = self.plain(folder / name)
                counts[plain] = counts.get(plain, 0) + 1
            self._outputs[folder] = counts
        return self._outputs[folder]
