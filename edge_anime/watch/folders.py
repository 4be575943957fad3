"""The watch folders: where they are, that they are usable, and moves that never overwrite.

Every input lives in exactly one of inbox/ work/ done/ failed/ at every instant, which only holds if moves
between them are renames on one filesystem. So ``prepare_folders`` refuses folders that nest (a worker
would take its own outputs) or that sit on different filesystems from the inbox (a rename there would be
a copy: two places at once after a crash). The outbox may live anywhere: outputs are written, not moved.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ..config import WATCH_FOLDERS, Config, WatchSection
from ..core import naming
from ..errors import ConfigError
from ..inputs import InputFilter

FOLDER_NAMES = WATCH_FOLDERS
# Folders whose contents are moved by rename with the inbox's files: they must share its filesystem.
SAME_FS_AS_INBOX = ("work", "done", "failed")
PROBE_PREFIX = ".edge-anime-probe-"
_RENAME_NOREPLACE = 1  # from <linux/fs.h>


@dataclass(frozen=True)
class Folders:
    """The effective, absolute watch folders."""

    inbox: Path
    work: Path
    outbox: Path
    done: Path
    failed: Path

    @classmethod
    def from_config(cls, watch: WatchSection) -> Folders:
        return cls(**{name: Path(os.path.abspath(watch.folder(name))) for name in FOLDER_NAMES})

    def items(self) -> list[tuple[str, Path]]:
        return [(name, getattr(self, name)) for name in FOLDER_NAMES]


def _nests(a: Path, b: Path) -> bool:
    return a == b or a in b.parents or b in a.parents


def check_overlap(folders: Folders) -> None:
    """Refuse folders that are the same or inside one another (after resolving links)."""
    resolved = [(name, path.resolve()) for name, path in folders.items()]
    for i, (name_a, a) in enumerate(resolved):
        for name_b, b in resolved[i + 1:]:
            if _nests(a, b):
                raise ConfigError(
                    f"watch.{name_a} ({a}) and watch.{name_b} ({b}) overlap; each watch folder must be separate "
                    "and not inside another (set them apart, or use only watch.root)"
                )


def _probe_writable(name: str, path: Path) -> None:
    """Create and remove a file: os.access says yes to root even on a read-only mount."""
    probe = path / f"{PROBE_PREFIX}{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"watch.{name}: {path} is not writable ({exc.strerror}); fix its permissions") from None


def prepare_folders(folders: Folders) -> None:
    """Create missing folders and refuse unusable ones, naming the key and the fix (exit 78)."""
    check_overlap(folders)
    for name, path in folders.items():
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"watch.{name}: cannot create {path} ({exc.strerror})") from None
        if not path.is_dir():
            raise ConfigError(f"watch.{name}: {path} exists but is not a folder")
        _probe_writable(name, path)
    inbox_dev = folders.inbox.stat().st_dev
    for name in SAME_FS_AS_INBOX:
        path = getattr(folders, name)
        if path.stat().st_dev != inbox_dev:
            raise ConfigError(
                f"watch.{name}: {path} is on another filesystem than watch.inbox ({folders.inbox}); "
                "files move between them by rename, which must stay on one filesystem"
            )


def style_keys(config: Config) -> list[tuple[str, str]]:
    """(config key, style name) for the default style and each of ``model.styles``: the names that become
    first-level folders of the inbox and the outbox. Read from the manifests without hashing the IRs."""
    from ..errors import ModelError
    from ..models import resolve_model

    dirs = list(config.model.dirs)
    specs = [("model.path", config.model.path),
             *((f"model.styles[{i}]", spec) for i, spec in enumerate(config.model.styles))]
    found = []
    for key, spec in specs:
        try:
            found.append((key, resolve_model(spec, search_dirs=dirs, verify=False).style))
        except ModelError as exc:  # named by its own key, as the Stylizer names it (stylizer.style_specs)
            raise ModelError(f"{key}: {exc}".replace(f"{key}: model.path: ", f"{key}: ")) from None
    return found


def check_style_names(config: Config) -> None:
    """Refuse a style name whose inbox folder would never be read: hidden (``.dot``), one that
    ``watch.ignore_patterns`` skips, or one not in Unicode NFC form (an NFD ``café`` and an NFC one look the
    same to a person and differ to the filesystem: two folders, one of them never read). Only with
    ``model.styles``: a single style makes no folder. Run by `run` (exit 78) and `config check`."""
    if not config.model.styles:
        return
    ignored = InputFilter(config.watch).ignored
    seen: dict[str, tuple[str, str]] = {}
    for key, style in style_keys(config):
        alike = seen.setdefault(unicodedata.normalize("NFC", style).casefold(), (key, style))
        if alike[1] != style:
            raise ConfigError(f"{key}: style {style!r} and {alike[0]}'s style {alike[1]!r} differ only in case or "
                              "Unicode form: their folders look alike to a person and apart to the filesystem; "
                              "expected names that differ in their letters")
        where = f"{key}: style {style!r} (the manifest's style, else its name)"
        if style.startswith("."):
            raise ConfigError(f"{where} is a hidden name: its folder inbox/{style}/ would be made and never read; "
                              "expected a name that does not start with '.'")
        nfc = unicodedata.normalize("NFC", style)
        if nfc != style:
            raise ConfigError(f"{where} is not in Unicode NFC form: it looks like {nfc!r} but is spelt with other "
                              f"code points, so inbox/{nfc}/ typed by a person would not be its folder; expected "
                              f"the NFC spelling {nfc!r} in the style's manifest")
        if ignored(style):
            raise ConfigError(f"{where} matches watch.ignore_patterns or is a temp name: its folder would never "
                              "be read; rename the style or change watch.ignore_patterns")


def _load_renameat2() -> object | None:
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)
    return getattr(libc, "renameat2", None)


_renameat2 = _load_renameat2()


def rename_noreplace(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, failing with FileExistsError instead of replacing ``dst``.

    Why not ``os.rename``: it silently replaces, and two workers committing inputs with the same name at
    once must never destroy one. renameat2(RENAME_NOREPLACE) is atomic; where the filesystem lacks it
    (EINVAL, e.g. some network shares) a hard link then unlink keeps the no-overwrite promise, and as a last
    resort (no hard links either) a check-then-rename is the best the filesystem allows.
    """
    if _renameat2 is not None:
        at_fdcwd = -100
        rc = _renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), _RENAME_NOREPLACE)  # type: ignore[operator]
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err == errno.EEXIST:
            raise FileExistsError(err, os.strerror(err), str(dst))
        if err not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(err, os.strerror(err), str(src))
    try:
        os.link(src, dst, follow_symlinks=False)
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
            raise
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(dst)) from None
        os.rename(src, dst)
        return
    os.unlink(src)


def move_noreplace(src: Path, folder: Path, name: str) -> Path:
    """Move ``src`` into ``folder`` as ``name``, or ``name-1``, ``name-2``... on a clash (naming's rule, each
    fitted to NAME_MAX); returns the target."""
    folder.mkdir(parents=True, exist_ok=True)

    def take(candidate: str) -> bool:
        try:
            rename_noreplace(src, folder / candidate)
        except FileExistsError:
            return False
        return True

    return naming.child(folder, naming.free_name(name, take), what="name")
