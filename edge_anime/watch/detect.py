"""Finding complete files in the inbox: inotify events, polling, settle, ignore patterns, rescans.

Shape (watchdog's own): producers fill one bounded queue of names, the service takes from it.
- inotify (watchdog's InotifyObserver): moved-to makes a file ready at once (a rename is whole by design);
  close-write makes it ready once ``settle_seconds`` pass with no change after the *last* close-write, so a
  writer that closes and reopens to append arrives as one file, not fragments. A created file waits for its
  close-write however slowly it is written; symlinks and hard links (which get none) settle as in polling
  mode; ``CREATED_SETTLE_SECONDS`` without a change is the last resort for a lost event.
- polling: the inbox is scanned every ``poll_interval_seconds``; a file is ready when its size, mtime and
  ctime stayed the same for ``settle_seconds`` of this machine's clock (ctime cannot be set back by cp -p,
  and comparing observations, not timestamps, is immune to a share's clock skew).
- A full rescan runs at start, after an inotify queue overflow, when the ready queue was full (a name was
  dropped) and every ``RESCAN_INTERVAL_SECONDS`` as a safety net. Rescans are generators: with 10,000 files
  waiting only ``MAX_TRACKED_FILES`` are looked at at a time, so memory stays flat. The inbox is the queue.
Names are inbox-relative, '/'-separated strings. Ready does not mean "still there": the claim's rename
is the only test that counts.
"""
from __future__ import annotations

import logging
import os
import queue
import stat
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

from watchdog.events import (
    FileClosedEvent,
    FileCreatedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from ..config import WatchSection
from ..errors import ConfigError
from ..inputs import InputFilter

log = logging.getLogger("edge_anime.watch")
_OVERFLOW_LOGGER = logging.getLogger("watchdog.observers.inotify_c")  # where watchdog reports an overflow

READY_QUEUE_SIZE = 64          # names offered and not yet taken
MAX_TRACKED_FILES = 1024       # files watched for settling at once
RESCAN_INTERVAL_SECONDS = 60.0  # inotify mode: full rescan as a safety net
# inotify mode: a created file is waited for until its close-write; it is taken without one (a hard link,
# an event lost) only after this long without a change, so a slow writer's pauses never make it "complete".
CREATED_SETTLE_SECONDS = 60.0
# After an inotify overflow, create events still on their way from watchdog's thread may belong to files whose
# close-write was the event dropped: for this long they settle as in polling mode, not CREATED_SETTLE_SECONDS
# (one tick that cleared the overflow before those creates arrived left a file waiting a minute).
LOSSY_GRACE_SECONDS = 5.0
NETWORK_FS_TYPES = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "fuse.sshfs",
                              "fuse.glusterfs", "glusterfs", "davfs", "fuse.davfs2", "afs"})

Skip = Callable[[str, os.stat_result], bool]
Signature = tuple[int, int, int]


Unwanted = Callable[[str, str, bool], None]  # (rel, why, stays: whether it stays in the inbox for good)


def scan(inbox: Path, accept: InputFilter, *, on_unwanted: Unwanted | None = None) -> Iterator[str]:
    """Inbox names, lazily; folders are entered as ``accept.enters`` says (style routes always, others only in
    recursive mode) and never through a symlink.
    ``on_unwanted(rel, why, stays)`` hears of what stays in the inbox for good and why: a file for its extension
    (``InputFilter.unwanted``), a symbolic link to a folder, a folder spelt like a style but not its route (which
    recursive mode does enter: ``stays`` False, the files go, but not in that style)."""
    stack = [""]
    while stack:
        prefix = stack.pop()
        try:
            entries = os.scandir(inbox / prefix if prefix else inbox)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue
        with entries:
            for entry in entries:
                rel = f"{prefix}{entry.name}"
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    entered = accept.enters(rel)
                    if entered:
                        stack.append(rel + "/")
                    why = look_alike_route(entry.name, accept, entered=entered) if on_unwanted and not prefix else ""
                    if why and on_unwanted is not None:
                        on_unwanted(rel + "/", why, not entered)
                elif accept.accepts(rel):
                    yield rel
                elif on_unwanted is not None and _is_link_to_folder(entry):
                    on_unwanted(rel, LINKED_FOLDER_REASON, True)
                elif on_unwanted is not None and accept.unwanted(rel):
                    on_unwanted(rel, unwanted_reason(accept), True)


