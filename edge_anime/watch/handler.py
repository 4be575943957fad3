"""One claimed file -> one decision: which output name, and where the input goes when the job ends.

Knows no threads, queues or clocks (watchdog's handler rule): the watch core calls ``prepare`` before it
submits a job, ``succeed`` or ``fail`` when it ends (the core alone decides which, watch/faults.py), and
``recover`` for claims found at start. Every name goes through edge_anime/core/naming.py.
Every step writes what it decided into the claim record before acting, so a crash at any point is finished
by ``recover`` the same way it would have been finished without the crash.
"""
from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config import Config
from ..core import naming
from ..fsutil import write_atomic
from ..inputs import InputFilter
from .claim import Claim, WorkerDir, release_name, remove_stale_temps, reserve_name, save_record
from .folders import Folders, move_noreplace, rename_noreplace
from .journal import ProcessedList

log = logging.getLogger("edge_anime.watch")

ERROR_SUFFIX = ".error.json"
SYMLINK_REASON = "a symbolic link: links are never followed out of the inbox"
# An input set aside keeps room for its report, NAME.error.json, written through a longer temp name.
FAILED_MAX_BYTES = naming.OUTPUT_MAX_BYTES - len(ERROR_SUFFIX)


class Outcome(enum.Enum):
    DONE = "done"          # output written, input moved/deleted/kept
    FAILED = "failed"      # input in failed/ with NAME.error.json
    RETRY = "retry"        # transient: keep the claim, try again after ``delay_s``
    RETURNED = "returned"  # given back to the inbox untouched (a folder, an already processed file)


@dataclass
class Verdict:
    outcome: Outcome
    where: Path | None = None   # output (done) or the input's new place (failed / returned)
    reason: str = ""
    stage: str = ""
    delay_s: float = 0.0
    held: bool = False          # RETRY only: kept while intake is paused (a fault of the box, not the input)


