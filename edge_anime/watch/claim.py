"""Claims: how a file leaves the inbox, who owns it while it is worked on, and how a dead worker's files
are taken over.

Layout (one folder per claim, so one rename moves a claim with everything that belongs to it)::

    work/<worker_id>/.lock                    flock held for the worker's whole life
    work/<worker_id>/<token>/in/<rel>         the input, renamed here from inbox/<rel>
    work/<worker_id>/<token>/claim.json       rel, chosen dst and style, attempts, failure, running and crashes
                                              (written before submit)
    work/.names/<sha1 of dst rel>             output-name reservation (O_EXCL), content "<token>" (the
                                              claim's, which adoption keeps: the worker is not part of it)

- Taking a file is ``rename(inbox/rel, work/me/token/in/rel)``: of several workers (or boxes on one share)
  exactly one rename succeeds; the others get ENOENT and move on.
- A worker's folder is its own while it holds the flock on ``.lock``. A worker that dies (even SIGKILL)
  loses the lock with its process, so ``adopt_orphans`` can tell a dead worker's folder from a live one
  without pid files or clocks: it takes the lock non-blocking, and only then renames the token folders
  into its own folder.
- Output names are reserved with O_EXCL before the job is submitted and the reservation is checked against
  the outbox after it is taken, so two workers never pick the same name. Therefore "dst exists" on
  recovery means "this claim's output is complete" (the pipeline renames it into place atomically).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..fsutil import TEMP_PREFIX, write_atomic

LOCK_NAME = ".lock"
RECORD_NAME = "claim.json"
INPUT_DIR = "in"
NAMES_DIR = ".names"
LOCK_RETRY_SECONDS = 2.0  # a starting worker waits this long for a lock briefly held by an adopter
LOCK_POLL_SECONDS = 0.05


@dataclass
class Claim:
    """One input owned by this worker, and what has been decided about it so far."""

    folder: Path                      # work/<worker>/<token>
    rel: str                          # path relative to the inbox, '/'-separated
    dst: Path | None = None           # reserved output path, once chosen
    dst_key: str | None = None        # reservation key (dst relative to the outbox)
    attempts: int = 0                 # transient failures so far
    failure: dict[str, Any] | None = None  # set once a permanent failure is being committed
    claimed_at: float = field(default_factory=time.time)
    style: str = ""                   # the style chosen with the output name (a route, or the default)
    # Bytes its output needs free before it may start again (a clip the disk ran full under; not persisted:
    # after a restart the clip simply tries, and a full disk sets it again).
    needs_bytes: int = 0
    # Written true with the output name just before the job is submitted, false when an attempt ends and the
    # claim stays: a record that still says true at the next start was in flight when the service died.
    running: bool = False
    crashes: int = 0                  # starts of the service that found this claim in flight (poison pills)

    @property
    def token(self) -> str:
        return self.folder.name

    @property
    def path(self) -> Path:
        return self.folder / INPUT_DIR / self.rel

    @property
    def name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, Any]:
        return {"rel": self.rel, "dst": str(self.dst) if self.dst else None, "dst_key": self.dst_key,
                "attempts": self.attempts, "failure": self.failure, "claimed_at": self.claimed_at,
                "style": self.style, "running": self.running, "crashes": self.crashes}


def save_record(claim: Claim) -> None:
    """Persist what was decided, durably, before acting on it (the decision must survive a crash)."""
    write_atomic(claim.folder / RECORD_NAME, json.dumps(claim.to_json()).encode("ascii"))


def _find_input(folder: Path) -> str | None:
    """The one entry under ``<token>/in`` (a claim made before its record was written)."""
    base = folder / INPUT_DIR
    for dirpath, dirnames, filenames in os.walk(base):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            return os.path.relpath(os.path.join(dirpath, name), base).replace(os.sep, "/")
    return None


def load_claim(folder: Path) -> Claim | None:
    """Rebuild a claim from its folder; None when the input is gone and nothing is left to finish."""
    record: dict[str, Any] = {}
    try:
        record = json.loads((folder / RECORD_NAME).read_text(encoding="ascii"))
    except (OSError, ValueError):
        record = {}
    rel = record.get("rel") or _find_input(folder)
    if rel is None:
        return None
    dst = record.get("dst")
    died_running = record.get("running") is True  # this load is a new life: the last one ended mid-job
    return Claim(folder=folder, rel=rel, dst=Path(dst) if dst else None, dst_key=record.get("dst_key"),
                 attempts=int(record.get("attempts", 0)), failure=record.get("failure"),
                 claimed_at=float(record.get("claimed_at", time.time())), style=str(record.get("style") or ""),
                 crashes=int(record.get("crashes", 0)) + died_running)


class WorkerDir:
    """This process's folder in work/, owned through an flock for as long as the process lives."""

    def __init__(self, work: Path, worker_id: str) -> None:
        if not worker_id or worker_id.startswith(".") or "/" in worker_id:
            raise ConfigError(f"watch.worker_id: {worker_id!r} is not a usable folder name")
        self.work = work
        self.worker_id = worker_id
        self.path = work / worker_id
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock; refuse (exit 78) when a live worker already uses this worker_id."""
        deadline = time.monotonic() + LOCK_RETRY_SECONDS
        while True:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = _try_lock(self.path / LOCK_NAME, create=True)
            if fd is not None:
                self._fd = fd
                try:  # for people reading work/; the flock is what counts, so a full disk must not stop us
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{os.getpid()}\n".encode())
                except OSError:
                    pass
                return
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"watch.worker_id: {self.worker_id!r} is in use by another running worker ({self.path}); "
                    "give each worker its own id, or use auto"
                )
            time.sleep(LOCK_POLL_SECONDS)

    def release(self) -> None:
        """Drop the lock; an empty folder (a clean stop) is removed first, so work/ does not fill with the
        folders of every past pid. Unlinking under the lock is safe: adopters open without O_CREAT."""
        if self._fd is None:
            return
        try:
            if not any(not e.name.startswith(".") for e in os.scandir(self.path)):
                os.unlink(self.path / LOCK_NAME)
                self.path.rmdir()
        except OSError:
            pass
        os.close(self._fd)  # closing drops the flock
        self._fd = None

    def claim(self, rel: str, inbox: Path) -> Claim | None:
        """Take ``inbox/rel`` by rename; None when another worker (or the user) took it first."""
        folder = self.path / uuid.uuid4().hex[:16]
        claim = Claim(folder=folder, rel=rel)
        claim.path.parent.mkdir(parents=True)
        try:
            os.rename(inbox / rel, claim.path)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                return None
            raise
        return claim

    def claims(self) -> Iterator[Claim]:
        """Claims found in this worker's folder (its own from an earlier life, or adopted ones)."""
        for entry in sorted(os.scandir(self.path), key=lambda e: e.name):
            if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                continue
            claim = load_claim(Path(entry.path))
            if claim is None:  # the input was already committed: only the record was left
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            yield claim


