"""The status file: what the service is doing, written atomically so `edge-anime status` never reads half.

Written with ``durable=False``: losing the latest copy on power loss is harmless, and an fsync per second
would wear an SD card for nothing.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..fsutil import write_atomic

STALE_AFTER_SECONDS = 30.0  # a running service rewrites the file at least every few seconds


@dataclass
class Counts:
    processed: int = 0
    failed: int = 0
    retried: int = 0
    recovered: int = 0
    in_flight: int = 0
    queued: int = 0

    def summary(self) -> str:
        return (f"{self.processed} done, {self.failed} failed, {self.in_flight} in flight, "
                f"{self.queued} queued, {self.retried} retries")


@dataclass
class Status:
    state: str                                  # starting | ready | paused | reloading | stopping | stopped
    worker_id: str
    model: str
    detector: str
    config: str
    config_hash: str
    counts: Counts = field(default_factory=Counts)
    last: dict[str, Any] | None = None          # the last image: name, result, seconds
    paused: dict[str, Any] | None = None        # while intake is paused: reason, seconds
    variant: str = ""                           # which IR at which precision runs, and why (choice)
    styles: dict[str, dict[str, Any]] = field(default_factory=dict)  # per served style: done, failed, compiled
    clip: dict[str, Any] | None = None          # the clip in work: file, frames_done, frames_total, frames_per_s
    room: list[dict[str, Any]] = field(default_factory=list)  # clips held for room: file, needed/free bytes
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    started: float = field(default_factory=time.time)
    updated: float = 0.0


def write_status(path: Path, status: Status) -> None:
    status.updated = time.time()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(asdict(status), indent=2).encode(), durable=False)


def read_status(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return data


def _pid(data: dict[str, Any]) -> int | None:
    """The writer's pid, or None when the field is missing or not a positive integer (a damaged file)."""
    value = data.get("pid")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


def number(data: dict[str, Any], key: str, default: float | None) -> float | None:
    """``data[key]`` as a finite float, or ``default`` when missing or not a number."""
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return default
    return float(value)


def is_alive(data: dict[str, Any], *, now: float | None = None) -> bool:
    """The writer is still running: same host and its pid exists, or (another host, or no usable pid)
    recently updated. Never raises on a damaged file: `edge-anime status` must always answer."""
    now = time.time() if now is None else now
    if data.get("state") == "stopped":
        return False
    pid = _pid(data)
    if pid is not None and data.get("host") == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        except OverflowError:
            return False
        return True
    return now - (number(data, "updated", 0.0) or 0.0) < STALE_AFTER_SECONDS