def unwanted_reason(accept: InputFilter) -> str:
    return f"its extension is not in watch.extensions or video.extensions ({', '.join(sorted(accept.extensions))})"


LINKED_FOLDER_REASON = ("a symbolic link to a folder: links are never followed out of the inbox, so nothing put "
                        "there is taken (make it a real folder)")


def _is_link_to_folder(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_symlink() and entry.is_dir(follow_symlinks=True)
    except OSError:
        return False


def look_alike_route(name: str, accept: InputFilter, *, entered: bool = False) -> str:
    """Why a first-level folder ``name`` that is not a route looks like one (another Unicode form, e.g. the NFD
    ``café`` a Mac writes beside the NFC style folder, or another case), or '' when it does not. It is not the
    style's folder: its files are never taken, or (``entered``, watch.recursive) taken in the default style, so
    the log must say so instead of staying silent."""
    if name in accept.routes:
        return ""
    key = unicodedata.normalize("NFC", name).casefold()
    for route in sorted(accept.routes):
        if unicodedata.normalize("NFC", route).casefold() == key:
            fate = "taken as a plain folder in the default style" if entered else "not taken"
            return (f"a folder spelt like style {route!r} but not its folder (another Unicode form or case): "
                    f"its files are {fate}; move them into {route}/")
    return ""


def filesystem_type(path: Path) -> str:
    """The mount type of ``path`` from /proc/self/mounts (longest matching mount point); '' if unknown."""
    best, fstype = "", ""
    target = str(path.resolve())
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount = fields[1].replace("\\040", " ")
                if (target == mount or target.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                    best, fstype = mount, fields[2]
    except OSError:
        return ""
    return fstype


class Detector:
    """Offers names of complete inbox files through ``get``; runs its own thread (and watchdog's)."""

    def __init__(self, inbox: Path, watch: WatchSection, *, skip: Skip | None = None,
                 clock: Callable[[], float] = time.monotonic, accept: InputFilter | None = None) -> None:
        self.inbox = inbox
        self.filter = accept or InputFilter(watch)
        self.settle_seconds = watch.settle_seconds
        self.poll_interval_seconds = max(watch.poll_interval_seconds, 0.01)
        self.requested_mode = watch.detector
        self.mode = "polling"
        self._skip = skip
        self._clock = clock
        self._ready: queue.Queue[str] = queue.Queue(maxsize=READY_QUEUE_SIZE)
        self._offered: set[str] = set()
        self._tracked: dict[str, tuple[Signature, float, float]] = {}  # rel -> signature, since, settle_s
        self._created: queue.Queue[str] = queue.Queue(maxsize=MAX_TRACKED_FILES)
        self._closed: queue.Queue[str] = queue.Queue(maxsize=MAX_TRACKED_FILES)
        # Closed (complete) files that found the ready queue full: offered first when room frees up.
        self._completed: queue.Queue[str] = queue.Queue(maxsize=MAX_TRACKED_FILES)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._rescan_requested = True
        self._rescan: Iterator[str] | None = None
        self._last_rescan = 0.0
        self._thread: threading.Thread | None = None
        self._observer: object | None = None
        self._overflow_hook: logging.Handler | None = None
        self.overflows = 0  # inotify queue overflows seen (each one triggers a rescan)
        self._events_lost = False
        self._lossy_until = 0.0  # creates handled before this may have lost their close-write
        self._inbox_missing = False
        self._unwanted_logged: set[str] = set()  # names already said to stay in the inbox (bounded)

    # --- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        self.mode = self._choose_mode()
        if self.mode == "inotify":
            self._start_inotify()
        self._thread = threading.Thread(target=self._run, name="edge-anime-detect", daemon=True)
        self._thread.start()
        log.info("watching %s (%s)", self.inbox, self.mode)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:  # first: the thread may be setting a watch on a recreated inbox
            self._thread.join(timeout=5)
        self._stop_observer()

    def _stop_observer(self) -> None:
        if self._observer is not None:
            self._observer.stop()  # type: ignore[attr-defined]
            self._observer.join(timeout=5)  # type: ignore[attr-defined]
            self._observer = None
        if self._overflow_hook is not None:  # the logger is global: a reload's old detector must leave it
            _OVERFLOW_LOGGER.removeHandler(self._overflow_hook)
            self._overflow_hook = None

    def request_rescan(self) -> None:
        self._rescan_requested = True

    def events_lost(self) -> None:
        """An inotify overflow: rescan, and stop waiting for close-writes that may have been dropped (the
        files they belong to settle as in polling mode instead of waiting CREATED_SETTLE_SECONDS)."""
        self._events_lost = True
        self._rescan_requested = True

    def get(self, timeout: float) -> str | None:
        """The next ready name, or None after ``timeout`` seconds."""
        try:
            rel = self._ready.get(timeout=timeout)
        except queue.Empty:
            return None
        with self._lock:
            self._offered.discard(rel)
        return rel

    def pending(self) -> int:
        """Names known and not yet taken (a lower bound: untracked files in a long inbox are not counted)."""
        return self._ready.qsize() + len(self._tracked)

    # --- mode ---------------------------------------------------------------------------------------
    def _choose_mode(self) -> str:
        if self.requested_mode == "polling":
            return "polling"
        fstype = filesystem_type(self.inbox)
        if self.requested_mode == "auto" and fstype in NETWORK_FS_TYPES:
            log.info("inbox is on %s, where inotify sees no remote writes: polling", fstype)
            return "polling"
        try:
            from watchdog.observers.inotify import InotifyObserver  # noqa: F401  (Linux only)
        except ImportError as exc:
            if self.requested_mode == "inotify":
                raise ConfigError(f"watch.detector: inotify is not available here ({exc}); "
                                  "use auto or polling") from None
            return "polling"
        return "inotify"

    def _start_inotify(self) -> None:
        from watchdog.observers.inotify import InotifyObserver

        observer = InotifyObserver(generate_full_events=True)
        # Style routes are sub-folders: watched (recursively) even when watch.recursive is off; events from
        # folders the filter does not enter are dropped by ``accepts``.
        deep = self.filter.recursive or bool(self.filter.routes)
        observer.schedule(_EventHandler(self), str(self.inbox), recursive=deep)
        try:
            observer.start()
        except OSError as exc:
            reason = {28: "inotify watch limit reached (raise fs.inotify.max_user_watches)",
                      24: "inotify instance limit reached (raise fs.inotify.max_user_instances)"}.get(
                exc.errno or 0, str(exc))
            if self.requested_mode == "inotify":
                raise ConfigError(f"watch.detector: inotify: {reason}; use auto or polling") from None
            log.warning("%s: falling back to polling", reason)
            self.mode = "polling"
            return
        self._overflow_hook = _OverflowHook(self)
        _OVERFLOW_LOGGER.addHandler(self._overflow_hook)
        self._observer = observer

    # --- the loop -----------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("detector: unexpected error; rescanning")
                self._rescan = None
                self._rescan_requested = True
            self._stop.wait(self.poll_interval_seconds)

    def tick(self) -> None:
        """One round: take created-file events, continue or start a rescan, offer what settled."""
        now = self._clock()
        if not self._inbox_present():
            return
        if self._events_lost:
            self._events_lost = False
            self._lossy_until = now + LOSSY_GRACE_SECONDS
            self._tracked = {rel: (sig, since, min(settle_s, self.settle_seconds))
                             for rel, (sig, since, settle_s) in self._tracked.items()}
        while not self._completed.empty():
            rel = self._completed.queue[0]
            if not self.offer(rel):
                break
            self._completed.get_nowait()
        while len(self._tracked) < MAX_TRACKED_FILES:
            try:
                rel = self._created.get_nowait()
            except queue.Empty:
                break
            self._track(rel, now, created=True)
        while True:
            try:
                rel = self._closed.get_nowait()
            except queue.Empty:
                break
            self._track_closed(rel, now)
        if self._rescan is None and (self.mode == "polling" or self._rescan_requested
                                     or now - self._last_rescan > RESCAN_INTERVAL_SECONDS):
            self._rescan_requested = False
            self._last_rescan = now
            self._rescan = scan(self.inbox, self.filter, on_unwanted=self._say_unwanted)
        if self._rescan is not None:
            for rel in self._rescan:
                self._track(rel, now)
                if len(self._tracked) >= MAX_TRACKED_FILES:
                    break
            else:
                self._rescan = None
        self._offer_settled(now)

    def _inbox_present(self) -> bool:
        """Say so when the inbox disappears (deleted, a share unmounted) and when it is back; an inotify watch
        died with the old folder, so it is set on the new one and the inbox rescanned at once, instead of
        waiting for the periodic rescan. The folder is not recreated here: under an unmounted share that would
        be a local folder hiding the share's files."""
        if self.inbox.is_dir():
            if self._inbox_missing:
                self._inbox_missing = False
                log.warning("inbox %s is back: watching it again", self.inbox)
                if self.mode == "inotify":
                    self._stop_observer()
                    self._start_inotify()
                self._rescan, self._rescan_requested = None, True
            return True
        if not self._inbox_missing:
            self._inbox_missing = True
            log.warning("inbox %s is gone (deleted or unmounted): nothing can arrive until it is back; "
                        "recreate it (or remount the share) and edge-anime takes it up again by itself", self.inbox)
        return False

    def _say_unwanted(self, rel: str, why: str, stays: bool) -> None:
        if rel in self._unwanted_logged or len(self._unwanted_logged) >= MAX_TRACKED_FILES:
            return
        self._unwanted_logged.add(rel)
        if stays:
            log.info("skipped %s: %s; it stays in the inbox", rel, why)
        else:
            log.warning("%s: %s", rel, why)

    def _track(self, rel: str, now: float, *, created: bool = False) -> None:
        with self._lock:
            if rel in self._offered:
                return
        known = self._tracked.get(rel)
        if known is not None:
            # A rescan saw it before its create event was handled: it is still being written, so it too
            # waits for its close-write, not just settle_seconds of a slow writer's pause.
            sig, since, settle_s = known
            if created and now >= self._lossy_until and settle_s < CREATED_SETTLE_SECONDS \
                    and self._may_be_open_for_writing(rel):
                self._tracked[rel] = (sig, since, CREATED_SETTLE_SECONDS)
            return
        current = self._signature(rel)
        if current is None:
            return
        sig = current
        settle_s = self.settle_seconds
        if created and now >= self._lossy_until and self._may_be_open_for_writing(rel):
            settle_s = max(settle_s, CREATED_SETTLE_SECONDS)
        self._tracked[rel] = (sig, now, settle_s)

    def _track_closed(self, rel: str, now: float) -> None:
        """A close-write restarts the settle clock: ready after ``settle_seconds`` with no change since."""
        with self._lock:
            if rel in self._offered:
                return
        sig = self._signature(rel)
        if sig is None:
            self._tracked.pop(rel, None)
            return
        self._tracked[rel] = (sig, now, self.settle_seconds)

    def _may_be_open_for_writing(self, rel: str) -> bool:
        """A created regular file with one link will get a close-write; symlinks and hard links will not
        (they appear whole, in one call)."""
        try:
            st = os.lstat(self.inbox / rel)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and st.st_nlink == 1

    def _signature(self, rel: str) -> Signature | None:
        try:
            st = os.lstat(self.inbox / rel)
        except OSError:
            return None
        if self._skip is not None and self._skip(rel, st):
            return None
        return (st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _offer_settled(self, now: float) -> None:
        for rel, (sig, since, settle_s) in list(self._tracked.items()):
            current = None if rel in self._offered else self._signature(rel)
            if current is None:  # gone, skipped, or offered by an event meanwhile
                self._tracked.pop(rel, None)
            elif current != sig:
                self._tracked[rel] = (current, now, settle_s)
            elif now - since >= settle_s:
                if not self.offer(rel):
                    return
                self._tracked.pop(rel, None)

    def offer(self, rel: str) -> bool:
        """Put ``rel`` in the ready queue; False (and a rescan later) when the queue is full."""
        with self._lock:
            if rel in self._offered:
                return True
            try:
                self._ready.put_nowait(rel)
            except queue.Full:
                self._rescan_requested = True
                return False
            self._offered.add(rel)
            return True

    def on_closed(self, rel: str) -> None:
        """close-write: the writer closed it, but may open it again to append; it settles from now."""
        if self.filter.accepts(rel):
            try:
                self._closed.put_nowait(rel)
            except queue.Full:
                self._rescan_requested = True

    def _say_at_once(self, rel: str) -> None:
        """A file that will never be taken is said when it lands, not at the next rescan a minute later
        (issue 42): the person who dropped it is still looking. Only in folders the inbox takes files from."""
        folder = rel.rpartition("/")[0]
        if self.filter.unwanted(rel) and (not folder or self.filter.enters(folder)):
            self._say_unwanted(rel, unwanted_reason(self.filter), True)

    def on_complete(self, rel: str) -> None:
        """moved-to: the file arrived whole (rsync, cp then mv)."""
        if not self.filter.accepts(rel):
            self._say_at_once(rel)
            return
        if self._skip is not None:
            try:
                if self._skip(rel, os.lstat(self.inbox / rel)):
                    return
            except OSError:
                return
        if not self.offer(rel):  # the detector thread drops it from _tracked once it is offered
            try:
                self._completed.put_nowait(rel)
            except queue.Full:
                pass  # offer() asked for a rescan; the file settles there instead

    def on_created(self, rel: str) -> None:
        if not self.filter.accepts(rel):
            self._say_at_once(rel)
            return
        try:
            self._created.put_nowait(rel)
        except queue.Full:
            self._rescan_requested = True


def _rel(detector: Detector, path: bytes | str) -> str | None:
    rel = os.path.relpath(os.fsdecode(path), detector.inbox)
    if rel.startswith(".." + os.sep) or rel == ".." or rel == ".":
        return None
    return rel.replace(os.sep, "/")


class _EventHandler(FileSystemEventHandler):
    """watchdog handler: routes events to the detector; knows nothing of threads (watchdog's own rule)."""

    def __init__(self, detector: Detector) -> None:
        super().__init__()
        self.detector = detector

    def dispatch(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            if event.event_type in ("created", "moved") and (self.detector.filter.recursive
                                                             or self.detector.filter.routes):
                self.detector.request_rescan()  # a folder moved in whole: its files came without events
            return
        if isinstance(event, FileMovedEvent) and event.dest_path:
            rel = _rel(self.detector, event.dest_path)
            if rel is not None:
                self.detector.on_complete(rel)
        elif isinstance(event, FileClosedEvent):
            rel = _rel(self.detector, event.src_path)
            if rel is not None:
                self.detector.on_closed(rel)
        elif isinstance(event, FileCreatedEvent):
            rel = _rel(self.detector, event.src_path)
            if rel is not None:
                self.detector.on_created(rel)


class _OverflowHook(logging.Handler):
    """watchdog (7.1 and later) logs an inotify queue overflow but gives event handlers no callback for
    it: its warning triggers a rescan. Older watchdog releases drop the overflow silently; there only the
    60 s rescan recovers (docs/service.md says so)."""

    def __init__(self, detector: Detector) -> None:
        super().__init__(level=logging.WARNING)
        self.detector = detector

    def emit(self, record: logging.LogRecord) -> None:
        if "overflow" in record.getMessage().lower():
            self.detector.overflows += 1
            log.warning("inotify queue overflowed: events were lost; rescanning %s now", self.detector.inbox)
            self.detector.events_lost()