def _try_lock(path: Path, *, create: bool) -> int | None:
    """An fd holding an exclusive flock on ``path``, or None when someone else holds it (or it is gone)."""
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # The file may have been unlinked by an adopter between our open and flock: then our lock guards
        # nothing. Same inode at the path means it is still the live lock file.
        if os.fstat(fd).st_ino != os.stat(path).st_ino:
            raise BlockingIOError
    except (BlockingIOError, FileNotFoundError):
        os.close(fd)
        return None
    return fd


def adopt_orphans(me: WorkerDir) -> list[Path]:
    """Move the claims of dead workers into ``me``'s folder; returns the adopted claim folders.

    Only folders whose lock can be taken are touched: a live worker holds its lock, so its claims are never
    taken. A folder without a lock file is left alone (a worker between mkdir and lock).
    """
    adopted: list[Path] = []
    for entry in os.scandir(me.work):
        if entry.name.startswith(".") or entry.name == me.worker_id or not entry.is_dir(follow_symlinks=False):
            continue
        folder = Path(entry.path)
        fd = _try_lock(folder / LOCK_NAME, create=False)
        if fd is None:
            continue
        try:
            for token in list(os.scandir(folder)):
                if token.name.startswith(".") or not token.is_dir(follow_symlinks=False):
                    continue
                os.rename(token.path, me.path / token.name)  # unique token names: no clash
                adopted.append(me.path / token.name)
            os.unlink(folder / LOCK_NAME)
            try:
                folder.rmdir()
            except OSError:
                pass  # a new worker with this id appeared meanwhile: its folder now
        finally:
            os.close(fd)
    return adopted


