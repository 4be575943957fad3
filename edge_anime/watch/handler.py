"""One claimed file -> one decision: which output name, and where the input goes when the job ends.

Knows no threads, queues or clocks (watchdog's handler rule): the service calls ``prepare`` before it submits
a job, ``finish`` with the job's error (None when it succeeded), ``recover`` for claims found at start.
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
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config import Config
from ..errors import InputError, TransientError
from ..fsutil import write_atomic
from .claim import (
    Claim,
    WorkerDir,
    release_name,
    remove_stale_temps,
    reserve_name,
    save_record,
)
from .folders import MAX_SUFFIX, Folders, move_noreplace, rename_noreplace, suffixed
from .journal import ProcessedList

log = logging.getLogger("edge_anime.watch")

ERROR_SUFFIX = ".error.json"
SYMLINK_REASON = "a symbolic link: links are never followed out of the inbox"


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

    def __init__(self, *, config: Config, folders: Folders, worker: WorkerDir, style: str, model_hash: str,
                 journal: ProcessedList | None = None) -> None:
        self.folders = folders
        self.worker = worker
        self.journal = journal
        self.update(config=config, style=style, model_hash=model_hash)

    def update(self, *, config: Config, style: str, model_hash: str) -> None:
        """Settings for claims prepared from now on (a reload); claims in flight keep their names."""
        self.config = config
        self.style = style
        self.model_hash = model_hash
        self.config_hash = config_hash(config)

    # --- before submit ------------------------------------------------------------------------------
    def prepare(self, claim: Claim) -> Path | Verdict:
        """The output path to submit the job with, or a Verdict when the file never reaches the pipeline."""
        try:
            st = os.lstat(claim.path)
        except FileNotFoundError:
            self._drop(claim)
            return Verdict(Outcome.RETURNED, reason="vanished from work/")
        if stat.S_ISLNK(st.st_mode):
            return self._fail(claim, SYMLINK_REASON, stage="claim")
        if stat.S_ISDIR(st.st_mode):
            return self.give_back(claim, reason="a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            return self._fail(claim, "not a regular file (a fifo, socket or device)", stage="claim")
        if self.journal is not None and self.journal.contains(claim.rel, st):
            return self.give_back(claim, reason="already processed (watch.after_success: keep)")
        if claim.dst is None:
            self._reserve_output(claim)
            save_record(claim)
        else:
            remove_stale_temps(claim.dst)
        assert claim.dst is not None
        return claim.dst

    def _output_name(self, name: str, n: int) -> str:
        from ..imaging import output_extension

        stem = name.rpartition(".")[0] or name
        ext = output_extension(self.config.output, Path(name))
        template = self.config.output.name_template
        base = template.format(stem=stem, style=self.style, ext=ext, name=name, n=n)
        return base if "{n}" in template else suffixed(base, n)

    def _reserve_output(self, claim: Claim) -> None:
        """Pick the first free output name and reserve it; checked after reserving, so no race wins."""
        head, name = _split(claim.rel)
        folder = self.folders.outbox / head if head else self.folders.outbox
        for n in range(MAX_SUFFIX):
            out_name = self._output_name(name, n)
            key = f"{head}/{out_name}" if head else out_name
            if os.path.lexists(folder / out_name) or not reserve_name(self.folders.work, key, claim.token):
                continue
            if os.path.lexists(folder / out_name):
                release_name(self.folders.work, key, claim.token)
                continue
            folder.mkdir(parents=True, exist_ok=True)
            claim.dst, claim.dst_key = folder / out_name, key
            return
        raise FileExistsError(f"no free output name for {claim.rel} in {folder}")

    # --- after the job ------------------------------------------------------------------------------
    def finish(self, claim: Claim, error: BaseException | None) -> Verdict:
        """Commit a finished job: done, failed at once, or kept for a retry."""
        if error is None:
            return self._succeed(claim)
        if isinstance(error, InputError):
            return self._fail(claim, str(error), stage=error.stage)
        if isinstance(error, TransientError):
            claim.attempts += 1
            retry = self.config.watch.retry
            if claim.attempts >= retry.max_attempts:
                return self._fail(claim, f"gave up after {claim.attempts} attempts: {error}", stage=error.stage)
            save_record(claim)
            delay = min(retry.initial_seconds * 2 ** (claim.attempts - 1), retry.max_seconds)
            return Verdict(Outcome.RETRY, reason=str(error), stage=error.stage, delay_s=delay)
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        log.error("internal error on %s (a bug; please report):\n%s", json.dumps(claim.rel), trace.rstrip())
        return self._fail(claim, f"internal error: {type(error).__name__}: {error}", stage="internal")

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
            return self._fail(claim, claim.failure["reason"], stage=claim.failure["stage"])
        if claim.dst is not None and os.path.exists(claim.dst):
            remove_stale_temps(claim.dst)
            return self._succeed(claim)  # renamed into place atomically: complete, never produced twice
        return self.prepare(claim)

    def _succeed(self, claim: Claim) -> Verdict:
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

    def _fail(self, claim: Claim, reason: str, *, stage: str) -> Verdict:
        """Input to failed/NAME first (no-replace, the first free suffix), then NAME.error.json named after
        where it landed: two workers failing one name never overwrite or delete each other's report."""
        head, name = _split(claim.rel)
        folder = self.folders.failed / head if head else self.folders.failed
        folder.mkdir(parents=True, exist_ok=True)
        if claim.failure is None:
            claim.failure = {"reason": reason, "stage": stage, "time": _now_iso()}
        while True:
            claim.failure["name"] = self._free_failed_name(folder, name, 0)
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
        write_atomic(target.with_name(target.name + ERROR_SUFFIX), json.dumps(report, indent=2).encode())

    @staticmethod
    def _free_failed_name(folder: Path, name: str, start: int) -> str:
        for n in range(start, MAX_SUFFIX):
            candidate = suffixed(name, n)
            if not os.path.lexists(folder / candidate) and not os.path.lexists(folder / (candidate + ERROR_SUFFIX)):
                return candidate
        raise FileExistsError(f"no free name for {name} in {folder}")

    def _error_report(self, claim: Claim) -> dict[str, Any]:
        assert claim.failure is not None
        return {"file": claim.rel, "reason": claim.failure["reason"], "stage": claim.failure["stage"],
                "time": claim.failure["time"], "config_hash": self.config_hash, "model_hash": self.model_hash,
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