def config_hash(config: Config) -> str:
    """Short hash of the effective config: error reports say which settings produced them."""
    data = json.dumps(config.model_dump(mode="json", exclude={"source"}), sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _split(rel: str) -> tuple[str, str]:
    head, _, name = rel.rpartition("/")
    return head, name


class Handler:
    """Decides names and commits for this worker's claims."""

    def __init__(self, *, config: Config, folders: Folders, worker: WorkerDir, style: str, accept: InputFilter,
                 model_hash: Callable[[str], str] = lambda _style: "", journal: ProcessedList | None = None) -> None:
        self.folders = folders
        self.worker = worker
        self.journal = journal
        self.model_hash = model_hash
        self.broken: dict[str, str] = {}  # style -> why its model cannot be compiled (the shell's, shared)
        self.update(config=config, style=style, accept=accept)

    def update(self, *, config: Config, style: str, accept: InputFilter) -> None:
        """Settings for claims prepared from now on (a reload); claims in flight keep their names and style.
        ``style`` is the default; ``accept``'s routes give a first-level inbox folder's files its style."""
        self.config = config
        self.style = style
        self.accept = accept
        self.config_hash = config_hash(config)

    def style_for(self, rel: str) -> str:
        """The style an inbox file gets: its route's (``inbox/<style>/...``), else the default."""
        return self.accept.style_of(rel) or self.style

    # --- before submit ------------------------------------------------------------------------------
    def prepare(self, claim: Claim) -> Path | Verdict:
        """The output path to submit the job with, or a Verdict when the file never reaches the pipeline."""
        if not claim.style:  # chosen once, with the output name, and kept in the record
            claim.style = self.style_for(claim.rel)
        try:
            st = os.lstat(claim.path)
        except FileNotFoundError:
            self._drop(claim)
            return Verdict(Outcome.RETURNED, reason="vanished from work/")
        if stat.S_ISLNK(st.st_mode):
            return self.fail(claim, SYMLINK_REASON, stage="claim")
        if stat.S_ISDIR(st.st_mode):
            return self.give_back(claim, reason="a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            return self.fail(claim, "not a regular file (a fifo, socket or device)", stage="claim")
        if self.journal is not None and self.journal.contains(claim.rel, st):
            return self.give_back(claim, reason="already processed (watch.after_success: keep)")
        held = self.accept.held_style(claim.rel)
        if held is not None and held in self.broken:
            return self.give_back(claim, reason=f"style {held!r} cannot be compiled ({self.broken[held]}); it "
                                  "waits in its folder until a reload compiles the style")
        if held is not None:
            return self.give_back(claim, reason=f"style {held!r} is no longer served (model.styles); it waits in "
                                  "its folder until the style is served again")
        if claim.dst is None:
            self._reserve_output(claim)
        else:
            remove_stale_temps(claim.dst)
        claim.running = True  # the job is submitted next: a start that finds this still true counts a crash
        save_record(claim)  # every time: an earlier attempt may have reserved the name but failed to save
        assert claim.dst is not None
        return claim.dst

    def _reserve_output(self, claim: Claim) -> None:
        """Pick the first free output name and reserve it; checked after reserving, so no race wins."""
        head, name = _split(claim.rel)
        folder = self.folders.outbox / head if head else self.folders.outbox

        def take(out_name: str) -> bool:
            key = f"{head}/{out_name}" if head else out_name
            if os.path.lexists(folder / out_name) or not reserve_name(self.folders.work, key, claim.token):
                return False
            if os.path.lexists(folder / out_name):  # written by a stylize run between check and reserve
                release_name(self.folders.work, key, claim.token)
                return False
            claim.dst_key = key
            return True

        out_name = naming.free_output_name(self.config.output.name_template, source_name=name, style=claim.style,
                                           ext=naming.output_extension(self.config, Path(name)), is_free=take)
        folder.mkdir(parents=True, exist_ok=True)
        claim.dst = naming.child(folder, out_name)

    # --- after the job ------------------------------------------------------------------------------
    def recover(self, claim: Claim) -> Path | Verdict:
        """Finish a claim found at start the way it would have ended without the crash."""
        if not os.path.lexists(claim.path):
            if claim.failure is not None and claim.failure.get("name"):  # moved to failed/, report not yet
                head, _name = _split(claim.rel)
                target = (self.folders.failed / head if head else self.folders.failed) / claim.failure["name"]
                if os.path.lexists(target) and not os.path.lexists(str(target) + ERROR_SUFFIX):
                    self._write_report(claim, target)
            self._drop(claim)  # its input was already committed; only the record was left
            return Verdict(Outcome.RETURNED, reason="already committed")
        if claim.failure is not None:
            return self.fail(claim, claim.failure["reason"], stage=claim.failure["stage"])
        if claim.dst is not None and os.path.exists(claim.dst):
            remove_stale_temps(claim.dst)
            return self.succeed(claim)  # renamed into place atomically: complete, never produced twice
        return self.prepare(claim)

    def succeed(self, claim: Claim) -> Verdict:
        """The output is in place: move the input on (done/, deleted, or kept in the inbox)."""
        head, name = _split(claim.rel)
        mode = self.config.watch.after_success
        if mode == "delete":
            os.unlink(claim.path)
        elif mode == "keep" and self._keep(claim):
            pass
        else:
            move_noreplace(claim.path, self.folders.done / head if head else self.folders.done, name)
        self._drop(claim)
        return Verdict(Outcome.DONE, where=claim.dst)

    def _keep(self, claim: Claim) -> bool:
        """Back into the inbox, listed as processed first (whoever sees it again finds the entry)."""
        if self.journal is None:
            return False
        self.journal.add(claim.rel, os.lstat(claim.path))
        target = self.folders.inbox / claim.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            rename_noreplace(claim.path, target)
        except FileExistsError:
            log.warning("%s: a new file with this name is in the inbox; the processed one goes to done/",
                        json.dumps(claim.rel))
            return False
        return True

    def fail(self, claim: Claim, reason: str, *, stage: str) -> Verdict:
        """Input to failed/NAME first (no-replace, the first free suffix), then NAME.error.json named after
        where it landed: two workers failing one name never overwrite or delete each other's report."""
        head, name = _split(claim.rel)
        folder = self.folders.failed / head if head else self.folders.failed
        folder.mkdir(parents=True, exist_ok=True)
        if claim.failure is None:
            claim.failure = {"reason": reason, "stage": stage, "time": _now_iso()}
        while True:
            claim.failure["name"] = self._free_failed_name(folder, name)
            save_record(claim)  # recovery knows where the input went if we crash before the report
            target = folder / claim.failure["name"]
            try:
                rename_noreplace(claim.path, target)
                break
            except FileExistsError:  # another worker failed a file of this name just now: next free one
                continue
        self._write_report(claim, target)
        self._drop(claim)
        return Verdict(Outcome.FAILED, where=target, reason=claim.failure["reason"], stage=claim.failure["stage"])

    def _write_report(self, claim: Claim, target: Path) -> None:
        report = self._error_report(claim)
        write_atomic(naming.child(target.parent, target.name + ERROR_SUFFIX, what="report name"),
                     json.dumps(report, indent=2).encode())

    @staticmethod
    def _free_failed_name(folder: Path, name: str) -> str:
        """Free for the input and for its report, both fitted: the report's temp name is the longest."""
        return naming.free_name(name, lambda c: not os.path.lexists(folder / c)
                                and not os.path.lexists(folder / (c + ERROR_SUFFIX)), max_bytes=FAILED_MAX_BYTES)

    def _error_report(self, claim: Claim) -> dict[str, Any]:
        assert claim.failure is not None
        style = claim.style or self.style_for(claim.rel)
        return {"file": claim.rel, "reason": claim.failure["reason"], "stage": claim.failure["stage"],
                "time": claim.failure["time"], "config_hash": self.config_hash,
                "style": style, "model_hash": self.model_hash(style),
                "worker": self.worker.worker_id, "attempts": claim.attempts}

    def give_back(self, claim: Claim, *, reason: str = "") -> Verdict:
        """Return an untouched input to the inbox (shutdown, or nothing to do); left in work/ on a clash."""
        target = self.folders.inbox / claim.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            rename_noreplace(claim.path, target)
        except FileExistsError:
            return Verdict(Outcome.RETRY, reason="inbox has a new file of this name; kept in work/",
                           stage="claim", delay_s=self.config.watch.retry.max_seconds)
        self._drop(claim)
        return Verdict(Outcome.RETURNED, where=target, reason=reason)

    def _drop(self, claim: Claim) -> None:
        release_name(self.folders.work, claim.dst_key, claim.token)
        shutil.rmtree(claim.folder, ignore_errors=True)
