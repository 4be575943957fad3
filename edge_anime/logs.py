"""Logging for every command: one line per image, plain or JSON, no second timestamp under journald.

In the base layer, not in ``service``: the HTTP app, the clip glue and ``stylize`` log through the same
escaping and the same structured fields (``FIELDS_ATTR``).

Every argument of every log line is escaped (``escape``): a file named ``"x\n... INFO done ..."`` cannot
forge a line, in plain or JSON form, whichever logger logged it. Python warnings (Pillow's, OpenVINO's) are
routed through logging, so they reach the same handler and the same form.

journald stamps every line itself; systemd sets JOURNAL_STREAM to the device:inode of the stream it
connected to stderr, so a match means "our stderr goes to the journal" (the documented test; a bare
INVOCATION_ID would also be true with stderr redirected to a file).
"""
from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any

FIELDS_ATTR = "fields"  # logging ``extra={"fields": {...}}``: structured data for the JSON form
_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"'}


def _unsafe(ch: str) -> bool:
    """Control characters (C0, DEL, C1), line and paragraph separators, and undecodable bytes."""
    o = ord(ch)
    return o < 0x20 or 0x7F <= o < 0xA0 or o in (0x2028, 0x2029) or 0xD800 <= o < 0xE000


def escape(text: str, *, quotes: bool = False) -> str:
    """``text`` with backslashes and unsafe characters escaped (``\\n``, ``\\x1b``, ``\\udcff``): one line,
    unambiguous, printable. With ``quotes``, double quotes are escaped too."""
    out = []
    for ch in text:
        if ch in _SHORT_ESCAPES and (quotes or ch != '"'):
            out.append(_SHORT_ESCAPES[ch])
        elif _unsafe(ch):
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}")
        else:
            out.append(ch)
    return "".join(out)


def log_name(name: str) -> str:
    """A file name for a log line: quoted and escaped, so where it ends is never in doubt."""
    return '"' + escape(name, quotes=True) + '"'


def _escape_arg(value: Any) -> Any:
    if isinstance(value, (str, os.PathLike, BaseException)):
        return escape(os.fspath(value) if isinstance(value, os.PathLike) else str(value))
    return value


def escaped(record: logging.LogRecord) -> logging.LogRecord:
    """A copy of ``record`` whose string-like arguments are escaped (names quoted with ``log_name`` stay
    as they are: they are already safe and contain no raw control characters)."""
    if not record.args:
        return record
    copy = logging.makeLogRecord(record.__dict__)
    if isinstance(record.args, dict):
        copy.args = {k: _escape_arg(v) for k, v in record.args.items()}
    else:
        copy.args = tuple(_escape_arg(a) for a in record.args)
    return copy


class PlainFormatter(logging.Formatter):
    """logging.Formatter over escaped arguments."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(escaped(record))


def under_journald() -> bool:
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    if not (dev.isdigit() and ino.isdigit()):
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return st.st_dev == int(dev) and st.st_ino == int(ino)


class JsonFormatter(logging.Formatter):
    def __init__(self, *, timestamps: bool) -> None:
        super().__init__()
        self.timestamps = timestamps

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {}
        if self.timestamps:
            data["ts"] = datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
        data.update(level=record.levelname, logger=record.name, msg=escaped(record).getMessage())
        data.update(getattr(record, FIELDS_ATTR, None) or {})
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup_logging(*, log_format: str, level: str) -> str:
    """Configure the root logger on stderr; returns the form chosen ('plain' / 'json', with '+journald')."""
    journald = under_journald()
    form = "plain" if log_format == "auto" else log_format
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(JsonFormatter(timestamps=not journald))
    elif journald:
        handler.setFormatter(PlainFormatter("%(levelname)s %(message)s"))
    else:
        handler.setFormatter(PlainFormatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("watchdog").setLevel(logging.WARNING)
    logging.captureWarnings(True)  # warnings.warn (Pillow, OpenVINO) through this handler, in this form
    return form + ("+journald" if journald else "")
