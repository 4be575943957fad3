"""`edge-anime status`: what the service is doing, read from its atomically written status file.

Exit status: 0 when the service is running, 3 when it is stopped or its status file is stale or missing
(the LSB convention `systemctl status` uses for "not running").
"""
from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ..config import load_config
from ..errors import EXIT_OK
from . import add_config_option

EXIT_NOT_RUNNING = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_option(parser, what="the service's config file")
    parser.add_argument("--json", action="store_true", help="print the status file as JSON")


def run(args: argparse.Namespace) -> int:
    from ..service.status_file import is_alive, read_status

    config = load_config(args.config)
    path = config.status_file()
    try:
        data = read_status(path)
    except FileNotFoundError:
        print(f"not running: no status file at {path} (service.status_file)")
        return EXIT_NOT_RUNNING
    except (OSError, ValueError) as exc:
        print(f"not running: cannot read {path}: {exc}")
        return EXIT_NOT_RUNNING
    alive = is_alive(data)
    if args.json:
        print(json.dumps({**data, "alive": alive}, indent=2))
        return EXIT_OK if alive else EXIT_NOT_RUNNING
    print(describe(data, path=path, alive=alive))
    return EXIT_OK if alive else EXIT_NOT_RUNNING


def _mb(value: Any) -> str:
    return f"{value / 1e6:.1f} MB" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def describe(data: dict[str, Any], *, path: Path, alive: bool, now: float | None = None) -> str:
    """The status file for people. Every field may be missing or of the wrong type (a damaged or
    hand-edited file): it is shown as '?', never a crash."""
    from ..service.status_file import number

    now = time.time() if now is None else now
    raw_counts = data.get("counts")
    counts: dict[str, Any] = raw_counts if isinstance(raw_counts, dict) else {}
    state = data.get("state", "?") if alive else f"not running (last state: {data.get('state', '?')})"
    updated = number(data, "updated", None)
    started = number(data, "started", None)
    when = datetime.fromtimestamp(updated).isoformat(timespec="seconds") if updated is not None else "?"
    uptime = f"{now - started:.0f} s" if started is not None else "?"
    lines = [
        f"state:     {state}",
        f"worker:    {data.get('worker_id')} (pid {data.get('pid', '?')} on {data.get('host')}), up {uptime}",
        f"model:     {data.get('model')}   detector: {data.get('detector')}   config: {data.get('config')}",
        (f"processed: {counts.get('processed', 0)}   failed: {counts.get('failed', 0)}   "
         f"retries: {counts.get('retried', 0)}   in flight: {counts.get('in_flight', 0)}   "
         f"queued: {counts.get('queued', 0)}"),
    ]
    if data.get("variant"):
        lines.append(f"variant:   {data.get('variant')}")
    styles = data.get("styles")
    if isinstance(styles, dict) and styles:
        for i, (name, info) in enumerate(styles.items()):
            info = info if isinstance(info, dict) else {}
            notes = [word for word, on in (("default", i == 0), ("compiled", info.get("compiled")),
                                           ("no longer served", info.get("served") is False)) if on]
            label = "styles:" if i == 0 else ""
            broken = info.get("broken")
            lines.append(f"{label:<11}{name}: {info.get('processed', '?')} done, {info.get('failed', '?')} failed"
                         + (f" ({', '.join(notes)})" if notes else "")
                         + (f"; cannot be compiled, its folder held until a reload: {broken}" if broken else ""))
    paused = data.get("paused")
    if isinstance(paused, dict):
        lines.append(f"paused:    {paused.get('reason')} (for {paused.get('seconds')} s)")
    clip = data.get("clip")
    if isinstance(clip, dict):
        lines.append(f"clip:      {json.dumps(clip.get('file'))} {clip.get('frames_done', '?')}/"
                     f"{clip.get('frames_total', '?')} frames, {clip.get('frames_per_s', '?')} frames/s")
    room = data.get("room")
    for wait in room if isinstance(room, list) else []:
        if isinstance(wait, dict):
            lines.append(f"room:      {json.dumps(wait.get('file'))} waits for {_mb(wait.get('needed_bytes'))} free "
                         f"in its outbox ({_mb(wait.get('free_bytes'))} free): the disk ran full under it")
    last = data.get("last")
    if isinstance(last, dict):
        lines.append(f"last:      {json.dumps(last.get('file'))} {last.get('result')} ({last.get('seconds')} s)")
    lines.append(f"updated:   {when}  ({path})")
    return "\n".join(lines)