# --- output-name reservations -------------------------------------------------------------------------

def _names_dir(work: Path) -> Path:
    return work / NAMES_DIR


def _key_file(work: Path, key: str) -> Path:
    return _names_dir(work) / hashlib.sha1(key.encode("utf-8", "surrogateescape")).hexdigest()


def reserve_name(work: Path, key: str, token: str) -> bool:
    """Reserve output name ``key`` (dst relative to the outbox) for claim ``token``; False when taken.

    The owner is the token, not the worker: an adopted claim keeps its token and so its reservation.
    """
    path = _key_file(work, key)
    path.parent.mkdir(exist_ok=True)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        try:
            return path.read_text(encoding="utf-8") == token  # ours from an earlier attempt
        except OSError:
            return False
    try:
        os.write(fd, token.encode("utf-8"))
    except OSError:  # a full disk: an empty reservation would push this name to -1 forever
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
    return True


def _claim_tokens(work: Path) -> set[str]:
    tokens: set[str] = set()
    for worker in os.scandir(work):
        if worker.name.startswith(".") or not worker.is_dir(follow_symlinks=False):
            continue
        try:
            tokens.update(t.name for t in os.scandir(worker.path) if not t.name.startswith("."))
        except OSError:
            continue  # a dead worker's folder removed by an adoption meanwhile
    return tokens


def sweep_names(work: Path) -> int:
    """Remove reservations whose claim folder is gone (a crash between reserving and saving the record),
    else that output name would take a -1 suffix forever. Safe against live workers: a claim folder exists
    before its name is reserved; a reservation missing from two scans (an adoption moves folders between
    workers) has no claim. Returns how many were removed."""
    try:
        entries = list(os.scandir(_names_dir(work)))
    except FileNotFoundError:
        return 0
    owners: dict[str, str] = {}
    for entry in entries:
        try:
            owners[entry.path] = Path(entry.path).read_text(encoding="utf-8")
        except OSError:
            continue
    first = _claim_tokens(work)
    suspects = [path for path, token in owners.items() if token not in first]
    if not suspects:
        return 0
    second = _claim_tokens(work)
    removed = 0
    for path in suspects:
        if owners[path] not in second:
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


def release_name(work: Path, key: str | None, token: str) -> None:
    """Drop reservation ``key`` if claim ``token`` holds it."""
    if key is None:
        return
    path = _key_file(work, key)
    try:
        if path.read_text(encoding="utf-8") == token:
            path.unlink()
    except OSError:
        pass


def remove_stale_temps(dst: Path) -> int:
    """Remove write_atomic temp files for ``dst`` left by a killed worker.

    Safe because ``dst``'s name is reserved by this claim: no live worker writes a temp for it.
    """
    removed = 0
    suffix = "-" + dst.name
    try:
        entries = list(os.scandir(dst.parent))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name.startswith(TEMP_PREFIX) and entry.name.endswith(suffix) and \
                len(entry.name) == len(TEMP_PREFIX) + 12 + len(suffix):
            try:
                os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed
