"""Run one function in a fresh interpreter and bring back its result and its log lines.

Why: the first start's screen compiles and runs 9-11 models (``runtime.shortlist``). Dropped, they still left
~150 MB in the process (RSS 250-280 MB after them, where a warm start is ready at ~90 MB; ``malloc_trim``
gave back 30 MB of it), so the service would have carried them for its whole life, and the first start's peak
was that much above a warm one's. A process that exits gives everything back. A plugin crash on one candidate
then ends the screen, not the service.

Why not ``multiprocessing``: its spawn start re-imports the parent's ``__main__``, which for ``python -m
edge_anime`` is the CLI itself; and ``fork`` after OpenVINO has started its threads is unsafe. The protocol here
is small: the arguments pickled on the child's stdin; log records (as ``logging.handlers.SocketHandler`` pickles
them) and then the result, pickled on its stdout; its stderr is the parent's, so a crash's traceback shows.
Pickle is safe here: both ends are this package, run by the same user, over a pipe only they hold.
"""
from __future__ import annotations

import ctypes
import importlib
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


class IsolatedError(RuntimeError):
    """The child failed: raised, killed, crashed or timed out; the message says which."""


def call(target: Callable[..., T], *args: Any, timeout: float) -> T:
    """``target(*args)`` in a fresh interpreter; its log records are handled here as if logged here.
    ``target`` must be a module-level function; args and result must pickle. Killed after ``timeout`` s."""
    level = logging.getLogger(target.__module__).getEffectiveLevel()  # the child sends no more than would show
    proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        with proc.stdin:
            pickle.dump((target.__module__, target.__qualname__, args, level), proc.stdin)
        kind, value = _relay(proc.stdout)
    except BrokenPipeError:
        kind, value = "error", "it exited before reading its arguments"
    finally:
        timer.cancel()
        proc.stdout.close()
        status = proc.wait()
    if kind == "result":
        return value  # type: ignore[no-any-return]
    if killed.is_set():
        value = f"killed after {timeout:.0f} s"
    elif status < 0:
        value = f"died of signal {-status}"
    elif kind == "eof":
        value = f"exited with status {status} without a result"
    raise IsolatedError(f"{target.__qualname__} in a child process: {value}")


def _relay(stream: IO[bytes]) -> tuple[str, Any]:
    """Hand the child's log records to this process's loggers until its result, error or end of output."""
    while True:
        try:
            kind, value = pickle.load(stream)
        except (EOFError, pickle.UnpicklingError):
            return "eof", None
        if kind != "log":
            return kind, value
        record = logging.makeLogRecord(value)
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)


class _PipeHandler(logging.Handler):
    """Sends each record to the parent, formatted into its message as ``SocketHandler`` does."""

    def __init__(self, stream: IO[bytes], lock: threading.Lock) -> None:
        super().__init__()
        self.stream, self.write_lock = stream, lock

    def emit(self, record: logging.LogRecord) -> None:
        data = dict(record.__dict__)
        data["msg"], data["args"], data["exc_info"] = record.getMessage(), None, None
        if record.exc_info:
            data["exc_text"] = logging.Formatter().formatException(record.exc_info)
        _send(self.stream, self.write_lock, "log", data)


def _send(stream: IO[bytes], lock: threading.Lock, kind: str, value: Any) -> None:
    with lock:
        pickle.dump((kind, value), stream)
        stream.flush()


def _die_with_parent() -> None:
    """A service killed (-9 included) mid-measurement takes its child along, instead of leaving it running."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the child ends with its work anyway
        pass
    if os.getppid() == 1:  # the parent died before the prctl
        os._exit(1)


def _main() -> None:
    _die_with_parent()
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the pipe
    module, name, args, level = pickle.load(sys.stdin.buffer)
    lock = threading.Lock()
    root = logging.getLogger()
    root.handlers[:] = [_PipeHandler(out, lock)]
    root.setLevel(level)
    try:
        result = getattr(importlib.import_module(module), name)(*args)
    except BaseException as exc:  # noqa: BLE001 - whatever it was, the parent is told, then this process ends
        _send(out, lock, "error", f"{type(exc).__name__}: {exc}")
        raise SystemExit(1) from None
    _send(out, lock, "result", result)


if __name__ == "__main__":
    _main()
