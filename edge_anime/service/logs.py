"""Logging for the service: one line per image, plain or JSON, no second timestamp under journald.

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
        data.update(level=record.levelname, logger=record.name, msg=record.getMessage())
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
        handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("watchdog").setLevel(logging.WARNING)
    return form + ("+journald" if journald else "")
