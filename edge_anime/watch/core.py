"""The watch core: names in, verdicts out. It decides; the process shell (edge_anime/service) runs it.

What it owns: which claim runs next (recovered claims, then due retries, then new files), the retry schedule,
pausing intake while the box's own storage fails, and holding a claim that needs more room than its outbox
has (``Claim.needs_bytes``: a clip the disk ran full under would restart at frame 0 and fill it again).
What it is given: the handler (file moves), a source of ready names, ``submit`` (the pipeline), ``probe`` (can
we write again?), ``room`` (free bytes in a folder), a clock, and ``events`` to report to.
So tests drive it in-process with a fake clock and a fake pipeline, without threads or signals.

Errors are caught at one boundary, ``_on_error``, and mean what watch/faults.py says: a bad input goes to
failed/ at once; a fault of the box (disk full, read-only, I/O) pauses intake and keeps every claim, never
condemning one, until ``probe`` succeeds; a style whose model cannot be compiled gives its input back
untouched (the shell holds that style's folder until a reload); other transient errors retry up to
``retry.max_attempts``.
"""
from __future__ import annotations

import heapq
import itertools
import json
import logging
import os
import queue
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..core.naming import child
from ..fsutil import write_atomic
from .claim import Claim, WorkerDir, adopt_orphans, load_claim, remove_stale_temps, save_record, sweep_names
from .faults import Kind, StyleFault, classify, describe
from .handler import Handler, Outcome, Verdict

log = logging.getLogger("edge_anime.watch")

RETRY_BACKLOG_PER_SLOT = 4   # claims waiting for a retry, per in-flight slot, before intake pauses
PROBE_NAME = ".edge-anime-probe"
PROBE_BYTES = 64 * 1024      # a probe writes this much: an empty file fits on a full disk, a photo does not


class Events(Protocol):
    """What the shell hears from the core (logs, counters, metrics, status)."""

    def verdict(self, claim: Claim, verdict: Verdict, result: Any | None) -> None: ...
    def paused(self, reason: str) -> None: ...
    def resumed(self, paused_s: float) -> None: ...
    def waiting_for_room(self, claim: Claim, needed: int, free: int) -> None: ...
    def room_found(self, claim: Claim, free: int) -> None: ...


class Source(Protocol):
    """Where ready inbox names come from (the Detector)."""

    def get(self, timeout: float) -> str | None: ...
    def request_rescan(self) -> None: ...


Submit = Callable[[Claim, Path], None]
Probe = Callable[[], None]
Room = Callable[[Path], int]  # free bytes on the filesystem of a folder


def free_bytes(folder: Path) -> int:
    """What an unprivileged writer may still write under ``folder`` (root's reserve is not ours to count)."""
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


@dataclass
class RoomWait:
    """A claim held until its outbox has ``needed`` bytes free (``free``: the last look)."""

    rel: str
    needed: int
    free: int
    interval_s: float


@dataclass
class Pause:
    reason: str
    since: float
    next_probe: float


def write_probe(folders: list[Path]) -> None:
    """Write and remove ``PROBE_BYTES`` in each folder; raises the OSError of the first that fails."""
    data = b"\0" * PROBE_BYTES
    for folder in folders:
        path = child(folder, PROBE_NAME)
        write_atomic(path, data, durable=False)
        path.unlink(missing_ok=True)


