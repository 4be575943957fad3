"""Stylize a list of batch items on one Stylizer: the code that runs on this box and inside every Ray actor.

Each input is submitted at once, photo or clip alike (``Stylizer.submit_file``, which tells them apart): a
photo goes to the style's pipeline (blocking while its in-flight slots are taken, so memory stays bounded and
decode, inference and encode overlap across photos), a clip to the Stylizer's clip lane, one at a time, its
frames through the same pipeline. Nothing raises for one input: every item ends as an ``Outcome`` (written,
skipped because its output exists, or failed with the reason), which is what a Ray actor returns as a row and
the command counts.
"""
from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import failure_reason
from .plan import Item

if TYPE_CHECKING:
    from ..config import Config
    from ..core.stylizer import FileResult, Stylizer

Status = Literal["written", "skipped", "failed"]


@dataclass(frozen=True)
class Outcome:
    """What became of one item. ``worker``: the host and process that ran it (a Ray run's spread). ``box``: it
    failed for the box's storage (disk full, read-only, I/O error), not for the input (``watch.faults``)."""

    src: str
    dst: str
    status: Status
    reason: str = ""
    bug: bool = False
    box: bool = False
    seconds: float = 0.0
    worker: str = ""

    def row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Outcome:
        return cls(src=str(row["src"]), dst=str(row["dst"]), status=row["status"], reason=str(row["reason"]),
                   bug=bool(row["bug"]), box=bool(row.get("box", False)), seconds=float(row["seconds"]),
                   worker=str(row["worker"]))


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def stylize_items(stylizer: Stylizer, items: Sequence[Item], *, style: str,
                  on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Every item's outcome, in the order given; ``on_outcome`` is called as each ends (from pipeline
    threads for photos), for a progress bar."""
    me = worker_name()
    outcomes: dict[int, Outcome] = {}
    lock = threading.Lock()

    def settle(index: int, outcome: Outcome) -> None:
        """Once per item, by whichever comes first: the future's callback (on a pipeline thread), or this
        thread after ``result()``, which may return before the callbacks have run."""
        with lock:
            if index in outcomes:
                return
            outcomes[index] = outcome
        if on_outcome is not None:
            on_outcome(outcome)

    def finished(index: int, item: Item, started: float, future: Future[FileResult]) -> None:
        result = future.result()
        settle(index, _outcome(item, result.error, time.monotonic() - started, me))

    pending: list[tuple[int, Item, float, Future[FileResult]]] = []
    for index, item in enumerate(items):
        if os.path.lexists(item.dst):  # an earlier attempt (a killed actor, a re-run) finished it
            settle(index, Outcome(item.src, item.dst, "skipped", worker=me))
            continue
        started = time.monotonic()
        future = stylizer.submit_file(item.src, item.dst, style=style)
        future.add_done_callback(functools.partial(finished, index, item, started))
        pending.append((index, item, started, future))
    for index, item, started, future in pending:
        finished(index, item, started, future)
    return [outcomes[index] for index in range(len(items))]


def _outcome(item: Item, error: BaseException | None, seconds: float, worker: str) -> Outcome:
    from ..watch.faults import Kind, classify

    if error is None:
        return Outcome(item.src, item.dst, "written", seconds=seconds, worker=worker)
    reason, bug = failure_reason(error, item.src)
    return Outcome(item.src, item.dst, "failed", reason=reason, bug=bug, box=classify(error) is Kind.BOX,
                   seconds=seconds, worker=worker)


def run_local(config: Config, items: Sequence[Item], *, style: str,
              on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """``batch`` without ``--ray``: the same items on one Stylizer in this process."""
    from ..core.stylizer import Stylizer

    with Stylizer(config) as stylizer:
        return stylize_items(stylizer, items, style=style, on_outcome=on_outcome)
