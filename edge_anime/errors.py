"""The error taxonomy: one place decides what a failure means for the operator and the watch folder.

- ``UserError``: the operator can fix it (bad YAML key, missing file, wrong model). One line, no traceback,
  a distinct exit status so systemd does not restart the service in a loop.
- ``InputError``: a permanent problem with one input file (not an image, bomb, unsupported mode). The file
  goes to ``failed/`` with the reason; the service keeps running.
- ``TransientError``: worth retrying with the input kept (disk full, model busy).
Anything else is a bug: full traceback and "please report".
"""
from __future__ import annotations

# Exit statuses, also named in the systemd unit's RestartPreventExitStatus.
EXIT_OK = 0
EXIT_FAILURES = 1      # a batch finished but some inputs failed
EXIT_USAGE = 2         # argparse's own convention
EXIT_CONFIG = 78       # EX_CONFIG from sysexits.h: bad config or model; restarting will not help
EXIT_INTERNAL = 70     # EX_SOFTWARE: a bug
EXIT_CANTCREAT = 73    # EX_CANTCREAT: the output folder cannot be made or written (read-only, full, a file)
EXIT_IOERR = 74        # EX_IOERR: writes failed during the run for the box's storage, not for the inputs
EXIT_TEMPFAIL = 75     # EX_TEMPFAIL: may work later (a port still held by the old instance, a Ray cluster not up)

# One mebibyte, wherever sizes are counted or said (MB in messages and config keys means MiB)
BYTES_PER_MB = 1 << 20


class EdgeAnimeError(Exception):
    """Base of every error the project raises on purpose."""


class UserError(EdgeAnimeError):
    """Something the operator fixes: a config key, a path, a model. Printed as one line."""

    exit_status = EXIT_CONFIG


class ConfigError(UserError):
    """A config file that does not validate; the message names the key path."""


class ModelError(UserError):
    """A model that cannot be used: missing files, manifest mismatch, sha256 mismatch."""


class InputError(EdgeAnimeError):
    """A permanent problem with one input file; ``stage`` says where it was found."""

    def __init__(self, message: str, *, stage: str = "decode") -> None:
        super().__init__(message)
        self.stage = stage


class TransientError(EdgeAnimeError):
    """A failure worth retrying later with the input kept (ENOSPC, EBUSY, a busy model)."""

    def __init__(self, message: str, *, stage: str = "write") -> None:
        super().__init__(message)
        self.stage = stage


def failure_reason(error: BaseException, src: object) -> tuple[str, bool]:
    """One line naming ``src`` and why it failed, and whether that was a bug: what ``stylize`` lists and
    ``batch`` writes to failed.jsonl. An input or transient error's own message names the file already,
    mostly; anything else is a bug and says so."""
    if isinstance(error, (InputError, TransientError)):
        text = str(error)
        return (text if str(src) in text else f"{src}: {text}"), False
    return f"{src}: internal error (a bug): {type(error).__name__}: {error}", True
