"""Temp-then-rename writes: a reader sees either nothing or the whole file, never a part of it.

Every artefact the runtime writes (stylized images, the status file) goes through ``write_atomic``. The
temp file is hidden (a leading dot) so the watch folder's own ignore patterns, rsync users and Samba
browsers all skip it, and it lives in the target folder so the rename never crosses a filesystem.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

TEMP_PREFIX = ".edge-anime-tmp-"
TEMP_ID_CHARS = 12
# How much longer a temp name is than its target's name: naming.OUTPUT_MAX_BYTES leaves this much room.
TEMP_OVERHEAD_BYTES = len(TEMP_PREFIX) + TEMP_ID_CHARS + 1
# Errors that a later retry may not meet: full disk, quota, busy, out of memory, I/O on a network share.
TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EBUSY, errno.EAGAIN, errno.ENOMEM, errno.EIO})


def temp_path_for(target: Path) -> Path:
    """A unique hidden temp name beside ``target``."""
    return target.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex[:TEMP_ID_CHARS]}-{target.name}")


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (power loss after rename must not undo it)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(target: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``target`` via a fsynced hidden temp file and a rename.

    ``durable=False`` skips both fsyncs, for files such as the status file where losing the latest
    version on power loss is harmless. Errors are raised as the OSError they are (the caller's one
    boundary decides what ENOSPC means for it: watch/faults.py); the temp file is removed on any failure.
    """
    tmp = temp_path_for(target)
    try:
        with open(tmp, "xb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, target)
        if durable:
            fsync_dir(target.parent)
    except BaseException:
        _unlink_quietly(tmp)
        raise


PROBE_BYTES = 4096  # one block: a full disk refuses it, where creating an empty file may still succeed


def probe_write(folder: Path) -> None:
    """Write, sync and remove one hidden temp file in ``folder``: raises the OSError a real output would meet
    there (EROFS, EACCES or EPERM for an immutable folder, ENOSPC, ENOTDIR). Why a write and not
    ``os.access``: root passes ``access`` on a mode-0555 folder, and only a write finds a full disk."""
    tmp = temp_path_for(folder / "write-probe")
    try:
        with open(tmp, "xb") as fh:
            fh.write(b"\0" * PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        _unlink_quietly(tmp)


def _unlink_quietly(path: Path) -> None:
    """Remove a temp file on the way out of a failure; a second error (EIO, EROFS) must not hide the first."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing, never truncated) for the ``with`` block,
    waiting while another process holds it. The lock goes with the process: a killed holder frees it.

    The one blocking file lock (the compile lock and the variant choice's lock). The watch folder's worker
    lock (``watch/claim.py``) is another kind: it never waits (LOCK_NB) and outlives a ``with`` block."""
    with open(path, "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def is_temp_name(name: str) -> bool:
    """True for names ``write_atomic`` uses, so cleanup after a crash can remove leftovers."""
    return name.startswith(TEMP_PREFIX)