class WatchCore:
    """Claims in, verdicts out; one thread calls ``step``, any thread may call ``done``."""

    def __init__(self, *, handler: Handler, worker: WorkerDir, source: Source, submit: Submit, probe: Probe,
                 events: Events, limit: int, clock: Callable[[], float] = time.monotonic,
                 room: Room = free_bytes) -> None:
        self.handler = handler
        self.worker = worker
        self.source = source
        self.submit = submit
        self.probe = probe
        self.events = events
        self.limit = limit
        self.clock = clock
        self.room = room
        self.room_waits: dict[str, RoomWait] = {}  # token -> why that claim waits (status, metrics)
        self.pause: Pause | None = None
        self.in_flight: dict[str, Claim] = {}
        self._results: queue.Queue[tuple[Claim, BaseException | None, Any]] = queue.Queue()
        self._retries: list[tuple[float, int, Claim]] = []
        self._requeue: deque[Claim] = deque()
        self._seq = itertools.count()
        self._probe_interval_s = 0.0

    # --- what the shell asks ------------------------------------------------------------------------
    def done(self, claim: Claim, error: BaseException | None, result: Any = None) -> None:
        """A job ended (called from a pipeline thread: it only enqueues)."""
        self._results.put((claim, error, result))

    def waiting(self) -> int:
        """Claims held for a retry or a resume (not in flight)."""
        return len(self._retries) + len(self._requeue)

    def step(self, wait_s: float) -> None:
        """One round: commit finished jobs, probe a paused box, start the next claim, or wait ``wait_s``."""
        self.take_results(wait_s=0.0)
        if len(self.in_flight) >= self.limit or self._suspect_waits():
            self.take_results(wait_s=wait_s)
            return
        if self.pause is not None:
            self._probe_if_due()
        claim = self._next_claim(wait_s)
        if claim is not None:
            self._start(claim)
        elif self.pause is not None or not self._intake_open():
            self.take_results(wait_s=wait_s)  # the round's wait while nothing is due

    def take_results(self, *, wait_s: float) -> int:
        """Commit every finished job; wait up to ``wait_s`` for the first. Returns how many."""
        count = 0
        try:
            item = self._results.get(timeout=wait_s) if wait_s > 0 else self._results.get_nowait()
        except queue.Empty:
            return 0
        while True:
            self._commit(*item)
            count += 1
            try:
                item = self._results.get_nowait()
            except queue.Empty:
                return count

    def note_fault(self, error: BaseException) -> None:
        """A box fault seen by the shell (the status file could not be written): pause like any other. Only
        the first one counts: the shell reports every second, and each report must not delay the probe."""
        if self.pause is None:
            self._pause(describe(error))

    def recover_at_start(self) -> int:
        """Queue the claims this worker finds in work/ (its own from an earlier life, and dead workers')."""
        try:
            adopt_orphans(self.worker)
            swept = sweep_names(self.worker.work)
            claims = list(self.worker.claims())
        except Exception as exc:  # noqa: BLE001 - the boundary: faults.classify decides
            self._boundary_without_claim(exc, "recovery")
            return 0
        if swept:
            log.info("recovery: released %d output name reservation(s) no claim held", swept)
        if claims:
            log.info("recovery: %d claim(s) left in work/", len(claims))
        self._requeue_recovered(claims)
        return len(claims)

    def _requeue_recovered(self, claims: list[Claim]) -> None:
        """Claims that were in flight when their service died go first, each to run alone (``_suspect_waits``):
        of several in flight at a crash, only the one that crashes again alone is counted a second time."""
        suspects = [c for c in claims if c.crashes > 0]
        for claim in suspects:
            log.warning("recovery: %s was being worked on when the service stopped unexpectedly (%d time(s) of "
                        "watch.retry.max_crashes=%d); it runs alone next", json.dumps(claim.rel), claim.crashes,
                        self.handler.config.watch.retry.max_crashes)
        self._requeue.extend(suspects + [c for c in claims if c.crashes == 0])

    def _suspect_waits(self) -> bool:
        """Whether nothing may start now: a suspect (``Claim.crashes``) is in flight, or is next and must wait
        for the pipeline to empty. A poison pill then takes down only itself, and is counted alone."""
        if any(c.crashes > 0 for c in self.in_flight.values()):
            return True
        return bool(self.in_flight) and bool(self._requeue) and self._requeue[0].crashes > 0

    def adopt_orphans(self) -> list[Claim]:
        """Take over the claims of workers that died since the last look (boxes sharing the inbox)."""
        try:
            folders = adopt_orphans(self.worker)
        except Exception as exc:  # noqa: BLE001 - the boundary: faults.classify decides
            self._boundary_without_claim(exc, "adopt")
            return []
        claims = [c for c in (load_claim(f) for f in folders) if c is not None]
        self._requeue_recovered(claims)
        return claims

    def give_back_waiting(self) -> None:
        """Stopping: inputs not started go back to the inbox; one whose output exists is committed at the
        next start (recovery), so it is never produced twice."""
        waiting = list(self._requeue) + [c for _, _, c in self._retries]
        self._requeue.clear()
        self._retries.clear()
        self.room_waits.clear()
        for claim in waiting:
            if claim.dst is not None and os.path.exists(claim.dst):
                continue
            try:
                self.handler.give_back(claim, reason="stopping")
            except OSError as exc:  # it stays claimed in work/; the next start recovers it
                log.warning("stopping: %s stays in work/: %s", claim.rel, describe(exc))

    # --- choosing the next claim --------------------------------------------------------------------
    def _intake_open(self) -> bool:
        return self.pause is None and len(self._retries) < self.limit * RETRY_BACKLOG_PER_SLOT

    def _next_claim(self, wait_s: float) -> Claim | None:
        """Recovered claims first, then due retries, then (intake open) a new file from the inbox. While
        paused nothing starts: the claims wait for the probe, so a full disk costs no inference."""
        if self.pause is not None:
            return None
        if self._requeue:
            return self._requeue.popleft()
        if self._retries and self._retries[0][0] <= self.clock():
            claim = heapq.heappop(self._retries)[2]
            return claim if self._has_room(claim) else None
        if not self._intake_open():
            return None
        rel = self.source.get(timeout=wait_s)
        if rel is None:
            return None
        try:
            return self.worker.claim(rel, self.handler.folders.inbox)
        except Exception as exc:  # noqa: BLE001 - the boundary: faults.classify decides
            self._boundary_without_claim(exc, "claim", name=rel)
            return None

    def _has_room(self, claim: Claim) -> bool:
        """Whether ``claim`` may start now: no room is asked of it, or its outbox has what it needs. Otherwise
        it goes back to the retry schedule (backing off like the probe) and the shell is told once, so a clip
        the disk ran full under is not restarted at frame 0 just to fill the disk again (issue 28)."""
        if claim.needs_bytes <= 0 or claim.dst is None:
            return True
        try:
            free = self.room(claim.dst.parent)
        except OSError:  # the folder itself is the fault: starting the claim says which, at the one boundary
            return True
        wait = self.room_waits.get(claim.token)
        if free >= claim.needs_bytes:
            if wait is not None:
                del self.room_waits[claim.token]
                self.events.room_found(claim, free)
            return True
        retry = self.handler.config.watch.retry
        if wait is None:
            wait = self.room_waits[claim.token] = RoomWait(claim.rel, claim.needs_bytes, free, retry.initial_seconds)
            self.events.waiting_for_room(claim, claim.needs_bytes, free)
        else:
            wait.needed, wait.free = claim.needs_bytes, free
            wait.interval_s = min(max(wait.interval_s * 2, retry.initial_seconds), retry.max_seconds)
        heapq.heappush(self._retries, (self.clock() + wait.interval_s, next(self._seq), claim))
        return False

    def _start(self, claim: Claim) -> None:
        max_crashes = self.handler.config.watch.retry.max_crashes
        finished = claim.dst is not None and os.path.exists(claim.dst)  # died after the output, before the commit
        if claim.crashes >= max_crashes and claim.failure is None and not finished:
            reason = (f"the service stopped unexpectedly {claim.crashes} times while working on this input (killed, "
                      f"perhaps out of memory); set aside so the others go on (watch.retry.max_crashes: {max_crashes})")
            log.error("%s: %s", json.dumps(claim.rel), reason)
            if claim.dst is not None:
                remove_stale_temps(claim.dst)  # what the killed writer left (a clip's partial file)
            self._settle(claim, self._fail(claim, reason, "crash"), None)
            return
        try:
            decision = self.handler.recover(claim)  # prepare, or finish what an earlier attempt left
        except Exception as exc:  # noqa: BLE001 - the boundary: faults.classify decides
            decision = self._on_error(claim, exc, stage="prepare")
        if isinstance(decision, Verdict):
            self._settle(claim, decision, None)
            return
        self.in_flight[claim.token] = claim
        self.submit(claim, decision)

    def _commit(self, claim: Claim, error: BaseException | None, result: Any) -> None:
        self.in_flight.pop(claim.token, None)
        claim.running = False  # persisted below when the claim stays (a retry); otherwise its record goes
        if error is None:
            try:
                verdict = self.handler.succeed(claim)
            except Exception as exc:  # noqa: BLE001 - the boundary: faults.classify decides
                verdict = self._on_error(claim, exc, stage="commit")
        else:
            verdict = self._on_error(claim, error, stage=getattr(error, "stage", "job"))
        if verdict.outcome is Outcome.DONE:
            self._probe_interval_s = 0.0  # the box writes again: the next fault starts a fresh backoff
        elif verdict.outcome is Outcome.RETRY and not verdict.held:
            self._forget_running(claim)
        self._settle(claim, verdict, result)

    def forget_running(self) -> None:
        """Stopping with jobs still in flight past the drain: an orderly stop, not a crash, so those claims'
        records say so (best effort: a box fault leaves the mark, and the next start counts one crash)."""
        for claim in list(self.in_flight.values()):
            claim.running = False
            self._forget_running(claim)

    @staticmethod
    def _forget_running(claim: Claim) -> None:
        try:
            save_record(claim)
        except OSError as exc:
            log.warning("%s: could not record that its attempt ended: %s", json.dumps(claim.rel), describe(exc))

    # --- the one error boundary ---------------------------------------------------------------------
    def _on_error(self, claim: Claim, error: BaseException, *, stage: str) -> Verdict:
        """What ``error`` means for ``claim``: failed/, a retry, or a pause that keeps it (watch/faults.py)."""
        kind = classify(error)
        stage = getattr(error, "stage", stage)
        # The input as the user put it (inbox/NAME), not the claim's folder in work/ that the pipeline read it
        # from: that path is ours, and it is gone by the time anyone reads the report (issue 42)
        reason = describe(error).replace(str(claim.path), str(self.handler.folders.inbox / claim.rel))
        if kind is Kind.BOX:
            self._pause(reason)
            return Verdict(Outcome.RETRY, reason=reason, stage=stage, delay_s=0.0, held=True)
        if kind is Kind.REQUEUE:
            return Verdict(Outcome.RETRY, reason=reason, stage=stage, delay_s=0.0)
        if kind is Kind.MODEL:
            assert isinstance(error, StyleFault)
            return self._hold_for_model(claim, error)
        if kind is Kind.RETRY:
            return self._retry_or_give_up(claim, reason, stage)
        if kind is Kind.BUG:
            trace = "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip()
            log.error("internal error on %s (a bug; please report):\n%s", claim.rel, trace)
            reason, stage = f"internal error: {type(error).__name__}: {error}", "internal"
        return self._fail(claim, reason, stage)

    def _hold_for_model(self, claim: Claim, fault: StyleFault) -> Verdict:
        """The style cannot be compiled: no attempt is counted against the input. A routed style's input goes
        back to its folder, which the shell holds until a reload; the default style's folder is the inbox
        itself, so intake pauses instead (the shell's probe fails while its model is broken)."""
        if fault.style == self.handler.style:
            self._pause(str(fault))
            return Verdict(Outcome.RETRY, reason=str(fault), stage=fault.stage, delay_s=0.0, held=True)
        try:
            return self.handler.give_back(claim, reason=f"{fault}; it waits in its folder until a reload "
                                          "compiles the style")
        except OSError as exc:  # the box cannot move it now: hold it like any claim during a box fault
            self._pause(describe(exc))
            return Verdict(Outcome.RETRY, reason=str(fault), stage=fault.stage, delay_s=0.0, held=True)

    def _retry_or_give_up(self, claim: Claim, reason: str, stage: str) -> Verdict:
        retry = self.handler.config.watch.retry
        claim.attempts += 1
        if claim.attempts >= retry.max_attempts:
            return self._fail(claim, f"gave up after {claim.attempts} attempts: {reason}", stage)
        try:
            save_record(claim)
        except OSError as exc:
            self._pause(describe(exc))
        delay_s = min(retry.initial_seconds * 2 ** (claim.attempts - 1), retry.max_seconds)
        return Verdict(Outcome.RETRY, reason=reason, stage=stage, delay_s=delay_s)

    def _fail(self, claim: Claim, reason: str, stage: str) -> Verdict:
        """Set the input aside; if the box cannot take it now, hold the claim (its failure is remembered)."""
        try:
            return self.handler.fail(claim, reason, stage=stage)
        except Exception as exc:  # noqa: BLE001 - the boundary: faults.classify decides
            why = describe(exc)
            if classify(exc) is not Kind.BOX:
                log.error("cannot set %s aside in failed/: %s; it stays in %s", claim.rel, why, claim.folder)
            self._pause(why)
            return Verdict(Outcome.RETRY, reason=f"{reason} (not yet in failed/: {why})", stage=stage, held=True)

    def _boundary_without_claim(self, error: BaseException, stage: str, *, name: str = "") -> None:
        """An error outside any claim (taking a file, recovery): pause on a box fault, else log it."""
        what = f" {name}" if name else ""
        if classify(error) is Kind.BOX:
            self._pause(describe(error))
        else:
            log.warning("%s%s: %s", stage, what, describe(error))

    def _settle(self, claim: Claim, verdict: Verdict, result: Any) -> None:
        if verdict.outcome is Outcome.RETRY:
            heapq.heappush(self._retries, (self.clock() + verdict.delay_s, next(self._seq), claim))
        self.events.verdict(claim, verdict, result)

    # --- pause and resume ---------------------------------------------------------------------------
    def _pause(self, reason: str) -> None:
        retry = self.handler.config.watch.retry
        now = self.clock()
        self._probe_interval_s = min(max(self._probe_interval_s * 2, retry.initial_seconds), retry.max_seconds)
        if self.pause is None:
            self.pause = Pause(reason=reason, since=now, next_probe=now + self._probe_interval_s)
            self.events.paused(reason)
        else:
            self.pause.reason = reason
            self.pause.next_probe = now + self._probe_interval_s

    def _probe_if_due(self) -> None:
        assert self.pause is not None
        now = self.clock()
        if now < self.pause.next_probe:
            return
        try:
            self.probe()
        except Exception as exc:  # noqa: BLE001 - the boundary: faults.classify decides
            self._pause(describe(exc))
            return
        paused_s = now - self.pause.since
        self.pause = None
        self._retries = [(now, seq, c) for _, seq, c in self._retries]  # all due now, in their order
        heapq.heapify(self._retries)
        self.source.request_rescan()  # names dropped while paused are found again at once
        self.events.resumed(paused_s)
