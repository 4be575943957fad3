"""What a failure means for the watch folder: the input's fault, the box's fault, worth a retry, or a bug.

One function decides, and the watch core calls it at its one error boundary. Why the split matters: a full
disk used to count against each input's ``retry.max_attempts`` and then filed good photos in failed/. Now:

- ``INPUT``: the file itself is bad (not an image, a name no filesystem takes): failed/ at once.
- ``BOX``: the box's own storage (disk full, quota, read-only, I/O error, a folder gone): intake pauses,
  every claim is kept, and nothing is condemned; a probe resumes intake once writes succeed again.
- ``RETRY``: transient but not storage (out of memory while decoding): bounded by ``retry.max_attempts``.
- ``REQUEUE``: the pipeline closed before the job ran (a reload or a stop): run it again, no attempt counted.
- ``MODEL``: the style's model cannot be compiled (``StyleFault``): the box's fault too, never the input's. The
  input goes back untouched, the style's folder is held until a reload tries the model again.
- ``BUG``: anything else: failed/ with "internal error" and a traceback in the log.
"""
from __future__ import annotations

import enum
import errno
import os

from ..core.naming import UnsafeNameError
from ..errors import InputError, TransientError

# errno values that belong to the input's name, not to the box: retrying cannot change them.
INPUT_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EILSEQ})
# Stages where the pipeline reports that a job never ran (the pipeline was closed under it).
NOT_RUN_STAGES = frozenset({"queue"})
# errno -> words an operator acts on (watchdog's habit: ENOSPC -> "inotify watch limit reached").
ERRNO_WORDS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "filesystem is read-only",
    errno.EIO: "I/O error",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "a folder is missing",
    errno.ENOTDIR: "a folder is not a folder",
    errno.ENOMEM: "out of memory",
}


class Kind(enum.Enum):
    INPUT = "input"
    BOX = "box"
    MODEL = "model"
    RETRY = "retry"
    REQUEUE = "requeue"
    BUG = "bug"


class StyleFault(Exception):
    """A style's model failed to compile (a damaged or unreadable IR): no input can be stylized in it, so none
    may be condemned for it. ``stage`` is the watch core's word for where it happened."""

    stage = "compile"

    def __init__(self, style: str, reason: str) -> None:
        super().__init__(f"style {style!r} cannot be compiled: {reason}")
        self.style = style
        self.reason = reason


def os_error_of(error: BaseException) -> OSError | None:
    """The OSError behind ``error`` (itself, or its cause chain), if any."""
    seen: BaseException | None = error
    for _ in range(8):  # cause chains are short; a cycle must not hang the service
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen
        seen = seen.__cause__
    return None


def classify(error: BaseException) -> Kind:
    """The one rule for what ``error`` means (see the module docstring)."""
    if isinstance(error, StyleFault):
        return Kind.MODEL
    if isinstance(error, (InputError, UnsafeNameError)):
        return Kind.INPUT
    os_error = os_error_of(error)
    if os_error is not None and os_error.errno in INPUT_ERRNOS:
        return Kind.INPUT
    if isinstance(error, TransientError):
        if error.stage in NOT_RUN_STAGES:
            return Kind.REQUEUE
        return Kind.BOX if os_error is not None else Kind.RETRY
    if isinstance(error, FileExistsError) and error.errno is None:
        return Kind.INPUT  # naming.first_free ran out of suffixes: this name, not the box
    if isinstance(error, OSError):
        return Kind.BOX
    return Kind.BUG


def describe(error: BaseException) -> str:
    """One line: the words for the errno first, then the error's own text (which names the file)."""
    os_error = os_error_of(error)
    words = ERRNO_WORDS.get(os_error.errno or 0) if os_error is not None else None
    text = str(error)
    if os_error is not None and os_error is error and os_error.filename is not None:
        text = f"{os.fsdecode(os_error.filename)}: {os_error.strerror}"
    return f"{words}: {text}" if words else text
